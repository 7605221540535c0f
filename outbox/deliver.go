package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// DeliveryKind is the River job kind of delivery jobs.
const DeliveryKind = "wharf_outbox_delivery"

// Delivery statuses.
const (
	// StatusPending: waiting for its first attempt, or being attempted.
	StatusPending = "pending"
	// StatusRetrying: an attempt failed and another is scheduled.
	StatusRetrying = "retrying"
	// StatusSucceeded: an attempt was answered 2xx.
	StatusSucceeded = "succeeded"
	// StatusDead: attempts are exhausted, the endpoint answered 410 or was
	// disabled, or the event is gone. Dead deliveries can be replayed.
	StatusDead = "dead"
)

// Attempt statuses.
const (
	attemptSucceeded = "succeeded"
	attemptFailed    = "failed"
)

// recordTimeout bounds recording an attempt, which runs even when the job's
// context has ended so that a sent request is not forgotten.
const recordTimeout = 10 * time.Second

// maxOrderingWait caps one snooze of a delivery waiting for an earlier one
// with its ordering key, so a replay of that one is noticed soon.
const maxOrderingWait = 5 * time.Minute

// DeliveryArgs are the args of a delivery job: the delivery's id, never the
// payload.
type DeliveryArgs struct {
	// DeliveryID identifies the delivery (one event to one endpoint).
	DeliveryID uuid.UUID `json:"delivery_id"`
}

// Kind returns DeliveryKind.
func (DeliveryArgs) Kind() string { return DeliveryKind }

// deliveryWorker makes one attempt of a delivery per run.
type deliveryWorker struct {
	river.WorkerDefaults[DeliveryArgs]
	outbox *Outbox
}

// NextRetry returns the time Work decided for the next attempt (the
// schedule, stretched by Retry-After or throttling), or the plain schedule
// for a job Work did not finish (rescued after a crash).
func (w *deliveryWorker) NextRetry(job *river.Job[DeliveryArgs]) time.Time {
	if at, ok := w.outbox.retries.take(job.ID); ok {
		return at
	}
	return time.Now().Add(w.outbox.retries.scheduled(job.Attempt))
}

// Work makes one delivery attempt.
func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[DeliveryArgs]) error {
	o := w.outbox
	log := o.config.Logger.With("delivery_id", job.Args.DeliveryID, "job_id", job.ID, "attempt", job.Attempt)
	row, err := o.queries.OutboxDeliveryGetForWork(ctx, job.Args.DeliveryID)
	if errors.Is(err, pgx.ErrNoRows) {
		log.InfoContext(ctx, "outbox: delivery no longer exists (endpoint deleted); nothing to send")
		return nil
	}
	if err != nil {
		return fmt.Errorf("outbox: load delivery %s: %w", job.Args.DeliveryID, err)
	}
	log = log.With("endpoint_id", row.EndpointID, "event_id", formatEventID(row.EventID))

	switch {
	case row.Status == StatusSucceeded || row.Status == StatusDead:
		// A rerun of a job whose outcome was recorded (the worker stopped
		// before River marked the job done).
		return nil
	case !row.Enabled:
		return o.deadWithoutAttempt(ctx, log, &row, "endpoint disabled")
	case row.Payload == nil:
		return o.deadWithoutAttempt(ctx, log, &row, "event no longer stored")
	case job.Attempt > o.retries.attempts():
		// Only reachable when a worker stopped during the last attempt.
		return o.deadWithoutAttempt(ctx, log, &row, "attempts exhausted; the outcome of the last one is unknown")
	}

	if row.Ordered && row.OrderingKey != "" {
		if wait, blocked, err := o.orderingWait(ctx, &row); err != nil || blocked {
			if err != nil {
				return err
			}
			return river.JobSnooze(wait)
		}
	}

	timeout := time.Duration(row.TimeoutMs) * time.Millisecond
	slot := int32(noLease)
	if row.MaxInFlight > 0 {
		var ok bool
		slot, ok, err = o.acquireLease(ctx, row.EndpointID, row.ID, row.MaxInFlight, timeout)
		if err != nil {
			return fmt.Errorf("outbox: concurrency slot: %w", err)
		}
		if !ok {
			return river.JobSnooze(o.retries.busy())
		}
	}

	attemptedAt := o.config.now()
	out := o.send(ctx, &delivery{
		url:     row.Url,
		eventID: formatEventID(row.EventID),
		secrets: signingSecrets(&row, attemptedAt),
		body:    row.Payload,
		timeout: timeout,
	})
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) && !out.succeeded() {
		// The client is stopping: this is no verdict on the endpoint. River
		// makes the job available again.
		o.releaseLease(context.WithoutCancel(ctx), row.EndpointID, row.ID, slot)
		return ctx.Err()
	}
	return o.finishAttempt(context.WithoutCancel(ctx), log, job, &row, slot, attemptedAt, out)
}

