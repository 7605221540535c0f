package outbox_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// TestPublishAndDeliverThroughPgBouncer: everything the outbox does at run
// time, through PgBouncer in transaction mode in pgx's exec and
// simple_protocol modes: endpoints, PublishManyTx in the caller's
// transaction, a replay refused while the delivery's job waits (which looks
// the job up by its args), signed delivery by a poll-only River client with
// retries, dead letters, and the replay of a dead delivery.
func TestPublishAndDeliverThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := testdb.NewPooled(t, mode)
			ob, err := outbox.New(pool, testConfig())
			require.NoError(t, err)
			b := &testBundle{pool: pool, outbox: ob}

			// The first attempt of each event fails: deliveries retry.
			var healthy atomic.Bool
			healthy.Store(true)
			var seen sync.Map // webhook-id → struct{}
			receiver := newSink(t, func(n int, w http.ResponseWriter, r *http.Request) {
				_, again := seen.LoadOrStore(r.Header.Get(signature.HeaderWebhookID), struct{}{})
				if !again || !healthy.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusNoContent)
			})
			ep := b.endpoint(t, receiver.URL(), nil)
			verifier := signature.NewStandardWebhooks(signature.Secrets{ep.Secret}, nil)

			const events = 10
			batch := make([]*outbox.Event, events)
			for i := range batch {
				batch[i] = &outbox.Event{Type: "balance.updated", Data: map[string]any{"n": i}}
			}
			published := b.publish(t, batch...)
			require.Len(t, published, events)

			// No worker yet: the first delivery's job waits, so a replay is
			// refused after looking the job up.
			first := b.onlyDelivery(t, published[0].EventID)
			require.ErrorIs(t, ob.DeliveryReplay(ctx, first.ID), outbox.ErrDeliveryInProgress)

			startPooledRiver(t, pool, ob)
			for _, res := range published {
				d := b.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
				require.Equal(t, 2, d.Attempts, "one failure, then success")
				attempts, err := ob.AttemptList(ctx, d.ID)
				require.NoError(t, err)
				require.Len(t, attempts, 2)
			}
			delivered := map[string]int{}
			for _, r := range receiver.all() {
				require.NoError(t, verifier.Verify(ctx, &signature.Request{Method: http.MethodPost, Header: r.Header, Body: r.Body}),
					"every attempt is signed")
				delivered[r.Header.Get(signature.HeaderWebhookID)]++
			}
			require.Len(t, delivered, events)
			for id, n := range delivered {
				require.Equal(t, 2, n, id)
			}

			// Dead letter, then replay once the endpoint is healthy again.
			healthy.Store(false)
			res := b.publish(t, &outbox.Event{Type: "balance.updated"})
			dead := b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusDead)
			require.Equal(t, len(testConfig().RetrySchedule), dead.Attempts)
			healthy.Store(true)
			require.NoError(t, ob.DeliveryReplay(ctx, dead.ID))
			b.awaitDelivery(t, ep.ID, res[0].EventID, outbox.StatusSucceeded)
		})
	}
}

// startPooledRiver is startRiver for a pool through PgBouncer in
// transaction mode: River in poll-only mode (LISTEN does not survive
// transaction pooling).
func startPooledRiver(t *testing.T, pool *pgxpool.Pool, ob *outbox.Outbox) {
	t.Helper()
	startClient(t, pool, ob, func(cfg *river.Config) { cfg.PollOnly = true })
}

// TestLimitsThroughPgBouncer: the rate limit (with and without a
// concurrency cap) and the circuit breaker's statements work through
// PgBouncer in transaction mode, in pgx's exec and simple_protocol modes.
func TestLimitsThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, _ := testdb.NewPooled(t, mode)
			metrics := telemetrytest.NewMetrics(t)
			cfg := testConfig()
			cfg.MeterProvider = metrics.Provider
			cfg.CircuitBreakerThreshold = 2
			cfg.RetrySchedule = []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
			ob, err := outbox.New(pool, cfg)
			require.NoError(t, err)
			b := &testBundle{pool: pool, outbox: ob}
			limit := &outbox.RateLimit{PerSecond: 50, Burst: 2}
			capped := b.endpoint(t, okSink(t).URL(), &outbox.EndpointParams{EventTypes: []string{"limited"}, RateLimit: limit})
			uncapped := b.endpoint(t, okSink(t).URL(), &outbox.EndpointParams{EventTypes: []string{"limited"}, RateLimit: limit,
				MaxInFlight: outbox.NoMaxInFlight})
			flaky := b.endpoint(t, newSink(t, failFirst(3)).URL(), &outbox.EndpointParams{EventTypes: []string{"flaky"}})
			startPooledRiver(t, pool, ob)

			limited := b.publish(t, &outbox.Event{Type: "limited"}, &outbox.Event{Type: "limited"}, &outbox.Event{Type: "limited"},
				&outbox.Event{Type: "limited"}, &outbox.Event{Type: "limited"})
			flakyEvents := b.publish(t, &outbox.Event{Type: "flaky"}, &outbox.Event{Type: "flaky"})
			for _, res := range limited {
				for _, ep := range []*outbox.EndpointWithSecret{capped, uncapped} {
					d := b.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
					require.Equal(t, 1, d.Attempts)
				}
			}
			for _, res := range flakyEvents {
				b.awaitDelivery(t, flaky.ID, res.EventID, outbox.StatusSucceeded)
			}
			got, err := ob.EndpointGet(ctx, flaky.ID)
			require.NoError(t, err)
			require.Equal(t, outbox.CircuitClosed, got.CircuitState, "closed by a probe")
			openings := telemetrytest.SumBy(t, metrics.Collect(t)["wharf_outbox_circuit_openings"], "endpoint_id")
			require.Positive(t, openings[flaky.ID.String()], "opened by the failures")
		})
	}
}
