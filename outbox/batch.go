package outbox

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
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/shared"
)

// DeliveryBatchKind is the River job kind of batch delivery jobs.
const DeliveryBatchKind = "wharf_outbox_delivery_batch"

// DeliveryRef names a delivery at the generation a job was inserted for.
type DeliveryRef struct {
	DeliveryID uuid.UUID `json:"delivery_id"`
	Generation int       `json:"generation,omitempty"`
	// AttemptsBefore is how many attempts the delivery had when the job
	// was inserted: those of earlier generations, for a replay. The job's
	// own attempts are the delivery's count less these.
	AttemptsBefore int `json:"attempts_before,omitempty"`
}

// DeliveryBatchArgs are the args of a batch delivery job: deliveries to one
// endpoint that were published together (one PublishManyTx, one
// DeliveryReplayDead, one EndpointRecover batch), up to
// Config.DeliveryBatchSize, attempted by one job, one after another, in
// the order they were stored (publish order, for PublishManyTx). The job
// makes the first attempt of each: one River job, one concurrency slot and
// one load for all of them, where a job per delivery would cost River's
// fetch and completion of each.
//
// A batch job also comes from a split: see below.
//
// A delivery the job cannot simply send (its endpoint is rate limited,
// ordered by a key, has a circuit that is not closed; its attempt failed
// and is to be retried; an earlier one's attempt failed or was not the
// job's to record) is handed over to a job of its own (DeliveryArgs),
// which goes on as any delivery's. The job loads its endpoint once, and
// each attempt's record tells it the endpoint's version: once the endpoint
// has changed (updated, disabled or enabled, its secret rotated; or
// disabled, or its circuit opened, by an attempt) the job sends nothing more
// and hands the rest to a new batch job, which loads it afresh and passes
// the same gates as any other job. The deliveries the job has not reached
// when Config.DeliveryBatchSpan has passed are handed over to new batch
// jobs, as many to a job as it sent in the span but in no more jobs than
// the endpoint has slots free for; or the job goes on sending when new
// jobs would not get them out sooner (spanEnd). A hand-over moves the
// delivery to its next generation and inserts its new job in one
// transaction, so later runs of the batch job leave it alone. A crash
// anywhere leaves every delivery either recorded, handed over, or still
// the batch job's, which River runs again.
type DeliveryBatchArgs struct {
	// EndpointID is the deliveries' endpoint.
	EndpointID uuid.UUID `json:"endpoint_id"`
	// Deliveries are the deliveries, in the order they were stored
	// (publish order, for PublishManyTx).
	Deliveries []DeliveryRef `json:"deliveries"`
}

// Kind returns DeliveryBatchKind.
func (DeliveryBatchArgs) Kind() string { return DeliveryBatchKind }

// batchWorker runs batch delivery jobs.
type batchWorker struct {
	river.WorkerDefaults[DeliveryBatchArgs]
	outbox *Outbox
}

// maxBatchSpans bounds the spans a batch job sends for: past its first
// only when new jobs would not get the rest out sooner (spanEnd).
const maxBatchSpans = 4

// Timeout is the River timeout of every batch job: maxBatchSpans of
// Config.DeliveryBatchSpan, then one more request of up to
// Config.MaxEndpointTimeout, plus deliveryJobMargin.
func (w *batchWorker) Timeout(*river.Job[DeliveryBatchArgs]) time.Duration {
	return maxBatchSpans*w.outbox.config.DeliveryBatchSpan + w.outbox.config.MaxEndpointTimeout + deliveryJobMargin
}

// Work attempts the batch's deliveries. When River cancels the job
// remotely while it runs, its deliveries not yet finished or handed over
// are dead-lettered, since no job will attempt them again.
func (w *batchWorker) Work(ctx context.Context, job *river.Job[DeliveryBatchArgs]) error {
	err := w.outbox.workBatch(ctx, job)
	if err != nil && errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return w.outbox.deadCancelledBatch(context.WithoutCancel(ctx), job, err)
	}
	return err
}

