package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/ordering"
	"github.com/wharfhq/wharf/internal/pgxtx"
)

// BatchWorker processes a batch of messages in one transaction: each
// handler runs in a savepoint, so its effect commits with its own processed
// mark and one failure rolls back only itself. A failed message is handed,
// in the same transaction, to a job of its own (Worker) that retries it
// alone with backoff. A message that must wait for an earlier one of its
// ordering key is parked (see ordering.ParkHeld). One commit covers the
// batch.
type BatchWorker struct {
	river.WorkerDefaults[inboxjob.BatchArgs]
	p *Processor
}

// Work runs the batch's handlers in one transaction, which it may share
// with other batch jobs that start with it (see merge); if that
// transaction is lost, its messages go on to jobs of their own.
func (w *BatchWorker) Work(ctx context.Context, job *river.Job[inboxjob.BatchArgs]) error {
	if job.Attempt > 1 {
		// The batch's transaction failed before (a crash, a timeout, a lost
		// connection): let each message go its own way.
		b := w.p.newBatch(job)
		if err := b.split(ctx); err != nil {
			b.log.WarnContext(ctx, "inbox: could not split a failed batch into jobs of their own; River runs the batch job again", "error", err)
			return err
		}
		return nil
	}
	call := gateCall{ctx: ctx, row: job.JobRow, run: func(ctx context.Context) error { return w.p.runBatch(ctx, job) }}
	if w.p.mergeable(job) {
		call.batch = job
	}
	return w.p.through(call)
}

// newBatch returns a run of job.
func (p *Processor) newBatch(job *river.Job[inboxjob.BatchArgs]) *batch {
	return &batch{p: p, job: job, log: p.config.Logger.With("job_id", job.ID, "attempt", job.Attempt),
		took: map[uuid.UUID]time.Duration{}}
}

// runBatch runs job's first attempt in a transaction of its own.
func (p *Processor) runBatch(ctx context.Context, job *river.Job[inboxjob.BatchArgs]) error {
	b := p.newBatch(job)
	b.pastHalf = halfway(ctx)
	if err := pgx.BeginFunc(ctx, p.config.Pool, func(tx pgx.Tx) error { return b.run(ctx, tx) }); err != nil {
		if b.selfCommitted {
			b.reportSelfCommitted(ctx)
		}
		return b.splitAfter(ctx, err)
	}
	b.report(ctx)
	return nil
}

// reportSelfCommitted reports what a handler that committed the
// transaction itself made processed: the messages whose marks went with
// that commit. The others handled before it (a handler that failed,
// rolled back and not yet recorded; one that never touched the database,
// not yet marked) run again on jobs of their own, and are reported there.
func (b *batch) reportSelfCommitted(ctx context.Context) {
	b.processed = slices.DeleteFunc(b.processed, func(m *dbsqlc.WharfInboxMessage) bool {
		return slices.Contains(b.unmarked, m.ID)
	})
	b.failures, b.late = nil, nil
	b.report(ctx)
}

// batch is one run of a batch job, or of batch jobs merged into one
// transaction (see merge): what its transaction has done so far.
type batch struct {
	p   *Processor
	job *river.Job[inboxjob.BatchArgs] // the job whose Work runs the batch
	// merged are the jobs of a merged batch, job among them, and jobOf
	// the job that lists each of their messages; nil for one job's.
	merged   []*river.Job[inboxjob.BatchArgs]
	jobOf    map[uuid.UUID]int64
	log      *slog.Logger
	pastHalf func() bool                 // see halfway
	took     map[uuid.UUID]time.Duration // handler run times

	// Set by load, for the transaction.
	tx    pgx.Tx
	q     *dbsqlc.Queries // generic plans
	rows  []dbsqlc.WharfInboxMessage
	now   time.Time
	order *ordering.BatchOrder
	sp    *savepoints

	ran           bool // a handler of the batch ran, or a message parked
	selfCommitted bool // a handler committed the transaction itself
	processed     []*dbsqlc.WharfInboxMessage
	failures      []batchFailure
	waiting       []ordering.Held // for an earlier message of their ordering key
	unmarked      []uuid.UUID     // processed by handlers that never touched the database
	late          []uuid.UUID     // to hand over to a new batch job (see pastHalf)
}

// batchFailure is a message whose handler failed within a batch.
type batchFailure struct {
	msg   *dbsqlc.WharfInboxMessage
	cause error
}

