package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/wharfhq/wharf/internal/audit"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/delivery"
)

// recoverBatch is how many events EndpointRecover handles per statement
// (and, outside the caller's transaction, per transaction).
const recoverBatch = 1000

// EndpointRecover creates the deliveries an endpoint missed: for every event
// still stored (retention has not dropped or scrubbed it) that was published
// at or after since, that the endpoint would receive now (its tenant, a type
// its filter matches) and that it has no delivery of, a pending delivery
// and its job, oldest event first. These are the events published while it
// was disabled (Publish skips disabled endpoints) or before it was created.
// It returns how many deliveries it created, in transactions of up to 1,000
// each.
//
// Call it after EndpointEnable; a disabled endpoint returns an error where
// errors.Is(err, ErrEndpointDisabled) is true, an unknown one ErrNotFound.
// It is idempotent: an event that has a delivery (pending, delivered, dead)
// is skipped, so running it twice sends nothing twice, and a second run
// catches an event whose transaction was still open while the endpoint was
// being enabled (it read the endpoint as disabled, and committed after the
// first run looked). Dead deliveries are left alone: DeliveryReplayDead
// sends those again. For an endpoint with Ordered set, the recovered
// deliveries come after those published since it was enabled.
func (o *Outbox) EndpointRecover(ctx context.Context, id uuid.UUID, since time.Time) (int, error) {
	shape, tenant, err := o.checkRecover(ctx, o.pool, id, since)
	if err != nil {
		return 0, err
	}
	total := 0
	cursor := recoverCursor{}
	for {
		var n int
		first := cursor == recoverCursor{}
		err := o.inTx(ctx, func(tx pgx.Tx) error {
			var err error
			n, cursor, err = o.recoverBatch(ctx, tx, id, shape, since, cursor)
			if err != nil || (n == 0 && !first) {
				return err
			}
			// Each batch commits on its own (a long recovery holds no
			// transaction open), with its own entry: a recovery cut short
			// is in the log as far as it went.
			return o.recordRecover(ctx, tx, id, tenant, since, n)
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < recoverBatch {
			return total, nil
		}
	}
}

// recordRecover writes a recovery's audit entry.
func (o *Outbox) recordRecover(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, tenant string, since time.Time, n int) error {
	return audit.Write(ctx, db, o.config.now(), audit.Record{
		Tenant: tenant, Action: "endpoint.recover", ObjectType: "endpoint", ObjectID: id.String(),
		Details: map[string]any{"since": since, "deliveries": n},
	})
}

// EndpointRecoverTx is EndpointRecover in tx, all of it: the deliveries and
// their jobs exist once tx commits. Run it in the transaction that enables
// the endpoint (EndpointEnableTx) to make both one change.
func (o *Outbox) EndpointRecoverTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, since time.Time) (int, error) {
	shape, tenant, err := o.checkRecover(ctx, tx, id, since)
	if err != nil {
		return 0, err
	}
	total := 0
	cursor := recoverCursor{}
	for {
		n, next, err := o.recoverBatch(ctx, tx, id, shape, since, cursor)
		if err != nil {
			return total, err
		}
		total += n
		if n < recoverBatch {
			return total, o.recordRecover(ctx, tx, id, tenant, since, total)
		}
		cursor = next
	}
}

// recoverCursor is the last event handled: the next batch starts after it.
type recoverCursor struct {
	createdAt time.Time
	id        uuid.UUID
}

// checkRecover returns the endpoint's shape and tenant.
func (o *Outbox) checkRecover(ctx context.Context, db dbsqlc.DBTX, id uuid.UUID, since time.Time) (delivery.Shape, string, error) {
	if since.IsZero() {
		return delivery.Shape{}, "", fmt.Errorf("outbox: recover endpoint %s: since is required (the oldest event to consider)", id)
	}
	row, err := endpointRow(ctx, db, id)
	if err != nil {
		return delivery.Shape{}, "", err
	}
	if !row.Enabled {
		return delivery.Shape{}, "", fmt.Errorf("outbox: recover endpoint %s: %w; enable it first", id, ErrEndpointDisabled)
	}
	return shapeOf(row), row.Tenant, nil
}

func (o *Outbox) recoverBatch(ctx context.Context, tx pgx.Tx, id uuid.UUID, shape delivery.Shape, since time.Time, after recoverCursor) (int, recoverCursor, error) {
	if after.createdAt.IsZero() {
		after.createdAt = since.Add(-time.Microsecond)
	}
	rows, err := dbsqlc.New(tx).OutboxEndpointRecover(ctx, dbsqlc.OutboxEndpointRecoverParams{
		EndpointID:     id,
		Now:            o.config.now(),
		Since:          since,
		AfterCreatedAt: after.createdAt,
		AfterID:        after.id,
		BatchSize:      recoverBatch,
	})
	if err != nil {
		return 0, after, fmt.Errorf("outbox: recover endpoint %s: %w", id, err)
	}
	if len(rows) == 0 {
		return 0, after, nil
	}
	jobs := make([]delivery.Pending, len(rows))
	for i, row := range rows {
		jobs[i] = delivery.Pending{ID: row.ID, EndpointID: id, OrderingKey: row.OrderingKey, Endpoint: shape}
	}
	if err := o.engine.InsertJobs(ctx, tx, jobs, 0); err != nil {
		return 0, after, err
	}
	last := rows[len(rows)-1]
	return len(rows), recoverCursor{createdAt: last.EventCreatedAt, id: last.EventID}, nil
}
