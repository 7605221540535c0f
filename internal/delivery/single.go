package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/shared"
)

// Worker makes one attempt of a delivery per run of its own job (Args).
type Worker struct {
	river.WorkerDefaults[Args]
	engine *Engine
}

// jobMargin is how much longer than Config.MaxEndpointTimeout a delivery
// job's River timeout is: the statements around the request.
const jobMargin = 2*recordTimeout + 30*time.Second

// Timeout is every delivery job's River timeout, whatever the client's
// JobTimeout: Config.MaxEndpointTimeout plus jobMargin, so that River
// never cuts an attempt short (the endpoint's own timeout bounds the
// request). River's rescuer honours it: a delivery whose process died is
// retried once its job is this old.
func (w *Worker) Timeout(*river.Job[Args]) time.Duration {
	return w.engine.config.MaxEndpointTimeout + jobMargin
}

// NextRetry returns the time Work decided for the next attempt (the
// schedule, stretched by Retry-After or throttling), or the plain schedule
// for a job Work did not finish (rescued after a crash).
func (w *Worker) NextRetry(job *river.Job[Args]) time.Time {
	if job.Args.retrySet {
		return time.Now().Add(job.Args.retryIn)
	}
	return time.Now().Add(w.engine.retries.scheduled(attemptOf(job)))
}

// Work makes one delivery attempt. When River cancels the job remotely
// (JobCancel from another process) while it runs, the delivery is
// dead-lettered, since no job will attempt it again.
func (w *Worker) Work(ctx context.Context, job *river.Job[Args]) error {
	err := w.engine.work(ctx, job)
	return w.engine.whenCancelled(ctx, err, w.engine.config.Logger.With("job_id", job.ID),
		Ref{DeliveryID: job.Args.DeliveryID, Generation: job.Args.Generation})
}

// attemptOf is the delivery's attempt number of job's current run: River's
// count of the job's runs, plus the attempts made before the job (a batch
// job's).
func attemptOf(job *river.Job[Args]) int {
	return job.Attempt + job.Args.AttemptOffset
}

// snoozeCount returns how often River has snoozed job (0 for a job without
// its row).
func snoozeCount(job *river.Job[Args]) int {
	if job.JobRow == nil {
		return 0
	}
	return shared.SnoozeCount(job.Metadata)
}

func (e *Engine) work(ctx context.Context, job *river.Job[Args]) error {
	attempt := attemptOf(job)
	log := e.config.Logger.With("delivery_id", job.Args.DeliveryID, "job_id", job.ID, "attempt", attempt)
	d, err := e.load(ctx, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		log.InfoContext(ctx, "outbox: delivery no longer exists (endpoint deleted); nothing to send")
		return nil
	}
	if err != nil {
		return e.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("load delivery: %w", err))
	}
	log = log.With("endpoint_id", d.EndpointID, "event_id", d.EventID)

	v := e.gate(d, job.Args.Generation)
	switch {
	case v.stale && int(d.Generation) != job.Args.Generation:
		log.InfoContext(ctx, "outbox: a replay superseded this job; nothing to send",
			"job_generation", job.Args.Generation, "delivery_generation", d.Generation)
		return nil
	case v.stale:
		// A rerun of a job whose outcome was recorded (the worker stopped
		// before River marked the job done).
		return nil
	case v.dead != "":
		return e.deadWithoutAttempt(ctx, log, d, v.dead)
	case attempt > e.retries.attemptLimit(job):
		// Only reachable when a run ended without recording its outcome
		// (a crash, a panic, a failure to record) after the last attempt.
		return e.deadWithoutAttempt(ctx, log, d, "attempts exhausted; the outcome of the last one is unknown")
	case v.wait > 0:
		return e.snooze(ctx, admission.ReasonCircuit, v.wait)
	case v.authErr != nil && !errors.Is(v.authErr, secretbox.ErrDecrypt):
		return fmt.Errorf("outbox: delivery %s: %w", d.ID, v.authErr)
	}
	if d.Ordered && d.OrderingKey != "" {
		wait, blocked, err := e.orderingWait(ctx, d)
		if err != nil {
			return e.databaseError(ctx, log, snoozeCount(job), fmt.Errorf("ordering check: %w", err))
		}
		if blocked {
			return e.snooze(ctx, deferOrdering, wait)
		}
	}
	if err := v.openErr(); err != nil {
		// A key missing from Config.SecretKeys, or a value altered, makes
		// an attempt that sends nothing, whose error says which, retried
		// on the schedule (the key may be on its way to this node).
		return e.finish(context.WithoutCancel(ctx), log, job, d, nil, e.now(), &outcome{Outcome: &egress.Outcome{Err: err}})
	}

	ticket, err := e.admission.Admit(ctx, d, admission.Request{Hold: e.timeout(d), Probe: v.probe, Snoozes: snoozeCount(job)})
	if err != nil {
		return e.deferOrFail(ctx, log, snoozeCount(job), err)
	}
	defer ticket.Release()
	if err := ticket.AwaitToken(ctx); err != nil {
		// The client is stopping: River makes the job available again.
		return err
	}
	if ticket.Probe() {
		log = log.With("circuit_probe", true)
		log.InfoContext(ctx, "outbox: probing the endpoint, whose circuit is half-open")
	}
	attemptedAt := e.now()
	out, _ := e.send(ctx, d, attempt, &v)
	ticket.Sent(!out.CutOff)
	return e.finish(context.WithoutCancel(ctx), log, job, d, ticket, attemptedAt, out)
}

