package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
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
}

// Handler applies a message's effect. It runs inside tx, the transaction
// that also marks the message processed and completes its River job: write
// through tx and the effect commits exactly once. Return an error to roll
// everything back and have River retry with backoff; wrap it with Permanent
// (or return river.JobCancel) to fail the message without retries; return
// river.JobSnooze to roll back and run again later without using an
// attempt. A Handler cannot commit or roll back tx: its Commit and Rollback
// return ErrHandlerEndedTx and change nothing.
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
var ErrNoHandler = errors.New("inbox: no handler registered")

// Permanent marks err as permanent: the message is dead at once, without
// retries, with err as its last error. It can still be replayed.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

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

// registration is what Handle or HandleBatch registered for a key.
type registration struct {
	one  Handler      // a BatchHandler's own, one message at a time, for HandleBatch
	many BatchHandler // nil for Handle
}

// Handle registers h for messages of source with eventType. Either may be
// Wildcard: the most specific registration wins, in the order (source,
// type), (source, *), (*, type), (*, *). Registering the same pair again
// replaces the handler (a BatchHandler too).
func (ib *Inbox) Handle(source, eventType string, h Handler) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.handlers[handlerKey{source, eventType}] = &registration{one: h}
}

// HandleBatch registers h, which applies several messages at once (see
// BatchHandler), for messages of source with eventType, as Handle does:
// the same wildcards and precedence, and registering the same pair again
// replaces the handler (a Handler too).
func (ib *Inbox) HandleBatch(source, eventType string, h BatchHandler) {
	if h == nil {
		panic("inbox: HandleBatch with a nil BatchHandler")
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.handlers[handlerKey{source, eventType}] = &registration{
		one:  func(ctx context.Context, tx pgx.Tx, msg *Message) error { return h(ctx, tx, []*Message{msg}) },
		many: h,
	}
}

// registered returns the registration for messages of source with
// eventType; nil when there is none.
func (ib *Inbox) registered(source, eventType string) *registration {
	ib.mu.RLock()
	defer ib.mu.RUnlock()
	for _, k := range []handlerKey{{source, eventType}, {source, Wildcard}, {Wildcard, eventType}, {Wildcard, Wildcard}} {
		if r, ok := ib.handlers[k]; ok {
			return r
		}
	}
	return nil
}

// handlerFor returns the handler of one message of source with eventType;
// nil when there is none.
func (ib *Inbox) handlerFor(source, eventType string) Handler {
	if r := ib.registered(source, eventType); r != nil {
		return r.one
	}
	return nil
}

type processWorker struct {
	river.WorkerDefaults[inboxjob.ProcessArgs]
	ib *Inbox
}

// Work runs the message's handler in one transaction with the message's
// status change and the job's completion.
func (w *processWorker) Work(ctx context.Context, job *river.Job[inboxjob.ProcessArgs]) error {
	if job.Args.NotBefore != nil {
		if wait := time.Until(*job.Args.NotBefore); wait > 0 {
			// A snooze handed over from a batch (or, from an older
			// version, a retry): not due yet. A snooze uses no attempt.
			return river.JobSnooze(wait)
		}
	}
	if job.Args.FailedInBatch && job.Attempt == 1 {
		// The handler failed in a batch, which recorded the attempt on the
		// message: River schedules the retry by the client's RetryPolicy,
		// as it does a failure of this worker.
		return &handlerFailed{messageID: job.Args.MessageID}
	}
	ib := w.ib
	log := ib.logger.With("message_id", job.Args.MessageID, "job_id", job.ID, "attempt", job.Attempt)

	var msg *dbsqlc.WharfInboxMessage // the job's message, once it is its own to run
	var handlerTook time.Duration
	var parked bool // waiting for an earlier message of its ordering key
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		parked = false
		row, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessageGetForUpdate(ctx, dbsqlc.InboxMessageGetForUpdateParams{
			ReceivedAt: job.Args.ReceivedAt,
			ID:         job.Args.MessageID,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return river.JobCancel(fmt.Errorf("inbox: message %s no longer exists", job.Args.MessageID))
		}
		if err != nil {
			return fmt.Errorf("inbox: load message: %w", err)
		}
		if row.Status == inboxjob.StatusProcessed {
			// A replayed or duplicated job: the effect already committed.
			return completeJob(ctx, tx, job)
		}
		if !inboxjob.OwnedBy(&row, job.ID) {
			// Skipped, erased, replayed onto a new job or rescued while
			// this job was running or waiting for a retry (neither can
			// delete a running job): not this job's to run, nor to fail.
			return river.JobCancel(&notOwnedError{messageID: row.ID, jobID: job.ID})
		}
		msg = &row
		if blocked, err := ordering.Blocked(ctx, tx, msg); errors.Is(err, ordering.ErrBusy) {
			return river.JobSnooze(ordering.BusyWait)
		} else if err != nil {
			return err
		} else if blocked {
			// An earlier message of its ordering key is unfinished: park
			// this one until that one finishes (see ordering.Blocked),
			// using no attempt.
			if err := ib.ordering.Park(ctx, tx, msg); err != nil {
				return err
			}
			parked = true
			return completeJob(ctx, tx, job)
		}
		h := ib.handlerFor(msg.Source, msg.EventType)
		if h == nil {
			return fmt.Errorf("%w for source %q, type %q", ErrNoHandler, msg.Source, msg.EventType)
		}
		// Marked before the handler runs, in the same transaction: whatever
		// the handler does to the transaction (a COMMIT through Conn, say),
		// its writes cannot commit without the mark; a failure rolls both
		// back.
		if err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessageMarkProcessed(ctx, dbsqlc.InboxMessageMarkProcessedParams{
			Now:        ib.clock(),
			ReceivedAt: job.Args.ReceivedAt,
			ID:         job.Args.MessageID,
		}); err != nil {
			return fmt.Errorf("inbox: mark processed: %w", err)
		}
		started := time.Now()
		spanCtx, span := ib.startProcess(ctx, msg)
		err = runHandler(spanCtx, h, tx, msg)
		endProcess(span, err)
		handlerTook = time.Since(started)
		if err != nil {
			return err
		}
		if err := ib.ordering.WakeNext(ctx, tx, msg); err != nil {
			return err
		}
		return completeJob(ctx, tx, job)
	})
	if err == nil {
		if parked {
			log.DebugContext(ctx, "inbox: message parked until the earlier message of its ordering key finishes", "ordering_key", msg.OrderingKey)
		} else if msg != nil {
			ib.metrics.handled(ctx, msg, inboxjob.StatusProcessed, handlerTook)
			log.DebugContext(ctx, "inbox: message processed", "source", msg.Source, "event_id", msg.EventID, "event_type", msg.EventType)
		}
		return nil
	}
	var notOwned *notOwnedError
	if errors.As(err, &notOwned) {
		log.InfoContext(ctx, "inbox: the message is no longer this job's; the job ends without running it", "reason", err)
		return err
	}
	if lostConflict(err) && shared.SnoozeCount(job.Metadata) < maxConflictRetries {
		// Rolled back: the handler's writes and the job's mark alike.
		log.InfoContext(ctx, "inbox: the handler's transaction lost a deadlock or serialization conflict; it runs again at once, using no attempt")
		return river.JobSnooze(0)
	}
	if msg == nil { // not loaded: nothing to record on the message
		return err
	}
	var snooze *river.JobSnoozeError
	if errors.As(err, &snooze) {
		// The handler asked to run again later: not a failed attempt.
		return err
	}
	return w.recordFailure(ctx, job, msg, err, handlerTook, log)
}

