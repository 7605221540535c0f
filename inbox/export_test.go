package inbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// GatheringDeliveries is how many deliveries the HTTP handler's open batch
// (the one taking members, not yet committing) holds.
func GatheringDeliveries(ib *Inbox) int { return ib.receiving.Gathering() }

// WakeNext gives the next unfinished message of msg's ordering key a job
// when it is parked, as a message's finish does, in tx.
func WakeNext(ctx context.Context, ib *Inbox, tx pgx.Tx, msg *Message) error {
	return ib.wakeNext(ctx, tx, msg)
}

// WakeNextOf wakes the next messages of finished, a batch's processed
// messages received at receivedAt, as the batch worker does, in tx.
func WakeNextOf(ctx context.Context, ib *Inbox, tx pgx.Tx, receivedAt time.Time, finished []*Message) error {
	return ib.wakeNextOf(ctx, tx, receivedAt, finished)
}

// SetBeforeFailureRecord makes fn run after a processing job's transaction
// has rolled back on its handler's failure, before the failure is recorded
// (in the job's goroutine). Set it before the workers start.
func SetBeforeFailureRecord(ib *Inbox, fn func(ctx context.Context, msg *Message)) {
	ib.hooks.beforeFailureRecord = fn
}