// finish records an attempt, updates endpoint health and returns what
// River should do with the job. ticket is the attempt's admission, nil
// when it was never admitted: a recorded attempt gave back its slot.
func (e *Engine) finish(ctx context.Context, log *slog.Logger, job *river.Job[Args],
	d *outboxtype.Delivery, ticket *admission.Ticket, attemptedAt time.Time, out *outcome,
) error {
	attempt := attemptOf(job)
	slot := int32(admission.NoSlot)
	if ticket != nil {
		slot = ticket.Slot()
	}
	s, err := e.settle(ctx, log, attempt, e.retries.attemptLimit(job), d, slot, attemptedAt, out)
	if err != nil {
		return err
	}
	if ticket != nil {
		ticket.Recorded()
	}
	switch s.status {
	case outboxtype.StatusDead:
		return river.JobCancel(fmt.Errorf("outbox: dead after attempt %d: %s", attempt, out.errorText()))
	case outboxtype.StatusRetrying:
		job.Args.retryIn, job.Args.retrySet = s.wait, true
		return fmt.Errorf("outbox: attempt %d failed: %s", attempt, out.errorText())
	}
	return nil
}

// deadWithoutAttempt dead-letters a delivery that cannot be attempted and
// ends its job.
func (e *Engine) deadWithoutAttempt(ctx context.Context, log *slog.Logger, d *outboxtype.Delivery, reason string) error {
	dead, err := e.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
		ID: d.ID, Generation: d.Generation, Reason: reason, Now: e.now(),
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Replayed, finished or deleted meanwhile: no longer this job's,
		// which ends as one that finds its delivery so when it loads it.
		log.InfoContext(ctx, "outbox: delivery no longer this job's; not dead-lettered", "reason", reason)
		return nil
	case err != nil:
		return fmt.Errorf("outbox: dead-letter delivery %s: %w", d.ID, err)
	}
	e.markedDead(ctx, dead, reason)
	log.InfoContext(ctx, "outbox: delivery dead-lettered without an attempt", "reason", reason)
	return river.JobCancel(fmt.Errorf("outbox: delivery dead: %s", reason))
}

// reasonCancelled is the dead delivery's error when its job was cancelled.
const reasonCancelled = "cancelled: its River job was cancelled"

// whenCancelled is what a worker's run that ended with err returns: err,
// unless River cancelled the job remotely while it ran; the job's
// deliveries (refs) are then dead-lettered (unless the run recorded an
// outcome or handed them over already): no job is left to attempt them. A
// replay sends them again.
func (e *Engine) whenCancelled(ctx context.Context, err error, log *slog.Logger, refs ...Ref) error {
	if err == nil || !errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	for _, ref := range refs {
		dead, err := e.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{
			ID: ref.DeliveryID, Generation: int32(ref.Generation), Reason: reasonCancelled, Now: e.now(),
		})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Finished, handed over, replayed or deleted: not the job's.
		case err != nil:
			log.ErrorContext(ctx, "outbox: job cancelled, but its delivery could not be dead-lettered; Rescue will",
				"delivery_id", ref.DeliveryID, "error", err)
		default:
			e.markedDead(ctx, dead, reasonCancelled)
			log.WarnContext(ctx, "outbox: job cancelled; delivery dead-lettered", "delivery_id", ref.DeliveryID, "reason", reasonCancelled)
		}
	}
	return river.JobCancel(err)
}