// notOwnedError ends a job whose message is no longer its own: skipped,
// erased, replayed onto another job or rescued since the job was given it,
// or since it read it. River cancels the job, which neither runs the
// message nor records anything on it: its new job, if any, runs it.
type notOwnedError struct {
	messageID uuid.UUID
	jobID     int64
}

func (e *notOwnedError) Error() string {
	return fmt.Sprintf("inbox: message %s is no longer job %d's (skipped, erased, replayed or rescued); the job leaves it alone",
		e.messageID, e.jobID)
}

// maxConflictRetries bounds the snoozes of a message's own job (River
// counts them, whatever their cause) under which a lost conflict (see
// lostConflict) runs the job again at once; past it a conflict is a failed
// attempt, with River's backoff, so that a handler that always loses one
// cannot hold a worker for ever.
const maxConflictRetries = 10

// lostConflict reports whether err, a handler's error, is Postgres's
// deadlock_detected (40P01) or serialization_failure (40001): its
// transaction lost a race with another one, which went on; nothing is wrong
// with the message, and running it again succeeds. Permanent (or
// river.JobCancel) is taken at its word.
func lostConflict(err error) bool {
	var pgErr *pgconn.PgError
	return !isPermanent(err) && errors.As(err, &pgErr) &&
		(pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// recordFailure stores a failed attempt on the message (its transaction has
// rolled back) and returns what River should do with the job. The record
// applies only while the message is as the job read it (see
// InboxMessageMarkFailed): otherwise an operator got in after the rollback,
// and the job ends (cancelled) with nothing counted, logged dead, woken or
// reported to OnDead.
func (w *processWorker) recordFailure(ctx context.Context, job *river.Job[inboxjob.ProcessArgs], msg *dbsqlc.WharfInboxMessage, cause error, took time.Duration, log *slog.Logger) error {
	status := failureStatus(cause, job.Attempt, job.MaxAttempts)
	// Record even when the job's context is done (a timeout is a failure
	// worth recording), but not forever.
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if w.ib.hooks.beforeFailureRecord != nil {
		w.ib.hooks.beforeFailureRecord(recordCtx, messageFromRow(msg))
	}
	mark := dbsqlc.InboxMessageMarkFailedParams{
		Status:     status,
		LastError:  inboxjob.LastError(cause.Error()),
		Now:        w.ib.clock(),
		ReceivedAt: job.Args.ReceivedAt,
		ID:         job.Args.MessageID,
		JobID:      job.ID,
		Attempts:   msg.Attempts,
	}
	// A dead message releases the next one of its ordering key in the same
	// transaction: a crash between the two would leave that one parked.
	var recorded int64
	err := w.ib.txFunc(recordCtx, func(tx pgx.Tx) error {
		var err error
		recorded, err = dbsqlc.New(tx).InboxMessageMarkFailed(recordCtx, mark)
		if err != nil || recorded == 0 || status != inboxjob.StatusDead {
			return err
		}
		return w.ib.ordering.WakeNext(recordCtx, tx, msg)
	})
	if err != nil && status == inboxjob.StatusDead {
		// The wake failed, or the mark: record the death alone, so that the
		// message is not left unfinished on a finished job; Rescue gives the
		// next message of its key a job if it was parked.
		log.WarnContext(ctx, "inbox: could not wake the next message of the ordering key; recording the failure alone", "error", err)
		recorded, err = dbsqlc.New(w.ib.pool).InboxMessageMarkFailed(recordCtx, mark)
	}
	if err != nil {
		log.ErrorContext(ctx, "inbox: recording failure", "error", err)
	} else if recorded == 0 {
		// The handler's error is left out: the message may have been erased.
		log.InfoContext(ctx, "inbox: the message was skipped, erased, replayed or rescued while its handler failed; the failure is not recorded")
		return river.JobCancel(&notOwnedError{messageID: msg.ID, jobID: job.ID})
	}
	w.ib.metrics.handled(ctx, msg, status, took)
	logFailure(ctx, log, msg, status, cause)
	if status == inboxjob.StatusDead {
		w.ib.dead(recordCtx, msg, cause)
	}
	failed := &handlerFailed{messageID: msg.ID}
	if isPermanent(cause) {
		return river.JobCancel(failed)
	}
	return failed
}

// handlerFailed is what River records of a failed handler, in place of the
// handler's error: that error may quote the payload, and River keeps its
// job rows' errors beyond the reach of Forget and ScrubAfter. The error
// itself is the message's last_error, which they erase.
type handlerFailed struct{ messageID uuid.UUID }

func (e *handlerFailed) Error() string {
	return "inbox: the handler of message " + e.messageID.String() + " failed; its error is the message's last_error"
}

// isPermanent reports whether a handler's error fails its message without
// retries: Permanent or river.JobCancel.
func isPermanent(err error) bool {
	var perm *permanentError
	var cancelled *river.JobCancelError
	return errors.As(err, &perm) || errors.As(err, &cancelled)
}

// failureStatus is a message's status after its handler failed with cause
// on attempt of maxAttempts.
func failureStatus(cause error, attempt, maxAttempts int) string {
	if isPermanent(cause) || attempt >= maxAttempts {
		return inboxjob.StatusDead
	}
	return inboxjob.StatusFailed
}

func logFailure(ctx context.Context, log *slog.Logger, msg *dbsqlc.WharfInboxMessage, status string, cause error) {
	attrs := []any{"source", msg.Source, "event_id", msg.EventID, "event_type", msg.EventType, "status", status, "error", cause}
	if status == inboxjob.StatusDead {
		log.ErrorContext(ctx, "inbox: message dead", attrs...)
	} else {
		log.WarnContext(ctx, "inbox: message failed, will retry", attrs...)
	}
}

// runHandler calls h in tx with msg's Message, turning a panic into an
// error so that the attempt is recorded like any other failure.
func runHandler(ctx context.Context, h Handler, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage) (err error) {
	return runHandlerIn(ctx, h, handlerTx{Tx: tx}, msg)
}

// runHandlerIn is runHandler with the handler's transaction given.
func runHandlerIn(ctx context.Context, h Handler, tx handlerTx, msg *dbsqlc.WharfInboxMessage) error {
	return recovered(func() error { return h(ctx, tx, messageFromRow(msg)) })
}

// recovered runs fn, turning a panic into an error.
func recovered(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("inbox: handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
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
	_ = json.Unmarshal(row.Headers, &m.Header) // written by ReceiveTx from an http.Header
	return m
}

// completeJob completes job in tx (River's JobCompleteTx), with a generic
// plan for River's statement (see pgxtx.GenericTx): it commits with the
// work's marks, or not at all.
func completeJob[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T]) error {
	_, err := river.JobCompleteTx[*riverpgxv5.Driver, pgx.Tx](ctx, pgxtx.GenericTx{Tx: tx}, job)
	return err
}
