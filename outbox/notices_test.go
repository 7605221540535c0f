package outbox_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// types lists the event types a sink received, in order.
func (s *sink) types(t *testing.T) []string {
	var out []string
	for _, r := range s.all() {
		typ, _ := envelopeOf(t, r.Body)
		out = append(out, typ)
	}
	return out
}

// awaitTypes waits until s received every type of want (in any order) and
// returns what it received.
func (s *sink) awaitTypes(t *testing.T, want ...string) []string {
	t.Helper()
	var got []string
	require.Eventually(t, func() bool {
		got = s.types(t)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	}, awaitTimeout, 10*time.Millisecond, "want %v", want)
	return got
}

// Operational events: a change to an endpoint or a delivery's death is
// published, with the endpoint's tenant, to the endpoints that name the
// type or a "wharf." prefix of it, and to no other; the application cannot
// publish them; each is published once.
func TestOperationalEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bundle := setup(t, testConfig())
	watch, all, star, theirs, gone := okSink(t), okSink(t), okSink(t), okSink(t), newSink(t, status(http.StatusGone))
	watchEP := bundle.endpoint(t, watch.URL(), &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"wharf.*"}})
	bundle.endpoint(t, all.URL(), &outbox.EndpointParams{Tenant: "acme"})
	bundle.endpoint(t, star.URL(), &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"*"}})
	bundle.endpoint(t, theirs.URL(), &outbox.EndpointParams{Tenant: "globex", EventTypes: []string{"wharf.*"}})
	goneEP := bundle.endpoint(t, gone.URL(), &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"invoice.paid"}})
	startRiver(t, bundle.pool, bundle.outbox)

	// The 410 disables the endpoint and kills the delivery: two notices.
	res := bundle.publish(t, &outbox.Event{Type: "invoice.paid", Tenant: "acme", Data: map[string]int{"cents": 5}})
	bundle.awaitDelivery(t, goneEP.ID, res[0].EventID, outbox.StatusDead)
	watch.awaitTypes(t, outbox.EventEndpointDisabled, outbox.EventDeliveryDead)
	for _, r := range watch.all() {
		typ, data := envelopeOf(t, r.Body)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(data, &fields))
		require.Equal(t, goneEP.ID.String(), fields["endpoint_id"], typ)
		require.NotEmpty(t, fields["at"], typ)
		if typ == outbox.EventDeliveryDead {
			require.Equal(t, res[0].EventID, fields["event_id"])
			require.Equal(t, "invoice.paid", fields["event_type"])
		}
		require.NoError(t, r.verifyWith(watchEP.Secret))
	}

	// Changes made by hand are told too, in their transaction.
	_, err := bundle.outbox.EndpointEnable(ctx, goneEP.ID)
	require.NoError(t, err)
	_, err = bundle.outbox.EndpointRotateSecret(ctx, watchEP.ID, nil)
	require.NoError(t, err)
	tx, err := bundle.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = bundle.outbox.EndpointDisableTx(ctx, tx, goneEP.ID, "rolled back")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	got := watch.awaitTypes(t, outbox.EventEndpointEnabled, outbox.EventSecretRotated)
	require.ElementsMatch(t, []string{outbox.EventEndpointDisabled, outbox.EventDeliveryDead,
		outbox.EventEndpointEnabled, outbox.EventSecretRotated}, got, "each once; the rolled-back disable tells nothing")

	// "*" and an empty filter get the application's events only; another
	// tenant's watcher gets nothing of acme's.
	require.Equal(t, []string{"invoice.paid"}, all.types(t))
	require.Equal(t, []string{"invoice.paid"}, star.types(t))
	require.Empty(t, theirs.all())
	// A notice nobody subscribes to is dropped, not stored as an event.
	lonely := bundle.endpoint(t, "https://lonely.example/hook", &outbox.EndpointParams{Tenant: "lonely"})
	_, err = bundle.outbox.EndpointDisable(ctx, lonely.ID, "no watcher")
	require.NoError(t, err)
	_, err = bundle.outbox.PublishNotices(ctx)
	require.NoError(t, err)
	var left, lonelyEvents, operational int
	// The job the disable asked for may hold the notice (SKIP LOCKED) while
	// the call above runs: wait for it to be done.
	require.Eventually(t, func() bool {
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_notices").Scan(&left))
		return left == 0
	}, awaitTimeout, 10*time.Millisecond)
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events WHERE tenant = 'lonely'").Scan(&lonelyEvents))
	require.Zero(t, lonelyEvents)
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events WHERE type LIKE 'wharf.%'").Scan(&operational))
	require.Equal(t, 4, operational)
	n, err := bundle.outbox.PublishNotices(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// Only the outbox publishes them.
	require.NoError(t, pgx.BeginFunc(ctx, bundle.pool, func(tx pgx.Tx) error {
		_, err := bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: outbox.EventEndpointDisabled, Tenant: "acme", Data: 1})
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		return nil
	}))
	cfg := testConfig()
	cfg.Catalog = &outbox.Catalog{Types: []outbox.EventType{{Name: "wharf.mine"}}}
	_, err = outbox.New(bundle.pool, cfg)
	require.ErrorIs(t, err, outbox.ErrInvalidConfig)
	names := map[string]bool{}
	for _, typ := range bundle.outbox.EventTypes() {
		names[typ.Name] = true
	}
	require.True(t, names[outbox.EventDeliveryDead], "the catalog lists them, for subscribers")
}

// The death of an operational event's delivery tells no one: an endpoint
// subscribed to wharf.delivery.dead that fails would feed itself.
func TestOperationalDeathTellsNoOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testConfig()
	cfg.CircuitBreakerThreshold = -1
	bundle := setup(t, cfg)
	failing := newSink(t, status(http.StatusInternalServerError))
	ep := bundle.endpoint(t, failing.URL(), &outbox.EndpointParams{Tenant: "acme", EventTypes: []string{"wharf.*"}})
	_, err := bundle.outbox.EndpointRotateSecret(ctx, ep.ID, nil)
	require.NoError(t, err)
	startRiver(t, bundle.pool, bundle.outbox)
	require.Eventually(t, func() bool {
		var dead int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_deliveries WHERE status = 'dead'").Scan(&dead))
		return dead == 1
	}, awaitTimeout, 10*time.Millisecond)
	n, err := bundle.outbox.PublishNotices(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	var events int
	require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events WHERE type = $1", outbox.EventDeliveryDead).Scan(&events))
	require.Zero(t, events)
}
