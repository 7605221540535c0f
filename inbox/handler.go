package inbox

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/process"
)

// Status is where a message is in its life.
type Status string

const (
	// StatusReceived: stored, waiting for (or in) its first processing.
	StatusReceived Status = "received"
	// StatusProcessed: the handler's transaction committed.
	StatusProcessed Status = "processed"
	// StatusFailed: the last attempt failed; River will retry.
	StatusFailed Status = "failed"
	// StatusDead: attempts are exhausted or the handler failed it
	// permanently. Replay re-enqueues it.
	StatusDead Status = "dead"
)

// Message is a stored webhook as a Handler sees it.
type Message struct {
	// ID is Wharf's id for the message (a UUIDv7).
	ID uuid.UUID
	// Source names the sender.
	Source string
	// EventID is the sender's event id (or the derived "sha256:…").
	EventID string
	// EventType is the event's type, possibly empty.
	EventType string
	// Header holds the request headers as received, minus credentials.
	Header http.Header
	// Body is the raw body, byte for byte.
	Body []byte
	// ReceivedAt is when the message was first received.
	ReceivedAt time.Time
	// Status is the message's status when it was loaded.
	Status Status
	// Attempts counts completed processing attempts before this one.
	Attempts int
	// LastError is the error of the latest failed attempt.
	LastError string
	// ProcessedAt is when processing committed; nil until then.
	ProcessedAt *time.Time
	// ScrubbedAt is when the body and headers were erased (retention's
	// ScrubAfter, or Forget); nil while they are kept.
	ScrubbedAt *time.Time
	// OrderingKey is the message's place in a sequence (see
	// Source.OrderingFields); empty when it has none.
	OrderingKey string
	// JobID is the River job that processes the message (the latest, after
	// a replay); 0 when it has none.
	JobID int64
	// RedeliveryOf is set on a late arrival: a message whose event had
	// been received and stored before, and was received again after its
	// dedupe key was pruned (past the retention jobs' DedupeWindow, while
	// the earlier message was still retained), a probable redelivery. Its
	// source's Source.LateArrivals said what to do with it. nil for any
	// other message.
	RedeliveryOf *Redelivery
}

// Redelivery names the earlier message of a late arrival's event (see
// Message.RedeliveryOf).
type Redelivery struct {
	// MessageID is the earlier message's id: the latest one received
	// before, when there are several.
	MessageID uuid.UUID
	// ProcessedAt is when the earlier message was processed, as the late
	// arrival was received; nil when it was not, or is no longer stored.
	ProcessedAt *time.Time
	// Policy is what the source's LateArrivals made of the late arrival.
	Policy LatePolicy
}

// Handler applies a message's effect. It runs inside tx, the transaction
// that also marks the message processed and completes its River job: write
// through tx and the effect commits exactly once. Return an error to roll
// everything back and have River retry with backoff; wrap it with Permanent
// (or return river.JobCancel) to fail the message without retries; return
// river.JobSnooze to roll back and run again later without using an
// attempt. A Handler cannot commit or roll back tx: its Commit and Rollback
// return ErrHandlerEndedTx and change nothing. msg is the handler's own
// copy: what it does to it changes nothing the worker does next.
//
// The messages of one received batch (see Config.BatchSize) are processed
// in one transaction, each handler in its own savepoint: an error rolls
// back that handler's writes only, and its message is retried alone. Row
// locks a handler takes are held until the batch commits. The handlers of a
// batch share its River job's timeout (the client's JobTimeout, 1 minute
// by default): a batch starts no handler past half of it (nor a message's
// own call after a BatchHandler's call failed), and the messages it has not
// reached go on, together, to a new batch job. Each job runs at least one,
// so with a JobTimeout of a second or less, slow handlers may run one a job.
//
// Row locks are held until the transaction commits (a batch's, for every
// handler of the batch), so two transactions that take the same rows in
// different orders can deadlock: two batches whose messages upsert the
// same rows, say, even when each handler writes one row. Postgres then
// aborts one of them after its deadlock_timeout (1 s by default). Return
// that error, or wrap it with %w: a deadlock_detected (40P01) or
// serialization_failure (40001) uses no attempt and is not recorded as a
// failure. In a batch only that handler's savepoint rolls back, and its
// message runs again alone, on a job of its own, once the batch has
// committed; on the message's own job the job runs again at once (after
// ten snoozes of the job, such an error counts as a failed attempt). Each
// deadlock still costs the wait: take row locks in one order where you can
// (sort the keys of a multi-row statement).
type Handler func(ctx context.Context, tx pgx.Tx, msg *Message) error

