package outbox

import (
	"context"
	"time"

	"github.com/riverqueue/river"
)

// snooze ends a run without an attempt: River runs the job again after
// wait, and the run uses none of the delivery's attempts.
func (o *Outbox) snooze(ctx context.Context, reason string, wait time.Duration) error {
	o.metrics.deferred.Add(ctx, 1, o.metrics.byReason.Of(reason))
	return river.JobSnooze(wait)
}
