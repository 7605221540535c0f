package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtype"
)

// awaitStatementDone waits until no other session of the test's database
// runs the query named name (sqlc's "-- name:" comment), which a stopped
// worker may have left running on the server.
func awaitStatementDone(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND query LIKE '%' || $1 || '%'`,
			"name: "+name).Scan(&n))
		return n == 0
	}, 30*time.Second, 10*time.Millisecond, "%s still runs", name)
}

// A stop while a job takes its endpoint's slot: the slot it took is given
// back, not held until its lease expires. The slot is taken by
// OutboxLeaseAcquireCounted (a lease above the lowered cap is live), which
// waits for the endpoint's row, held by the test, while the job's context
// ends; the statement then goes on in the server, whatever its client.
func TestStopWhileAJobTakesItsSlotReleasesIt(t *testing.T) {
	t.Parallel()
	batchJob := func(endpointID uuid.UUID, rows []*outboxtype.Delivery) *river.Job[BatchArgs] {
		args := BatchArgs{EndpointID: endpointID}
		for _, row := range rows {
			args.Deliveries = append(args.Deliveries, Ref{DeliveryID: row.ID})
		}
		return &river.Job[BatchArgs]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: 7}, Args: args}
	}
	batch := func(e *Engine, endpointID uuid.UUID, rows []*outboxtype.Delivery) func(context.Context) error {
		w := &BatchWorker{engine: e}
		job := batchJob(endpointID, rows)
		return func(ctx context.Context) error { return w.Work(ctx, job) }
	}
	own := func(e *Engine, _ uuid.UUID, rows []*outboxtype.Delivery) func(context.Context) error {
		w := &Worker{engine: e}
		job := &river.Job[Args]{JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, MaxAttempts: 7}, Args: Args{DeliveryID: rows[0].ID}}
		return func(ctx context.Context) error { return w.Work(ctx, job) }
	}
	// River's remote cancellation ends the context too, with its cause: the
	// batch's deliveries are dead-lettered, and the slot given back all the
	// same.
	t.Run("Batch", func(t *testing.T) { t.Parallel(); testStopWhileTakingASlot(t, batch, context.Canceled, "pending") })
	t.Run("OwnJob", func(t *testing.T) { t.Parallel(); testStopWhileTakingASlot(t, own, context.Canceled, "pending") })
	t.Run("BatchCancelledRemotely", func(t *testing.T) {
		t.Parallel()
		testStopWhileTakingASlot(t, batch, river.ErrJobCancelledRemotely, "dead")
	})
}

// testStopWhileTakingASlot ends the job's context with cause while its
// slot is being taken, and expects its deliveries to be left status.
func testStopWhileTakingASlot(t *testing.T,
	jobOf func(e *Engine, endpointID uuid.UUID, rows []*outboxtype.Delivery) func(context.Context) error,
	cause error, status string,
) {
	ctx := context.Background()
	e, pool, eps, loaded := combineSetup(t, []int32{3}, 2)
	require.NoError(t, e.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 2}))
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = gen_random_uuid(), expires_at = now() + interval '1 minute'
		WHERE endpoint_id = $1 AND slot = 2`, eps[0])
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_endpoints SET max_in_flight = 2 WHERE id = $1`, eps[0])
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM wharf_outbox_endpoints WHERE id = $1 FOR UPDATE`, eps[0])
	require.NoError(t, err)

	work := jobOf(e, eps[0], loaded)
	jobCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	done := make(chan error, 1)
	go func() { done <- work(jobCtx) }()
	waitLocked(t, pool, 1) // the job's slot waits for the endpoint's row
	stop(cause)
	require.NoError(t, tx.Rollback(ctx))
	select {
	case err := <-done:
		require.Error(t, err, "the stopping job sends nothing and runs again")
	case <-time.After(30 * time.Second):
		t.Fatal("the job never returned")
	}
	awaitStatementDone(t, pool, "OutboxLeaseAcquireCounted")

	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases
		WHERE endpoint_id = $1 AND delivery_id = ANY($2) AND expires_at > now()`,
		eps[0], []string{loaded[0].ID.String(), loaded[1].ID.String()}).Scan(&held))
	require.Zero(t, held, "the slot the stopped job took is free")
	rows, err := pool.Query(ctx, `SELECT status, attempts FROM wharf_outbox_deliveries ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var got string
		var attempts int
		require.NoError(t, rows.Scan(&got, &attempts))
		require.Zero(t, attempts, "nothing was sent")
		require.Equal(t, status, got)
	}
	require.NoError(t, rows.Err())
}
