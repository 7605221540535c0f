package delivery

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/admission"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/egress"
	"github.com/wharfhq/wharf/internal/outboxtest"
	"github.com/wharfhq/wharf/internal/outboxtype"
	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/secretbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestCombinedStatements checks the outbox's combined statements directly:
// a load of many deliveries answers each (ErrNoRows for one that does not
// exist); a lease statement for many deliveries gives each a distinct slot
// until the cap, and none past it; a record batch whose one attempt fails
// (its day has no partition) rolls back and records the others on their
// own, so that one attempt's failure is only its own, and an attempt that
// is no longer its delivery's (a newer generation) gets ErrNoRows without
// failing its neighbours.
//
// It runs straight to Postgres and through PgBouncer in transaction mode in
// pgx's exec and simple_protocol modes, which pipeline a batch differently.
func TestCombinedStatements(t *testing.T) {
	t.Parallel()
	testdb.EachMode(t, testCombinedStatements)
}

func testCombinedStatements(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	e := testEngine(t, pool)
	eps, ids := outboxtest.Seed(t, pool, []int32{3}, 5)
	require.Len(t, ids, 5)

	// Load.
	missing := uuid.New()
	loaded, errs := e.loadMany(ctx, append([]uuid.UUID{missing}, ids...))
	require.ErrorIs(t, errs[0], pgx.ErrNoRows)
	require.Nil(t, loaded[0])
	for i, id := range ids {
		require.NoError(t, errs[i+1])
		require.Equal(t, id, loaded[i+1].ID)
		require.Equal(t, eps[0], loaded[i+1].EndpointID)
	}

	// Lease: the slots exist once the single-delivery path created them.
	require.NoError(t, e.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 2}))
	// (admission's TestTakeSlots checks this statement.)
	taken, err := e.queries.OutboxLeaseAcquireMany(ctx, dbsqlc.OutboxLeaseAcquireManyParams{
		EndpointID: eps[0], DeliveryIds: pgxtx.UUIDTexts(ids), LeaseSeconds: 60,
	})
	require.NoError(t, err)
	slots := make([]int32, len(ids))
	for i, id := range ids {
		slots[i] = admission.NoSlot
		for _, l := range taken {
			if l.DeliveryID == id {
				slots[i] = l.Slot
			}
		}
	}
	require.ElementsMatch(t, []int32{0, 1, 2, admission.NoSlot, admission.NoSlot}, slots, "three slots under the cap of 3, then none")
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now() AND delivery_id IS NOT NULL`).Scan(&held))
	require.Equal(t, 3, held)

	// Record: four attempts in one batch; the third's day has no partition.
	record := func(i int, at time.Time) *dbsqlc.OutboxAttemptRecordParams {
		require.NoError(t, e.partitions.Ensure(ctx, nil, "wharf_outbox_attempts", time.Now()))
		p, err := e.attemptParams(&attemptRecord{
			row: loaded[i+1], slot: slots[i], attemptedAt: at, status: outboxtype.StatusSucceeded,
			out: &outcome{Outcome: &egress.Outcome{StatusCode: 204, Duration: time.Millisecond}},
		})
		require.NoError(t, err)
		return p
	}
	now := time.Now()
	params := []*dbsqlc.OutboxAttemptRecordParams{record(0, now), record(1, now), record(2, now.AddDate(-30, 0, 0)), record(3, now)}
	params[3].Generation++ // a replay superseded this attempt's job
	outs, errs := e.recordMany(ctx, params)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NotNil(t, outs[0])
	require.NotNil(t, outs[1])
	require.ErrorContains(t, errs[2], "record attempt")
	require.ErrorIs(t, errs[3], pgx.ErrNoRows)

	statuses := map[uuid.UUID]string{}
	rows, err := pool.Query(ctx, `SELECT id, status FROM wharf_outbox_deliveries`)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		var status string
		require.NoError(t, rows.Scan(&id, &status))
		statuses[id] = status
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "succeeded", statuses[ids[0]])
	require.Equal(t, "succeeded", statuses[ids[1]])
	require.Equal(t, "pending", statuses[ids[2]], "its record failed")
	require.Equal(t, "pending", statuses[ids[3]], "not its generation")
	var attempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_attempts`).Scan(&attempts))
	require.Equal(t, 2, attempts)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now() AND delivery_id IS NOT NULL`).Scan(&held))
	require.Equal(t, 1, held, "the recorded attempts gave their slots back; the failed one still holds its slot")

	// Successes only, of distinct deliveries: one statement for all. The
	// endpoint was failing with its circuit open; the successes close it
	// (reported by one attempt), and the superseded attempt records
	// nothing.
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_endpoints SET consecutive_failures = 3, failing_since = now(),
		circuit_state = 'open', circuit_opened_at = now(), circuit_open_until = now(), circuit_openings = 1 WHERE id = $1`, eps[0])
	require.NoError(t, err)
	params = []*dbsqlc.OutboxAttemptRecordParams{record(2, now), record(3, now), record(4, now)}
	params[2].Generation++
	require.True(t, allSucceeded(params, []int{0, 1, 2}))
	outs, errs = e.recordMany(ctx, params)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], pgx.ErrNoRows)
	require.Equal(t, int32(1), outs[0].Attempts)
	require.True(t, outs[0].CircuitClosed != outs[1].CircuitClosed, "one attempt reports the circuit closed")
	var state string
	var failures int
	require.NoError(t, pool.QueryRow(ctx, `SELECT circuit_state, consecutive_failures FROM wharf_outbox_endpoints WHERE id = $1`, eps[0]).Scan(&state, &failures))
	require.Equal(t, "closed", state)
	require.Zero(t, failures)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_attempts`).Scan(&attempts))
	require.Equal(t, 4, attempts)
	var succeeded int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'succeeded' AND attempts = 1 AND last_error = ''`).Scan(&succeeded))
	require.Equal(t, 4, succeeded)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now() AND delivery_id IS NOT NULL`).Scan(&held))
	require.Zero(t, held, "every recorded attempt gave its slot back")
}

// combineSetup seeds an endpoint of each stored cap (0: none) and events
// events, each delivered to every endpoint, and returns the engine, its
// pool, the endpoints and the deliveries as loaded.
func combineSetup(t *testing.T, caps []int32, events int) (*Engine, *pgxpool.Pool, []uuid.UUID, []*outboxtype.Delivery) {
	ctx := context.Background()
	pool := testdb.New(t)
	e := testEngine(t, pool)
	eps, ids := outboxtest.Seed(t, pool, caps, events)
	loaded, errs := e.loadMany(ctx, ids)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, e.partitions.Ensure(ctx, nil, "wharf_outbox_attempts", time.Now()))
	return e, pool, eps, loaded
}

// testEngine is an engine on pool with every default, private networks
// allowed and no logs.
func testEngine(t testing.TB, pool *pgxpool.Pool) *Engine {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys, err := secretbox.New(nil)
	require.NoError(t, err)
	e, err := New(pool, &Config{
		Logger:    quiet,
		Keys:      keys,
		Egress:    egress.New(&egress.Config{AllowPrivateNetworks: true}),
		Admission: admission.New(pool, &admission.Config{Logger: quiet}),
	})
	require.NoError(t, err)
	return e
}

func combineParams(t *testing.T, e *Engine, row *outboxtype.Delivery, slot int32, ok bool) *dbsqlc.OutboxAttemptRecordParams {
	out := &outcome{Outcome: &egress.Outcome{StatusCode: 204, Duration: time.Millisecond}}
	status := outboxtype.StatusSucceeded
	var next *time.Time
	if !ok {
		out = &outcome{Outcome: &egress.Outcome{StatusCode: 500, Duration: time.Millisecond}}
		status = outboxtype.StatusRetrying
		n := time.Now().Add(time.Minute)
		next = &n
	}
	p, err := e.attemptParams(&attemptRecord{row: row, slot: slot, attemptedAt: time.Now(), status: status, out: out, nextAttemptAt: next})
	require.NoError(t, err)
	return p
}

func waitLocked(t *testing.T, pool *pgxpool.Pool, n int) {
	require.Eventually(t, func() bool {
		var c int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&c))
		return c >= n
	}, 10*time.Second, 10*time.Millisecond)
}

// TestRecordBatchLocksSlotsInOrder: a record batch releases its endpoint's
// lease rows in slot order, as OutboxLeaseAcquireCounted locks them (in
// delivery order the two deadlocked, found by review).
func TestRecordBatchLocksSlotsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, eps, rows := combineSetup(t, []int32{4}, 3)
	require.Len(t, rows, 3)
	require.NoError(t, e.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: eps[0], LastSlot: 3}))
	sort.Slice(rows[:2], func(i, j int) bool { return bytes.Compare(rows[i].ID[:], rows[j].ID[:]) < 0 })
	first, second, third := rows[0], rows[1], rows[2]
	// first holds slot 3, second slot 1.
	_, err := pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = $2, expires_at = now() + interval '1 hour' WHERE endpoint_id = $1 AND slot = 3`, eps[0], first.ID)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE wharf_outbox_leases SET delivery_id = $2, expires_at = now() + interval '1 hour' WHERE endpoint_id = $1 AND slot = 1`, eps[0], second.ID)
	require.NoError(t, err)
	var deadlocks0 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks0))

	// Something holds the second delivery's row for a moment (its own
	// record elsewhere, a replay...), so that the batch pauses between
	// its two statements.
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SELECT 1 FROM wharf_outbox_deliveries WHERE id = $1 FOR UPDATE`, second.ID)
	require.NoError(t, err)

	type res struct{ errs []error }
	batchDone := make(chan res, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		_, errs := e.recordMany(bctx, []*dbsqlc.OutboxAttemptRecordParams{combineParams(t, e, first, 3, true), combineParams(t, e, second, 1, true)})
		batchDone <- res{errs}
	}()
	waitLocked(t, pool, 1)
	countedDone := make(chan error, 1)
	go func() {
		_, err := e.queries.OutboxLeaseAcquireCounted(ctx, dbsqlc.OutboxLeaseAcquireCountedParams{EndpointID: eps[0], DeliveryID: third.ID, LeaseSeconds: 60})
		countedDone <- err
	}()
	// The batch holds none of the endpoint's slots while it waits for a
	// delivery, so the counted acquisition, which locks every slot, goes
	// through (locking slot 3 before slot 1, the batch held slot 3 as it
	// waited, and the two deadlocked once the delivery was free).
	var cerr error
	select {
	case cerr = <-countedDone:
	case <-time.After(recordTimeout / 2): // the batch gives up after recordTimeout, freeing what it held
		_ = holder.Rollback(ctx)
		<-batchDone
		t.Fatal("OutboxLeaseAcquireCounted waited for a slot the record batch held")
	}
	require.NoError(t, holder.Commit(ctx))
	r := <-batchDone
	var deadlocks1 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocks1))
	require.NoError(t, cerr)
	for _, err := range r.errs {
		require.NoError(t, err)
	}
	require.Zero(t, deadlocks1-deadlocks0, "deadlock between a record batch and OutboxLeaseAcquireCounted")
}

