package outbox_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// awaitCircuit waits until the endpoint's circuit is in state and returns
// the endpoint.
func (b *testBundle) awaitCircuit(t *testing.T, id uuid.UUID, state outbox.CircuitState) *outbox.Endpoint {
	t.Helper()
	var ep *outbox.Endpoint
	require.Eventually(t, func() bool {
		var err error
		ep, err = b.outbox.EndpointGet(context.Background(), id)
		require.NoError(t, err)
		return ep.CircuitState == state
	}, 15*time.Second, 5*time.Millisecond, "the circuit of %s never became %s", id, state)
	return ep
}

// circuitTestConfig is the outbox config of the circuit breaker's tests
// across nodes: the circuit opens after 3 consecutive failures, for 400 ms
// and then 800 ms, and a delivery has twelve attempts 10 ms apart.
func circuitTestConfig() *outbox.Config {
	cfg := testConfig()
	cfg.RetrySchedule = slices.Repeat([]time.Duration{10 * time.Millisecond}, 12)
	cfg.CircuitBreakerThreshold = 3
	cfg.CircuitBreakerCooldown = 400 * time.Millisecond
	cfg.CircuitBreakerMaxCooldown = 2 * cfg.CircuitBreakerCooldown
	return cfg
}

// The circuit breaker across two worker nodes in this process: a failing
// endpoint's circuit opens after the threshold of consecutive failures
// (visible in EndpointGet and the metrics); while it is open the queued
// deliveries wait without using attempts, and after each cool-down exactly
// one delivery probes, however many wait on either node; a failed probe
// opens it again, for twice as long (up to the maximum). Once the endpoint
// recovers, the next probe closes the circuit and everything is delivered.
func TestCircuitBreakerAcrossNodes(t *testing.T) {
	t.Parallel()
	testCircuitBreakerAcross(t, inOneProcess)
}

// TestCircuitBreakerAcrossNodes with each node a process of its own,
// sharing nothing but the database.
func TestCircuitBreakerAcrossProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs subprocesses")
	}
	testCircuitBreakerAcross(t, inTwoProcesses)
}

