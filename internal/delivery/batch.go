package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/shared"
)

// BatchWorker runs batch delivery jobs (BatchArgs).
type BatchWorker struct {
	river.WorkerDefaults[BatchArgs]
	engine *Engine
}

// maxBatchSpans bounds the spans a batch job sends for: past its first
// only when new jobs would not get the rest out sooner (spanEnd).
const maxBatchSpans = 4

// Timeout is the River timeout of every batch job: maxBatchSpans of
// Config.DeliveryBatchSpan, then one more request of up to
// Config.MaxEndpointTimeout, plus jobMargin.
func (w *BatchWorker) Timeout(*river.Job[BatchArgs]) time.Duration {
	return maxBatchSpans*w.engine.config.DeliveryBatchSpan + w.engine.config.MaxEndpointTimeout + jobMargin
}

// Work attempts the batch's deliveries. When River cancels the job
// remotely while it runs, its deliveries not yet finished or handed over
// are dead-lettered, since no job will attempt them again.
func (w *BatchWorker) Work(ctx context.Context, job *river.Job[BatchArgs]) error {
	err := w.engine.workBatch(ctx, job)
	log := w.engine.config.Logger.With("job_id", job.ID, "endpoint_id", job.Args.EndpointID)
	logUnlogged(ctx, log, err)
	return w.engine.whenCancelled(ctx, err, log, job.Args.Deliveries...)
}

// member is a delivery a batch job sends, with what its gate opened.
type member struct {
	d   *outboxtype.Delivery
	ref Ref
	v   verdict
}

func (e *Engine) workBatch(ctx context.Context, job *river.Job[BatchArgs]) error {
	log := e.config.Logger.With("job_id", job.ID, "endpoint_id", job.Args.EndpointID)
	snoozes := shared.SnoozeCount(job.Metadata)
	ids := make([]uuid.UUID, len(job.Args.Deliveries))
	for i, ref := range job.Args.Deliveries {
		ids[i] = ref.DeliveryID
	}
	loaded, errs := e.loadMany(ctx, ids)
	now := time.Now()
	// The last run River allows hands everything over: River would discard
	// the job after a failure, and its deliveries would have no job.
	lastRun := job.Attempt >= job.MaxAttempts
	var members []member
	var over []handOver
	seen := make(map[uuid.UUID]bool, len(ids))
	for i, ref := range job.Args.Deliveries {
		if errs != nil && errs[i] != nil {
			if errors.Is(errs[i], pgx.ErrNoRows) {
				continue // deleted with its endpoint
			}
			return e.databaseError(ctx, log, snoozes, fmt.Errorf("load deliveries: %w", errs[i]))
		}
		d := loaded[i]
		v := e.gate(d, ref.Generation)
		own := int(d.Attempts) - ref.AttemptsBefore // this job's attempts
		switch {
		case seen[d.ID] || v.stale:
			// Listed twice, handed over or replayed, or finished.
		case own > 0:
			// Attempted by an earlier run that stopped before handing it
			// over: the retry is due on the schedule.
			over = append(over, handOverOf(d, ref, now.Add(e.retries.scheduled(own))))
		case lastRun || d.EndpointID != job.Args.EndpointID || !v.sendable():
			// What the job cannot simply send (see verdict) goes to a job of
			// its own, which knows what to do.
			over = append(over, handOverOf(d, ref, now))
		default:
			members = append(members, member{d: d, ref: ref, v: v})
		}
		seen[d.ID] = true
	}
	if len(members) == 0 {
		return e.handOverOrSnooze(ctx, log, job, over)
	}

	first := members[0].d
	timeout := e.timeout(first)
	// One slot for the batch, held for its span and one more request;
	// its snooze count is the batch job's, so that a batch at its
	// endpoint's cap polls less often the longer it waits.
	ticket, err := e.admission.Admit(ctx, first, admission.Request{Hold: e.config.DeliveryBatchSpan + timeout, Snoozes: snoozes})
	if d := (*admission.Deferral)(nil); errors.As(err, &d) {
		// At the cap: the batch waits as one, using no attempt.
		if err := e.handOverOrSnooze(ctx, log, job, over); err != nil {
			return err
		}
		return e.snooze(ctx, d.Reason, d.Wait)
	}
	if err != nil {
		return e.databaseError(ctx, log, snoozes, err)
	}
	// Given back before the hand-over (the new jobs may want it), and
	// however the run ends.
	defer ticket.Release()

	over, sendErr := e.sendMembers(ctx, log, ticket, members, over)
	ticket.Release()
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		// Cancelled: nothing goes on; Work dead-letters what is still the
		// job's.
		return cmp.Or(sendErr, context.Cause(ctx))
	}
	if err := e.handOverOrSnooze(ctx, log, job, over); err != nil {
		return err
	}
	return sendErr
}