// ErrNoHandler is the error recorded for a message for which no handler is
// registered. The message is retried, so a handler deployed later still
// gets it.
var ErrNoHandler = process.ErrNoHandler

// ErrHandlerEndedTx is returned by the Commit and Rollback of the
// transaction a Handler gets: only the worker may end it, since it also
// holds the message's processed mark and its job's completion.
var ErrHandlerEndedTx = process.ErrHandlerEndedTx

// Permanent marks err as permanent: the message is dead at once, without
// retries, with err as its last error. It can still be replayed. The
// result wraps err (errors.Is and errors.As see it) and reads
// "permanent: " and err's message.
func Permanent(err error) error { return process.Permanent(err) }

// Wildcard matches any source or any event type in Handle.
const Wildcard = "*"

type handlerKey struct{ source, eventType string }

// BatchHandler applies the effects of several messages at once: the
// messages of one processing batch (see Config.BatchSize) that follow one
// another in receipt order and resolve to the same registration, so that
// set-based statements (one upsert for many rows, PublishManyTx) can
// replace a statement per message. It runs inside tx, as a Handler does, in
// one savepoint that also marks all of msgs processed: its writes commit
// exactly once, with those marks.
//
// When it returns an error (or panics), its writes and marks are rolled
// back and the messages go again one by one, in the same transaction, each
// in its own savepoint, so that one bad message fails only itself: the
// handler is called with each message alone, and that call's error is the
// message's, with a Handler's meaning (Permanent, river.JobSnooze, a retry
// with backoff). A message whose ordering key an earlier one's failure
// holds waits for it instead, as with a Handler. What the failed call did
// outside the database (an HTTP request, an email) is not rolled back, as
// with any retry. A message retried later, or processed outside a batch,
// is also passed alone. A deadlock or serialization failure of a call for
// one message uses no attempt, as with a Handler.
//
// msgs are in receipt order, so messages of one ordering key come in their
// order. They are the handler's own copies: it may sort or filter the
// slice, or clear a body once decoded.
type BatchHandler func(ctx context.Context, tx pgx.Tx, msgs []*Message) error

// registration is what Handle or HandleBatch registered for a key: the
// process engine's Registration, which builds each handler's Messages from
// the rows.
type registration struct {
	one  Handler      // a BatchHandler's own, one message at a time, for HandleBatch
	many BatchHandler // nil for Handle
}

// Run calls the handler with msg's Message.
func (r *registration) Run(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) error {
	return r.one(ctx, tx, messageFromRow(msg))
}

// Batch reports whether a BatchHandler was registered.
func (r *registration) Batch() bool { return r.many != nil }

// RunBatch calls the BatchHandler with msgs' Messages, each its own copy.
func (r *registration) RunBatch(ctx context.Context, tx pgx.Tx, msgs []*dbsqlc.WharfInboxMessage) error {
	out := make([]*Message, len(msgs))
	for i, m := range msgs {
		out[i] = messageFromRow(m)
	}
	return r.many(ctx, tx, out)
}

// registry holds the registrations of Handle and HandleBatch: the process
// engine's Registry.
type registry struct {
	mu         sync.RWMutex
	regs       map[handlerKey]*registration
	reconciles map[string]*registration // HandleReconcile's, by source
}