// testCircuitBreakerAcross runs the test of the circuit breaker across the
// nodes start starts (with circuitTestConfig).
func testCircuitBreakerAcross(t *testing.T, start workerNodes) {
	ctx := context.Background()
	const (
		events = 20
		late   = 10 // published once the circuit is open
		probes = 3  // failed probes before the endpoint recovers
	)
	cfg := circuitTestConfig()
	threshold, cooldown := cfg.CircuitBreakerThreshold, cfg.CircuitBreakerCooldown
	url := testdb.NewURL(t)

	// failed holds the numbers of the requests answered 503: a request
	// that arrived as the sink turned healthy was answered one way or the
	// other.
	var healthy atomic.Bool
	var failed sync.Map
	s := newSink(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if healthy.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		failed.Store(n, true)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	done := start(t, url, "circuit")
	// The gauges read the database: this outbox's show every node's.
	metrics := telemetrytest.NewMetrics(t)
	cfg.MeterProvider = metrics.Provider
	b := openBundle(t, url, cfg)
	ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{MaxInFlight: outbox.NoMaxInFlight})
	batch := make([]*outbox.Event, events)
	for i := range batch {
		batch[i] = &outbox.Event{Type: "circuit.test", Data: map[string]int{"n": i}}
	}
	published := b.publish(t, batch...)
	open := b.awaitCircuit(t, ep.ID, outbox.CircuitOpen)
	// Events published while it is open wait too.
	queued := b.publish(t, batch[:late]...)
	require.GreaterOrEqual(t, open.ConsecutiveFailures, threshold)
	require.Equal(t, 1, open.CircuitOpenings)
	require.NotNil(t, open.CircuitOpenedAt)
	require.NotNil(t, open.CircuitOpenUntil)
	require.WithinDuration(t, open.CircuitOpenedAt.Add(cooldown), *open.CircuitOpenUntil, time.Millisecond)
	data := metrics.Collect(t)
	require.Equal(t, int64(1), telemetrytest.GaugeBy(t, data["wharf_outbox_circuit_open"], "endpoint_id")[ep.ID.String()])

	// The attempts that were under way when it opened arrived long before
	// its cool-down ended; any request after that is a probe.
	isProbe := func(r received) bool { return !r.At.Before(open.CircuitOpenUntil.Add(-5 * time.Millisecond)) }
	require.Eventually(t, func() bool {
		n := 0
		for _, r := range s.all() {
			if isProbe(r) {
				n++
			}
		}
		return n >= probes
	}, 15*time.Second, 5*time.Millisecond)
	healthy.Store(true)
	healthyAt := time.Now()

	all := append(published, queued...)
	for _, res := range all {
		b.awaitDelivery(t, ep.ID, res.EventID, outbox.StatusSucceeded)
	}
	// The probes: those that failed, then the first success. Each came a
	// cool-down after the one before, whichever node sent it: one at a
	// time across both nodes, and nothing else while the circuit was open.
	var failedProbes, probesSent []received
	var firstSuccess time.Time
	for i, r := range s.all() {
		if _, ok := failed.Load(i + 1); !ok {
			if firstSuccess.IsZero() || r.At.Before(firstSuccess) {
				firstSuccess = r.At
			}
		} else if isProbe(r) {
			failedProbes = append(failedProbes, r)
		}
	}
	for _, r := range s.all() {
		if isProbe(r) && !r.At.After(firstSuccess) {
			probesSent = append(probesSent, r)
		}
	}
	slices.SortFunc(probesSent, func(a, b received) int { return a.At.Compare(b.At) })
	require.GreaterOrEqual(t, len(failedProbes), probes)
	require.Len(t, probesSent, len(failedProbes)+1, "the failed probes and the one that closed the circuit")
	probeNodes := []string{probesSent[0].Header.Get(nodeHeader)}
	for i := 1; i < len(probesSent); i++ {
		gap := probesSent[i].At.Sub(probesSent[i-1].At)
		require.GreaterOrEqual(t, gap, cooldown, "one probe per cool-down, across both nodes (probe %d came %s after the one before)", i, gap)
		probeNodes = append(probeNodes, probesSent[i].Header.Get(nodeHeader))
	}
	t.Logf("probes sent by nodes %v", probeNodes)
	recovery := firstSuccess.Sub(healthyAt)
	t.Logf("recovery: first success %s after the endpoint became healthy (cool-down at most %s)", recovery, 2*cooldown)
	require.Less(t, recovery, 2*cooldown+2*time.Second, "the next probe after the cool-down closes it")

	closed := b.awaitCircuit(t, ep.ID, outbox.CircuitClosed)
	require.Zero(t, closed.CircuitOpenings)
	require.Nil(t, closed.CircuitOpenUntil)
	require.Zero(t, closed.ConsecutiveFailures)

	// Attempts are requests. Without the breaker each delivery would have
	// used its twelve attempts, 10 ms apart, and died long before the
	// endpoint recovered; with it they waited without using attempts, and
	// those published while it was open went at their first attempt
	// (unless one was a probe).
	sent := map[string]int{}
	for _, r := range s.all() {
		sent[r.Header.Get(signature.HeaderWebhookID)]++
	}
	total, lateFirstTry := 0, 0
	for i, res := range all {
		d, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EventID: res.EventID})
		require.NoError(t, err)
		require.Len(t, d, 1)
		require.Equal(t, sent[res.EventID], d[0].Attempts, "every attempt is a request, every request an attempt")
		total += d[0].Attempts
		if i >= events && d[0].Attempts == 1 {
			lateFirstTry++
		}
	}
	require.Len(t, s.all(), total)
	byNode := s.byNode()
	require.Positive(t, byNode["a"], "node a sent some")
	require.Positive(t, byNode["b"], "node b sent some")
	require.GreaterOrEqual(t, lateFirstTry, late-len(failedProbes))
	t.Logf("%d requests for %d deliveries, %d failed probes", total, len(all), len(failedProbes))

	data = metrics.Collect(t)
	require.Equal(t, int64(0), telemetrytest.GaugeBy(t, data["wharf_outbox_circuit_open"], "endpoint_id")[ep.ID.String()])
	counted := done()
	// The first opening and one per failed probe (a request sent before the
	// circuit opened and answered while it was half-open would reopen it
	// in the probe's stead).
	require.Equal(t, int64(1+len(failedProbes)), counted.Openings[ep.ID.String()])
	require.Positive(t, counted.Deferred["circuit_open"])
}

