package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// processBatchWorker processes a batch of messages in one transaction: each
// handler runs in a savepoint, so its effect commits with its own processed
// mark and one failure rolls back only itself. A failed message is handed,
// in the same transaction, to a job of its own (processWorker) that retries
// it alone with backoff. A message that must wait for an earlier one of its
// ordering key is parked (see parkHeld). One commit covers the batch.
type processBatchWorker struct {
	river.WorkerDefaults[inboxjob.BatchArgs]
	ib *Inbox
}

// batchFailure is a message whose handler failed within a batch.
type batchFailure struct {
	msg   *dbsqlc.WharfInboxMessage
	cause error
}

func (w *processBatchWorker) Work(ctx context.Context, job *river.Job[inboxjob.BatchArgs]) error {
	ib := w.ib
	log := ib.logger.With("job_id", job.ID, "attempt", job.Attempt)
	if job.Attempt > 1 {
		// The batch's transaction failed before (a crash, a timeout, a lost
		// connection): let each message go its own way.
		return w.split(ctx, job, log)
	}
	var processed []*dbsqlc.WharfInboxMessage
	var failures []batchFailure
	var late []uuid.UUID                  // messages left for a new batch job (see pastHalf)
	took := map[uuid.UUID]time.Duration{} // handler run times
	pastHalf := halfway(ctx)
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		processed, failures, late = nil, nil, nil
		clear(took)
		var waiting []ordering.Held
		// Generic plans: a custom plan of these statements on the
		// day-partitioned messages took as long as running them (see
		// pgxtx.GenericPlans).
		q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
		// Locked here, in id order, so that no other run of this job, nor a
		// split, nor Forget, changes them while their handlers run.
		rows, err := q.InboxMessagesGetForUpdate(ctx, dbsqlc.InboxMessagesGetForUpdateParams{
			ReceivedAt: job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(job.Args.MessageIDs),
		})
		if err != nil {
			return fmt.Errorf("inbox: load messages: %w", err)
		}
		now := ib.clock()
		order, err := ordering.NewBatchOrder(ctx, tx, job.ID, job.Args.ReceivedAt, rows)
		if err != nil {
			return err
		}
		sp := &savepoints{ctx: ctx}
		var unmarked []uuid.UUID // processed by handlers that never touched the database
		// alone runs msg's handler in a savepoint of its own; an error is
		// one that lost the transaction.
		alone := func(msg *dbsqlc.WharfInboxMessage) error {
			if held, ok := order.Holds(msg); ok {
				// An earlier message of its ordering key is unfinished: it
				// waits, parked, without using an attempt.
				waiting = append(waiting, held)
				return nil
			}
			sp.start(pgxtx.Capture(func(db pgxtx.DBTX) error {
				return dbsqlc.New(db).InboxMessageMarkProcessed(ctx, dbsqlc.InboxMessageMarkProcessedParams{
					Now: now, ReceivedAt: msg.ReceivedAt, ID: msg.ID,
				})
			}))
			started := time.Now()
			spanCtx, span := ib.startProcess(ctx, msg)
			err := w.runInSavepoint(spanCtx, tx, sp, "message "+msg.ID.String(), func(ctx context.Context, htx handlerTx) error {
				if h := ib.handlerFor(msg.Source, msg.EventType); h != nil {
					return runHandlerIn(ctx, h, htx, msg)
				}
				return fmt.Errorf("%w for source %q, type %q", ErrNoHandler, msg.Source, msg.EventType)
			})
			endProcess(span, err)
			took[msg.ID] = time.Since(started)
			if err != nil {
				var fatal *batchFatalError
				if errors.As(err, &fatal) {
					return fatal.err
				}
				failures = append(failures, batchFailure{msg, err})
				if !ib.diesInBatch(err) {
					// Its later messages in this batch wait too. A message
					// dead now is finished and holds none: each of them
					// waits, if at all, for an earlier one outside the
					// batch, which may lie between the two.
					order.Hold(msg)
				}
				return nil
			}
			if !sp.taken {
				unmarked = append(unmarked, msg.ID)
			}
			processed = append(processed, msg)
			return nil
		}
		// Half the job's timeout gone, the messages not reached yet go on
		// to a new batch job, rather than risk the whole batch's work on
		// the time left; at least one runs, so that every job gets on.
		ran := false // a handler of the batch, or a park
		leaveFrom := func(rest []*dbsqlc.WharfInboxMessage, from int) {
			for _, m := range rest {
				late = append(late, m.ID)
			}
			for j := from; j < len(rows); j++ {
				if inboxjob.OwnedBy(&rows[j], job.ID) {
					late = append(late, rows[j].ID)
				}
			}
		}
	rows:
		for i := 0; i < len(rows); i++ {
			if !inboxjob.OwnedBy(&rows[i], job.ID) {
				continue
			}
			if ran && pastHalf() {
				leaveFrom(nil, i)
				break
			}
			ran = true
			msg := &rows[i]
			reg, group, next := w.group(job, rows, i, order)
			if len(group) < 2 {
				if err := alone(msg); err != nil {
					return err
				}
				continue
			}
			i = next - 1
			ok, err := w.runGroup(ctx, log, tx, sp, reg, group, now, took)
			if err != nil {
				return err
			}
			if ok {
				if !sp.taken {
					for _, m := range group {
						unmarked = append(unmarked, m.ID)
					}
				}
				processed = append(processed, group...)
				continue
			}
			// The BatchHandler failed, and its writes and marks were rolled
			// back: each message goes again alone, so that only a bad one
			// fails.
			for k, m := range group {
				if k > 0 && pastHalf() {
					leaveFrom(group[k:], next)
					break rows
				}
				if err := alone(m); err != nil {
					return err
				}
			}
		}
		if len(unmarked) > 0 {
			if err := q.InboxMessagesMarkProcessed(ctx, dbsqlc.InboxMessagesMarkProcessedParams{
				Now: now, ReceivedAt: job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(unmarked),
			}); err != nil {
				return fmt.Errorf("inbox: mark processed: %w", err)
			}
		}
		// Parked before any wake of this transaction (retryAlone wakes the
		// next message of one that is dead), so that the wakes see them.
		rest, err := ib.ordering.ParkHeld(ctx, tx, job.Args.ReceivedAt, waiting)
		if err != nil {
			return err
		}
		switch {
		case len(rest) == 0:
		case job.Args.Waits < orderingHandOns:
			// Another transaction holds the messages they wait for (or
			// has just finished them): a new batch job looks again.
			if err := ib.handOn(ctx, tx, job, rest); err != nil {
				return err
			}
		default:
			for _, msg := range rest {
				// A job of its own parks it.
				failures = append(failures, batchFailure{msg, &orderingWaitError{}})
			}
		}
		if len(late) > 0 {
			if err := ib.continueBatch(ctx, tx, job, late, job.Args.Waits); err != nil {
				return fmt.Errorf("inbox: hand the rest of a batch on: %w", err)
			}
		}
		if err := ib.ordering.WakeNextOf(ctx, tx, job.Args.ReceivedAt, processed); err != nil {
			return err
		}
		for _, f := range failures {
			if err := ib.retryAlone(ctx, tx, f.msg, f.cause); err != nil {
				return err
			}
		}
		return completeJob(ctx, tx, job)
	})
	if err != nil {
		// Nothing of the batch committed. Split it now, so that one bad
		// message (a handler outliving the job's timeout, say) costs its
		// neighbours one delay at most; if that fails too, River retries and
		// the next attempt splits.
		log.WarnContext(ctx, "inbox: batch transaction failed; its messages continue on jobs of their own", "error", err)
		splitCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if splitErr := w.split(splitCtx, job, log); splitErr != nil {
			return errors.Join(err, splitErr)
		}
		return nil
	}
	if len(late) > 0 {
		log.InfoContext(ctx, "inbox: batch ran for half its job's timeout; the messages it had not reached go on to a new batch job",
			"messages", len(late))
	}
	for _, msg := range processed {
		ib.metrics.handled(ctx, msg, inboxjob.StatusProcessed, took[msg.ID])
		log.DebugContext(ctx, "inbox: message processed", "message_id", msg.ID, "source", msg.Source, "event_id", msg.EventID, "event_type", msg.EventType)
	}
	for _, f := range failures {
		if lostConflict(f.cause) {
			log.InfoContext(ctx, "inbox: a handler lost a deadlock or serialization conflict in a batch; its message runs again alone at once, using no attempt",
				"message_id", f.msg.ID)
		}
		if usesNoAttempt(f.cause) {
			continue // waiting for its turn (ordering), the handler's snooze, or a run of its own: not a failure
		}
		status := failureStatus(f.cause, 1, ib.maxAttempts)
		ib.metrics.handled(ctx, f.msg, status, took[f.msg.ID])
		logFailure(ctx, log.With("message_id", f.msg.ID), f.msg, status, f.cause)
		if status == inboxjob.StatusDead {
			ib.dead(ctx, f.msg, f.cause)
		}
	}
	return nil
}

