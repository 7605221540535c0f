package outbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
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

// TestPublishWritesItsJobs: one event's delivery jobs are written by the
// publish statement as River's insert writes them, and the insert
// notification wakes a worker that would otherwise wait a minute for its
// poll.
func TestPublishWritesItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WakesAWorker", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startClient(t, bundle.pool, bundle.outbox, func(cfg *river.Config) { cfg.FetchPollInterval = time.Minute })
		// The first is delivered by River's first fetch or by a
		// notification; once it is, only a notification (or the minute's
		// poll) starts the second's job.
		first := bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 1}})
		bundle.awaitDelivery(t, ep.ID, first[0].EventID, outbox.StatusSucceeded)
		started := time.Now()
		second := bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 2}})
		bundle.awaitDelivery(t, ep.ID, second[0].EventID, outbox.StatusSucceeded)
		require.Less(t, time.Since(started), 20*time.Second, "delivered before the poll")

		// Back to back, most within the interval of the one before: those
		// that do not notify in their own transaction are covered by a
		// notification sent on its own.
		started = time.Now()
		var burst []*outbox.PublishResult
		for i := range 5 {
			burst = append(burst, bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 10 + i}})...)
		}
		for _, res := range burst {
			bundle.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
		}
		require.Less(t, time.Since(started), 20*time.Second, "delivered before the poll")
	})

	t.Run("WakesAWorkerForALateCommit", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t, testConfig())
		receiver := okSink(t)
		ep := bundle.endpoint(t, receiver.URL(), nil)
		startClient(t, bundle.pool, bundle.outbox, func(cfg *river.Config) { cfg.FetchPollInterval = time.Minute })
		warm := bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 1}})
		bundle.awaitDelivery(t, ep.ID, warm[0].EventID, outbox.StatusSucceeded)

		txA, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(ctx) }()
		txB, err := bundle.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = txB.Rollback(ctx) }()
		// Sent back to back: the first notifies in its transaction, the
		// second does not.
		a, err := bundle.outbox.PublishTx(ctx, txA, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 2}})
		require.NoError(t, err)
		b, err := bundle.outbox.PublishTx(ctx, txB, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 3}})
		require.NoError(t, err)
		require.NoError(t, txA.Commit(ctx))
		// The second's transaction does other work before it commits: the
		// notification an interval after its publish has gone by then.
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, txB.Commit(ctx))
		started := time.Now()
		bundle.awaitDelivery(t, ep.ID, a.EventID, outbox.StatusSucceeded)
		bundle.awaitDelivery(t, ep.ID, b.EventID, outbox.StatusSucceeded)
		require.Less(t, time.Since(started), 20*time.Second, "delivered before the poll")
	})

	t.Run("AsRiverWritesThem", func(t *testing.T) {
		t.Parallel()
		// A job each: PublishManyTx's jobs are River's insert's.
		bundle := setup(t, singleJobConfig())
		bundle.endpoint(t, okSink(t).URL(), nil)
		bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 1}})
		inline := jobRows(t, bundle)
		require.Len(t, inline, 1)
		bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 2}},
			&outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 3}})
		all := jobRows(t, bundle)
		require.Len(t, all, 3)
		for _, river := range all[1:] {
			require.Equal(t, river, inline[0])
		}
	})

	t.Run("FirstAttemptLaterIsScheduled", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.RetrySchedule = []time.Duration{time.Hour, time.Minute}
		bundle := setup(t, cfg)
		bundle.endpoint(t, okSink(t).URL(), nil)
		bundle.publish(t, &outbox.Event{Type: "invoice.paid", Data: map[string]int{"amount": 1}})
		var state string
		var in time.Duration
		require.NoError(t, bundle.pool.QueryRow(ctx,
			"SELECT state::text, scheduled_at - now() FROM river_job").Scan(&state, &in))
		require.Equal(t, "scheduled", state)
		require.InDelta(t, time.Hour.Seconds(), in.Seconds(), 60)
	})
}

// jobRows returns what River's insert sets of each job, in id order, with
// whether its args name a stored delivery.
func jobRows(t *testing.T, bundle *testBundle) []string {
	t.Helper()
	rows, err := bundle.pool.Query(context.Background(), `
		SELECT concat_ws(' ', j.kind, j.queue, j.state, j.attempt, j.max_attempts, j.priority, j.tags::text,
		                 j.metadata::text, j.unique_key IS NULL, j.unique_states IS NULL, j.errors IS NULL,
		                 j.attempted_at IS NULL, j.finalized_at IS NULL, j.scheduled_at <= now(),
		                 j.created_at <= now(), d.id IS NOT NULL, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(j.args) k))
		FROM river_job j LEFT JOIN wharf_outbox_deliveries d ON d.id = (j.args->>'delivery_id')::uuid
		ORDER BY j.id`)
	require.NoError(t, err)
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return jobs
}
