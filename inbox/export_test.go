package inbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// GatheringDeliveries is how many deliveries the HTTP handler's open batch
// (the one taking members, not yet committing) holds.
func GatheringDeliveries(ib *Inbox) int { return ib.receiver.Gathering() }

// WakeNext gives the next unfinished message of msg's ordering key a job
// when it is parked, as a message's finish does, in tx.
func WakeNext(ctx context.Context, ib *Inbox, tx pgx.Tx, msg *Message) error {
	return ib.ordering.WakeNext(ctx, tx, orderingRow(msg))
}

// WakeNextOf wakes the next messages of finished, a batch's processed
// messages received at receivedAt, as the batch worker does, in tx.
func WakeNextOf(ctx context.Context, ib *Inbox, tx pgx.Tx, receivedAt time.Time, finished []*Message) error {
	rows := make([]*dbsqlc.WharfInboxMessage, len(finished))
	for i, m := range finished {
		rows[i] = orderingRow(m)
	}
	return ib.ordering.WakeNextOf(ctx, tx, receivedAt, rows)
}

// orderingRow is what ordering reads of msg.
func orderingRow(msg *Message) *dbsqlc.WharfInboxMessage {
	return &dbsqlc.WharfInboxMessage{ID: msg.ID, ReceivedAt: msg.ReceivedAt, Source: msg.Source, OrderingKey: msg.OrderingKey}
}

// SetBeforeFailureRecord makes fn run after a processing job's transaction
// has rolled back on its handler's failure, before the failure is recorded
// (in the job's goroutine). Set it before the workers start.
func SetBeforeFailureRecord(ib *Inbox, fn func(ctx context.Context, msg *Message)) {
	ib.processor.TestHooks.BeforeFailureRecord = func(ctx context.Context, msg *dbsqlc.WharfInboxMessage) {
		fn(ctx, messageFromRow(msg))
	}
}

// SetQuickHandlers makes ib's batch jobs merge whatever its handlers'
// times. Set it before the workers start.
func SetQuickHandlers(ib *Inbox) { ib.processor.TestHooks.QuickHandlers = true }
