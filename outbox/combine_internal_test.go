package outbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/dbsqlc"
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
	for _, mode := range append([]string{"direct"}, testdb.Modes...) {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool := testdb.New(t)
			if mode != "direct" {
				pool, _ = testdb.NewPooled(t, mode)
			}
			testCombinedStatements(t, pool)
		})
	}
}

func testCombinedStatements(t *testing.T, pool *pgxpool.Pool) {
	ctx := context.Background()
	o, err := New(pool, &Config{AllowPrivateNetworks: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ep, err := o.EndpointCreate(ctx, &EndpointParams{URL: "https://example.com/hook", MaxInFlight: 3})
	require.NoError(t, err)
	events := make([]*Event, 5)
	for i := range events {
		events[i] = &Event{Type: "combined.test", Data: json.RawMessage(`{}`)}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := o.PublishManyTx(ctx, tx, events)
		return err
	}))
	var ids []uuid.UUID
	rows, err := pool.Query(ctx, `SELECT id FROM wharf_outbox_deliveries ORDER BY seq`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Len(t, ids, 5)

	// Load.
	missing := uuid.New()
	loaded, errs := o.loadMany(ctx, append([]uuid.UUID{missing}, ids...))
	require.ErrorIs(t, errs[0], pgx.ErrNoRows)
	require.Nil(t, loaded[0])
	for i, id := range ids {
		require.NoError(t, errs[i+1])
		require.Equal(t, id, loaded[i+1].ID)
		require.Equal(t, ep.ID, loaded[i+1].EndpointID)
	}

	// Lease: the slots exist once the single-delivery path created them.
	require.NoError(t, o.queries.OutboxLeaseSlotsCreate(ctx, dbsqlc.OutboxLeaseSlotsCreateParams{EndpointID: ep.ID, LastSlot: 2}))
	asks := make([]leaseAsk, len(ids))
	for i, id := range ids {
		asks[i] = leaseAsk{endpointID: ep.ID, deliveryID: id, seconds: 60}
	}
	slots, errs := o.leaseMany(ctx, asks)
	require.Nil(t, errs)
	require.ElementsMatch(t, []int32{0, 1, 2, noLease, noLease}, slots, "three slots under the cap of 3, then none")
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM wharf_outbox_leases WHERE expires_at > now() AND delivery_id IS NOT NULL`).Scan(&held))
	require.Equal(t, 3, held)

	// Record: four attempts in one batch; the third's day has no partition.
	record := func(i int, at time.Time) *dbsqlc.OutboxAttemptRecordParams {
		require.NoError(t, o.partitions.Ensure(ctx, nil, attemptsTable, time.Now()))
		p, err := o.attemptParams(&attemptRecord{
			row: loaded[i+1], slot: slots[i], attemptedAt: at, status: StatusSucceeded,
			out: &sendOutcome{statusCode: 204, duration: time.Millisecond},
		})
		require.NoError(t, err)
		return p
	}
	now := time.Now()
	params := []*dbsqlc.OutboxAttemptRecordParams{record(0, now), record(1, now), record(2, now.AddDate(-30, 0, 0)), record(3, now)}
	params[3].Generation++ // a replay superseded this attempt's job
	outs, errs := o.recordMany(ctx, params)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NotNil(t, outs[0])
	require.NotNil(t, outs[1])
	require.ErrorContains(t, errs[2], "record attempt")
	require.ErrorIs(t, errs[3], pgx.ErrNoRows)

	statuses := map[uuid.UUID]string{}
	rows, err = pool.Query(ctx, `SELECT id, status FROM wharf_outbox_deliveries`)
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
}
