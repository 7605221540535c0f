// Package receive stores the inbox's incoming messages: in one
// transaction it claims their dedupe keys, inserts their River jobs and
// stores the messages that won their keys (Receiver.ReceiveTx); the HTTP
// handler's deliveries share such transactions (group commit,
// Receiver.Receive). Package inbox validates each message and turns its
// public Incoming into a Message first.
package receive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/shared"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// Config configures a Receiver. Every field is required: package inbox
// applies its Config's defaults before it builds the engines.
type Config struct {
	// Pool runs the group commit's transactions.
	Pool *pgxpool.Pool
	// Jobs inserts the new messages' jobs.
	Jobs *inboxjob.Jobs
	// BatchSize caps the deliveries of one group commit and the messages
	// of one job (with inboxjob.MaxMessages); 1 turns batching off.
	BatchSize int
	// BatchWait is the longest a delivery waits for others (0: never).
	BatchWait time.Duration
	// Timeout bounds the database work of one group commit.
	Timeout time.Duration
	// Now returns the current time at Postgres's precision.
	Now func() time.Time
}

// errInvalidConfig wraps each problem New finds with its config.
var errInvalidConfig = errors.New("receive: invalid config")

func (c *Config) validate() error {
	p := shared.NewProblems(errInvalidConfig)
	if c.Pool == nil {
		p.Addf("no Pool")
	}
	if c.Jobs == nil {
		p.Addf("no Jobs")
	}
	if c.BatchSize < 1 {
		p.Addf("BatchSize %d is below 1", c.BatchSize)
	}
	if c.BatchWait < 0 {
		p.Addf("BatchWait %s is negative", c.BatchWait)
	}
	if c.Timeout <= 0 {
		p.Addf("Timeout %s is not positive", c.Timeout)
	}
	if c.Now == nil {
		p.Addf("no Now")
	}
	return p.Err()
}

// Message is a valid message to receive (package inbox checked it): an
// inbox.Incoming made storable.
type Message struct {
	// Source, EventID and EventType are the Incoming's; (Source, EventID)
	// is the dedupe key.
	Source, EventID, EventType string
	// Headers are the headers to store, as JSON.
	Headers []byte
	// Body is the raw body, stored byte for byte.
	Body []byte
	// PayloadHash fingerprints the payload.
	PayloadHash []byte
	// OrderingKey is the message's place in a sequence; "" for none.
	OrderingKey string
	// Trace is the receiving span's trace context; ReceiveTx stores its
	// ctx's when empty.
	Trace string
	// Ignored marks an event of a type its source ignores: its key is
	// claimed, and nothing else stored.
	Ignored bool
	// Late is what to do with it should it be a late arrival (its event
	// received before, its key since pruned): inboxjob.LateProcess (also
	// when empty), LateSkip or LateReconcile.
	Late string
}

// Result says what ReceiveTx did with a Message: package inbox's Result
// without its Err (see there for each field).
type Result struct {
	MessageID       uuid.UUID // the new message's, or the first receipt's
	Duplicate       bool      // the key was claimed before
	ReceivedAt      time.Time // when the event was first received
	PayloadMismatch bool      // a duplicate with another payload
	JobID           int64     // the new message's job; 0 for a duplicate
	Ignored         bool      // an event its source ignores, or a duplicate of one
	RedeliveryOf    uuid.UUID // a late arrival's earlier message; uuid.Nil for none
}

// Receiver stores incoming messages.
type Receiver struct {
	config     Config
	partitions *partition.Cache
	batcher    *groupcommit.Batcher[Message, Result] // the HTTP handler's group commit
}

// New returns a Receiver for cfg, or an error naming what cfg lacks.
func New(cfg *Config) (*Receiver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Receiver{config: *cfg, partitions: partition.NewCache(cfg.Pool)}
	r.batcher = r.newBatcher()
	return r, nil
}

