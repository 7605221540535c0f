package outbox_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/outbox"
)

// Attempts are counted by outcome, events as published, and the database
// gauges show what is pending and dead per endpoint.
func TestDeliveryMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	cfg := testConfig()
	cfg.MeterProvider = mp
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

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	data := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			data[m.Name] = m.Data
		}
	}
	published := data["wharf_outbox_published"].(metricdata.Sum[int64])
	require.EqualValues(t, 4, published.DataPoints[0].Value)
	attempts := map[string]int64{}
	for _, dp := range data["wharf_outbox_attempts"].(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key("outcome"))
		attempts[v.AsString()] += dp.Value
	}
	require.Equal(t, map[string]int64{"2xx": 3, "5xx": 4}, attempts)
	require.EqualValues(t, 1, data["wharf_outbox_deliveries_dead"].(metricdata.Sum[int64]).DataPoints[0].Value)
	dead := map[string]int64{}
	for _, dp := range data["wharf_outbox_dead_deliveries"].(metricdata.Gauge[int64]).DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key("endpoint_id"))
		dead[v.AsString()] = dp.Value
	}
	require.Equal(t, map[string]int64{bad.ID.String(): 1, good.ID.String(): 0}, dead, "every endpoint has a series")
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
