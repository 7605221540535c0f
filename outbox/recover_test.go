package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// An endpoint re-enabled after a while recovers the events it missed,
// exactly those its filter and tenant take, once each, however often
// recover runs; they are delivered.
func TestEndpointRecoverCreatesMissedDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())
	receiver := newSink(t, status(http.StatusNoContent))
	ep := b.endpoint(t, receiver.URL(), &outbox.EndpointParams{EventTypes: []string{"order.*"}})
	since := time.Now().Add(-time.Minute)

	before := b.publish(t, &outbox.Event{Type: "order.created", Data: map[string]int{"n": 1}})
	_, err := b.outbox.EndpointDisable(ctx, ep.ID, "maintenance")
	require.NoError(t, err)
	missed := b.publish(t,
		&outbox.Event{Type: "order.paid", Data: map[string]int{"n": 2}},
		&outbox.Event{Type: "invoice.paid", Data: map[string]int{"n": 3}},               // not its filter
		&outbox.Event{Type: "order.paid", Tenant: "acme", Data: map[string]int{"n": 4}}, // another tenant
		&outbox.Event{Type: "order.shipped", Data: map[string]int{"n": 5}})
	require.Zero(t, missed[0].Deliveries, "disabled: nothing was created")

	_, err = b.outbox.EndpointRecover(ctx, ep.ID, since)
	require.ErrorIs(t, err, outbox.ErrEndpointDisabled)
	_, err = b.outbox.EndpointRecover(ctx, uuid.New(), since)
	require.ErrorIs(t, err, outbox.ErrNotFound)

	_, err = b.outbox.EndpointEnable(ctx, ep.ID)
	require.NoError(t, err)
	_, err = b.outbox.EndpointRecover(ctx, ep.ID, time.Time{})
	require.ErrorContains(t, err, "since is required")
	n, err := b.outbox.EndpointRecover(ctx, ep.ID, since)
	require.NoError(t, err)
	require.Equal(t, 2, n, "order.paid and order.shipped of its tenant")
	n, err = b.outbox.EndpointRecover(ctx, ep.ID, since)
	require.NoError(t, err)
	require.Zero(t, n, "idempotent")

	startRiver(t, b.pool, b.outbox)
	for _, id := range []string{before[0].EventID, missed[0].EventID, missed[3].EventID} {
		b.awaitDelivery(t, ep.ID, id, outbox.StatusSucceeded)
	}
	sent := receiver.byWebhookID()
	require.Len(t, sent, 3)
	for id, count := range sent {
		require.Equal(t, 1, count, id)
	}

	// Events before since are left alone.
	_, err = b.outbox.EndpointDisable(ctx, ep.ID, "again")
	require.NoError(t, err)
	b.publish(t, &outbox.Event{Type: "order.old", Data: map[string]int{}})
	_, err = b.outbox.EndpointEnable(ctx, ep.ID)
	require.NoError(t, err)
	n, err = b.outbox.EndpointRecover(ctx, ep.ID, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Zero(t, n)
}

// Recovery walks a large backlog in batches, each event once; in the
// caller's transaction it is all or nothing.
func TestEndpointRecoverBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())
	ep := b.endpoint(t, "http://127.0.0.1:9/never", nil)
	_, err := b.outbox.EndpointDisable(ctx, ep.ID, "")
	require.NoError(t, err)
	events := make([]*outbox.Event, 2345)
	for i := range events {
		events[i] = &outbox.Event{Type: "bulk", Data: map[string]string{"i": fmt.Sprint(i)}}
	}
	b.publish(t, events...)
	_, err = b.outbox.EndpointEnable(ctx, ep.ID)
	require.NoError(t, err)
	since := time.Now().Add(-time.Hour)

	// Rolled back: nothing.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	n, err := b.outbox.EndpointRecoverTx(ctx, tx, ep.ID, since)
	require.NoError(t, err)
	require.Equal(t, len(events), n)
	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, countDeliveries(t, b, ep.ID))

	n, err = b.outbox.EndpointRecover(ctx, ep.ID, since)
	require.NoError(t, err)
	require.Equal(t, len(events), n)
	require.Equal(t, len(events), countDeliveries(t, b, ep.ID))
	var distinct, inJobs, distinctInJobs, largest int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM wharf_outbox_deliveries WHERE endpoint_id = $1`, ep.ID).Scan(&distinct))
	require.Equal(t, len(events), distinct)
	require.NoError(t, b.pool.QueryRow(ctx, `
		SELECT count(*), count(DISTINCT id) FROM (
			SELECT args->>'delivery_id' AS id FROM river_job WHERE kind = $1
			UNION ALL
			SELECT jsonb_array_elements(args->'deliveries')->>'delivery_id' FROM river_job WHERE kind = $2) jobs`,
		outbox.DeliveryKind, outbox.DeliveryBatchKind).Scan(&inJobs, &distinctInJobs))
	require.Equal(t, len(events), inJobs, "one job per recovered delivery")
	require.Equal(t, len(events), distinctInJobs, "one job per recovered delivery")
	var batches int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), max(jsonb_array_length(args->'deliveries')) FROM river_job WHERE kind = $1`,
		outbox.DeliveryBatchKind).Scan(&batches, &largest))
	require.Equal(t, 63, largest, "batch jobs of up to DeliveryBatchSize (64): 1,000 in 16")
	require.Equal(t, 16+16+10, batches, "1,000, 1,000, then 345 over the endpoint's cap of 10 jobs")
}

func countDeliveries(t *testing.T, b *testBundle, endpointID uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), `SELECT count(*) FROM wharf_outbox_deliveries WHERE endpoint_id = $1`, endpointID).Scan(&n)
	}))
	return n
}