// handOver is a delivery at generation that a batch job (or Rescue) gives
// a new job, to run at at; ref is its place in the batch (its
// AttemptsBefore: what the delivery's attempts were before its batch).
type handOver struct {
	id, endpointID uuid.UUID
	generation     int32
	ref            DeliveryRef
	at             time.Time
	// batch, above 0, numbers the new batch job the delivery shares with
	// the others of the same number (one alone gets a job of its own); 0:
	// a job of its own.
	batch int
}

// handOverOf is the hand-over of row, loaded by a batch job, at its place
// ref, to run at at.
func handOverOf(row *outboxtype.Delivery, ref DeliveryRef, at time.Time) handOver {
	return handOver{id: row.ID, endpointID: row.EndpointID, generation: row.Generation, ref: ref, at: at}
}

// batchMember is a delivery a batch job sends.
type batchMember struct {
	row     *outboxtype.Delivery
	ref     DeliveryRef
	secrets []string
	auth    *outboxtype.Auth
}

func (o *Outbox) workBatch(ctx context.Context, job *river.Job[DeliveryBatchArgs]) error {
	log := o.config.Logger.With("job_id", job.ID, "endpoint_id", job.Args.EndpointID)
	ids := make([]uuid.UUID, len(job.Args.Deliveries))
	for i, ref := range job.Args.Deliveries {
		ids[i] = ref.DeliveryID
	}
	rows, errs := o.loadMany(ctx, ids)
	now := time.Now()
	// The last run River allows hands everything over: River would discard
	// the job after a failure, and its deliveries would have no job.
	lastRun := job.Attempt >= job.MaxAttempts
	var members []batchMember
	var over []handOver
	seen := make(map[uuid.UUID]bool, len(ids))
	for i, ref := range job.Args.Deliveries {
		if errs != nil && errs[i] != nil {
			if errors.Is(errs[i], pgx.ErrNoRows) {
				continue // deleted with its endpoint
			}
			return o.databaseError(ctx, log, shared.SnoozeCount(job.Metadata), fmt.Errorf("load deliveries: %w", errs[i]))
		}
		row := rows[i]
		status := DeliveryStatus(row.Status)
		own := int(row.Attempts) - ref.AttemptsBefore // this job's attempts
		switch {
		case seen[row.ID] || int(row.Generation) != ref.Generation || status == StatusSucceeded || status == StatusDead:
			// Listed twice, handed over or replayed, or finished.
		case own > 0:
			// Attempted by an earlier run that stopped before handing it
			// over: the retry is due on the schedule.
			over = append(over, handOverOf(row, ref, now.Add(o.retries.scheduled(own))))
		case lastRun || row.EndpointID != job.Args.EndpointID:
			over = append(over, handOverOf(row, ref, now))
		default:
			m, ok := o.batchable(row)
			if !ok {
				over = append(over, handOverOf(row, ref, now))
				break
			}
			m.ref = ref
			members = append(members, m)
		}
		seen[row.ID] = true
	}
	if len(members) == 0 {
		return o.handOverOrSnooze(ctx, log, job, over)
	}

	first := members[0].row
	timeout := min(first.Timeout, o.config.MaxEndpointTimeout)
	// One slot for the batch, held for its span and one more request;
	// its snooze count is the batch job's, so that a batch at its
	// endpoint's cap polls less often the longer it waits.
	snoozes := shared.SnoozeCount(job.Metadata)
	ticket, err := o.gate.Admit(ctx, first, admission.Request{Hold: o.config.DeliveryBatchSpan + timeout, Snoozes: snoozes})
	if d := (*admission.Deferral)(nil); errors.As(err, &d) {
		// At the cap: the batch waits as one, using no attempt.
		if err := o.handOverOrSnooze(ctx, log, job, over); err != nil {
			return err
		}
		return o.snooze(ctx, d.Reason, d.Wait)
	}
	if err != nil {
		return o.databaseError(ctx, log, snoozes, err)
	}
	// Given back before the hand-over (the new jobs may want it), and
	// however the run ends.
	defer ticket.Release()

	start := time.Now()
	spanFirst, spans := 0, 1 // the span's first member, and its number
	var sendErr error
	handRest := func(i int) {
		for _, rest := range members[i:] {
			over = append(over, handOverOf(rest.row, rest.ref, time.Now()))
		}
	}
	for i, m := range members {
		if i > spanFirst && time.Since(start) > o.config.DeliveryBatchSpan {
			keep, size := o.spanEnd(ctx, log, first, ticket, timeout, len(members)-i, i-spanFirst, spans)
			if !keep {
				over = append(over, splitRest(members[i:], size, time.Now())...)
				break
			}
			start, spanFirst, spans = time.Now(), i, spans+1
		}
		if ctx.Err() != nil {
			// The client is stopping, or River cancelled the job: the rest
			// wait for the job's next run, or are dead-lettered (Work).
			sendErr = context.Cause(ctx)
			break
		}
		row := m.row
		mlog := log.With("delivery_id", row.ID, "event_id", row.EventID, "attempt", 1)
		attemptedAt := o.config.now()
		out := o.attemptSend(ctx, row, 1, m.secrets, m.auth, timeout)
		if ctx.Err() != nil && !out.Succeeded() {
			switch {
			case errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely):
				out.cancelled = true
			case errors.Is(ctx.Err(), context.Canceled):
				// Stopping: an attempt (the receiver may have got it) but no
				// verdict on the endpoint; the rest wait for the job's next
				// run, which River makes at once.
				out.MarkCutOff()
				sendErr = ctx.Err()
			}
		}
		s, err := o.settleAttempt(context.WithoutCancel(ctx), mlog, 1, o.retries.attempts(), row, admission.NoSlot, attemptedAt, out)
		if err != nil {
			// Not recorded: it and the rest go on in jobs of their own
			// (the hand-over snoozes the batch if the database is still
			// unavailable, and its next run sends them).
			mlog.WarnContext(ctx, "outbox: attempt not recorded; the delivery will be sent again", "error", err)
			handRest(i)
			break
		}
		if s.status == StatusRetrying {
			over = append(over, handOverOf(row, m.ref, time.Now().Add(s.wait)))
		}
		if sendErr != nil {
			break
		}
		if s.status == "" || !out.Succeeded() {
			// The endpoint is failing, or the delivery was not the job's to
			// record any more (replayed, its endpoint deleted) and what the
			// job loaded may be stale: the rest go on in jobs of their own,
			// which load them afresh and heed the endpoint's circuit and
			// its disabling.
			handRest(i + 1)
			break
		}
		if s.endpointVersion != first.EndpointVersion && i+1 < len(members) {
			// The endpoint changed since the job loaded it (its URL,
			// secrets, cap, rate limit, enabling…): the rest go to a new
			// batch job, which loads it afresh and takes its slot under
			// the cap as it is now, or hands each on to a job of its own.
			mlog.InfoContext(ctx, "outbox: the endpoint changed; the batch hands the rest on", "rest", len(members)-i-1)
			over = append(over, splitRest(members[i+1:], o.config.DeliveryBatchSize, time.Now())...)
			break
		}
	}
	ticket.Release()
	if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		// Cancelled: nothing goes on; Work dead-letters what is still the
		// job's.
		return cmp.Or(sendErr, context.Cause(ctx))
	}
	if err := o.handOverOrSnooze(ctx, log, job, over); err != nil {
		return err
	}
	return sendErr
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
func (o *Outbox) spanEnd(ctx context.Context, log *slog.Logger, first *outboxtype.Delivery, ticket *admission.Ticket,
	timeout time.Duration, rest, sent, spans int,
) (keep bool, size int) {
	size = min(sent, o.config.DeliveryBatchSize)
	count, err := o.gate.CountLeases(ctx, first.EndpointID)
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
	if goOn && spans < maxBatchSpans && o.config.DeliveryBatchSize > 1 && o.spanRoom(ctx, timeout) {
		if !capped {
			return true, 0
		}
		extended, err := ticket.Extend(ctx, o.config.DeliveryBatchSpan+timeout)
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
		size = min(int((int64(rest)+free-1)/free), o.config.DeliveryBatchSize)
	}
	return false, size
}