// halfway returns a function that reports whether half of the time ctx
// had when halfway was called has passed: a batch job starts no handler
// past half its River timeout (JobTimeout, or none). Without a deadline it
// always reports false.
func halfway(ctx context.Context) func() bool {
	deadline, ok := ctx.Deadline()
	if !ok {
		return func() bool { return false }
	}
	start := time.Now()
	half := start.Add(deadline.Sub(start) / 2)
	return func() bool { return !time.Now().Before(half) }
}

// batchFatalError is a failure that lost the batch's transaction, not just
// one handler's savepoint.
type batchFatalError struct{ err error }

func (e *batchFatalError) Error() string { return e.err.Error() }

// runInSavepoint runs a handler (run) in a savepoint of tx (see
// handlerTx), which also holds its messages' processed marks; what names
// them in errors. A handler error rolls back to the savepoint and is
// returned; an error that leaves tx unusable, or a handler that ended tx
// itself, is returned as a *batchFatalError.
func (w *processBatchWorker) runInSavepoint(ctx context.Context, tx pgx.Tx, sp *savepoints, what string, run func(context.Context, handlerTx) error) error {
	herr := run(ctx, handlerTx{Tx: tx, sp: sp})
	if sp.broken != nil {
		return &batchFatalError{fmt.Errorf("inbox: savepoint of %s: %w", what, sp.broken)}
	}
	switch tx.Conn().PgConn().TxStatus() {
	case 'T':
	case 'E':
		if herr == nil {
			herr = errors.New("inbox: a statement of the handler failed, but the handler returned nil")
		}
	default:
		// Through Conn() or a raw COMMIT: whatever ran before, these
		// messages' marks included, committed with it; the rest continue on
		// jobs of their own.
		return &batchFatalError{fmt.Errorf("inbox: the handler of %s ended the batch's transaction", what)}
	}
	if herr == nil {
		return nil
	}
	if err := sp.undo(ctx, tx); err != nil {
		// The handler's error is left out: this one may reach River's
		// job row, beyond the reach of erasure (see handlerFailed).
		return &batchFatalError{fmt.Errorf("inbox: roll back handler of %s: %w", what, err)}
	}
	return herr
}