// sendMembers sends a batch's members one after another under ticket,
// recording each, and returns over with what goes on in other jobs added,
// and the error the job's context ended with (the rest then wait for the
// job's next run, or are dead-lettered).
func (e *Engine) sendMembers(ctx context.Context, log *slog.Logger, ticket *admission.Ticket, members []member, over []handOver) ([]handOver, error) {
	first := members[0].d
	timeout := e.timeout(first)
	start := time.Now()
	spanFirst, spans := 0, 1 // the span's first member, and its number
	handRest := func(i int) {
		for _, rest := range members[i:] {
			over = append(over, handOverOf(rest.d, rest.ref, time.Now()))
		}
	}
	for i, m := range members {
		if i > spanFirst && time.Since(start) > e.config.DeliveryBatchSpan {
			keep, size := e.spanEnd(ctx, log, first, ticket, timeout, len(members)-i, i-spanFirst, spans)
			if !keep {
				return append(over, splitRest(members[i:], size, time.Now())...), nil
			}
			start, spanFirst, spans = time.Now(), i, spans+1
		}
		if ctx.Err() != nil {
			// The client is stopping, or River cancelled the job: the rest
			// wait for the job's next run, or are dead-lettered (Work).
			return over, context.Cause(ctx)
		}
		mlog := log.With("delivery_id", m.d.ID, "event_id", m.d.EventID, "attempt", 1)
		attemptedAt := e.now()
		out, stopping := e.send(ctx, m.d, 1, &m.v)
		var sendErr error
		if stopping {
			// The rest wait for the job's next run, which River makes at
			// once.
			sendErr = ctx.Err()
		}
		s, err := e.settle(context.WithoutCancel(ctx), mlog, 1, e.retries.attempts(), m.d, admission.NoSlot, attemptedAt, out)
		if err != nil {
			// Not recorded: it and the rest go on in jobs of their own
			// (the hand-over snoozes the batch if the database is still
			// unavailable, and its next run sends them).
			mlog.WarnContext(ctx, "outbox: attempt not recorded; the delivery will be sent again", "error", err)
			handRest(i)
			return over, sendErr
		}
		if s.status == outboxtype.StatusRetrying {
			h := handOverOf(m.d, m.ref, time.Now().Add(s.wait))
			h.cutOff = out.CutOff
			over = append(over, h)
		}
		if sendErr != nil {
			return over, sendErr
		}
		if s.status == "" || !out.Succeeded() {
			// The endpoint is failing, or the delivery was not the job's to
			// record any more (replayed, its endpoint deleted) and what the
			// job loaded may be stale: the rest go on in jobs of their own,
			// which load them afresh and heed the endpoint's circuit and
			// its disabling.
			handRest(i + 1)
			return over, nil
		}
		if s.endpointVersion != first.EndpointVersion && i+1 < len(members) {
			// The endpoint changed since the job loaded it (its URL,
			// secrets, cap, rate limit, enabling…): the rest go to a new
			// batch job, which loads it afresh and takes its slot under
			// the cap as it is now, or hands each over to a job of its own.
			mlog.InfoContext(ctx, "outbox: the endpoint changed; the batch hands the rest over", "rest", len(members)-i-1)
			return append(over, splitRest(members[i+1:], e.config.DeliveryBatchSize, time.Now())...), nil
		}
	}
	return over, nil
}

