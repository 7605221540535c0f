package inbox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// ErrInvalidMessage is wrapped by ReceiveTx's error when the message cannot be
// stored as given (an empty or overlong source or event id, say). Nothing is
// written.
var ErrInvalidMessage = errors.New("inbox: invalid message")

// Incoming is a message to receive.
type Incoming struct {
	// Source names the sender; keys are scoped by it. 1–128 characters.
	Source string
	// EventID is the sender's id for the event, shared by every delivery of
	// it. 1–MaxEventIDLength characters.
	EventID string
	// EventType selects the handler; may be empty.
	EventType string
	// Header holds the request headers to keep with the message.
	// Credentials and shared tokens are not stored (see
	// Source.DropHeaders).
	Header http.Header
	// Body is the raw body, stored byte for byte.
	Body []byte
	// PayloadHash fingerprints the payload, to spot an event id reused for a
	// different payload. Defaults to the SHA-256 of Body.
	PayloadHash []byte
	// OrderingKey puts the message in a sequence: messages of the source
	// with the same key are processed one at a time, in receipt order (see
	// Source.OrderingFields). Empty, the default: no order. At most
	// MaxOrderingKeyLength characters. The HTTP handler sets it from the
	// source's OrderingFields or OrderingHeader.
	OrderingKey string

	// trace is the receiving span's trace context (the HTTP handler's);
	// ReceiveManyTx uses its ctx's when empty.
	trace string
}

// Result says what ReceiveTx did.
type Result struct {
	// MessageID identifies the stored message: the new one, or for a
	// duplicate the one first received.
	MessageID uuid.UUID
	// Duplicate is true when the event had been received before; nothing
	// new was stored or enqueued.
	Duplicate bool
	// ReceivedAt is when the event was first received.
	ReceivedAt time.Time
	// PayloadMismatch is true for a duplicate whose payload differs from the
	// first receipt's. The mismatch is counted on the dedupe key.
	PayloadMismatch bool
	// JobID is the River job that will process a new message (shared by
	// the messages of one batch); 0 for a duplicate.
	JobID int64
	// Err is set by ReceiveManyTx for a message it rejected before writing
	// anything for it; it wraps ErrInvalidMessage and the other fields are
	// zero. ReceiveTx returns such an error instead.
	Err error
}

// ReceiveTx claims msg's dedupe key, stores the message and inserts its River
// job, all in tx: the caller's commit makes the receipt durable and its
// rollback leaves no trace. When the key was already claimed no message or
// job is written and the result is a duplicate carrying the first receipt's
// id and time; the key row is locked until tx ends (concurrent duplicates
// queue on it) and counts a payload mismatch.
//
// An error wrapping ErrInvalidMessage means msg was rejected before anything
// was written. Any other error comes from the database; River's insert
// aborts tx on failure, so roll back.
func (ib *Inbox) ReceiveTx(ctx context.Context, tx pgx.Tx, msg Incoming) (*Result, error) {
	results, err := ib.ReceiveManyTx(ctx, tx, []Incoming{msg})
	if err != nil {
		return nil, err
	}
	if results[0].Err != nil {
		return nil, results[0].Err
	}
	return &results[0], nil
}