// group returns the messages a BatchHandler takes together from rows[i]
// on (msg is rows[i]'s), and its registration: msg and the owned messages
// after it, in order, that resolve to msg's registration, when that is a
// HandleBatch one, stopping at the first that waits for an earlier one of
// its ordering key (it is handled alone, and parks). next is the index of
// the first row after the group. Fewer than two messages mean no group.
func (w *processBatchWorker) group(job *river.Job[inboxjob.BatchArgs], rows []dbsqlc.WharfInboxMessage, i int, order *ordering.BatchOrder) (reg *registration, group []*dbsqlc.WharfInboxMessage, next int) {
	msg := &rows[i]
	reg = w.ib.registered(msg.Source, msg.EventType)
	if reg == nil || reg.many == nil {
		return nil, nil, i + 1
	}
	if _, held := order.Holds(msg); held {
		return nil, nil, i + 1
	}
	group = []*dbsqlc.WharfInboxMessage{msg}
	next = i + 1
	for ; next < len(rows); next++ {
		if !inboxjob.OwnedBy(&rows[next], job.ID) {
			continue
		}
		m := &rows[next]
		if w.ib.registered(m.Source, m.EventType) != reg {
			break
		}
		if _, held := order.Holds(m); held {
			break
		}
		group = append(group, m)
	}
	return reg, group, next
}

