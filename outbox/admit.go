package outbox

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// admission is whether an attempt may go now: with the concurrency slot it
// took (noLease for none), or, when wait is positive, not before wait has
// passed, for reason (a deferral reason, the label of
// wharf_outbox_deferred_total).
type admission struct {
	slot   int32
	wait   time.Duration
	reason string
}

func admitted(slot int32) admission { return admission{slot: slot} }

func deferred(reason string, wait time.Duration) admission {
	return admission{slot: noLease, wait: max(wait, time.Millisecond), reason: reason}
}

// admit decides whether the attempt of row may go now under its endpoint's
// concurrency cap and rate limit: it takes a slot and a token (in one
// statement when the endpoint has both), or says how long to wait. A
// delivery that reserved a token earlier and is now due sends on it
// without taking another.
func (o *Outbox) admit(ctx context.Context, job *river.Job[DeliveryArgs], row *dbsqlc.OutboxDeliveryGetForWorkRow, timeout time.Duration) (admission, error) {
	held, early := reservation(row)
	if early > 0 {
		return deferred(deferRateLimit, early), nil
	}
	if row.MaxInFlight > 0 {
		return o.acquireLease(ctx, job, row, timeout, held)
	}
	if row.RateLimitPerSecond > 0 && !held {
		return o.takeToken(ctx, row)
	}
	return admitted(noLease), nil
}

// snooze ends a run without an attempt: River runs the job again after
// wait, and the run uses none of the delivery's attempts.
func (o *Outbox) snooze(ctx context.Context, reason string, wait time.Duration) error {
	o.metrics.deferred.Add(ctx, 1, o.metrics.byReason.Of(reason))
	return river.JobSnooze(wait)
}
