package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/shared"
)

// Worker is the River worker of a message's own job.
type Worker struct {
	river.WorkerDefaults[inboxjob.ProcessArgs]
	p *Processor
}

// Work runs the message's handler in one transaction with the message's
// status change and the job's completion.
func (w *Worker) Work(ctx context.Context, job *river.Job[inboxjob.ProcessArgs]) error {
	if job.Args.NotBefore != nil {
		if wait := time.Until(*job.Args.NotBefore); wait > 0 {
			// A handler's snooze in a batch, retried alone (or, from an
			// older version, a retry): not due yet. A snooze uses no
			// attempt.
			return river.JobSnooze(wait)
		}
	}
	if job.Args.FailedInBatch && job.Attempt == 1 {
		// The handler failed in a batch, which recorded the attempt on the
		// message: River schedules the retry by the client's RetryPolicy,
		// as it does a failure of this worker.
		return &handlerFailed{messageID: job.Args.MessageID}
	}
	alone := func(ctx context.Context) error {
		r := &single{p: w.p, job: job, pastHalf: halfway(ctx),
			log: w.p.config.Logger.With("message_id", job.Args.MessageID, "job_id", job.ID, "attempt", job.Attempt)}
		err := pgx.BeginFunc(ctx, w.p.config.Pool, func(tx pgx.Tx) error { return r.run(ctx, tx) })
		return r.settle(ctx, err)
	}
	return w.p.through(gateCall{ctx: ctx, row: job.JobRow, batch: w.p.mergeableOne(job), run: alone})
}

// single is one run of a message's own job.
type single struct {
	p   *Processor
	job *river.Job[inboxjob.ProcessArgs]
	log *slog.Logger

	pastHalf func() bool // see halfway

	msg         *dbsqlc.WharfInboxMessage // the job's message, once it is its own to run
	took        time.Duration             // the handler's run time
	parked      bool                      // waiting for an earlier message of its ordering key
	adopted     *batch                    // the other jobs' messages it ran (see adopt)
	adoptedJobs []int64                   // their jobs: set once the transaction holds them
}

// run is the job's transaction: load and lock the message, wait for its
// turn, mark it processed, run its handler, wake the next message of its
// ordering key, adopt waiting messages (see adopt), complete the job.
func (r *single) run(ctx context.Context, tx pgx.Tx) error {
	r.parked, r.adopted, r.adoptedJobs = false, nil, nil
	msg, err := r.load(ctx, tx)
	if msg == nil {
		return err
	}
	r.msg = msg
	if waits, err := r.awaitTurn(ctx, tx); waits || err != nil {
		return err
	}
	reg, err := r.p.lookup(msg)
	if err != nil {
		return err
	}
	// Marked before the handler runs, in the same transaction: whatever
	// the handler does to the transaction (a COMMIT through Conn, say),
	// its writes cannot commit without the mark; a failure rolls both
	// back.
	if err := markProcessed(ctx, pgxtx.GenericPlans{DBTX: tx}, r.p.config.Now(), msg); err != nil {
		return fmt.Errorf("inbox: mark processed: %w", err)
	}
	if err := r.runHandler(ctx, tx, reg); err != nil {
		return err
	}
	if err := r.p.config.Ordering.WakeNext(ctx, tx, msg); err != nil {
		return err
	}
	if err := r.adopt(ctx, tx); err != nil {
		return err
	}
	return completeJob(ctx, tx, r.job)
}