// spanRoom reports whether the job whose context is ctx has time for one
// more span, one more request of up to timeout after it, and recording,
// before River's timeout of the job.
func (o *Outbox) spanRoom(ctx context.Context, timeout time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > o.config.DeliveryBatchSpan+timeout+deliveryJobMargin
}

// splitRest hands rest, the deliveries a batch job did not reach in its
// span, over to new batch jobs of size deliveries each (what the job sent
// in the span, at most Config.DeliveryBatchSize), the last one smaller,
// due at at. A batch that ends up with one delivery (size 1, or the others
// finished meanwhile) is a job of its own.
func splitRest(rest []batchMember, size int, at time.Time) []handOver {
	over := make([]handOver, len(rest))
	for i, m := range rest {
		over[i] = handOverOf(m.row, m.ref, at)
		over[i].batch = i/size + 1
	}
	return over
}

// batchable reports whether a batch job may send row's delivery as it is,
// with what it is signed and authorised with: its endpoint is enabled and
// its event stored, it is neither rate limited nor ordered by the
// delivery's key, its circuit is closed, and its secrets open. Any other
// delivery is handed over to a job of its own, which knows what to do.
func (o *Outbox) batchable(row *outboxtype.Delivery) (batchMember, bool) {
	if !row.Enabled || row.Payload == nil || row.RateLimitPerSecond > 0 || (row.Ordered && row.OrderingKey != "") {
		return batchMember{}, false
	}
	if wait, probe := o.gate.Circuit(row); wait > 0 || probe {
		return batchMember{}, false
	}
	auth, err := o.keys.DecodeAuth(row.EndpointID, row.Auth)
	if err != nil {
		return batchMember{}, false
	}
	secrets, err := o.signingSecrets(row, o.config.now())
	if err != nil {
		return batchMember{}, false
	}
	return batchMember{row: row, secrets: secrets, auth: auth}, true
}

