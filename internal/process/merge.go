package process

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/groupcommit"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/shared"
)

// The gate: every processing transaction of a node goes through one
// group commit (groupcommit.Batcher), which runs at most
// Config.Transactions of them at once. A job beyond them waits for a
// slot holding its River worker but no connection, so a queue may have
// more workers than the pool can spare connections.
//
// Batch jobs merge there: those that start together (River hands the jobs
// of one fetch to its workers at once) or while others hold the slots
// share one transaction, up to Config.Merge messages in all, run as one
// batch: one load, one processed mark and one BatchHandler call for a run
// of their messages, one completion of their jobs, one commit. At a
// steady 1,000 webhooks a second a receive batch holds one or two
// messages, and a batch job a transaction each paid the commit's and
// River's costs every one or two webhooks.
//
// Only first runs merge, never after a snooze, of jobs of at most half
// Config.Merge messages (a larger one could merge with smaller ones only,
// and would wait for them) whose messages have no ordering key (an
// ordered message's turn is decided in its own job's transaction), and
// only while this node's handlers are known to be quick (handlerTime): a
// merged transaction runs its handlers one after another, where the jobs'
// own transactions would run them side by side, which for handlers that
// wait on something (an API, a lock) costs more than the commits it
// saves. A merged transaction that is lost (a handler that broke it, a
// deferred constraint failing at the commit, the context running out)
// rolls every job back: each runs again at once, alone, using no attempt,
// where a failure is its own.

// gateCall is a job's run waiting for a slot: run, its run alone (a
// batch job's is runBatch), and, for a job that may merge, batch, the
// job as a batch job (a message's own job as a batch of one).
type gateCall struct {
	ctx   context.Context // the job's: the run's, and a merge's leader's
	row   *rivertype.JobRow
	batch *river.Job[inboxjob.BatchArgs]
	run   func(context.Context) error
}

// through runs call, a job's, through the gate. A job waits for a slot
// for at most half the time its River timeout leaves it, so that it runs
// with the other half; if none came by then it runs again later (a
// snooze: no attempt used), where a run on a context that ran out while
// it waited would have failed an attempt, or split a batch.
func (p *Processor) through(call gateCall) error {
	wait, cancel := waitContext(call.ctx)
	defer cancel()
	_, err := p.gate.Do(wait, call)
	if !errors.Is(err, groupcommit.ErrNoSlot) {
		return err
	}
	if call.ctx.Err() != nil {
		return context.Cause(call.ctx) // the client stopping, or River cancelling the job
	}
	p.config.Logger.InfoContext(call.ctx, "inbox: no processing transaction came free within half the job's timeout; it runs again later, using no attempt",
		"job_id", call.row.ID)
	return river.JobSnooze(0)
}

// waitContext is ctx, a job's, with its deadline brought forward to half
// the time it leaves (unchanged without one).
func waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
}

const (
	// mergeIdleWait is how long the first job of a merge waits for the
	// others of its fetch while no transaction runs: they start
	// microseconds apart.
	mergeIdleWait = 200 * time.Microsecond
	// mergeMaxWait is how long it waits for more jobs while transactions
	// run.
	mergeMaxWait = time.Millisecond
	// gateTimeout bounds a job's wait for a slot; the run is bounded by
	// its job's context.
	gateTimeout = time.Hour
)

// newGate returns the node's gate of processing transactions: slots at
// once, batch jobs merging up to merge messages.
func (p *Processor) newGate(slots, merge int) *groupcommit.Batcher[gateCall, struct{}] {
	merge = max(merge, 1)
	return groupcommit.New(groupcommit.Config[gateCall]{
		MaxSize: merge, Slots: slots, Timeout: gateTimeout, MaxWait: mergeMaxWait, IdleWait: mergeIdleWait, LeaderBoundsWait: true,
		Weight: func(c gateCall) int {
			if c.batch == nil {
				return merge // alone
			}
			return len(c.batch.Args.MessageIDs)
		},
		MaxWeight: merge,
	}, p.runGate)
}

// mergeable reports whether job's run may share its transaction (see
// above).
func (p *Processor) mergeable(job *river.Job[inboxjob.BatchArgs]) bool {
	return p.config.Merge > 1 && job.Attempt == 1 && job.Args.Unordered && job.Args.Waits == 0 &&
		len(job.Args.MessageIDs) <= p.config.Merge/2 && shared.SnoozeCount(job.Metadata) == 0 && p.quick()
}

// quick reports whether this node's handlers are quick enough to merge
// (see handlerTime).
func (p *Processor) quick() bool { return p.TestHooks.QuickHandlers || p.handlerTime.quick() }

// mergeableOne returns a message's own job as a batch job of one when it
// may share its transaction (its first run, that of a message received
// alone: no snooze, no failure of a batch to report), nil otherwise. In a
// merged batch its message is one of the batch's: a failure of its
// handler goes to a job of its own, as any batch's does.
func (p *Processor) mergeableOne(job *river.Job[inboxjob.ProcessArgs]) *river.Job[inboxjob.BatchArgs] {
	if p.config.Merge < 2 || job.Attempt != 1 || !job.Args.Unordered || job.Args.NotBefore != nil ||
		job.Args.FailedInBatch || shared.SnoozeCount(job.Metadata) != 0 || !p.quick() {
		return nil
	}
	return &river.Job[inboxjob.BatchArgs]{JobRow: job.JobRow, Args: inboxjob.BatchArgs{
		ReceivedAt: job.Args.ReceivedAt, MessageIDs: []uuid.UUID{job.Args.MessageID}, Unordered: true,
	}}
}