// run is the batch's transaction: load and lock its messages, run their
// handlers (alone or in groups), mark those that never touched the
// database, settle the messages that wait for their turn and those left
// for later, wake the next messages of the finished ones' keys, retry the
// failed ones alone, complete the job.
func (b *batch) run(ctx context.Context, tx pgx.Tx) error {
	if err := b.load(ctx, tx); err != nil {
		return err
	}
	if err := b.processAll(ctx); err != nil {
		return err
	}
	if err := b.markUntouched(ctx); err != nil {
		return err
	}
	// Parked before any wake of this transaction (retryAlone wakes the
	// next message of one that is dead), so that the wakes see them.
	if err := b.settleWaiting(ctx); err != nil {
		return err
	}
	if len(b.late) > 0 {
		// Not waits more: they were not waiting for their turn.
		if err := b.handOver(ctx, b.late, b.job.Args.Waits); err != nil {
			return fmt.Errorf("inbox: hand the rest of a batch on: %w", err)
		}
	}
	if b.merged == nil {
		// A merged batch's messages have no ordering key: none to wake.
		if err := b.p.config.Ordering.WakeNextOf(ctx, tx, b.job.Args.ReceivedAt, b.processed); err != nil {
			return err
		}
	}
	for _, f := range b.failures {
		if err := b.p.retryAlone(ctx, tx, f.msg, f.cause); err != nil {
			return err
		}
	}
	if b.merged != nil {
		return b.completeMerged(ctx)
	}
	return completeJob(ctx, tx, b.job)
}

// owns reports whether row still waits for the job that lists it.
func (b *batch) owns(row *dbsqlc.WharfInboxMessage) bool {
	if b.jobOf != nil {
		return inboxjob.OwnedBy(row, b.jobOf[row.ID])
	}
	return inboxjob.OwnedBy(row, b.job.ID)
}

// load starts the transaction's work afresh: it locks the batch's
// messages and reads their order.
func (b *batch) load(ctx context.Context, tx pgx.Tx) error {
	b.ran, b.processed, b.failures, b.waiting, b.unmarked, b.late = false, nil, nil, nil, nil, nil
	clear(b.took)
	b.tx = tx
	// Generic plans: a custom plan of these statements on the
	// day-partitioned messages took as long as running them (see
	// pgxtx.GenericPlans).
	b.q = dbsqlc.New(pgxtx.GenericPlans{DBTX: tx})
	// Locked here, in id order, so that no other run of this job, nor a
	// split, nor Forget, changes them while their handlers run.
	var rows []dbsqlc.WharfInboxMessage
	var err error
	if b.merged != nil {
		rows, err = b.loadMerged(ctx)
	} else {
		rows, err = b.q.InboxMessagesGetForUpdate(ctx, dbsqlc.InboxMessagesGetForUpdateParams{
			ReceivedAt: b.job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(b.job.Args.MessageIDs),
		})
	}
	if err != nil {
		return fmt.Errorf("inbox: load messages: %w", err)
	}
	b.rows, b.now = rows, b.p.config.Now()
	b.sp = &savepoints{ctx: ctx}
	if b.merged != nil {
		b.order = &ordering.BatchOrder{} // no ordering key (see loadMerged)
		return nil
	}
	b.order, err = ordering.NewBatchOrder(ctx, tx, b.job.ID, b.job.Args.ReceivedAt, rows)
	return err
}

// processAll runs the handlers of the messages the job still owns, in
// receipt order: a run of messages for one BatchHandler in one call, the
// others alone. Half the job's timeout gone, the messages not reached yet
// go on to a new batch job, rather than risk the whole batch's work on the
// time left; at least one runs, so that every job gets on. An error is one
// that lost the transaction.
func (b *batch) processAll(ctx context.Context) error {
	for i := 0; i < len(b.rows); i++ {
		if !b.owns(&b.rows[i]) {
			continue
		}
		if b.ran && b.pastHalf() {
			b.leave(nil, i)
			return nil
		}
		b.ran = true
		reg, group, next := b.group(i)
		if len(group) < 2 {
			if err := b.alone(ctx, &b.rows[i]); err != nil {
				return err
			}
			continue
		}
		i = next - 1
		ok, err := b.runGroup(ctx, reg, group)
		if err != nil {
			return err
		}
		if ok {
			continue
		}
		// The BatchHandler failed, and its writes and marks were rolled
		// back: each message goes again alone, so that only a bad one
		// fails.
		if left, err := b.eachAlone(ctx, group, next); left || err != nil {
			return err
		}
	}
	return nil
}