// runGroup runs reg's BatchHandler on group in one savepoint that also
// marks the group's messages processed. ok reports whether it succeeded;
// an error is one that lost the transaction. A failure is rolled back, and
// recorded nowhere: the caller runs each message again alone. The handler
// gets copies of the messages, in a slice of its own: what it does to them
// (sorting, filtering, clearing a body once decoded) changes nothing the
// worker goes on with.
func (w *processBatchWorker) runGroup(ctx context.Context, log *slog.Logger, tx pgx.Tx, sp *savepoints, reg *registration,
	group []*dbsqlc.WharfInboxMessage, now time.Time, took map[uuid.UUID]time.Duration,
) (ok bool, err error) {
	ib := w.ib
	ids := make([]uuid.UUID, len(group))
	msgs := make([]*Message, len(group))
	for i, m := range group {
		ids[i] = m.ID
		msgs[i] = messageFromRow(m)
	}
	sp.start(pgxtx.Capture(func(db pgxtx.DBTX) error {
		return dbsqlc.New(db).InboxMessagesMarkProcessed(ctx, dbsqlc.InboxMessagesMarkProcessedParams{
			Now: now, ReceivedAt: group[0].ReceivedAt, Ids: pgxtx.UUIDTexts(ids),
		})
	}))
	started := time.Now()
	// One span for the call, linked to each message's receipt, with a span
	// per message under it; the handler's context carries the call's, so
	// that what it writes (an outbox event) continues its trace.
	spanCtx, span := ib.startProcessGroup(ctx, group)
	spans := make([]trace.Span, len(group))
	for i, m := range group {
		_, spans[i] = ib.startProcess(spanCtx, m)
	}
	herr := w.runInSavepoint(spanCtx, tx, sp, fmt.Sprintf("%d messages from %s", len(group), group[0].ID), func(ctx context.Context, htx handlerTx) error {
		return recovered(func() error { return reg.many(ctx, htx, msgs) })
	})
	// Each message's share of the call, for the handler-duration metric.
	share := time.Since(started) / time.Duration(len(group))
	var spanErr error
	if herr != nil {
		spanErr = fmt.Errorf("inbox: batch handler failed; its messages go again alone: %w", herr)
	}
	for i, m := range group {
		took[m.ID] = share
		endProcess(spans[i], spanErr)
	}
	endProcess(span, spanErr)
	var fatal *batchFatalError
	if errors.As(herr, &fatal) {
		return false, fatal.err
	}
	if herr != nil {
		log.InfoContext(ctx, "inbox: batch handler failed; its messages go again alone",
			"messages", len(group), "first_message_id", group[0].ID, "error", herr)
	}
	return herr == nil, nil
}

// diesInBatch reports whether cause, a handler's failure in a batch, makes
// its message dead in the batch's transaction (see retryAlone).
func (ib *Inbox) diesInBatch(cause error) bool {
	return !usesNoAttempt(cause) && failureStatus(cause, 1, ib.maxAttempts) == inboxjob.StatusDead
}

// usesNoAttempt reports whether cause, a handler's failure in a batch (or
// a message's wait for its ordering key), is no failed attempt: a snooze,
// a wait, or a lost conflict (see lostConflict).
func usesNoAttempt(cause error) bool {
	var snooze *river.JobSnoozeError
	var waiting *orderingWaitError
	return errors.As(cause, &snooze) || errors.As(cause, &waiting) || lostConflict(cause)
}

