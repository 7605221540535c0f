package outbox

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/outboxtype"
)

// admission is whether an attempt may go: with the concurrency slot it
// took (noLease for none) once sleep has passed (its rate limit token is
// due then), or, when wait is positive, not before wait has passed, for
// reason (a deferral reason, the label of wharf_outbox_deferred_total).
type admission struct {
	slot   int32
	sleep  time.Duration
	wait   time.Duration
	reason string
}

func admitted(slot int32) admission { return admission{slot: slot} }

func deferred(reason string, wait time.Duration) admission {
	return admission{slot: noLease, wait: max(wait, time.Millisecond), reason: reason}
}

// admit decides whether the attempt of row may go under its endpoint's
// concurrency cap and rate limit: it takes a slot and a token, or says how
// long to wait. A delivery whose turn for a token has come goes before
// those that have not waited.
func (o *Outbox) admit(ctx context.Context, job *river.Job[DeliveryArgs], row *outboxtype.Delivery, timeout time.Duration) (admission, error) {
	queued, early := turn(row)
	if early > 0 {
		return deferred(deferRateLimit, early), nil
	}
	if row.MaxInFlight > 0 {
		return o.acquireLease(ctx, job, row, timeout, queued)
	}
	if row.RateLimitPerSecond > 0 {
		return o.takeToken(ctx, row, queued, false)
	}
	return admitted(noLease), nil
}

// awaitToken waits d in the worker for the token an admission took, or
// until ctx ends; it returns ctx's error at once when ctx has ended (the
// admission's statements run to their end regardless: see acquireLease),
// so that nothing is sent after a stop.
func awaitToken(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// snooze ends a run without an attempt: River runs the job again after
// wait, and the run uses none of the delivery's attempts.
func (o *Outbox) snooze(ctx context.Context, reason string, wait time.Duration) error {
	o.metrics.deferred.Add(ctx, 1, o.metrics.byReason.Of(reason))
	return river.JobSnooze(wait)
}