// handOverOrSnooze hands over as handOver does; a transient database
// error snoozes the job (using no attempt: a last run stays the last), any
// other fails the run.
func (o *Outbox) handOverOrSnooze(ctx context.Context, log *slog.Logger, job *river.Job[DeliveryBatchArgs], over []handOver) error {
	if err := o.handOver(ctx, log, over); err != nil {
		return o.databaseError(context.WithoutCancel(ctx), log, shared.SnoozeCount(job.Metadata), fmt.Errorf("hand deliveries over to jobs of their own: %w", err))
	}
	return nil
}

// handOver moves each delivery of over to its next generation and inserts
// its new job, due at its time, in one transaction: the batch job's later
// runs leave it alone. A job of its own goes on from the attempts the batch
// job made; a new batch job makes the first attempt of each of its
// deliveries that the batch job did not reach.
func (o *Outbox) handOver(ctx context.Context, log *slog.Logger, over []handOver) error {
	if len(over) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err := o.inTx(ctx, func(tx pgx.Tx) error {
		_, err := o.handOverTx(ctx, tx, over)
		return err
	})
	if err != nil {
		return err
	}
	log.DebugContext(ctx, "outbox: deliveries handed over to new jobs", "deliveries", len(over))
	return nil
}

// handOverTx is handOver in tx, and returns the deliveries it handed over:
// those still unfinished at the generation of their hand-over as it locked
// them (the others were finished, replayed or deleted meanwhile).
func (o *Outbox) handOverTx(ctx context.Context, tx pgx.Tx, over []handOver) (map[uuid.UUID]bool, error) {
	if len(over) == 0 {
		return nil, nil
	}
	params := dbsqlc.OutboxDeliveryHandOffParams{Now: o.config.now()}
	batchOf := make(map[uuid.UUID]int, len(over))
	for _, h := range over {
		params.Ids = append(params.Ids, h.id.String())
		params.Generations = append(params.Generations, h.generation)
		batchOf[h.id] = h.batch
	}
	rows, err := o.queries.WithTx(tx).OutboxDeliveryHandOff(ctx, params)
	if err != nil {
		return nil, err
	}
	handed := make(map[uuid.UUID]dbsqlc.OutboxDeliveryHandOffRow, len(rows))
	members := make(map[int]int, len(rows)) // deliveries of each new batch job
	for _, row := range rows {
		handed[row.ID] = row
		members[batchOf[row.ID]]++
	}
	var jobs []river.InsertManyParams
	batches := make(map[int]int) // the index in jobs of each new batch job
	done := make(map[uuid.UUID]bool, len(rows))
	for _, h := range over {
		row, ok := handed[h.id]
		if !ok || done[h.id] {
			continue // finished, replayed or deleted meanwhile
		}
		done[h.id] = true
		at := h.at
		if row.NextAttemptAt != nil && row.NextAttemptAt.After(at) {
			// Recorded by the attempt (Retry-After, throttling), before
			// a run that stopped short of handing it over.
			at = *row.NextAttemptAt
		}
		if h.batch == 0 || members[h.batch] == 1 {
			offset := max(int(row.Attempts)-h.ref.AttemptsBefore, 0)
			opts := o.jobInsertOpts(0)
			opts.MaxAttempts = max(opts.MaxAttempts-offset, spareRuns+1)
			scheduleAt(opts, at)
			jobs = append(jobs, river.InsertManyParams{
				Args:       DeliveryArgs{DeliveryID: row.ID, Generation: int(row.Generation), AttemptOffset: offset},
				InsertOpts: opts,
			})
			continue
		}
		ref := DeliveryRef{DeliveryID: row.ID, Generation: int(row.Generation), AttemptsBefore: int(row.Attempts)}
		if i, ok := batches[h.batch]; ok {
			args := jobs[i].Args.(DeliveryBatchArgs)
			args.Deliveries = append(args.Deliveries, ref)
			jobs[i].Args = args
			scheduleAt(jobs[i].InsertOpts, at)
			continue
		}
		batches[h.batch] = len(jobs)
		opts := o.jobInsertOpts(0)
		scheduleAt(opts, at)
		jobs = append(jobs, river.InsertManyParams{
			Args:       DeliveryBatchArgs{EndpointID: h.endpointID, Deliveries: []DeliveryRef{ref}},
			InsertOpts: opts,
		})
	}
	if len(jobs) == 0 {
		return done, nil
	}
	if _, err := o.inserter.InsertManyFastTx(ctx, tx, jobs); err != nil {
		return nil, err
	}
	return done, nil
}

// scheduleAt makes opts' job due at at, or later if it already is.
func scheduleAt(opts *river.InsertOpts, at time.Time) {
	if at.After(time.Now()) && at.After(opts.ScheduledAt) {
		opts.ScheduledAt = at
	}
}

// deadCancelledBatch dead-letters the deliveries of a batch job River
// cancelled remotely while it ran that are still the job's (neither
// finished nor handed over): no job is left to attempt them.
func (o *Outbox) deadCancelledBatch(ctx context.Context, job *river.Job[DeliveryBatchArgs], err error) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	log := o.config.Logger.With("job_id", job.ID, "endpoint_id", job.Args.EndpointID)
	for _, ref := range job.Args.Deliveries {
		o.deadLetterCancelled(ctx, log, ref.DeliveryID, ref.Generation)
	}
	return river.JobCancel(err)
}