// ReceiveTx claims msgs' dedupe keys, stores the messages that won them
// and inserts their jobs, all in tx, with a few statements for the whole
// batch; it returns a Result for each message, in the order of msgs. A
// message whose event id appeared earlier in msgs is a duplicate of that
// one. An error comes from the database and covers the whole batch;
// River's insert aborts tx on failure, so roll back.
func (r *Receiver) ReceiveTx(ctx context.Context, tx pgx.Tx, msgs []Message) ([]Result, error) {
	results := make([]Result, len(msgs))
	firsts, repeats := distinct(msgs)
	if len(firsts) == 0 {
		return results, nil
	}
	ids, err := newIDs(len(msgs))
	if err != nil {
		return nil, err
	}
	now := r.config.Now()
	if err := r.partitions.Ensure(ctx, tx, inboxjob.MessagesTable, now); err != nil {
		return nil, err
	}
	won, err := claimKeys(ctx, tx, msgs, ids, firsts, now, results)
	if err != nil {
		return nil, err
	}
	if err := r.store(ctx, tx, msgs, ids, won, now, results); err != nil {
		return nil, err
	}
	// A repeat within the batch claims the key its first occurrence just
	// took: a duplicate, with its payload mismatch counted on the key.
	q := dbsqlc.New(tx)
	for _, i := range repeats {
		msg := &msgs[i]
		key, err := q.InboxKeyClaim(ctx, dbsqlc.InboxKeyClaimParams{
			Source: msg.Source, EventID: msg.EventID, PayloadHash: msg.PayloadHash, MessageID: ids[i], ReceivedAt: now, Ignored: msg.Ignored,
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: claim key: %w", err)
		}
		results[i] = duplicateResult(key.MessageID, key.ReceivedAt, key.PayloadHash, msg.PayloadHash, key.Ignored)
	}
	return results, nil
}

// newIDs returns n message ids (UUIDv7), ascending: the ids of a batch's
// messages, should their keys be free, in the batch's order (the order of
// receipt within it).
func newIDs(n int) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, n)
	for i := range ids {
		var err error
		if ids[i], err = uuid.NewV7(); err != nil {
			return nil, fmt.Errorf("inbox: message id: %w", err)
		}
	}
	return ids, nil
}

// eventKey is a dedupe key.
type eventKey struct{ source, eventID string }

// distinct returns the indexes of msgs whose keys come first in msgs, and
// of those that repeat an earlier one's.
func distinct(msgs []Message) (firsts, repeats []int) {
	seen := make(map[eventKey]bool, len(msgs))
	for i := range msgs {
		key := eventKey{msgs[i].Source, msgs[i].EventID}
		if seen[key] {
			repeats = append(repeats, i)
			continue
		}
		seen[key] = true
		firsts = append(firsts, i)
	}
	return firsts, repeats
}

// claimed is a message that won its key.
type claimed struct {
	i    int // its index in the batch
	past *pastMessage
}

// skipped reports whether c is a late arrival its source skips: stored
// processed, without a job.
func (c *claimed) skipped(msgs []Message) bool {
	return c.past != nil && msgs[c.i].late() == inboxjob.LateSkip
}

// pastMessage is the earlier message of a late arrival's event.
type pastMessage struct {
	id          uuid.UUID
	processedAt *time.Time
}