// load locks the job's message and returns it; nil when the job has
// nothing to run: its message is processed (the job is completed in tx),
// or gone or no longer its own (the error cancels the job).
func (r *single) load(ctx context.Context, tx pgx.Tx) (*dbsqlc.WharfInboxMessage, error) {
	msg, err := dbsqlc.New(pgxtx.GenericPlans{DBTX: tx}).InboxMessageGetForUpdate(ctx, dbsqlc.InboxMessageGetForUpdateParams{
		ReceivedAt: r.job.Args.ReceivedAt,
		ID:         r.job.Args.MessageID,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, river.JobCancel(fmt.Errorf("inbox: message %s no longer exists", r.job.Args.MessageID))
	}
	if err != nil {
		return nil, fmt.Errorf("inbox: load message: %w", err)
	}
	if msg.Status == inboxjob.StatusProcessed {
		// A replayed or duplicated job: the effect already committed.
		return nil, completeJob(ctx, tx, r.job)
	}
	if !inboxjob.OwnedBy(&msg, r.job.ID) {
		// Skipped, erased, replayed onto a new job or rescued while
		// this job was running or waiting for a retry (neither can
		// delete a running job): not this job's to run, nor to fail.
		return nil, river.JobCancel(&notOwnedError{messageID: msg.ID, jobID: r.job.ID})
	}
	return &msg, nil
}

// awaitTurn reports whether the message must wait for an earlier message
// of its ordering key: it then snoozes (that one is being processed at
// this moment) or parks, completing its job, until that one finishes (see
// ordering.Blocked), using no attempt.
func (r *single) awaitTurn(ctx context.Context, tx pgx.Tx) (bool, error) {
	blocked, err := ordering.Blocked(ctx, tx, r.msg)
	switch {
	case errors.Is(err, ordering.ErrBusy):
		return true, river.JobSnooze(ordering.BusyWait)
	case err != nil:
		return true, err
	case !blocked:
		return false, nil
	}
	if err := r.p.config.Ordering.Park(ctx, tx, r.msg); err != nil {
		return true, err
	}
	r.parked = true
	return true, completeJob(ctx, tx, r.job)
}

// runHandler runs reg's handler on the message in tx, which it cannot end.
func (r *single) runHandler(ctx context.Context, tx pgx.Tx, reg Registration) error {
	started := time.Now()
	spanCtx, span := r.p.startProcess(ctx, r.msg)
	err := recovered(func() error { return reg.Run(spanCtx, handlerTx{Tx: tx}, r.msg) })
	endProcess(span, err)
	r.took = time.Since(started)
	return err
}

// settle turns the transaction's outcome, err, into the job's: nothing
// more on success; a lost conflict runs again at once; a failure of the
// handler is recorded on the message.
func (r *single) settle(ctx context.Context, err error) error {
	if err == nil {
		r.report(ctx)
		if r.adopted != nil {
			r.adopted.report(ctx)
		}
		return nil
	}
	var notOwned *notOwnedError
	if errors.As(err, &notOwned) {
		r.log.InfoContext(ctx, "inbox: the message is no longer this job's; the job ends without running it", "reason", err)
		return err
	}
	if r.adoptedJobs != nil {
		return r.settleAdoption(ctx, err)
	}
	if lostConflict(err) && shared.SnoozeCount(r.job.Metadata) < maxConflictRetries {
		// Rolled back: the handler's writes and the job's mark alike.
		r.log.InfoContext(ctx, "inbox: the handler's transaction lost a deadlock or serialization conflict; it runs again at once, using no attempt")
		return river.JobSnooze(0)
	}
	if r.msg == nil { // not loaded: nothing to record on the message
		var cancelled *river.JobCancelError
		if !errors.As(err, &cancelled) {
			// River's own line for it is left out of the logs (see
			// wharfriver.Configure): this is the one.
			r.log.WarnContext(ctx, "inbox: the message could not be loaded; River runs the job again", "error", err)
		}
		return err
	}
	var snooze *river.JobSnoozeError
	if errors.As(err, &snooze) {
		// The handler asked to run again later: not a failed attempt.
		return err
	}
	return r.recordFailure(ctx, err)
}

// report logs and counts a committed run.
func (r *single) report(ctx context.Context) {
	switch {
	case r.parked:
		r.log.DebugContext(ctx, "inbox: message parked until the earlier message of its ordering key finishes", "ordering_key", r.msg.OrderingKey)
	case r.msg != nil:
		r.p.handlerTime.add(r.took)
		r.p.config.Metrics.Handled(ctx, r.msg, inboxjob.StatusProcessed, r.took)
		r.log.DebugContext(ctx, "inbox: message processed", "source", r.msg.Source, "event_id", r.msg.EventID, "event_type", r.msg.EventType)
	}
}

// failureRecordTimeout bounds the record of a failure, which goes on
// when the job's context is done (a timeout is a failure worth
// recording).
const failureRecordTimeout = 10 * time.Second

// recordFailure stores a failed attempt on the message (its transaction has
// rolled back) and returns what River should do with the job. The record
// applies only while the message is as the job read it (see
// InboxMessageMarkFailed): otherwise an operator got in after the rollback,
// and the job ends (cancelled) with nothing counted, logged dead, woken or
// reported to OnDead.
func (r *single) recordFailure(ctx context.Context, cause error) error {
	status := failureStatus(cause, r.job.Attempt, r.job.MaxAttempts)
	recordCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureRecordTimeout)
	defer cancel()
	if hook := r.p.TestHooks.BeforeFailureRecord; hook != nil {
		hook(recordCtx, r.msg)
	}
	recorded, err := r.record(recordCtx, status, cause)
	if err != nil {
		// Nothing recorded: the message is as it was, unfinished on this
		// job. River retries the job, or ends it after its last attempt
		// (cancels it, for a permanent failure), and Rescue then makes the
		// message dead: that is when it counts as dead, once.
		r.log.ErrorContext(ctx, "inbox: the handler failed and its failure could not be recorded; the job's next run or Rescue settles the message",
			"error", err, "handler_error", cause)
		return handlerResult(cause, &handlerFailed{messageID: r.msg.ID})
	}
	if recorded == 0 {
		// The handler's error is left out: the message may have been erased.
		r.log.InfoContext(ctx, "inbox: the message was skipped, erased, replayed or rescued while its handler failed; the failure is not recorded")
		return river.JobCancel(&notOwnedError{messageID: r.msg.ID, jobID: r.job.ID})
	}
	r.p.handlerTime.add(r.took)
	r.p.config.Metrics.Handled(ctx, r.msg, status, r.took)
	logFailure(ctx, r.log, r.msg, status, cause)
	if status == inboxjob.StatusDead {
		r.p.config.OnDead.call(recordCtx, r.p.config.Logger, r.msg, cause)
	}
	return handlerResult(cause, &handlerFailed{messageID: r.msg.ID})
}