// The breaker leaves endpoint disabling alone: probes that keep failing
// for DisableAfter disable the endpoint, a probe answered 410 Gone does
// at once, and EndpointEnable closes the circuit. With the breaker
// disabled (-1) the circuit never opens.
func TestCircuitBreakerAndDisabling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DisableAfter", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.RetrySchedule = slices.Repeat([]time.Duration{10 * time.Millisecond}, 10)
		cfg.CircuitBreakerThreshold = 2
		var offset atomic.Int64
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
		b := setup(t, cfg)
		s := newSink(t, status(http.StatusInternalServerError))
		ep := b.endpoint(t, s.URL(), nil)
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"})
		b.awaitCircuit(t, ep.ID, outbox.CircuitOpen)

		// Five days and an hour later, the next probe fails too.
		offset.Store(int64(outbox.DefaultDisableAfter + time.Hour))
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
			require.Equal(t, "endpoint disabled", d.LastError)
		}
		got, err := b.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.False(t, got.Enabled)
		require.Contains(t, got.DisabledReason, "every attempt failed for longer")

		enabled, err := b.outbox.EndpointEnable(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, outbox.CircuitClosed, enabled.CircuitState, "enabling closes the circuit")
		require.Nil(t, enabled.CircuitOpenUntil)
		require.Zero(t, enabled.CircuitOpenings)
	})

	t.Run("GoneProbe", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.RetrySchedule = slices.Repeat([]time.Duration{10 * time.Millisecond}, 10)
		cfg.CircuitBreakerThreshold = 2
		b := setup(t, cfg)
		var gone atomic.Bool
		s := newSink(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if gone.Load() {
				w.WriteHeader(http.StatusGone)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		})
		ep := b.endpoint(t, s.URL(), &outbox.EndpointParams{MaxInFlight: 1})
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"})
		b.awaitCircuit(t, ep.ID, outbox.CircuitOpen)
		gone.Store(true)
		for _, r := range res {
			b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
		}
		got, err := b.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.False(t, got.Enabled)
		require.Contains(t, got.DisabledReason, "410")
	})

	t.Run("BreakerDisabled", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig()
		cfg.CircuitBreakerThreshold = -1
		b := setup(t, cfg)
		s := newSink(t, status(http.StatusServiceUnavailable))
		ep := b.endpoint(t, s.URL(), nil)
		startRiver(t, b.pool, b.outbox)
		res := b.publish(t, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"}, &outbox.Event{Type: "x"})
		for _, r := range res {
			d := b.awaitDelivery(t, ep.ID, r.EventID, outbox.StatusDead)
			require.Equal(t, 4, d.Attempts, "every scheduled attempt is made")
		}
		got, err := b.outbox.EndpointGet(ctx, ep.ID)
		require.NoError(t, err)
		require.Equal(t, outbox.CircuitClosed, got.CircuitState)
		require.Equal(t, 12, got.ConsecutiveFailures)
	})
}

// Bad breaker settings are refused.
func TestCircuitBreakerConfig(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	for _, cfg := range []*outbox.Config{
		{CircuitBreakerThreshold: -2},
		{CircuitBreakerCooldown: -time.Second},
		{CircuitBreakerCooldown: time.Minute, CircuitBreakerMaxCooldown: time.Second},
	} {
		_, err := outbox.New(pool, cfg)
		require.ErrorIs(t, err, outbox.ErrInvalidConfig, "%+v", cfg)
	}
	_, err := outbox.New(pool, &outbox.Config{CircuitBreakerCooldown: time.Hour})
	require.NoError(t, err, "the maximum defaults to the cool-down when that is longer")
}