func (r *registry) set(source, eventType string, reg *registration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.regs[handlerKey{source, eventType}] = reg
}

// Lookup returns the registration for msg: for a late arrival its source
// reconciles, HandleReconcile's for its source, else for every source;
// else the most specific of its source and type, in the order (source,
// type), (source, *), (*, type), (*, *).
func (r *registry) Lookup(msg *dbsqlc.WharfInboxMessage) (process.Registration, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	source, eventType := msg.Source, msg.EventType
	if msg.LatePolicy != nil && *msg.LatePolicy == inboxjob.LateReconcile {
		for _, k := range []string{source, Wildcard} {
			if reg, ok := r.reconciles[k]; ok {
				return reg, true
			}
		}
		return nil, false
	}
	for _, k := range []handlerKey{{source, eventType}, {source, Wildcard}, {Wildcard, eventType}, {Wildcard, Wildcard}} {
		if reg, ok := r.regs[k]; ok {
			return reg, true
		}
	}
	return nil, false
}

// Handle registers h for messages of source with eventType. Either may be
// Wildcard: the most specific registration wins, in the order (source,
// type), (source, *), (*, type), (*, *). Registering the same pair again
// replaces the handler (a BatchHandler too).
func (ib *Inbox) Handle(source, eventType string, h Handler) {
	ib.handlers.set(source, eventType, &registration{one: h})
}

// HandleReconcile registers h for the late arrivals of source (or of every
// source, with Wildcard) whose Source.LateArrivals is LateReconcile: a
// message whose event was received and stored before, its dedupe key
// since pruned (see Message.RedeliveryOf). h runs in place of the
// handler registered for the message's type, in the same transaction as
// its processed mark, as any Handler does: it may compare the event with
// the effect the first receipt applied, and apply what is missing.
// Registering a source again replaces the handler. Such a late arrival
// with no reconcile handler fails with ErrNoHandler.
func (ib *Inbox) HandleReconcile(source string, h Handler) {
	if h == nil {
		panic("inbox: HandleReconcile with a nil Handler")
	}
	ib.handlers.mu.Lock()
	defer ib.handlers.mu.Unlock()
	ib.handlers.reconciles[source] = &registration{one: h}
}

// HandleBatch registers h, which applies several messages at once (see
// BatchHandler), for messages of source with eventType, as Handle does:
// the same wildcards and precedence, and registering the same pair again
// replaces the handler (a Handler too).
func (ib *Inbox) HandleBatch(source, eventType string, h BatchHandler) {
	if h == nil {
		panic("inbox: HandleBatch with a nil BatchHandler")
	}
	ib.handlers.set(source, eventType, &registration{
		one:  func(ctx context.Context, tx pgx.Tx, msg *Message) error { return h(ctx, tx, []*Message{msg}) },
		many: h,
	})
}

func messageFromRow(row *dbsqlc.WharfInboxMessage) *Message {
	m := &Message{
		ID:          row.ID,
		Source:      row.Source,
		EventID:     row.EventID,
		EventType:   row.EventType,
		Body:        row.Body,
		ReceivedAt:  row.ReceivedAt,
		Status:      Status(row.Status),
		Attempts:    int(row.Attempts),
		ProcessedAt: row.ProcessedAt,
		ScrubbedAt:  row.ScrubbedAt,
		OrderingKey: row.OrderingKey,
		JobID:       inboxjob.JobID(row),
	}
	if row.LastError != nil {
		m.LastError = *row.LastError
	}
	if row.RedeliveryOf != nil {
		m.RedeliveryOf = &Redelivery{MessageID: *row.RedeliveryOf, ProcessedAt: row.RedeliveryOfProcessedAt}
		if row.LatePolicy != nil {
			m.RedeliveryOf.Policy = latePolicyOf(*row.LatePolicy)
		}
	}
	_ = json.Unmarshal(row.Headers, &m.Header) // written by ReceiveTx from an http.Header
	return m
}