// claimKeys claims the keys of msgs[firsts] (distinct) in one statement,
// fills the results of those already claimed and returns the messages
// that won their keys, each with its event's earlier message when it is
// a late arrival.
func claimKeys(ctx context.Context, tx pgx.Tx, msgs []Message, ids []uuid.UUID, firsts []int, now time.Time, results []Result) ([]claimed, error) {
	params := dbsqlc.InboxKeyClaimManyParams{ReceivedAt: now}
	for _, i := range firsts {
		params.Sources = append(params.Sources, msgs[i].Source)
		params.EventIds = append(params.EventIds, msgs[i].EventID)
		params.PayloadHashes = append(params.PayloadHashes, msgs[i].PayloadHash)
		params.MessageIds = append(params.MessageIds, ids[i].String())
		params.Ignored = append(params.Ignored, msgs[i].Ignored)
	}
	rows, err := dbsqlc.New(tx).InboxKeyClaimMany(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("inbox: claim keys: %w", err)
	}
	keys := make(map[eventKey]*dbsqlc.InboxKeyClaimManyRow, len(rows))
	for i := range rows {
		keys[eventKey{rows[i].Source, rows[i].EventID}] = &rows[i]
	}
	var won []claimed
	for _, i := range firsts {
		key, ok := keys[eventKey{msgs[i].Source, msgs[i].EventID}]
		if !ok {
			return nil, fmt.Errorf("inbox: claim keys: no row for key %d of the batch", i)
		}
		switch {
		case key.MessageID != ids[i]:
			results[i] = duplicateResult(key.MessageID, key.ReceivedAt, key.PayloadHash, msgs[i].PayloadHash, key.Ignored)
		case msgs[i].Ignored:
			results[i] = Result{MessageID: ids[i], ReceivedAt: now, Ignored: true} // the key alone
		case key.PastMessageID != uuid.Nil: // NULL scans as uuid.Nil
			won = append(won, claimed{i: i, past: &pastMessage{id: key.PastMessageID}})
		default:
			won = append(won, claimed{i: i})
		}
	}
	return won, pastMessages(ctx, tx, msgs, won)
}

// pastMessages reads, in one statement, the earlier messages of won's
// late arrivals, with when each was processed (nil if it was not, or is
// gone). One whose past key was pruned since the claim is not late after
// all.
func pastMessages(ctx context.Context, tx pgx.Tx, msgs []Message, won []claimed) error {
	var params dbsqlc.InboxPastMessagesParams
	for _, c := range won {
		if c.past != nil {
			params.Sources = append(params.Sources, msgs[c.i].Source)
			params.EventIds = append(params.EventIds, msgs[c.i].EventID)
		}
	}
	if len(params.Sources) == 0 {
		return nil
	}
	rows, err := dbsqlc.New(tx).InboxPastMessages(ctx, params)
	if err != nil {
		return fmt.Errorf("inbox: late arrivals' earlier messages: %w", err)
	}
	found := make(map[eventKey]*dbsqlc.InboxPastMessagesRow, len(rows))
	for i := range rows {
		found[eventKey{rows[i].Source, rows[i].EventID}] = &rows[i]
	}
	for k := range won {
		c := &won[k]
		if c.past == nil {
			continue
		}
		row, ok := found[eventKey{msgs[c.i].Source, msgs[c.i].EventID}]
		if !ok {
			c.past = nil // pruned meanwhile: no longer retained
			continue
		}
		c.past = &pastMessage{id: row.MessageID, processedAt: row.ProcessedAt}
	}
	return nil
}

func duplicateResult(id uuid.UUID, receivedAt time.Time, storedHash, hash []byte, ignored bool) Result {
	return Result{
		MessageID:       id,
		Duplicate:       true,
		ReceivedAt:      receivedAt,
		PayloadMismatch: string(storedHash) != string(hash),
		Ignored:         ignored,
	}
}