// finishAttempt records an attempt, updates endpoint health and returns
// what River should do with the job.
func (o *Outbox) finishAttempt(ctx context.Context, log *slog.Logger, job *river.Job[DeliveryArgs],
	row *dbsqlc.OutboxDeliveryGetForWorkRow, slot int32, attemptedAt time.Time, out *sendOutcome,
) error {
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()

	rec := &attemptRecord{row: row, slot: slot, attemptedAt: attemptedAt, out: out, status: StatusSucceeded}
	final := job.Attempt >= o.retries.attempts() || out.gone()
	var wait time.Duration
	if !out.succeeded() {
		rec.status = StatusRetrying
		if final {
			rec.status = StatusDead
		} else {
			wait = o.retries.wait(job.Attempt, out)
			next := attemptedAt.Add(out.duration + wait)
			rec.nextAttemptAt = &next
		}
	}
	disabledReason, err := o.recordAttempt(ctx, rec)
	if errors.Is(err, pgx.ErrNoRows) {
		// The endpoint and its deliveries were deleted during the attempt.
		return nil
	}
	if err != nil {
		o.releaseLease(ctx, row.EndpointID, row.ID, slot)
		return fmt.Errorf("outbox: delivery %s: %w", row.ID, err)
	}

	attrs := []any{"status_code", out.statusCode, "duration", out.duration}
	if disabledReason != "" {
		log.WarnContext(ctx, "outbox: endpoint disabled", append(attrs, "reason", disabledReason)...)
	}
	switch {
	case out.succeeded():
		log.DebugContext(ctx, "outbox: delivered", attrs...)
		return nil
	case final:
		log.WarnContext(ctx, "outbox: delivery dead-lettered", append(attrs, "error", out.errorText())...)
		return river.JobCancel(fmt.Errorf("outbox: dead after attempt %d: %s", job.Attempt, out.errorText()))
	default:
		log.InfoContext(ctx, "outbox: attempt failed; will retry", append(attrs, "error", out.errorText(), "retry_in", wait)...)
		o.retries.decide(job.ID, time.Now().Add(wait))
		return fmt.Errorf("outbox: attempt %d failed: %s", job.Attempt, out.errorText())
	}
}

// deadWithoutAttempt dead-letters a delivery that cannot be attempted and
// ends its job.
func (o *Outbox) deadWithoutAttempt(ctx context.Context, log *slog.Logger, row *dbsqlc.OutboxDeliveryGetForWorkRow, reason string) error {
	err := o.queries.OutboxDeliveryMarkDead(ctx, dbsqlc.OutboxDeliveryMarkDeadParams{ID: row.ID, Reason: reason, Now: o.config.now()})
	if err != nil {
		return fmt.Errorf("outbox: dead-letter delivery %s: %w", row.ID, err)
	}
	log.InfoContext(ctx, "outbox: delivery dead-lettered without an attempt", "reason", reason)
	return river.JobCancel(fmt.Errorf("outbox: delivery dead: %s", reason))
}

// orderingWait reports whether an earlier delivery with the same ordering
// key to the same endpoint is unfinished, and how long to wait for it.
func (o *Outbox) orderingWait(ctx context.Context, row *dbsqlc.OutboxDeliveryGetForWorkRow) (time.Duration, bool, error) {
	earlier, err := o.queries.OutboxDeliveryEarlierPending(ctx, dbsqlc.OutboxDeliveryEarlierPendingParams{
		EndpointID: row.EndpointID, OrderingKey: row.OrderingKey, Seq: row.Seq,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("outbox: ordering check: %w", err)
	}
	wait := o.retries.busy()
	if earlier.NextAttemptAt != nil {
		wait = max(wait, min(earlier.NextAttemptAt.Sub(o.config.now()), maxOrderingWait))
	}
	return wait, true, nil
}
