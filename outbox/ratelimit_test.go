package outbox_test

import (
	"context"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// nodeHeader names the worker node that sent a request, set by each test
// node's transport.
const nodeHeader = "X-Test-Node"

// node is one worker process of a multi-node test: its own pool, outbox
// and River client on the shared database.
type node struct {
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
}

// startNode starts a worker node on the database at url with cfg (copied),
// whose requests carry nodeHeader: name.
func startNode(tb testing.TB, url, name string, cfg *outbox.Config) *node {
	tb.Helper()
	return startNodeWith(tb, url, name, cfg, nil)
}

// startNodeWith is startNode with tune, when not nil, changing the River
// config of the node's client.
func startNodeWith(tb testing.TB, url, name string, cfg *outbox.Config, tune func(*river.Config)) *node {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	own := *cfg
	own.WrapTransport = func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set(nodeHeader, name)
			return next.RoundTrip(r)
		})
	}
	ob, err := outbox.New(pool, &own)
	require.NoError(tb, err)
	workers := river.NewWorkers()
	require.NoError(tb, ob.AddWorkers(workers))
	riverCfg := riverConfig(ob, workers, 20)
	if tune != nil {
		tune(riverCfg)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), riverCfg)
	require.NoError(tb, err)
	require.NoError(tb, client.Start(context.Background()))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(tb, client.Stop(ctx))
	})
	return &node{pool: pool, outbox: ob}
}

// arrivals returns the sink's request times, in order.
func (s *sink) arrivals() []time.Time {
	var at []time.Time
	for _, r := range s.all() {
		at = append(at, r.At)
	}
	slices.SortFunc(at, time.Time.Compare)
	return at
}

// excessOverLimit returns by how many requests the busiest stretch of at
// (sorted) exceeds what a token bucket of burst refilled at perSecond
// allows: for every i ≤ j, j-i+1 requests in at[j]-at[i] may be at most
// burst + perSecond·(at[j]-at[i]). 0 or less means the limit held.
func excessOverLimit(at []time.Time, perSecond float64, burst int) float64 {
	worst := math.Inf(-1)
	for i := range at {
		for j := i; j < len(at); j++ {
			allowed := float64(burst) + perSecond*at[j].Sub(at[i]).Seconds()
			worst = max(worst, float64(j-i+1)-allowed)
		}
	}
	return worst
}

// maxPerSecond returns the most requests of at (sorted) in any one-second
// window.
func maxPerSecond(at []time.Time) int {
	most := 0
	for i := range at {
		n, _ := slices.BinarySearchFunc(at, at[i].Add(time.Second), time.Time.Compare)
		most = max(most, n-i)
	}
	return most
}

// The rate limit holds across two worker nodes (each its own pool, outbox
// and River client) delivering to one endpoint: arrivals never exceed the
// bucket (burst, then the rate) in any stretch of time, both nodes send,
// and waiting for a token uses no attempt. Once with a concurrency cap
// (token and slot taken in one statement) and once without.
func TestRateLimitAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxInFlight int
	}{{"Capped", 0}, {"Uncapped", outbox.NoMaxInFlight}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const (
				perSecond = 20
				burst     = 5
				events    = 60
			)
			url := testdb.NewURL(t)
			metrics := telemetrytest.NewMetrics(t)
			cfg := testConfig()
			cfg.MeterProvider = metrics.Provider
			a := startNode(t, url, "a", cfg)
			startNode(t, url, "b", cfg)
			bundle := &testBundle{pool: a.pool, outbox: a.outbox}
			s := okSink(t)
			ep := bundle.endpoint(t, s.URL(), &outbox.EndpointParams{
				MaxInFlight: tc.maxInFlight,
				RateLimit:   &outbox.RateLimit{PerSecond: perSecond, Burst: burst},
			})

			batch := make([]*outbox.Event, events)
			for i := range batch {
				batch[i] = &outbox.Event{Type: "rate.test", Data: map[string]int{"n": i}}
			}
			published := bundle.publish(t, batch...)
			for _, res := range published {
				d := bundle.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
				require.Equal(t, 1, d.Attempts, "waiting for a token uses no attempt")
			}

			at := s.arrivals()
			require.Len(t, at, events)
			// Two requests of slack: a request reaches the sink a little
			// after its token is due, and not always as little (measured
			// here: within 0.15 requests' worth, up to 1.7 under the race
			// detector's slowdown on two CPUs).
			require.LessOrEqual(t, excessOverLimit(at, perSecond, burst), 2.0, "the bucket held in every stretch")
			span := at[len(at)-1].Sub(at[0])
			minSpan := time.Duration(float64(events-burst-1) / perSecond * float64(time.Second))
			require.GreaterOrEqual(t, span, minSpan, "%d requests after a burst of %d take at least that long", events, burst)
			require.LessOrEqual(t, maxPerSecond(at), perSecond+burst+1, "the rate and the burst in any second, and the slack")
			t.Logf("%d deliveries in %s: %.1f/s after the burst, at most %d in a second, excess %.2f",
				events, span.Round(time.Millisecond), float64(events-burst)/span.Seconds(), maxPerSecond(at), excessOverLimit(at, perSecond, burst))

			byNode := map[string]int{}
			for _, r := range s.all() {
				byNode[r.Header.Get(nodeHeader)]++
			}
			require.Positive(t, byNode["a"], "node a sent some")
			require.Positive(t, byNode["b"], "node b sent some")

			// Every job completed on its first attempt, snoozed or not
			// (River records completions in batches, after the delivery).
			var jobs, snoozed, maxAttempt int
			require.Eventually(t, func() bool {
				require.NoError(t, a.pool.QueryRow(ctx, `
					SELECT count(*), count(*) FILTER (WHERE (metadata->>'snoozes')::int > 0), COALESCE(max(attempt), 0)
					FROM river_job WHERE kind = $1 AND state = 'completed'`, outbox.DeliveryKind).Scan(&jobs, &snoozed, &maxAttempt))
				return jobs == events
			}, 10*time.Second, 10*time.Millisecond)
			require.Positive(t, snoozed, "deliveries waited for tokens")
			require.Equal(t, 1, maxAttempt, "snoozes give their River attempt back")
			deferred := telemetrytest.SumBy(t, metrics.Collect(t)["wharf_outbox_deferred"], "reason")
			require.Positive(t, deferred["rate_limit"], "rate-limited runs are counted")
		})
	}
}