// ReceiveManyTx receives msgs in tx as ReceiveTx receives one, with a few
// statements for the whole batch instead of a few per message: one commit
// then makes them all durable (group commit). Results are in the order of
// msgs and every guarantee holds per message: a message whose event id
// appeared earlier in msgs is a duplicate of that one, and a message that
// cannot be stored as given gets a Result whose Err wraps ErrInvalidMessage
// while its neighbours are received. Up to Config.BatchSize (at most 30)
// new messages share one River job, whose worker runs each handler in a
// savepoint of one transaction (see Handler).
//
// An error comes from the database and covers the whole batch; River's
// insert aborts tx on failure, so roll back.
func (ib *Inbox) ReceiveManyTx(ctx context.Context, tx pgx.Tx, msgs []Incoming) ([]Result, error) {
	results := make([]Result, len(msgs))
	var claims, repeats []*claim
	seen := make(map[eventKey]bool, len(msgs))
	for i := range msgs {
		c, err := newClaim(i, &msgs[i], ib.sources[msgs[i].Source])
		if err != nil {
			results[i].Err = err
			continue
		}
		key := eventKey{msgs[i].Source, msgs[i].EventID}
		if seen[key] {
			repeats = append(repeats, c)
			continue
		}
		seen[key] = true
		claims = append(claims, c)
	}
	if len(claims) == 0 {
		return results, nil
	}
	now := ib.clock()
	if err := ib.partitions.Ensure(ctx, tx, inboxjob.MessagesTable, now); err != nil {
		return nil, err
	}
	won, err := ib.claimKeys(ctx, tx, msgs, claims, now, results)
	if err != nil {
		return nil, err
	}
	if err := ib.storeMessages(ctx, tx, msgs, won, now, results); err != nil {
		return nil, err
	}
	// A repeat within the batch claims the key its first occurrence just
	// took: a duplicate, with its payload mismatch counted on the key.
	q := dbsqlc.New(tx)
	for _, c := range repeats {
		msg := &msgs[c.index]
		key, err := q.InboxKeyClaim(ctx, dbsqlc.InboxKeyClaimParams{
			Source: msg.Source, EventID: msg.EventID, PayloadHash: c.hash, MessageID: c.proposed, ReceivedAt: now,
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: claim key: %w", err)
		}
		results[c.index] = duplicateResult(key.MessageID, key.ReceivedAt, key.PayloadHash, c.hash)
	}
	return results, nil
}

// eventKey is a dedupe key.
type eventKey struct{ source, eventID string }

// claim is a valid message of a batch on its way to the database.
type claim struct {
	index    int // in the batch
	hash     []byte
	headers  []byte
	proposed uuid.UUID // the message id, if the claim wins
}

func newClaim(index int, msg *Incoming, src *Source) (*claim, error) {
	if err := msg.validate(); err != nil {
		return nil, err
	}
	hash := msg.PayloadHash
	if len(hash) == 0 {
		sum := sha256.Sum256(msg.Body)
		hash = sum[:]
	}
	var drop []string
	if src != nil {
		drop = src.DropHeaders
	}
	headers, err := json.Marshal(storedHeaders(msg.Header, drop))
	if err != nil {
		return nil, fmt.Errorf("%w: headers: %v", ErrInvalidMessage, err)
	}
	proposed, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("inbox: message id: %w", err)
	}
	return &claim{index: index, hash: hash, headers: headers, proposed: proposed}, nil
}

// claimKeys claims the keys of claims (distinct) in one statement, fills
// the results of those already claimed and returns the claims it won.
func (ib *Inbox) claimKeys(ctx context.Context, tx pgx.Tx, msgs []Incoming, claims []*claim, now time.Time, results []Result) ([]*claim, error) {
	params := dbsqlc.InboxKeyClaimManyParams{ReceivedAt: now}
	for _, c := range claims {
		params.Sources = append(params.Sources, msgs[c.index].Source)
		params.EventIds = append(params.EventIds, msgs[c.index].EventID)
		params.PayloadHashes = append(params.PayloadHashes, c.hash)
		params.MessageIds = append(params.MessageIds, c.proposed.String())
	}
	rows, err := dbsqlc.New(tx).InboxKeyClaimMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: claim keys: %w", err)
	}
	keys := make(map[eventKey]*dbsqlc.InboxKeyClaimManyRow, len(rows))
	for i := range rows {
		keys[eventKey{rows[i].Source, rows[i].EventID}] = &rows[i]
	}
	var won []*claim
	for _, c := range claims {
		key, ok := keys[eventKey{msgs[c.index].Source, msgs[c.index].EventID}]
		if !ok {
			return nil, fmt.Errorf("inbox: claim keys: no row for key %d of the batch", c.index)
		}
		if key.MessageID == c.proposed {
			won = append(won, c)
			continue
		}
		results[c.index] = duplicateResult(key.MessageID, key.ReceivedAt, key.PayloadHash, c.hash)
	}
	return won, nil
}

func duplicateResult(id uuid.UUID, receivedAt time.Time, storedHash, hash []byte) Result {
	return Result{
		MessageID:       id,
		Duplicate:       true,
		ReceivedAt:      receivedAt,
		PayloadMismatch: string(storedHash) != string(hash),
	}
}