// store inserts the River jobs of the messages that won their keys (one
// job per message when batches are off or there is only one, else one job
// per BatchSize messages, inboxjob.MaxMessages at most) and then the
// messages, in one statement each, and the late arrivals in another; a
// late arrival its source skips gets no job.
func (r *Receiver) store(ctx context.Context, tx pgx.Tx, msgs []Message, ids []uuid.UUID, won []claimed, now time.Time, results []Result) error {
	run := make([]int, 0, len(won)) // the messages that get a job
	for _, c := range won {
		if !c.skipped(msgs) {
			run = append(run, c.i)
		}
	}
	var jobOf map[uuid.UUID]int64
	if len(run) > 0 {
		var err error
		if jobOf, err = r.config.Jobs.Insert(ctx, tx, r.jobs(msgs, ids, run, now)); err != nil {
			return err
		}
	}
	q := dbsqlc.New(tx)
	params := dbsqlc.InboxMessageInsertManyParams{ReceivedAt: now}
	late := dbsqlc.InboxMessagesInsertLateParams{ReceivedAt: now}
	callerTrace := telemetry.StoredContext(ctx)
	for _, c := range won {
		msg, id := &msgs[c.i], ids[c.i]
		jobID, ok := jobOf[id]
		if !ok && !c.skipped(msgs) {
			return fmt.Errorf("inbox: no job was inserted for message %s", id)
		}
		results[c.i] = Result{MessageID: id, ReceivedAt: now, JobID: jobID}
		trace := cmp.Or(msg.Trace, callerTrace)
		if c.past != nil {
			results[c.i].RedeliveryOf = c.past.id
			late.Ids = append(late.Ids, id.String())
			late.Sources = append(late.Sources, msg.Source)
			late.EventIds = append(late.EventIds, msg.EventID)
			late.EventTypes = append(late.EventTypes, msg.EventType)
			late.Headers = append(late.Headers, msg.Headers)
			late.Bodies = append(late.Bodies, bodyBytes(msg.Body))
			late.PayloadHashes = append(late.PayloadHashes, msg.PayloadHash)
			late.JobIds = append(late.JobIds, jobID) // 0: skipped, no job
			late.OrderingKeys = append(late.OrderingKeys, msg.OrderingKey)
			late.TraceContexts = append(late.TraceContexts, trace)
			late.RedeliveryOf = append(late.RedeliveryOf, c.past.id.String())
			processedAt := ""
			if c.past.processedAt != nil {
				processedAt = c.past.processedAt.UTC().Format(time.RFC3339Nano)
			}
			late.RedeliveryOfProcessedAt = append(late.RedeliveryOfProcessedAt, processedAt)
			late.LatePolicies = append(late.LatePolicies, msg.late())
			continue
		}
		params.Ids = append(params.Ids, id.String())
		params.Sources = append(params.Sources, msg.Source)
		params.EventIds = append(params.EventIds, msg.EventID)
		params.EventTypes = append(params.EventTypes, msg.EventType)
		params.Headers = append(params.Headers, msg.Headers)
		params.Bodies = append(params.Bodies, bodyBytes(msg.Body))
		params.PayloadHashes = append(params.PayloadHashes, msg.PayloadHash)
		params.JobIds = append(params.JobIds, jobID)
		params.OrderingKeys = append(params.OrderingKeys, msg.OrderingKey)
		params.TraceContexts = append(params.TraceContexts, trace)
	}
	if len(late.Ids) > 0 {
		if err := q.InboxMessagesInsertLate(ctx, late); err != nil {
			return fmt.Errorf("inbox: store late arrivals: %w", err)
		}
	}
	if len(params.Ids) == 0 {
		return nil
	}
	if err := q.InboxMessageInsertMany(ctx, params); err != nil {
		return fmt.Errorf("inbox: store messages: %w", err)
	}
	return nil
}

// late is m.Late, LateProcess when empty.
func (m *Message) late() string { return cmp.Or(m.Late, inboxjob.LateProcess) }

// jobs returns the job inserts of the messages msgs[run], ids[run],
// received now.
func (r *Receiver) jobs(msgs []Message, ids []uuid.UUID, run []int, now time.Time) []river.InsertManyParams {
	var jobs []river.InsertManyParams
	if len(run) == 1 || r.config.BatchSize <= 1 {
		for _, i := range run {
			jobs = append(jobs, r.config.Jobs.One(ids[i], now, msgs[i].OrderingKey == ""))
		}
		return jobs
	}
	for chunk := range slices.Chunk(run, min(r.config.BatchSize, inboxjob.MaxMessages)) {
		batch := make([]uuid.UUID, len(chunk))
		unordered := true
		for k, i := range chunk {
			batch[k] = ids[i]
			unordered = unordered && msgs[i].OrderingKey == ""
		}
		jobs = append(jobs, r.config.Jobs.Batch(now, batch, unordered))
	}
	return jobs
}

// bodyBytes keeps a nil body from becoming a NULL element of the bodies
// array (the column is NOT NULL; an empty body is stored empty).
func bodyBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
