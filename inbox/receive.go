package inbox

import (
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

	"github.com/wharfhq/wharf/internal/receive"
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
	// RedeliveryOf is set when the message is a late arrival (see
	// Message.RedeliveryOf): the id of its event's earlier message;
	// uuid.Nil otherwise. When its source skips late arrivals (LateSkip)
	// it was stored processed and JobID is 0.
	RedeliveryOf uuid.UUID
	// Ignored is true when the event's type is one its source ignores
	// (Source.AcceptTypes), or it is a duplicate of such an event: its
	// dedupe key is claimed, and no message or job was stored; MessageID
	// names no message.
	Ignored bool
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
// Run tx at READ COMMITTED, Postgres's default: under REPEATABLE READ or
// SERIALIZABLE the claim reads the transaction's snapshot, and a late
// arrival (see Source.LateArrivals) whose key the retention job pruned
// after that snapshot was taken is stored as a new event, unmarked.
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
	valid := make([]receive.Message, 0, len(msgs))
	index := make([]int, 0, len(msgs)) // in msgs, of each of valid
	for i := range msgs {
		m, err := ib.toReceive(&msgs[i])
		if err != nil {
			results[i].Err = err
			continue
		}
		valid = append(valid, m)
		index = append(index, i)
	}
	received, err := ib.receiver.ReceiveTx(ctx, tx, valid)
	if err != nil {
		return nil, err
	}
	for k, res := range received {
		results[index[k]] = resultOf(res)
	}
	return results, nil
}

// resultOf is the Result of a received message.
func resultOf(res receive.Result) Result {
	return Result{MessageID: res.MessageID, Duplicate: res.Duplicate, ReceivedAt: res.ReceivedAt,
		PayloadMismatch: res.PayloadMismatch, JobID: res.JobID, Ignored: res.Ignored, RedeliveryOf: res.RedeliveryOf}
}

// toReceive checks msg and makes it what the receive engine stores: its
// headers without credentials (and its source's DropHeaders) as JSON, and
// its payload hash (the body's SHA-256 unless given).
func (ib *Inbox) toReceive(msg *Incoming) (receive.Message, error) {
	if err := msg.validate(); err != nil {
		return receive.Message{}, err
	}
	hash := msg.PayloadHash
	if len(hash) == 0 {
		sum := sha256.Sum256(msg.Body)
		hash = sum[:]
	}
	var drop []string
	ignored, late := false, LateProcess
	if src := ib.sources[msg.Source]; src != nil {
		drop, ignored, late = src.DropHeaders, src.ignores(msg.EventType), src.LateArrivals
	}
	if ignored {
		// The key alone: no body or headers go further.
		return receive.Message{Source: msg.Source, EventID: msg.EventID, EventType: msg.EventType,
			PayloadHash: hash, Ignored: true}, nil
	}
	headers, err := json.Marshal(storedHeaders(msg.Header, drop))
	if err != nil {
		return receive.Message{}, fmt.Errorf("%w: headers: %v", ErrInvalidMessage, err)
	}
	return receive.Message{
		Source: msg.Source, EventID: msg.EventID, EventType: msg.EventType, Headers: headers,
		Body: msg.Body, PayloadHash: hash, OrderingKey: msg.OrderingKey, Trace: msg.trace, Late: late.String(),
	}, nil
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