// retryAlone records a batch handler's failure on msg in tx and, unless
// the message is now dead, inserts a job of its own that retries it. A
// snooze uses no attempt and runs again after its duration; a lost
// conflict (see lostConflict) uses none either and runs again at once.
// (The handler's savepoint was rolled back, its message's mark with it.)
func (ib *Inbox) retryAlone(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage, cause error) error {
	q := dbsqlc.New(tx)
	opts := ib.jobs.Opts()
	args := inboxjob.ProcessArgs{MessageID: msg.ID, ReceivedAt: msg.ReceivedAt}
	var snooze *river.JobSnoozeError
	var waiting *orderingWaitError
	switch {
	case errors.As(cause, &waiting):
		// Its job runs now and, while the earlier message of its key is
		// unfinished, snoozes itself briefly (a short snooze keeps the job
		// available; a job inserted for later waits for River's
		// scheduler, seconds).
	case lostConflict(cause):
		// Its job runs now, after this batch has committed and let go of
		// the rows its other handlers locked, using no attempt.
	case errors.As(cause, &snooze):
		at := time.Now().Add(snooze.Duration)
		args.NotBefore = &at
	default:
		status := failureStatus(cause, 1, ib.maxAttempts)
		recorded, err := q.InboxMessageMarkFailed(ctx, dbsqlc.InboxMessageMarkFailedParams{
			Status:     status,
			LastError:  inboxjob.LastError(cause.Error()),
			Now:        ib.clock(),
			ReceivedAt: msg.ReceivedAt,
			ID:         msg.ID,
			JobID:      inboxjob.JobID(msg),
			Attempts:   msg.Attempts,
		})
		if err != nil {
			return fmt.Errorf("inbox: record failure: %w", err)
		}
		if recorded == 0 {
			// The batch has held the row since it read it: nothing can
			// have changed it. Should it have, nothing of the batch
			// commits, and its messages go on alone (see split).
			return fmt.Errorf("inbox: message %s changed under the batch's lock", msg.ID)
		}
		if status == inboxjob.StatusDead {
			return ib.ordering.WakeNext(ctx, tx, msg)
		}
		// This attempt counted: the retry job's first run stands for it
		// and hands it to River, which schedules the retry by the client's
		// RetryPolicy (see inboxjob.ProcessArgs.FailedInBatch); its other attempts
		// are the rest.
		args.FailedInBatch = true
	}
	if _, err := ib.jobs.Assign(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}}); err != nil {
		return fmt.Errorf("inbox: retry job: %w", err)
	}
	return nil
}

// split gives every message still waiting for job a job of its own, with a
// full set of attempts (the batch's failed transaction recorded none), and
// completes job, in one transaction.
func (w *processBatchWorker) split(ctx context.Context, job *river.Job[inboxjob.BatchArgs], log *slog.Logger) error {
	ib := w.ib
	var moved int
	err := ib.txFunc(ctx, func(tx pgx.Tx) error {
		q := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
		rows, err := q.InboxMessagesGetForUpdate(ctx, dbsqlc.InboxMessagesGetForUpdateParams{
			ReceivedAt: job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(job.Args.MessageIDs),
		})
		if err != nil {
			return fmt.Errorf("inbox: load messages: %w", err)
		}
		var params []river.InsertManyParams
		for i := range rows {
			if !inboxjob.OwnedBy(&rows[i], job.ID) {
				continue
			}
			// Stay on the queue the batch was on.
			opts := ib.jobs.Opts()
			opts.Queue = job.Queue
			params = append(params, river.InsertManyParams{
				Args:       inboxjob.ProcessArgs{MessageID: rows[i].ID, ReceivedAt: rows[i].ReceivedAt},
				InsertOpts: opts,
			})
		}
		if len(params) > 0 {
			if _, err := ib.jobs.Assign(ctx, tx, params); err != nil {
				return err
			}
		}
		moved = len(params)
		return completeJob(ctx, tx, job)
	})
	if err != nil {
		return fmt.Errorf("inbox: split batch: %w", err)
	}
	log.DebugContext(ctx, "inbox: batch split into jobs of their own", "messages", moved)
	return nil
}
