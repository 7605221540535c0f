package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
)

// publish publishes n events of type typ through the node, in one
// transaction.
func (n *node) publish(tb testing.TB, count int, typ string) {
	tb.Helper()
	ctx := context.Background()
	events := make([]*outbox.Event, count)
	for i := range events {
		events[i] = &outbox.Event{Type: typ, Data: map[string]int{"n": i}}
	}
	require.NoError(tb, pgx.BeginFunc(ctx, n.pool, func(tx pgx.Tx) error {
		_, err := n.outbox.PublishManyTx(ctx, tx, events)
		return err
	}))
}

// BenchmarkRateLimitAccuracy measures how well an endpoint's rate limit
// holds across two worker nodes (each its own pool, outbox and River
// client: 20 workers, 2 ms fetch cooldown) under a backlog: a limit of
// WHARF_BENCH_RATE requests per second (default 10) with a burst of
// WHARF_BENCH_BURST (default 5), and rate·WHARF_BENCH_RATE_SECONDS
// (default 60) events beyond the burst published at once to a loopback
// sink. Once with a 20 ms River fetch poll, once with River's default of
// 1 s. Reported: the rate achieved after the burst, the most requests in
// any one-second window against rate+burst, the most by which any stretch
// exceeds the bucket (requests), and River runs per delivery (each
// snooze is a run), as BENCH lines too.
func BenchmarkRateLimitAccuracy(b *testing.B) {
	perSecond := loadtest.EnvFloat("WHARF_BENCH_RATE", 10)
	burst := loadtest.EnvInt("WHARF_BENCH_BURST", 5)
	seconds := loadtest.EnvInt("WHARF_BENCH_RATE_SECONDS", 60)
	for _, poll := range []time.Duration{20 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprintf("poll=%s", poll), func(b *testing.B) {
			ctx := context.Background()
			events := int(perSecond*float64(seconds)) + burst
			var achieved, excess float64
			var mostPerSecond, runs int
			for b.Loop() {
				url := testdb.NewURL(b)
				cfg := benchConfig()
				cfg.BusyRetryDelay = 0 // the default
				a := startNodePolling(b, url, "a", cfg, poll)
				startNodePolling(b, url, "b", cfg, poll)
				s := okSink(b)
				_, err := a.outbox.EndpointCreate(ctx, &outbox.EndpointParams{
					URL: s.URL(), RateLimit: &outbox.RateLimit{PerSecond: perSecond, Burst: burst},
				})
				require.NoError(b, err)
				a.publish(b, events, "bench.rate")
				deadline := time.Now().Add(time.Duration(float64(events)/perSecond*float64(time.Second)) + time.Minute)
				for len(s.all()) < events {
					require.True(b, time.Now().Before(deadline), "deliveries stopped: %d of %d", len(s.all()), events)
					select {
					case <-s.arrived:
					case <-time.After(time.Second):
					}
				}
				at := s.arrivals()
				require.Len(b, at, events, "one request per delivery")
				achieved = float64(events-burst) / at[len(at)-1].Sub(at[0]).Seconds()
				mostPerSecond = maxPerSecond(at)
				excess = excessOverLimit(at, perSecond, burst)
				require.NoError(b, a.pool.QueryRow(ctx, `
					SELECT COALESCE(sum(1 + COALESCE((metadata->>'snoozes')::int, 0)), 0) FROM river_job WHERE kind = $1`,
					outbox.DeliveryKind).Scan(&runs))
			}
			runsPerDelivery := float64(runs) / float64(events)
			b.ReportMetric(achieved, "achieved/s")
			b.ReportMetric(float64(mostPerSecond), "max_in_1s")
			b.ReportMetric(excess, "max_excess")
			b.ReportMetric(runsPerDelivery, "runs/delivery")
			b.ReportMetric(0, "ns/op")
			name := fmt.Sprintf("outbox_rate_limit_poll_%dms", poll.Milliseconds())
			loadtest.Bench(name+"_achieved_per_s_vs_limit", achieved, perSecond)
			loadtest.Bench(name+"_max_in_1s_vs_limit_plus_burst", float64(mostPerSecond), perSecond+float64(burst))
			loadtest.Bench(name+"_max_excess_requests_vs_burst", excess, float64(burst))
			loadtest.Bench(name+"_river_runs_per_delivery", runsPerDelivery, 1)
		})
	}
}

