package admission

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/outboxtest"
	"github.com/wharfhq/wharf/internal/testdb"
)

func TestWaitsGrowToTheirCaps(t *testing.T) {
	t.Parallel()
	g := New(nil, &Config{BusyRetryDelay: time.Second})
	within := func(got, base time.Duration) {
		t.Helper()
		require.GreaterOrEqual(t, got, base)
		require.LessOrEqual(t, got, base+base/4, "at most 25%% jitter")
	}
	for snoozes, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		within(g.capped(snoozes), want)
	}
	within(g.capped(1_000_000), time.Minute)
	for snoozes, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second} {
		within(g.AfterDatabaseError(snoozes), want)
	}
	within(g.AfterDatabaseError(64), 10*time.Second)
	within(g.Busy(), time.Second)

	slow := New(nil, &Config{BusyRetryDelay: 2 * time.Minute})
	within(slow.capped(3), 2*time.Minute) // a delay above the cap is kept
}

// Busy is BusyRetryDelay and up to 25% jitter.
func TestBusy(t *testing.T) {
	t.Parallel()
	busy := New(nil, &Config{BusyRetryDelay: time.Second}).Busy()
	require.GreaterOrEqual(t, busy, time.Second)
	require.LessOrEqual(t, busy, time.Second+time.Second/4)
}

// TestTakeSlots checks the statement that takes many deliveries' slots at
// once: each gets a distinct slot until the cap, and none past it.
//
// It runs straight to Postgres and through PgBouncer in transaction mode in
// pgx's exec and simple_protocol modes.
func TestTakeSlots(t *testing.T) {
	t.Parallel()
	testdb.EachMode(t, testTakeSlots)
}

func testTakeSlots(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	eps, ids := outboxtest.Seed(t, pool, []int32{3}, 5)
	g := New(pool, nil)
	// The slots exist once the single-delivery path created them.
	require.NoError(t, g.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 2}))
	asks := make([]slotAsk, len(ids))
	for i, id := range ids {
		asks[i] = slotAsk{endpointID: eps[0], deliveryID: id, seconds: 60}
	}
	slots, errs := g.takeSlots(ctx, asks)
	require.Nil(t, errs)
	require.ElementsMatch(t, []int32{0, 1, 2, NoSlot, NoSlot}, slots, "three slots under the cap of 3, then none")
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now() AND delivery_id IS NOT NULL`).Scan(&held))
	require.Equal(t, 3, held)
}

// TestTakeSlotsDeliveryAskingTwice: two runs of one delivery's job asking
// in one lease batch do not both get the same slot (and leave a second one
// held until it expired, found by review): the second gets none from the
// batch.
func TestTakeSlotsDeliveryAskingTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	eps, ids := outboxtest.Seed(t, pool, []int32{3}, 1)
	g := New(pool, nil)
	require.NoError(t, g.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 2}))
	ask := slotAsk{endpointID: eps[0], deliveryID: ids[0], seconds: 60}
	slots, errs := g.takeSlots(ctx, []slotAsk{ask, ask})
	require.Nil(t, errs)
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now()`).Scan(&held))
	require.NotEqual(t, int32(NoSlot), slots[0])
	require.Equal(t, int32(NoSlot), slots[1], "the second ask takes the single-delivery path")
	require.Equal(t, 1, held)
}

// TestLeaseUpdatesStayHOT takes concurrency slots and frees them, and
// checks that every one of those updates was a heap-only tuple update: no
// new index entries. With expires_at indexed, each wrote an entry in both
// of the table's indexes, so that a busy endpoint's few slot rows gathered
// dead entries by the thousand for every later search to step over.
func TestLeaseUpdatesStayHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	eps, rows := outboxtest.Seed(t, pool, []int32{10}, 5)
	require.NoError(t, dbsqlc.New(pool).OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 9}))
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
			ids[i] = r.String()
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