// spanEnd says what a batch job does with the rest deliveries it has not
// reached when its span, its spans-th, has passed, having sent sent in
// it. It goes on sending for another span (keep), its lease extended,
// when new jobs would not get the rest out sooner: its endpoint's cap is
// reached (every slot but its own is held, so new jobs would only wait
// for a slot, snoozed and fetched again), or the rest is no more than it
// sent in the span. On a machine whose cores are busy a batch sends
// slowly, and splitting it at each span cost a burst to a fast endpoint
// much of its rate: the last few deliveries' hand-over and fetch drew the
// burst out. It goes on for at most maxBatchSpans in all, while River's
// timeout leaves room for one more span (spanRoom), and never with
// Config.DeliveryBatchSize 1 (batch jobs turned off since), nor when the
// endpoint's cap was set, lifted or lowered since it took its slot.
//
// Otherwise the rest is split among new batch jobs of size deliveries
// each: as many as the job sent in the span, at most
// Config.DeliveryBatchSize, and, for a capped endpoint, in no more jobs
// than it has slots free, counting the one this job gives back (unless
// DeliveryBatchSize makes them smaller). When the slots cannot be
// counted, or the cap changed, the split is by what it sent.
func (e *Engine) spanEnd(ctx context.Context, log *slog.Logger, first *outboxtype.Delivery, ticket *admission.Ticket,
	timeout time.Duration, rest, sent, spans int,
) (keep bool, size int) {
	size = min(sent, e.config.DeliveryBatchSize)
	count, err := e.admission.CountLeases(ctx, first.EndpointID)
	if err != nil {
		// No row: deleted with its deliveries, which the hand-over skips.
		if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			log.WarnContext(ctx, "outbox: could not count the endpoint's free slots; splitting the batch by what it sent", "error", err)
		}
		return false, size
	}
	capped := count.MaxInFlight > 0
	slot := ticket.Slot()
	if capped != (slot != admission.NoSlot) || count.HeldAbove > 0 || slot >= count.MaxInFlight {
		// The cap was set, lifted or lowered since the job took its slot:
		// new jobs heed it as it is now.
		return false, size
	}
	var free int64 // slots free besides the job's own
	if capped {
		free = int64(count.MaxInFlight) - count.Held
	}
	goOn := (capped && free <= 0) || rest <= sent
	if goOn && spans < maxBatchSpans && e.config.DeliveryBatchSize > 1 && e.spanRoom(ctx, timeout) {
		if !capped {
			return true, 0
		}
		extended, err := ticket.Extend(ctx, e.config.DeliveryBatchSpan+timeout)
		if extended {
			return true, 0
		}
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "outbox: could not extend the batch's concurrency slot; splitting the batch", "error", err)
		}
	}
	if !capped {
		return false, size
	}
	free = max(free, 0) + 1
	if jobs := (rest + size - 1) / size; int64(jobs) > free {
		size = min(int((int64(rest)+free-1)/free), e.config.DeliveryBatchSize)
	}
	return false, size
}

// spanRoom reports whether the job whose context is ctx has time for one
// more span, one more request of up to timeout after it, and recording,
// before River's timeout of the job.
func (e *Engine) spanRoom(ctx context.Context, timeout time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > e.config.DeliveryBatchSpan+timeout+jobMargin
}

// splitRest hands rest, the deliveries a batch job did not reach in its
// span, over to new batch jobs of size deliveries each (what the job sent
// in the span, at most Config.DeliveryBatchSize), the last one smaller,
// due at at. A batch that ends up with one delivery (size 1, or the others
// finished meanwhile) is a job of its own.
func splitRest(rest []member, size int, at time.Time) []handOver {
	over := make([]handOver, len(rest))
	for i, m := range rest {
		over[i] = handOverOf(m.d, m.ref, at)
		over[i].batch = i/size + 1
	}
	return over
}