// handlerResult is what River is told of a handler's failure, cause:
// failed, and for a permanent failure cancelled.
func handlerResult(cause error, failed *handlerFailed) error {
	if isPermanent(cause) {
		return river.JobCancel(failed)
	}
	return failed
}

// record writes the failure with status; recorded is 0 when the message
// is no longer as the job read it. A dead message releases the next one of
// its ordering key in the same transaction: a crash between the two would
// leave that one parked.
func (r *single) record(ctx context.Context, status string, cause error) (recorded int64, err error) {
	mark := dbsqlc.InboxMessageMarkFailedParams{
		Status:     status,
		LastError:  inboxjob.LastError(cause.Error()),
		Now:        r.p.config.Now(),
		ReceivedAt: r.job.Args.ReceivedAt,
		ID:         r.job.Args.MessageID,
		JobID:      r.job.ID,
		Attempts:   r.msg.Attempts,
	}
	err = pgx.BeginFunc(ctx, r.p.config.Pool, func(tx pgx.Tx) error {
		var err error
		recorded, err = dbsqlc.New(tx).InboxMessageMarkFailed(ctx, mark)
		if err != nil || recorded == 0 || status != inboxjob.StatusDead {
			return err
		}
		return r.p.config.Ordering.WakeNext(ctx, tx, r.msg)
	})
	if err != nil && status == inboxjob.StatusDead {
		// The wake failed, or the mark: record the death alone, so that the
		// message is not left unfinished on a finished job; Rescue gives the
		// next message of its key a job if it was parked.
		r.log.WarnContext(ctx, "inbox: could not wake the next message of the ordering key; recording the failure alone", "error", err)
		recorded, err = dbsqlc.New(r.p.config.Pool).InboxMessageMarkFailed(ctx, mark)
	}
	return recorded, err
}

// logFailure logs a failed handler: a warning while it will retry, an
// error once its message is dead.
func logFailure(ctx context.Context, log *slog.Logger, msg *dbsqlc.WharfInboxMessage, status string, cause error) {
	attrs := []any{"source", msg.Source, "event_id", msg.EventID, "event_type", msg.EventType, "status", status, "error", cause}
	if status == inboxjob.StatusDead {
		log.ErrorContext(ctx, "inbox: message dead", attrs...)
	} else {
		log.WarnContext(ctx, "inbox: message failed, will retry", attrs...)
	}
}