// eachAlone runs the messages of a failed group alone; left reports that
// half the job's timeout went first, and the rest (from the group's
// remainder on, then the rows from next) are left for a new batch job.
func (b *batch) eachAlone(ctx context.Context, group []*dbsqlc.WharfInboxMessage, next int) (left bool, err error) {
	for k, m := range group {
		if k > 0 && b.pastHalf() {
			b.leave(group[k:], next)
			return true, nil
		}
		if err := b.alone(ctx, m); err != nil {
			return false, err
		}
	}
	return false, nil
}

// leave leaves rest, then the owned rows from index from on, for a new
// batch job.
func (b *batch) leave(rest []*dbsqlc.WharfInboxMessage, from int) {
	for _, m := range rest {
		b.late = append(b.late, m.ID)
	}
	for j := from; j < len(b.rows); j++ {
		if b.owns(&b.rows[j]) {
			b.late = append(b.late, b.rows[j].ID)
		}
	}
}

// alone runs msg's handler in a savepoint of its own; an error is one that
// lost the transaction.
func (b *batch) alone(ctx context.Context, msg *dbsqlc.WharfInboxMessage) error {
	if held, ok := b.order.Holds(msg); ok {
		// An earlier message of its ordering key is unfinished: it
		// waits, parked, without using an attempt.
		b.waiting = append(b.waiting, held)
		return nil
	}
	b.sp.start(pgxtx.Capture(func(db pgxtx.DBTX) error { return markProcessed(ctx, db, b.now, msg) }))
	started := time.Now()
	spanCtx, span := b.p.startProcess(ctx, msg)
	err := b.runInSavepoint(spanCtx, "message "+msg.ID.String(), func(ctx context.Context, htx handlerTx) error {
		reg, err := b.p.lookup(msg)
		if err != nil {
			return err
		}
		return recovered(func() error { return reg.Run(ctx, htx, msg) })
	})
	endProcess(span, err)
	b.took[msg.ID] = time.Since(started)
	if err != nil {
		var fatal *batchFatalError
		if errors.As(err, &fatal) {
			if b.selfCommitted {
				b.processed = append(b.processed, msg) // its mark went with the commit
			}
			return fatal.err
		}
		b.failures = append(b.failures, batchFailure{msg, err})
		if !b.p.diesInBatch(err) {
			// Its later messages in this batch wait too. A message
			// dead now is finished and holds none: each of them
			// waits, if at all, for an earlier one outside the batch,
			// which may lie between the two.
			b.order.Hold(msg)
		}
		return nil
	}
	b.processed = append(b.processed, msg)
	if !b.sp.taken {
		b.unmarked = append(b.unmarked, msg.ID)
	}
	return nil
}