// runGate runs calls, which took a slot together: alone, or batch jobs
// merged into one transaction on the first live one's context (the
// leader's). A job whose context ended while it waited (River cancelled
// it, or the client is stopping) is left out of the merge and ends as it
// would have alone.
func (p *Processor) runGate(_ context.Context, calls []gateCall) ([]struct{}, []error) {
	outs := make([]struct{}, len(calls))
	errs := make([]error, len(calls))
	var live []int
	for i, c := range calls {
		if len(calls) > 1 && c.ctx.Err() != nil {
			errs[i] = c.run(c.ctx) // fails at once, as its own run
			continue
		}
		live = append(live, i)
	}
	switch len(live) {
	case 0:
		return outs, errs
	case 1:
		errs[live[0]] = calls[live[0]].run(calls[live[0]].ctx)
		return outs, errs
	}
	lead := calls[live[0]]
	ctx := lead.ctx
	b := p.newBatch(lead.batch)
	b.jobOf = map[uuid.UUID]int64{}
	for _, i := range live {
		job := calls[i].batch
		b.merged = append(b.merged, job)
		for _, id := range job.Args.MessageIDs {
			b.jobOf[id] = job.ID
		}
	}
	// A message's lines name its own job (see batch.msgLog).
	b.log = p.config.Logger.With("merged_job_ids", mergedIDs(b.merged))
	b.pastHalf = halfway(ctx)
	err := pgx.BeginFunc(ctx, p.config.Pool, func(tx pgx.Tx) error { return b.run(ctx, tx) })
	if err == nil {
		b.report(ctx)
		return outs, errs
	}
	if b.selfCommitted {
		b.log.WarnContext(ctx, "inbox: a handler committed a merged batch's transaction itself; what ran before it is processed, the jobs run again alone",
			"error", err)
		b.reportSelfCommitted(ctx)
	} else {
		b.log.WarnContext(ctx, "inbox: a merged batch's transaction was lost; its jobs run again alone", "error", err)
	}
	for _, i := range live {
		errs[i] = river.JobSnooze(0)
	}
	return outs, errs
}

// mergedIDs returns the ids of jobs.
func mergedIDs(jobs []*river.Job[inboxjob.BatchArgs]) []int64 {
	ids := make([]int64, len(jobs))
	for i, job := range jobs {
		ids[i] = job.ID
	}
	return ids
}

// loadMerged loads and locks the messages of a merged batch's jobs, in id
// order (the order every batch locks messages in), and refuses an ordered
// one: a merged batch decides no message's turn.
func (b *batch) loadMerged(ctx context.Context) ([]dbsqlc.WharfInboxMessage, error) {
	type ref struct {
		at time.Time
		id uuid.UUID
	}
	var refs []ref
	for _, job := range b.merged {
		for _, id := range job.Args.MessageIDs {
			refs = append(refs, ref{job.Args.ReceivedAt, id})
		}
	}
	slices.SortFunc(refs, func(x, y ref) int { return slices.Compare(x.id[:], y.id[:]) })
	var params dbsqlc.InboxMessagesGetForUpdateEachParams
	for _, r := range refs {
		params.ReceivedAts = append(params.ReceivedAts, r.at)
		params.Ids = append(params.Ids, r.id.String())
	}
	rows, err := b.q.InboxMessagesGetForUpdateEach(ctx, params)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		if rows[i].OrderingKey != "" && b.owns(&rows[i]) {
			return nil, fmt.Errorf("inbox: message %s of an unordered batch job has an ordering key", rows[i].ID)
		}
	}
	return rows, nil
}

// completeMerged completes the jobs of a merged batch in its transaction.
func (b *batch) completeMerged(ctx context.Context) error {
	if err := b.q.InboxJobsCompleteRunning(ctx, mergedIDs(b.merged)); err != nil {
		return fmt.Errorf("inbox: complete merged jobs: %w", err)
	}
	return nil
}

const (
	// quickHandler is the mean handler time per message below which batch
	// jobs merge.
	quickHandler = time.Millisecond
	// handlerTimeKnown is how many handler runs the mean needs before
	// merges start.
	handlerTimeKnown = 20
)

// handlerTime is the mean time this node's handlers took per message, an
// exponentially weighted mean of the runs that ended.
type handlerTime struct {
	mean atomic.Int64 // nanoseconds
	runs atomic.Int64
}

// add counts a handler run of took (a BatchHandler's share per message).
func (h *handlerTime) add(took time.Duration) {
	if h.runs.Add(1) == 1 {
		h.mean.Store(int64(took))
		return
	}
	for {
		old := h.mean.Load()
		if h.mean.CompareAndSwap(old, old+(int64(took)-old)/8) {
			return
		}
	}
}

// quick reports whether enough runs were seen and their mean is below
// quickHandler.
func (h *handlerTime) quick() bool {
	return h.runs.Load() >= handlerTimeKnown && time.Duration(h.mean.Load()) < quickHandler
}
