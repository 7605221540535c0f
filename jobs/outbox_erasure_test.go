package jobs_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
)

// TestOutboxErasureLeavesNoCopy: ForgetEvent and ForgetTenant leave a
// payload nowhere in the database (the event, the response an endpoint
// echoed it in, an operator's words about its delivery), stop the
// deliveries still to send, and keep the succeeded ones without a payload
// to replay.
func TestOutboxErasureLeavesNoCopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	const oneEvent, wholeTenant = "MARKER-event-4000056655665556", "MARKER-tenant-378282246310005"

	// One endpoint echoes what it gets; one fails, so its delivery retries.
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	}))
	t.Cleanup(echo.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(body)
	}))
	t.Cleanup(failing.Close)
	for _, tenant := range []string{"", "acme"} {
		for _, url := range []string{echo.URL, failing.URL} {
			_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: url, Tenant: tenant})
			require.NoError(t, err)
		}
	}
	b.startWorkers(t)

	publish := func(tenant, marker string) *outbox.PublishResult {
		var res *outbox.PublishResult
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "card.charged", Tenant: tenant, Data: map[string]string{"card": marker}})
			return err
		}))
		return res
	}
	event := publish("", oneEvent)
	publish("acme", wholeTenant)
	publish("acme", wholeTenant+"-2")
	b.awaitJobs(t, 6) // each delivery's first attempt

	// Audit entries whose words quote the payloads: about the event's
	// deliveries, and of the tenant.
	list, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: event.EventID})
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, d := range list {
		_, err := b.pool.Exec(ctx, `INSERT INTO wharf_audit_log (id, at, actor_kind, actor, tenant, action, object_type, object_id, reason, details)
			VALUES (gen_random_uuid(), now(), 'operator', 'ops', '', 'delivery.replay', 'delivery', $1, $2, jsonb_build_object('note', $2::text))`,
			d.ID.String(), "customer asked about "+oneEvent)
		require.NoError(t, err)
	}
	_, err = b.pool.Exec(ctx, `INSERT INTO wharf_audit_log (id, at, actor_kind, actor, tenant, action, object_type, object_id, reason, details)
		VALUES (gen_random_uuid(), now(), 'tenant', 'acme', 'acme', 'endpoint.update', 'endpoint', 'x', $1, '{}')`, "about "+wholeTenant)
	require.NoError(t, err)
	require.Len(t, findMarker(t, b.pool, oneEvent), 4, "the test's premise: the payload is stored, echoed, and quoted")

	erased, err := b.outbox.ForgetEvent(ctx, event.EventID)
	require.NoError(t, err)
	require.Equal(t, 1, erased.Events)
	require.Equal(t, 1, erased.Stopped, "the failing endpoint's retrying delivery")
	require.Positive(t, erased.Attempts)
	require.Empty(t, findMarker(t, b.pool, oneEvent), "after ForgetEvent")
	list, err = b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: event.EventID})
	require.NoError(t, err)
	require.Len(t, list, 1, "the succeeded delivery stays")
	require.ErrorIs(t, b.outbox.DeliveryReplay(ctx, list[0].ID), outbox.ErrEventGone, "nothing left to replay")

	require.NotEmpty(t, findMarker(t, b.pool, wholeTenant))
	erased, err = b.outbox.ForgetTenant(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, 2, erased.Events)
	require.Equal(t, 2, erased.Stopped)
	require.Empty(t, findMarker(t, b.pool, wholeTenant), "after ForgetTenant")

	_, err = b.outbox.ForgetEvent(ctx, "evt_0196b8a4-0000-7000-8000-000000000000")
	require.ErrorIs(t, err, outbox.ErrNotFound)
	_, err = b.outbox.ForgetTenant(ctx, "")
	require.True(t, errors.Is(err, outbox.ErrTenantRequired))
}