// TestRecordBatchOneEndpointEach: an application transaction that updates
// endpoint B, then A, does not deadlock with recording attempts of A and B
// together (one transaction held A's row while it waited for B's, found by
// review): each endpoint's attempts are recorded in a transaction of their
// own.
func TestRecordBatchOneEndpointEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, eps, rows := combineSetup(t, []int32{10, 10}, 1) // EndpointCreate's default cap
	byEP := map[uuid.UUID]*outboxtype.Delivery{}
	for _, r := range rows {
		byEP[r.EndpointID] = r
	}
	lo, hi := eps[0], eps[1]
	if bytes.Compare(lo[:], hi[:]) > 0 {
		lo, hi = hi, lo
	}
	var d0, d1 int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&d0))
	app, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = dbsqlc.New(app).OutboxEndpointUpdate(ctx, dbsqlc.OutboxEndpointUpdateParams{ID: hi, Now: time.Now()})
	require.NoError(t, err)
	batchDone := make(chan []error, 1)
	go func() {
		bctx, cancel := context.WithTimeout(ctx, recordTimeout)
		defer cancel()
		_, errs := e.recordMany(bctx, []*dbsqlc.OutboxAttemptRecordParams{combineParams(t, e, byEP[lo], admission.NoSlot, false), combineParams(t, e, byEP[hi], admission.NoSlot, false)})
		batchDone <- errs
	}()
	waitLocked(t, pool, 1)
	_, appErr := dbsqlc.New(app).OutboxEndpointUpdate(ctx, dbsqlc.OutboxEndpointUpdateParams{ID: lo, Now: time.Now()})
	_ = app.Rollback(ctx)
	errs := <-batchDone
	require.NoError(t, pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&d1))
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, appErr)
	require.Zero(t, d1-d0)
}