// group returns the messages a BatchHandler takes together from rows[i]
// on, and its registration: rows[i] and the owned messages after it, in
// order, that resolve to its registration, when that is a HandleBatch
// one, stopping at the first that waits for an earlier one of its ordering
// key (it is handled alone, and parks). next is the index of the first row
// after the group. Fewer than two messages mean no group.
func (b *batch) group(i int) (reg Registration, group []*dbsqlc.WharfInboxMessage, next int) {
	msg := &b.rows[i]
	reg, ok := b.p.config.Registry.Lookup(msg)
	if !ok || !reg.Batch() {
		return nil, nil, i + 1
	}
	if _, held := b.order.Holds(msg); held {
		return nil, nil, i + 1
	}
	group = []*dbsqlc.WharfInboxMessage{msg}
	for next = i + 1; next < len(b.rows); next++ {
		m := &b.rows[next]
		if !b.owns(m) {
			continue
		}
		if r, _ := b.p.config.Registry.Lookup(m); r != reg {
			break
		}
		if _, held := b.order.Holds(m); held {
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
// gets copies of the messages, in a slice of its own (see
// Registration.RunBatch): what it does to them (sorting, filtering,
// clearing a body once decoded) changes nothing the worker goes on with.
func (b *batch) runGroup(ctx context.Context, reg Registration, group []*dbsqlc.WharfInboxMessage) (ok bool, err error) {
	ids := make([]uuid.UUID, len(group))
	for i, m := range group {
		ids[i] = m.ID
	}
	b.sp.start(pgxtx.Capture(func(db pgxtx.DBTX) error { return b.markProcessed(ctx, db, group) }))
	started := time.Now()
	spanCtx, end := b.p.startGroupSpans(ctx, group)
	herr := b.runInSavepoint(spanCtx, fmt.Sprintf("%d messages from %s", len(group), group[0].ID), func(ctx context.Context, htx handlerTx) error {
		return recovered(func() error { return reg.RunBatch(ctx, htx, group) })
	})
	// Each message's share of the call, for the handler-duration metric.
	share := time.Since(started) / time.Duration(len(group))
	for _, m := range group {
		b.took[m.ID] = share
	}
	var spanErr error
	if herr != nil {
		spanErr = fmt.Errorf("inbox: batch handler failed; its messages go again alone: %w", herr)
	}
	end(spanErr)
	var fatal *batchFatalError
	if errors.As(herr, &fatal) {
		if b.selfCommitted {
			b.processed = append(b.processed, group...) // their mark went with the commit
		}
		return false, fatal.err
	}
	if herr != nil {
		b.log.InfoContext(ctx, "inbox: batch handler failed; its messages go again alone",
			"messages", len(group), "first_message_id", group[0].ID, "error", herr)
		return false, nil
	}
	b.processed = append(b.processed, group...)
	if !b.sp.taken {
		b.unmarked = append(b.unmarked, ids...)
	}
	return true, nil
}

// runInSavepoint runs a handler (run) in a savepoint of the transaction
// (see handlerTx), which also holds its messages' processed marks; what
// names them in errors. A handler error rolls back to the savepoint and is
// returned; an error that leaves the transaction unusable, or a handler
// that ended it itself, is returned as a *batchFatalError.
func (b *batch) runInSavepoint(ctx context.Context, what string, run func(context.Context, handlerTx) error) error {
	herr := run(ctx, handlerTx{Tx: b.tx, sp: b.sp})
	if b.sp.broken != nil {
		return &batchFatalError{fmt.Errorf("inbox: savepoint of %s: %w", what, b.sp.broken)}
	}
	switch b.tx.Conn().PgConn().TxStatus() {
	case 'T':
	case 'E':
		if herr == nil {
			herr = errors.New("inbox: a statement of the handler failed, but the handler returned nil")
		}
	default:
		// Through Conn() or a raw COMMIT: whatever ran before, these
		// messages' marks included, committed with it; the rest continue on
		// jobs of their own.
		b.selfCommitted = true
		return &batchFatalError{fmt.Errorf("inbox: the handler of %s ended the batch's transaction", what)}
	}
	if herr == nil {
		return nil
	}
	if err := b.sp.undo(ctx, b.tx); err != nil {
		// The handler's error is left out: this one may reach River's
		// job row, beyond the reach of erasure (see handlerFailed).
		return &batchFatalError{fmt.Errorf("inbox: roll back handler of %s: %w", what, err)}
	}
	return herr
}

// markProcessed marks msgs, messages of the batch, processed in db, in
// one statement.
func (b *batch) markProcessed(ctx context.Context, db dbsqlc.DBTX, msgs []*dbsqlc.WharfInboxMessage) error {
	q := dbsqlc.New(db)
	if b.merged == nil {
		ids := make([]uuid.UUID, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		return q.InboxMessagesMarkProcessed(ctx, dbsqlc.InboxMessagesMarkProcessedParams{
			Now: b.now, ReceivedAt: b.job.Args.ReceivedAt, Ids: pgxtx.UUIDTexts(ids),
		})
	}
	each := dbsqlc.InboxMessagesMarkProcessedEachParams{Now: b.now}
	for _, m := range msgs {
		each.ReceivedAts = append(each.ReceivedAts, m.ReceivedAt)
		each.Ids = append(each.Ids, m.ID.String())
	}
	return q.InboxMessagesMarkProcessedEach(ctx, each)
}

// markUntouched marks processed, in one statement, the messages whose
// handlers never touched the database (and so took no savepoint).
func (b *batch) markUntouched(ctx context.Context) error {
	if len(b.unmarked) == 0 {
		return nil
	}
	var msgs []*dbsqlc.WharfInboxMessage
	for i := range b.rows {
		if slices.Contains(b.unmarked, b.rows[i].ID) {
			msgs = append(msgs, &b.rows[i])
		}
	}
	if err := b.markProcessed(ctx, pgxtx.GenericPlans{DBTX: b.tx}, msgs); err != nil {
		return fmt.Errorf("inbox: mark processed: %w", err)
	}
	return nil
}

// maxHandOns bounds how many times a batch's held messages whose earlier
// messages are being processed are handed over together to a new batch job;
// past it they go to jobs of their own, which park them.
const maxHandOns = 3

// settleWaiting parks the messages that wait for an earlier one of their
// ordering key where it can (see ordering.ParkHeld); the others, whose
// earlier messages another transaction holds, are handed over to a new
// batch job, or, past maxHandOns, to jobs of their own.
func (b *batch) settleWaiting(ctx context.Context) error {
	if len(b.waiting) == 0 {
		return nil
	}
	rest, err := b.p.config.Ordering.ParkHeld(ctx, b.tx, b.job.Args.ReceivedAt, b.waiting)
	if err != nil {
		return err
	}
	switch {
	case len(rest) == 0:
	case b.job.Args.Waits < maxHandOns:
		// Another transaction holds the messages they wait for (or has
		// just finished them): a new batch job looks again, by when the
		// earlier ones have most likely finished and the messages are
		// processed together.
		ids := make([]uuid.UUID, len(rest))
		for i, m := range rest {
			ids[i] = m.ID
		}
		if err := b.handOver(ctx, ids, b.job.Args.Waits+1); err != nil {
			return fmt.Errorf("inbox: ordering: hand messages on: %w", err)
		}
	default:
		for _, msg := range rest {
			// A job of its own parks it.
			b.failures = append(b.failures, batchFailure{msg, &orderingWaitError{}})
		}
	}
	return nil
}

// handOver hands ids, messages of the batch, over to a new batch job on the
// batch's queue that runs at once, with waits as its Waits (how many times
// its messages were handed over while waiting for their turn); those of a
// merged batch to a new batch job per receipt time.
func (b *batch) handOver(ctx context.Context, ids []uuid.UUID, waits int) error {
	opts := b.p.config.Jobs.BatchOpts()
	opts.Queue = b.job.Queue
	if b.merged == nil {
		// Unordered messages stay so (late ones, not waiting for their turn).
		args := inboxjob.BatchArgs{ReceivedAt: b.job.Args.ReceivedAt, MessageIDs: ids, Waits: waits, Unordered: b.job.Args.Unordered && waits == 0}
		_, err := b.p.config.Jobs.Assign(ctx, b.tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
		return err
	}
	var inserts []river.InsertManyParams
	for _, job := range b.merged {
		var theirs []uuid.UUID
		for _, id := range ids {
			if b.jobOf[id] == job.ID {
				theirs = append(theirs, id)
			}
		}
		if len(theirs) > 0 {
			args := inboxjob.BatchArgs{ReceivedAt: job.Args.ReceivedAt, MessageIDs: theirs, Waits: waits, Unordered: true}
			opts := b.p.config.Jobs.BatchOpts()
			opts.Queue = job.Queue
			inserts = append(inserts, river.InsertManyParams{Args: args, InsertOpts: opts})
		}
	}
	_, err := b.p.config.Jobs.Assign(ctx, b.tx, inserts)
	return err
}

// report logs and counts what the committed batch did.
func (b *batch) report(ctx context.Context) {
	if len(b.late) > 0 {
		b.log.InfoContext(ctx, "inbox: batch ran for half its job's timeout; the messages it had not reached go on to a new batch job",
			"messages", len(b.late))
	}
	for _, msg := range b.processed {
		b.p.handlerTime.add(b.took[msg.ID])
		b.p.config.Metrics.Handled(ctx, msg, inboxjob.StatusProcessed, b.took[msg.ID])
		b.msgLog(msg).DebugContext(ctx, "inbox: message processed", "source", msg.Source, "event_id", msg.EventID, "event_type", msg.EventType)
	}
	for _, f := range b.failures {
		if lostConflict(f.cause) {
			b.msgLog(f.msg).InfoContext(ctx, "inbox: a handler lost a deadlock or serialization conflict in a batch; its message runs again alone at once, using no attempt")
		}
		if usesNoAttempt(f.cause) {
			continue // waiting for its turn (ordering), the handler's snooze, or a run of its own: not a failure
		}
		b.p.handlerTime.add(b.took[f.msg.ID])
		status := failureStatus(f.cause, 1, b.p.config.Jobs.MaxAttempts())
		b.p.config.Metrics.Handled(ctx, f.msg, status, b.took[f.msg.ID])
		logFailure(ctx, b.msgLog(f.msg), f.msg, status, f.cause)
		if status == inboxjob.StatusDead {
			b.p.config.OnDead.call(ctx, b.p.config.Logger, f.msg, f.cause)
		}
	}
}

// msgLog is the batch's logger for a line about msg: with its id, and in a
// merged batch its own job's.
func (b *batch) msgLog(msg *dbsqlc.WharfInboxMessage) *slog.Logger {
	log := b.log.With("message_id", msg.ID)
	if b.jobOf != nil {
		log = log.With("job_id", b.jobOf[msg.ID])
	}
	return log
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
