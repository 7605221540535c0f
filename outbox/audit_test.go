package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/outbox"
)

// Every change to an endpoint or a delivery writes one audit entry, in the
// change's transaction, naming the context's actor and never a secret.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	bundle := setup(t, testConfig())
	ctx := audit.WithActor(context.Background(), audit.Actor{Kind: audit.KindOperator, ID: "alice"})
	startRiver(t, bundle.pool, bundle.outbox)
	receiver := okSink(t)

	ep, err := bundle.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: receiver.URL() + "/hooks/sekrit123?token=abc", Tenant: "acme"})
	require.NoError(t, err)
	desc := "prod"
	_, err = bundle.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Description: &desc, EventTypes: []string{"a.*"}})
	require.NoError(t, err)
	_, err = bundle.outbox.EndpointDisable(ctx, ep.ID, "maintenance")
	require.NoError(t, err)
	_, err = bundle.outbox.EndpointEnable(ctx, ep.ID)
	require.NoError(t, err)
	rotated, err := bundle.outbox.EndpointRotateSecret(ctx, ep.ID, nil)
	require.NoError(t, err)
	res := bundle.publish(t, &outbox.Event{Type: "a.b", Tenant: "acme", Data: 1})
	d := bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
	require.NoError(t, bundle.outbox.DeliveryReplay(ctx, d.ID))
	_, err = bundle.outbox.EndpointRecover(ctx, ep.ID, time.Now().Add(-time.Hour))
	require.NoError(t, err)

	// A change rolled back leaves no entry.
	tx, err := bundle.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = bundle.outbox.EndpointDisableTx(ctx, tx, ep.ID, "rolled back")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	// Without an actor, the application acted.
	require.NoError(t, pgx.BeginFunc(ctx, bundle.pool, func(tx pgx.Tx) error {
		return bundle.outbox.EndpointDeleteTx(context.Background(), tx, ep.ID)
	}))

	entries, err := audit.List(ctx, bundle.pool, nil)
	require.NoError(t, err)
	var actions []string
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		actions = append(actions, e.Action)
		require.Equal(t, "acme", e.Tenant, e.Action)
		require.NotContains(t, string(e.Details), "whsec_", e.Action)
		require.NotContains(t, string(e.Details), rotated.Secret)
		require.NotContains(t, string(e.Details), "sekrit123", e.Action)
		require.NotContains(t, e.Reason, "rolled back")
	}
	require.Equal(t, []string{"endpoint.create", "endpoint.update", "endpoint.disable", "endpoint.enable",
		"endpoint.rotate_secret", "delivery.replay", "endpoint.recover", "endpoint.delete"}, actions)
	require.Equal(t, audit.Actor{Kind: audit.KindOperator, ID: "alice"}, entries[1].Actor)
	require.Equal(t, audit.Actor{Kind: audit.KindApp}, entries[0].Actor)
	require.Equal(t, "maintenance", entries[5].Reason)
	require.JSONEq(t, `{"fields":["description","event_types"]}`, string(entries[6].Details))
	var created struct{ URL string }
	require.NoError(t, json.Unmarshal(entries[7].Details, &created))
	require.True(t, strings.HasPrefix(created.URL, "http://127.0.0.1:"), created.URL)
	require.True(t, strings.HasSuffix(created.URL, "/hooks/…?…"), created.URL)

	// Paging and the tenant filter.
	page, err := audit.List(ctx, bundle.pool, &audit.ListParams{Limit: 3})
	require.NoError(t, err)
	require.Len(t, page, 3)
	rest, err := audit.List(ctx, bundle.pool, &audit.ListParams{After: audit.Cursor(page[2])})
	require.NoError(t, err)
	require.Len(t, rest, 5)
	other := "globex"
	none, err := audit.List(ctx, bundle.pool, &audit.ListParams{Tenant: &other})
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = audit.List(ctx, bundle.pool, &audit.ListParams{After: "nope"})
	require.ErrorIs(t, err, audit.ErrInvalidCursor)
}