// storeMessages inserts the River jobs of the won claims (one job per
// message when batches are off or there is only one, else one job per
// BatchSize messages, 30 at most) and then their messages, in one statement
// each.
func (ib *Inbox) storeMessages(ctx context.Context, tx pgx.Tx, msgs []Incoming, won []*claim, now time.Time, results []Result) error {
	if len(won) == 0 {
		return nil
	}
	var jobs []river.InsertManyParams
	if len(won) == 1 || ib.batchSize <= 1 {
		for _, c := range won {
			jobs = append(jobs, river.InsertManyParams{Args: inboxjob.ProcessArgs{MessageID: c.proposed, ReceivedAt: now}, InsertOpts: ib.jobs.Opts()})
		}
	} else {
		for chunk := range slices.Chunk(won, min(ib.batchSize, inboxjob.MaxMessages)) {
			args := inboxjob.BatchArgs{ReceivedAt: now, MessageIDs: make([]uuid.UUID, len(chunk))}
			for i, c := range chunk {
				args.MessageIDs[i] = c.proposed
			}
			jobs = append(jobs, river.InsertManyParams{Args: args, InsertOpts: ib.jobs.BatchOpts()})
		}
	}
	jobOf, err := ib.jobs.Insert(ctx, tx, jobs)
	if err != nil {
		return err
	}
	params := dbsqlc.InboxMessageInsertManyParams{ReceivedAt: now}
	callerTrace := telemetry.StoredContext(ctx)
	for _, c := range won {
		jobID, ok := jobOf[c.proposed]
		if !ok {
			return fmt.Errorf("inbox: no job was inserted for message %s", c.proposed)
		}
		msg := &msgs[c.index]
		params.Ids = append(params.Ids, c.proposed.String())
		params.Sources = append(params.Sources, msg.Source)
		params.EventIds = append(params.EventIds, msg.EventID)
		params.EventTypes = append(params.EventTypes, msg.EventType)
		params.Headers = append(params.Headers, c.headers)
		params.Bodies = append(params.Bodies, bodyBytes(msg.Body))
		params.PayloadHashes = append(params.PayloadHashes, c.hash)
		params.JobIds = append(params.JobIds, jobID)
		params.OrderingKeys = append(params.OrderingKeys, msg.OrderingKey)
		params.TraceContexts = append(params.TraceContexts, cmp.Or(msg.trace, callerTrace))
		results[c.index] = Result{MessageID: c.proposed, ReceivedAt: now, JobID: jobID}
	}
	if err := dbsqlc.New(tx).InboxMessageInsertMany(ctx, params); err != nil {
		return fmt.Errorf("inbox: store messages: %w", err)
	}
	return nil
}

// bodyBytes keeps a nil body from becoming a NULL element of the bodies
// array (the column is NOT NULL; an empty body is stored empty).
func bodyBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (m *Incoming) validate() error {
	if !validText(m.Source, 1, 128) {
		return fmt.Errorf("%w: source must be 1–128 characters of UTF-8 without NUL", ErrInvalidMessage)
	}
	if !validText(m.EventID, 1, MaxEventIDLength) {
		return fmt.Errorf("%w: event id must be 1–%d characters of UTF-8 without NUL", ErrInvalidMessage, MaxEventIDLength)
	}
	if !validText(m.EventType, 0, MaxEventTypeLength) {
		return fmt.Errorf("%w: event type must be at most %d characters of UTF-8 without NUL", ErrInvalidMessage, MaxEventTypeLength)
	}
	if !validText(m.OrderingKey, 0, MaxOrderingKeyLength) {
		return fmt.Errorf("%w: ordering key must be at most %d characters of UTF-8 without NUL", ErrInvalidMessage, MaxOrderingKeyLength)
	}
	// Headers are stored as JSON text, which cannot hold NUL.
	for name, values := range m.Header {
		if strings.ContainsRune(name, 0) || slices.ContainsFunc(values, func(v string) bool { return strings.ContainsRune(v, 0) }) {
			return fmt.Errorf("%w: header %q holds a NUL character", ErrInvalidMessage, strings.ReplaceAll(name, "\x00", ""))
		}
	}
	return nil
}

// validText reports whether s can be stored in a text column and has
// between min and max characters.
func validText(s string, min, max int) bool {
	n := utf8.RuneCountInString(s)
	return n >= min && n <= max && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// droppedHeaders are never stored with a message: credentials that
// authenticate a sender to a proxy or the app, and the shared tokens that
// some providers send in place of a signature. Each is a secret in its own
// right. Source.DropHeaders adds to them; its doc lists them.
var droppedHeaders = []string{
	"Authorization",
	"Cookie",
	"Proxy-Authorization",
	"X-Gitlab-Token",
	"X-Goog-Channel-Token",
	"X-Hook-Secret",
	"X-Api-Key",
	"Api-Key",
	"X-Auth-Token",
	"X-Webhook-Token",
	"X-Webhook-Secret",
}

// storedHeaders returns a copy of h without droppedHeaders and extra.
func storedHeaders(h http.Header, extra []string) http.Header {
	out := h.Clone()
	if out == nil {
		return http.Header{}
	}
	for _, name := range droppedHeaders {
		out.Del(name)
	}
	for _, name := range extra {
		out.Del(name)
	}
	return out
}