// TestRecordCombinerPerEndpoint: while endpoint B's row is locked (an
// application's transaction updating it), B's attempt waits, and an
// attempt of endpoint A recorded meanwhile is not held behind it (one
// batch of both kept A waiting, and failing, for as long: found by
// review).
func TestRecordCombinerPerEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, pool, eps, rows := combineSetup(t, []int32{10, 10}, 1) // EndpointCreate's default cap
	byEP := map[uuid.UUID]*outboxtype.Delivery{}
	for _, r := range rows {
		byEP[r.EndpointID] = r
	}
	a, b := byEP[eps[0]], byEP[eps[1]]
	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = locker.Exec(ctx, `SELECT 1 FROM wharf_outbox_endpoints WHERE id = $1 FOR UPDATE`, b.EndpointID)
	require.NoError(t, err)

	bDone := make(chan error, 1)
	go func() {
		p := combineParams(t, e, b, admission.NoSlot, false)
		_, err := e.records.Do(ctx, p.EndpointID, p)
		bDone <- err
	}()
	waitLocked(t, pool, 1)
	p := combineParams(t, e, a, admission.NoSlot, false)
	_, err = e.records.Do(ctx, p.EndpointID, p)
	require.NoError(t, err)
	select {
	case err := <-bDone:
		t.Fatalf("B's record ended while its endpoint was locked: %v", err)
	default:
	}
	require.NoError(t, locker.Rollback(ctx))
	require.NoError(t, <-bDone)
	var attempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_attempts`).Scan(&attempts))
	require.Equal(t, 2, attempts)
}
