package outbox_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// TestRedrive: a redrive sends again, across endpoints, the dead
// deliveries its filter selects (a tenant, a type pattern, a range of
// status codes, a time window), a batch per transaction with an audit
// entry each; a dry run counts them and changes nothing; the others stay
// dead.
func TestRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	var healed atomic.Bool
	answer := func(code int) func(int, http.ResponseWriter, *http.Request) {
		return func(_ int, w http.ResponseWriter, _ *http.Request) {
			if healed.Load() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(code)
		}
	}
	acme5xx := bundle.endpoint(t, newSink(t, answer(503)).URL(), &outbox.EndpointParams{Tenant: "acme"})
	acme4xx := bundle.endpoint(t, newSink(t, answer(422)).URL(), &outbox.EndpointParams{Tenant: "acme"})
	globex := bundle.endpoint(t, newSink(t, answer(500)).URL(), &outbox.EndpointParams{Tenant: "globex"})
	startRiver(t, bundle.pool, bundle.outbox)

	since := time.Now().Add(-time.Second)
	var events []*outbox.Event
	for _, tenant := range []string{"acme", "globex"} {
		for _, typ := range []string{"invoice.paid", "invoice.voided", "user.created"} {
			events = append(events, &outbox.Event{Type: typ, Tenant: tenant, Data: map[string]string{"t": typ}})
		}
	}
	published := bundle.publish(t, events...)
	for i, res := range published {
		eps := []*outbox.EndpointWithSecret{acme5xx, acme4xx}
		if events[i].Tenant == "globex" {
			eps = []*outbox.EndpointWithSecret{globex}
		}
		for _, ep := range eps {
			bundle.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusDead)
		}
	}
	healed.Store(true)

	acme := "acme"
	params := &outbox.RedriveParams{Tenant: &acme, EventType: "invoice.*", MinStatusCode: 500, MaxStatusCode: 599, Since: since, BatchSize: 1, DryRun: true}
	dry, err := bundle.outbox.Redrive(ctx, params, nil)
	require.NoError(t, err)
	require.Equal(t, outbox.RedriveResult{Matched: 2, Batches: 2}, *dry, "acme's invoices answered 503")
	require.Equal(t, 9, countStatus(t, bundle, outbox.StatusDead), "a dry run changes nothing")

	params.DryRun = false
	var seen []outbox.RedriveResult
	res, err := bundle.outbox.Redrive(ctx, params, func(r outbox.RedriveResult) { seen = append(seen, r) })
	require.NoError(t, err)
	require.Equal(t, outbox.RedriveResult{Matched: 2, Replayed: 2, Batches: 2}, *res)
	require.Len(t, seen, 2, "progress after each batch")
	require.Equal(t, 1, seen[0].Replayed)
	for _, i := range []int{0, 1} {
		bundle.awaitDelivery(t, acme5xx.ID, published[i].EventID, outbox.StatusSucceeded)
	}
	require.Equal(t, 7, countStatus(t, bundle, outbox.StatusDead), "the others stay dead")
	var batches int
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_audit_log WHERE action = 'delivery.redrive' AND tenant = 'acme'").Scan(&batches))
	require.Equal(t, 2, batches, "an audit entry per batch")

	again, err := bundle.outbox.Redrive(ctx, params, nil)
	require.NoError(t, err)
	require.Zero(t, again.Matched, "succeeded now: not dead any more")

	for name, bad := range map[string]*outbox.RedriveParams{
		"status":  {Status: outbox.StatusPending},
		"type":    {EventType: "in voice"},
		"codes":   {MinStatusCode: 599, MaxStatusCode: 500},
		"window":  {Since: time.Now().Add(time.Hour)},
		"batch":   {BatchSize: 20000},
		"codes 2": {MinStatusCode: 500},
	} {
		_, err := bundle.outbox.Redrive(ctx, bad, nil)
		require.ErrorIs(t, err, outbox.ErrInvalidRedrive, name)
	}

	unknown := uuid.New()
	_, err = bundle.outbox.Redrive(ctx, &outbox.RedriveParams{EndpointID: &unknown}, nil)
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = bundle.outbox.Redrive(ctx, &outbox.RedriveParams{Tenant: &acme, EndpointID: &globex.ID}, nil)
	require.ErrorIs(t, err, outbox.ErrNotFound, "another tenant's endpoint")
	_, err = bundle.outbox.EndpointDisable(ctx, globex.ID, "test")
	require.NoError(t, err)
	_, err = bundle.outbox.Redrive(ctx, &outbox.RedriveParams{EndpointID: &globex.ID}, nil)
	require.ErrorIs(t, err, outbox.ErrEndpointDisabled)
	all, err := bundle.outbox.Redrive(ctx, &outbox.RedriveParams{DryRun: true}, nil)
	require.NoError(t, err)
	require.Equal(t, 4, all.Matched, "acme's other dead deliveries; not the disabled endpoint's")
}

// countStatus counts the deliveries in status.
func countStatus(t *testing.T, b *testBundle, status outbox.DeliveryStatus) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM wharf_outbox_deliveries WHERE status = $1", status).Scan(&n))
	return n
}