// startNodePolling is startNode with River's FetchPollInterval set to
// poll.
func startNodePolling(tb testing.TB, url, name string, cfg *outbox.Config, poll time.Duration) *node {
	tb.Helper()
	return startNodeWith(tb, url, name, cfg, func(rc *river.Config) { rc.FetchPollInterval = poll })
}

// BenchmarkCircuitRecovery measures how soon deliveries resume once a
// failing endpoint recovers, across two worker nodes with a backlog of 200
// deliveries: the circuit (threshold 10, cool-down and maximum
// WHARF_BENCH_COOLDOWN_MS, default 1000) is open and its probes failing
// when the sink turns healthy at a random moment of a cool-down. Measured
// over 5 recoveries: the time from the sink turning healthy to the first
// success (at most a cool-down, by design), from the end of the cool-down
// to the first success (the probe's own delay: wake-up jitter of up to
// 25% and River's), and to the whole backlog delivered. BENCH lines
// compare the means with the cool-down.
func BenchmarkCircuitRecovery(b *testing.B) {
	const rounds, backlog = 5, 200
	cooldown := time.Duration(loadtest.EnvInt("WHARF_BENCH_COOLDOWN_MS", 1000)) * time.Millisecond
	ctx := context.Background()
	var toFirst, fromOpenUntil, toAll []time.Duration
	for b.Loop() {
		url := testdb.NewURL(b)
		cfg := benchConfig()
		cfg.RetrySchedule = slices.Repeat([]time.Duration{10 * time.Millisecond}, 50)
		cfg.CircuitBreakerThreshold = 10
		cfg.CircuitBreakerCooldown = cooldown
		cfg.CircuitBreakerMaxCooldown = cooldown
		cfg.BusyRetryDelay = 0 // the default
		var healthy atomic.Bool
		s := newSink(b, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if healthy.Load() {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		a := startNode(b, url, "a", cfg)
		startNode(b, url, "b", cfg)
		ep, err := a.outbox.EndpointCreate(ctx, &outbox.EndpointParams{URL: s.URL()})
		require.NoError(b, err)
		for round := range rounds {
			healthy.Store(false)
			a.publish(b, backlog, fmt.Sprintf("bench.circuit.%d", round))
			require.Eventually(b, func() bool {
				got, err := a.outbox.EndpointGet(ctx, ep.ID)
				require.NoError(b, err)
				return got.CircuitState == outbox.CircuitOpen && got.CircuitOpenings >= 2
			}, time.Minute, time.Millisecond, "the circuit opened and a probe failed")
			// Turn healthy somewhere in the cool-down.
			time.Sleep(time.Duration(float64(cooldown) * float64(round+1) / (rounds + 1))) // the recovery moment is the variable
			healthy.Store(true)
			healthyAt := time.Now()
			got, err := a.outbox.EndpointGet(ctx, ep.ID)
			require.NoError(b, err)
			openUntil := got.CircuitOpenUntil
			require.Eventually(b, func() bool {
				list, err := a.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &ep.ID, Status: outbox.StatusSucceeded, Limit: 10000})
				require.NoError(b, err)
				return len(list) == backlog*(round+1)
			}, time.Minute, 5*time.Millisecond)
			var successes []time.Time
			for _, r := range s.all() {
				if r.At.After(healthyAt) {
					successes = append(successes, r.At)
				}
			}
			allDone := time.Now()
			slices.SortFunc(successes, time.Time.Compare)
			toFirst = append(toFirst, successes[0].Sub(healthyAt))
			if openUntil != nil {
				fromOpenUntil = append(fromOpenUntil, successes[0].Sub(*openUntil))
			}
			toAll = append(toAll, allDone.Sub(healthyAt))
		}
	}
	mean := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return loadtest.Ms(sum / time.Duration(max(len(ds), 1)))
	}
	b.ReportMetric(mean(toFirst), "ms_to_first_success")
	b.ReportMetric(loadtest.Ms(slices.Max(toFirst)), "max_ms_to_first_success")
	b.ReportMetric(mean(fromOpenUntil), "ms_after_cooldown")
	b.ReportMetric(mean(toAll), "ms_to_backlog_delivered")
	b.ReportMetric(0, "ns/op")
	ms := loadtest.Ms(cooldown)
	loadtest.Bench("outbox_circuit_recovery_ms_to_first_success_vs_cooldown", mean(toFirst), ms)
	loadtest.Bench("outbox_circuit_recovery_ms_after_cooldown_vs_cooldown", mean(fromOpenUntil), ms)
	loadtest.Bench("outbox_circuit_recovery_ms_to_200_delivered_vs_cooldown", mean(toAll), ms)
}
