package outbox

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// TestRecordSucceededReadsOnlyItsDeliveries records three successes of an
// endpoint with a backlog of unfinished deliveries whose statistics lag
// (published just now, not analyzed: a burst), under a generic and a
// custom plan, and counts the delivery rows the statement fetched through
// indexes. It fetched the whole backlog (its plan read the endpoint's
// index of unfinished deliveries and matched them to the attempts), which
// made the outbox's records cost more the larger its backlog; a record
// fetches the deliveries it records, a few more rows at most.
func TestRecordSucceededReadsOnlyItsDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const backlog = 3000
	o, pool, eps, rows := combineSetup(t, []int{100}, backlog)
	params := make([]*dbsqlc.OutboxAttemptRecordParams, 3)
	for i := range params {
		params[i] = combineParams(t, o, rows[i*1000], noLease, true)
	}
	require.Equal(t, eps[0], params[0].EndpointID)
	for _, mode := range []string{"force_generic_plan", "force_custom_plan"} {
		t.Run(mode, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode)
			require.NoError(t, err)
			fetched := func() int64 {
				var n int64
				require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(sum(idx_tup_fetch), 0)::bigint FROM pg_stat_xact_user_tables
					WHERE relname = 'wharf_outbox_deliveries'`).Scan(&n))
				return n
			}
			before := fetched()
			recorded, err := dbsqlc.New(tx).OutboxAttemptRecordSucceeded(ctx, succeededArg(params, []int{0, 1, 2}))
			require.NoError(t, err)
			require.Len(t, recorded, 3)
			require.Less(t, fetched()-before, int64(30), "delivery rows fetched to record 3 attempts, with %d unfinished", backlog)
			var pending int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'pending'`).Scan(&pending))
			require.Equal(t, backlog-3, pending)
		})
	}
}

// TestLeaseUpdatesStayHOT takes concurrency slots and frees them, and
// checks that every one of those updates was a heap-only tuple update: no
// new index entries. With expires_at indexed, each wrote an entry in both
// of the table's indexes, so that a busy endpoint's few slot rows gathered
// dead entries by the thousand for every later search to step over.
func TestLeaseUpdatesStayHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, pool, eps, rows := combineSetup(t, []int{10}, 5)
	require.NoError(t, o.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 9}))
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// Counted from here: pg_stat_xact_user_tables also holds the counts of
	// earlier transactions on this connection not yet reported.
	const counts = `SELECT coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_hot_upd), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname = 'wharf_outbox_leases'`
	var updates0, hot0 int64
	require.NoError(t, tx.QueryRow(ctx, counts).Scan(&updates0, &hot0))
	q := dbsqlc.New(tx)
	for round := range 3 {
		ids := make([]string, len(rows))
		for i, r := range rows {
			ids[i] = r.ID.String()
		}
		taken, err := q.OutboxLeaseAcquireMany(ctx, dbsqlc.OutboxLeaseAcquireManyParams{EndpointID: eps[0], DeliveryIds: ids, LeaseSeconds: 60})
		require.NoError(t, err)
		require.Len(t, taken, len(rows), "round %d", round)
		for _, l := range taken {
			require.NoError(t, q.OutboxLeaseRelease(ctx, dbsqlc.OutboxLeaseReleaseParams{EndpointID: eps[0], Slot: l.Slot, DeliveryID: l.DeliveryID}))
		}
	}
	var updates, hot int64
	require.NoError(t, tx.QueryRow(ctx, counts).Scan(&updates, &hot))
	updates, hot = updates-updates0, hot-hot0
	require.Equal(t, int64(2*3*len(rows)), updates)
	require.Equal(t, updates, hot, "lease updates that were HOT")
}
