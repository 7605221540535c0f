package process

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

// BatchWorker processes a batch of messages in one transaction: each
// handler runs in a savepoint, so its effect commits with its own processed
// mark and one failure rolls back only itself. A failed message is handed,
// in the same transaction, to a job of its own (processWorker) that retries
// it alone with backoff. A message that must wait for an earlier one of its
// ordering key is parked (see parkHeld). One commit covers the batch.
type BatchWorker struct {
	river.WorkerDefaults[inboxjob.BatchArgs]
	p *Processor
}

// batchFailure is a message whose handler failed within a batch.
type batchFailure struct {
	msg   *dbsqlc.WharfInboxMessage
	cause error
}

func (w *BatchWorker) Work(ctx context.Context, job *river.Job[inboxjob.BatchArgs]) error {
	p := w.p
	log := p.config.Logger.With("job_id", job.ID, "attempt", job.Attempt)
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
	err := pgx.BeginFunc(ctx, p.config.Pool, func(tx pgx.Tx) error {
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
		now := p.config.Now()
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
			spanCtx, span := p.startProcess(ctx, msg)
			err := w.runInSavepoint(spanCtx, tx, sp, "message "+msg.ID.String(), func(ctx context.Context, htx handlerTx) error {
				reg, err := p.lookup(msg)
				if err != nil {
					return err
				}
				return recovered(func() error { return reg.Run(ctx, htx, msg) })
			})
			endProcess(span, err)
			took[msg.ID] = time.Since(started)
			if err != nil {
				var fatal *batchFatalError
				if errors.As(err, &fatal) {
					return fatal.err
				}
				failures = append(failures, batchFailure{msg, err})
				if !p.diesInBatch(err) {
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
		rest, err := p.config.Ordering.ParkHeld(ctx, tx, job.Args.ReceivedAt, waiting)
		if err != nil {
			return err
		}
		switch {
		case len(rest) == 0:
		case job.Args.Waits < orderingHandOns:
			// Another transaction holds the messages they wait for (or
			// has just finished them): a new batch job looks again.
			if err := p.handOn(ctx, tx, job, rest); err != nil {
				return err
			}
		default:
			for _, msg := range rest {
				// A job of its own parks it.
				failures = append(failures, batchFailure{msg, &orderingWaitError{}})
			}
		}
		if len(late) > 0 {
			if err := p.continueBatch(ctx, tx, job, late, job.Args.Waits); err != nil {
				return fmt.Errorf("inbox: hand the rest of a batch on: %w", err)
			}
		}
		if err := p.config.Ordering.WakeNextOf(ctx, tx, job.Args.ReceivedAt, processed); err != nil {
			return err
		}
		for _, f := range failures {
			if err := p.retryAlone(ctx, tx, f.msg, f.cause); err != nil {
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
		p.config.Metrics.Handled(ctx, msg, inboxjob.StatusProcessed, took[msg.ID])
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
		status := failureStatus(f.cause, 1, p.config.Jobs.MaxAttempts())
		p.config.Metrics.Handled(ctx, f.msg, status, took[f.msg.ID])
		logFailure(ctx, log.With("message_id", f.msg.ID), f.msg, status, f.cause)
		if status == inboxjob.StatusDead {
			p.config.OnDead.call(ctx, p.config.Logger, f.msg, f.cause)
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

// runInSavepoint runs a handler (run) in a savepoint of tx (see
// handlerTx), which also holds its messages' processed marks; what names
// them in errors. A handler error rolls back to the savepoint and is
// returned; an error that leaves tx unusable, or a handler that ended tx
// itself, is returned as a *batchFatalError.
func (w *BatchWorker) runInSavepoint(ctx context.Context, tx pgx.Tx, sp *savepoints, what string, run func(context.Context, handlerTx) error) error {
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
func (w *BatchWorker) group(job *river.Job[inboxjob.BatchArgs], rows []dbsqlc.WharfInboxMessage, i int, order *ordering.BatchOrder) (reg Registration, group []*dbsqlc.WharfInboxMessage, next int) {
	msg := &rows[i]
	reg, ok := w.p.config.Registry.Lookup(msg.Source, msg.EventType)
	if !ok || !reg.Batch() {
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
		if r, _ := w.p.config.Registry.Lookup(m.Source, m.EventType); r != reg {
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
func (w *BatchWorker) runGroup(ctx context.Context, log *slog.Logger, tx pgx.Tx, sp *savepoints, reg Registration,
	group []*dbsqlc.WharfInboxMessage, now time.Time, took map[uuid.UUID]time.Duration,
) (ok bool, err error) {
	p := w.p
	ids := make([]uuid.UUID, len(group))
	for i, m := range group {
		ids[i] = m.ID
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
	spanCtx, span := p.startProcessGroup(ctx, group)
	spans := make([]trace.Span, len(group))
	for i, m := range group {
		_, spans[i] = p.startProcess(spanCtx, m)
	}
	herr := w.runInSavepoint(spanCtx, tx, sp, fmt.Sprintf("%d messages from %s", len(group), group[0].ID), func(ctx context.Context, htx handlerTx) error {
		return recovered(func() error { return reg.RunBatch(ctx, htx, group) })
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
func (p *Processor) diesInBatch(cause error) bool {
	return !usesNoAttempt(cause) && failureStatus(cause, 1, p.config.Jobs.MaxAttempts()) == inboxjob.StatusDead
}

// retryAlone records a batch handler's failure on msg in tx and, unless
// the message is now dead, inserts a job of its own that retries it. A
// snooze uses no attempt and runs again after its duration; a lost
// conflict (see lostConflict) uses none either and runs again at once.
// (The handler's savepoint was rolled back, its message's mark with it.)
func (p *Processor) retryAlone(ctx context.Context, tx pgx.Tx, msg *dbsqlc.WharfInboxMessage, cause error) error {
	q := dbsqlc.New(tx)
	opts := p.config.Jobs.Opts()
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
		status := failureStatus(cause, 1, p.config.Jobs.MaxAttempts())
		recorded, err := q.InboxMessageMarkFailed(ctx, dbsqlc.InboxMessageMarkFailedParams{
			Status:     status,
			LastError:  inboxjob.LastError(cause.Error()),
			Now:        p.config.Now(),
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
			return p.config.Ordering.WakeNext(ctx, tx, msg)
		}
		// This attempt counted: the retry job's first run stands for it
		// and hands it to River, which schedules the retry by the client's
		// RetryPolicy (see inboxjob.ProcessArgs.FailedInBatch); its other attempts
		// are the rest.
		args.FailedInBatch = true
	}
	if _, err := p.config.Jobs.Assign(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}}); err != nil {
		return fmt.Errorf("inbox: retry job: %w", err)
	}
	return nil
}

// split gives every message still waiting for job a job of its own, with a
// full set of attempts (the batch's failed transaction recorded none), and
// completes job, in one transaction.
func (w *BatchWorker) split(ctx context.Context, job *river.Job[inboxjob.BatchArgs], log *slog.Logger) error {
	p := w.p
	var moved int
	err := pgx.BeginFunc(ctx, p.config.Pool, func(tx pgx.Tx) error {
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
			opts := p.config.Jobs.Opts()
			opts.Queue = job.Queue
			params = append(params, river.InsertManyParams{
				Args:       inboxjob.ProcessArgs{MessageID: rows[i].ID, ReceivedAt: rows[i].ReceivedAt},
				InsertOpts: opts,
			})
		}
		if len(params) > 0 {
			if _, err := p.config.Jobs.Assign(ctx, tx, params); err != nil {
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

// orderingHandOns bounds how many times a batch's held messages whose
// earlier messages are being processed go on together to a new batch job;
// past it they go to jobs of their own, which park them.
const orderingHandOns = 3

// handOn gives msgs, messages of batch job that wait for earlier ones
// another transaction holds (being processed, most likely), a new batch job
// that runs at once: by the time it runs, the earlier ones have most likely
// finished and the messages are processed together. Its Waits counts the
// hand-ons.
func (p *Processor) handOn(ctx context.Context, tx pgx.Tx, job *river.Job[inboxjob.BatchArgs], msgs []*dbsqlc.WharfInboxMessage) error {
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	if err := p.continueBatch(ctx, tx, job, ids, job.Args.Waits+1); err != nil {
		return fmt.Errorf("inbox: ordering: hand messages on: %w", err)
	}
	return nil
}

// continueBatch gives ids, messages of batch job, a new batch job on its
// queue that runs at once, with waits as its Waits.
func (p *Processor) continueBatch(ctx context.Context, tx pgx.Tx, job *river.Job[inboxjob.BatchArgs], ids []uuid.UUID, waits int) error {
	args := inboxjob.BatchArgs{ReceivedAt: job.Args.ReceivedAt, MessageIDs: ids, Waits: waits}
	opts := p.config.Jobs.BatchOpts()
	opts.Queue = job.Queue
	_, err := p.config.Jobs.Assign(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
	return err
}