// An endpoint's rate limit is set at creation, read back, changed, removed
// and ensured; bad limits are refused before any statement.
func TestEndpointRateLimitParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, testConfig())

	plain := b.endpoint(t, "https://plain.example/hook", nil)
	require.Nil(t, plain.RateLimit, "no limit unless asked")
	require.Equal(t, outbox.CircuitClosed, plain.CircuitState)
	require.Nil(t, plain.CircuitOpenUntil)

	ep := b.endpoint(t, "https://limited.example/hook", &outbox.EndpointParams{RateLimit: &outbox.RateLimit{PerSecond: 0.5}})
	require.Equal(t, &outbox.RateLimit{PerSecond: 0.5, Burst: 1}, ep.RateLimit, "burst defaults to 1")
	got, err := b.outbox.EndpointGet(ctx, ep.ID)
	require.NoError(t, err)
	require.Equal(t, ep.RateLimit, got.RateLimit)
	require.Equal(t, "0.5/s burst 1", got.RateLimit.String())

	updated, err := b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{RateLimit: &outbox.RateLimit{PerSecond: 100, Burst: 20}})
	require.NoError(t, err)
	require.Equal(t, &outbox.RateLimit{PerSecond: 100, Burst: 20}, updated.RateLimit)
	updated, err = b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{Description: new(string)})
	require.NoError(t, err)
	require.Equal(t, &outbox.RateLimit{PerSecond: 100, Burst: 20}, updated.RateLimit, "nil leaves it")
	updated, err = b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{RateLimit: &outbox.RateLimit{}})
	require.NoError(t, err)
	require.Nil(t, updated.RateLimit, "the zero RateLimit removes it")

	ensured, err := b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "https://limited.example/hook", RateLimit: &outbox.RateLimit{PerSecond: 5, Burst: 10}})
	require.NoError(t, err)
	require.True(t, ensured.Updated)
	require.Equal(t, &outbox.RateLimit{PerSecond: 5, Burst: 10}, ensured.RateLimit)
	ensured, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "https://limited.example/hook", RateLimit: &outbox.RateLimit{PerSecond: 5, Burst: 10}})
	require.NoError(t, err)
	require.False(t, ensured.Updated, "the same limit changes nothing")
	ensured, err = b.outbox.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "https://limited.example/hook"})
	require.NoError(t, err)
	require.True(t, ensured.Updated)
	require.Nil(t, ensured.RateLimit, "ensuring without one removes it")

	for _, bad := range []outbox.RateLimit{
		{PerSecond: -1}, {PerSecond: math.NaN()}, {PerSecond: math.Inf(1)}, {PerSecond: 2e6},
		{Burst: 5}, {PerSecond: 1, Burst: -1}, {PerSecond: 1, Burst: 2e6},
	} {
		_, err := b.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://bad.example/hook", RateLimit: &bad})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, "%+v", bad)
		_, err = b.outbox.EndpointUpdate(ctx, ep.ID, &outbox.EndpointUpdateParams{RateLimit: &bad})
		require.ErrorIs(t, err, outbox.ErrInvalidEndpoint, "%+v", bad)
	}
}
