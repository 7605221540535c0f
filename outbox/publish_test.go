package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

func TestPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RolledBackSendsNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)

		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		rolledBack, err := bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "balance.updated", Data: map[string]int{"balance": 1}})
		require.NoError(t, err)
		require.Equal(t, 1, rolledBack.Deliveries)
		require.NoError(t, tx.Rollback(ctx))

		startRiver(t, bundle.pool, bundle.outbox)
		marker := bundle.publish(t, &outbox.Event{Type: "balance.updated", Data: map[string]int{"balance": 2}})
		bundle.awaitDelivery(t, ep.ID, marker[0].EventID, outbox.StatusSucceeded)

		require.Equal(t, map[string]int{marker[0].EventID: 1}, receiver.byWebhookID())
		var events, jobs int
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events").Scan(&events))
		require.NoError(t, bundle.pool.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&jobs))
		require.Equal(t, 1, events)
		require.Equal(t, 1, jobs)
	})

	t.Run("CommittedDeliveredOncePerMatchingEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		exact, wildcard, all, other, disabled, tenant := okSink(t), okSink(t), okSink(t), okSink(t), okSink(t), okSink(t)
		matching := map[*sink]*outbox.EndpointWithSecret{
			exact:    bundle.endpoint(t, exact.URL(), &outbox.EndpointParams{EventTypes: []string{"invoice.paid"}}),
			wildcard: bundle.endpoint(t, wildcard.URL(), &outbox.EndpointParams{EventTypes: []string{"user.created", "invoice.*"}}),
			all:      bundle.endpoint(t, all.URL(), nil),
		}
		bundle.endpoint(t, other.URL(), &outbox.EndpointParams{EventTypes: []string{"invoice.paid.late", "invoice", "user.*"}})
		off := bundle.endpoint(t, disabled.URL(), &outbox.EndpointParams{EventTypes: []string{"invoice.paid"}})
		_, err := bundle.outbox.EndpointDisable(ctx, off.ID, "test")
		require.NoError(t, err)
		bundle.endpoint(t, tenant.URL(), &outbox.EndpointParams{EventTypes: []string{"*"}, Tenant: "acme"})
		startRiver(t, bundle.pool, bundle.outbox)

		res := bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: json.RawMessage(`{"amount": 42, "note": "<b>&</b>"}`)})
		require.Equal(t, 3, res[0].Deliveries)
		require.True(t, strings.HasPrefix(res[0].EventID, outbox.EventIDPrefix))
		for _, ep := range matching {
			bundle.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		}

		for receiver, ep := range matching {
			got := receiver.all()
			require.Len(t, got, 1)
			require.Equal(t, res[0].EventID, got[0].Header.Get("webhook-id"))
			require.Equal(t, "application/json", got[0].Header.Get("Content-Type"))
			typ, data := envelopeOf(t, got[0].Body)
			require.Equal(t, "invoice.paid", typ)
			require.JSONEq(t, `{"amount": 42, "note": "<b>&</b>"}`, string(data))
			require.Contains(t, string(got[0].Body), `"<b>&</b>"`, "data is sent without HTML escaping")

			require.NoError(t, got[0].verifyWith(ep.Secret))
			otherSecret, err := outbox.NewSecret()
			require.NoError(t, err)
			require.ErrorIs(t, got[0].verifyWith(otherSecret), signature.ErrNoMatch)
		}
		for _, silent := range []*sink{other, disabled, tenant} {
			require.Empty(t, silent.all())
		}
	})

	t.Run("ManyInOneCall", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), &outbox.EndpointParams{EventTypes: []string{"a.*"}})

		results := bundle.publish(t,
			&outbox.Event{Type: "a.one", Data: 1},
			&outbox.Event{Type: "b.two", Data: 2},
			&outbox.Event{Type: "a.three", Data: 3},
		)
		require.Len(t, results, 3)
		require.Equal(t, []int{1, 0, 1}, []int{results[0].Deliveries, results[1].Deliveries, results[2].Deliveries})
		require.Less(t, results[0].EventID, results[2].EventID, "event ids sort by publication")

		startRiver(t, bundle.pool, bundle.outbox)
		bundle.awaitDelivery(t, ep.ID, results[0].EventID, outbox.StatusSucceeded)
		bundle.awaitDelivery(t, ep.ID, results[2].EventID, outbox.StatusSucceeded)
		require.Equal(t, map[string]int{results[0].EventID: 1, results[2].EventID: 1}, receiver.byWebhookID())
	})

	t.Run("BadEventIsRefusedAndTransactionStaysUsable", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.MaxPayloadBytes = 1024
		bundle := setup(t, cfg)
		bundle.endpoint(t, okSink(t).URL(), nil)

		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck

		_, err = bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "big", Data: strings.Repeat("x", 1024)})
		require.ErrorIs(t, err, outbox.ErrPayloadTooLarge)
		require.Contains(t, err.Error(), "limit is 1024")

		for _, bad := range []*outbox.Event{
			nil,
			{Type: ""},
			{Type: "has space"},
			{Type: "wild.*"},
			{Type: strings.Repeat("t", 257)},
			{Type: "ok", Data: json.RawMessage(`{not json`)},
			{Type: "ok", Data: make(chan int)},
			{Type: "ok", Tenant: strings.Repeat("t", 257)},
		} {
			_, err := bundle.outbox.PublishTx(ctx, tx, bad)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent, "event %+v", bad)
		}
		_, err = bundle.outbox.PublishManyTx(ctx, tx, []*outbox.Event{{Type: "fine"}, {Type: ""}})
		require.ErrorIs(t, err, outbox.ErrInvalidEvent)
		require.Contains(t, err.Error(), "events[1]")

		// The refusals touched nothing: the transaction still works and
		// holds no event.
		var events int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM wharf_outbox_events").Scan(&events))
		require.Zero(t, events)
		res, err := bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "fine", Data: nil})
		require.NoError(t, err)
		require.Equal(t, 1, res.Deliveries)
	})

	t.Run("InvalidTextIsRefusedAndTransactionStaysUsable", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		ep := bundle.endpoint(t, okSink(t).URL(), nil)

		tx, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck

		// Postgres refuses NUL and invalid UTF-8 in text: had any of these
		// reached it, it would have aborted tx.
		for name, bad := range map[string]*outbox.Event{
			"type with NUL":              {Type: "a\x00b"},
			"invalid UTF-8 type":         {Type: "a\xffb"},
			"ordering key with NUL":      {Type: "ok", OrderingKey: "key\x00"},
			"invalid UTF-8 ordering key": {Type: "ok", OrderingKey: "key\xc3"},
			"tenant with NUL":            {Type: "ok", Tenant: "acme\x00"},
			"invalid UTF-8 tenant":       {Type: "ok", Tenant: "\xfe\xffacme"},
			"overlong ordering key":      {Type: "ok", OrderingKey: strings.Repeat("k", 257)},
		} {
			_, err := bundle.outbox.PublishTx(ctx, tx, bad)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent, name)
			_, err = bundle.outbox.PublishManyTx(ctx, tx, []*outbox.Event{{Type: "fine"}, bad})
			require.ErrorIs(t, err, outbox.ErrInvalidEvent, name)
			require.Contains(t, err.Error(), "events[1]", name)
		}

		// The transaction is intact: a later statement in it succeeds, and
		// it commits what that statement wrote, and nothing else.
		res, err := bundle.outbox.PublishTx(ctx, tx, &outbox.Event{Type: "fine", OrderingKey: "ключ", Tenant: ""})
		require.NoError(t, err)
		require.Equal(t, 1, res.Deliveries)
		require.NoError(t, tx.Commit(ctx))
		list, err := bundle.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &ep.ID})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, res.EventID, list[0].EventID)
	})

	t.Run("NilTransaction", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		_, err := bundle.outbox.PublishTx(ctx, nil, &outbox.Event{Type: "x"})
		require.Error(t, err)
	})
}
