package outbox_test

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/outbox"
)

// Attempts are counted by outcome, events as published, and the database
// gauges show what is pending and dead per endpoint.
func TestDeliveryMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	metrics := telemetrytest.NewMetrics(t)
	cfg := testConfig()
	cfg.MeterProvider = metrics.Provider
	var hookMu sync.Mutex
	var deadHooks []outbox.DeadDelivery
	var disabledHooks []outbox.DisabledEndpoint
	cfg.OnDead = func(_ context.Context, d outbox.DeadDelivery) {
		hookMu.Lock()
		defer hookMu.Unlock()
		deadHooks = append(deadHooks, d)
	}
	cfg.OnEndpointDisabled = func(_ context.Context, e outbox.DisabledEndpoint) {
		hookMu.Lock()
		defer hookMu.Unlock()
		disabledHooks = append(disabledHooks, e)
	}
	b := setup(t, cfg)
	ok := newSink(t, status(http.StatusNoContent))
	failing := newSink(t, status(http.StatusServiceUnavailable))
	good := b.endpoint(t, ok.URL(), &outbox.EndpointParams{EventTypes: []string{"good"}})
	bad := b.endpoint(t, failing.URL(), &outbox.EndpointParams{EventTypes: []string{"bad"}})

	b.publish(t, &outbox.Event{Type: "good", Data: map[string]int{}}, &outbox.Event{Type: "good", Data: map[string]int{}},
		&outbox.Event{Type: "bad", Data: map[string]int{}})
	startRiver(t, b.pool, b.outbox)
	res := b.publish(t, &outbox.Event{Type: "good", Data: map[string]int{}})
	b.awaitDelivery(t, good.ID, res[0].EventID, outbox.StatusSucceeded)
	// The failing endpoint's delivery runs its four attempts (10 ms apart) and dies.
	require.Eventually(t, func() bool {
		list, err := b.outbox.DeliveryList(ctx, &outbox.DeliveryListParams{EndpointID: &bad.ID})
		require.NoError(t, err)
		return len(list) == 1 && list[0].Status == outbox.StatusDead
	}, 20*time.Second, 10*time.Millisecond)

	// An attempt is counted after its record has committed.
	data := metrics.CollectWhen(t, "every attempt counted", func(data map[string]metricdata.Aggregation) bool {
		return maps.Equal(telemetrytest.Sum(data["wharf_outbox_attempts"], "outcome"), map[string]int64{"2xx": 3, "5xx": 4}) &&
			maps.Equal(telemetrytest.Sum(data["wharf_outbox_deliveries_dead"]), map[string]int64{"": 1}) &&
			telemetrytest.Count(data["wharf_outbox_delivery_latency"]) == 3
	})
	require.Equal(t, map[string]int64{"2xx": 3, "5xx": 4}, telemetrytest.SumBy(t, data["wharf_outbox_attempts"], "outcome"))
	require.Equal(t, map[string]int64{"": 4}, telemetrytest.SumBy(t, data["wharf_outbox_published"]))
	require.Equal(t, map[string]int64{"": 1}, telemetrytest.SumBy(t, data["wharf_outbox_deliveries_dead"]))
	require.Equal(t, map[string]int64{bad.ID.String(): 1, good.ID.String(): 0},
		telemetrytest.GaugeBy(t, data["wharf_outbox_dead_deliveries"], "endpoint_id"), "every endpoint has a series")
	require.EqualValues(t, 3, data["wharf_outbox_delivery_latency"].(metricdata.Histogram[float64]).DataPoints[0].Count)

	// The hooks: one dead delivery so far; an endpoint answering 410 is
	// disabled and its delivery dead.
	gone := newSink(t, status(http.StatusGone))
	goneEp := b.endpoint(t, gone.URL(), &outbox.EndpointParams{EventTypes: []string{"gone"}})
	b.publish(t, &outbox.Event{Type: "gone", Data: map[string]int{}})
	require.Eventually(t, func() bool {
		hookMu.Lock()
		defer hookMu.Unlock()
		return len(disabledHooks) == 1 && len(deadHooks) == 2
	}, 20*time.Second, 10*time.Millisecond)
	hookMu.Lock()
	defer hookMu.Unlock()
	require.Equal(t, bad.ID, deadHooks[0].EndpointID)
	require.Contains(t, deadHooks[0].Reason, "answered 503")
	require.Equal(t, goneEp.ID, disabledHooks[0].EndpointID)
	require.Contains(t, disabledHooks[0].Reason, "410")
}
