// Package telemetrytest gives tests an OpenTelemetry SDK to read Wharf's
// metrics and spans from. Test code only: the library imports the API.
package telemetrytest

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Metrics is a MeterProvider whose metrics a test collects on demand.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// NewMetrics returns a Metrics shut down when the test ends.
func NewMetrics(tb testing.TB) *Metrics {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Metrics{Provider: mp, reader: reader}
}

// Collect reads every metric, by name.
func (m *Metrics) Collect(tb testing.TB) map[string]metricdata.Aggregation {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(tb, m.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			out[metric.Name] = metric.Data
		}
	}
	return out
}

// CollectWhen collects until the int64 sum named name, keyed as SumBy
// keys it, equals want, and returns that collection; it fails the test
// after 10 s. Wharf counts an outcome after the transaction that recorded
// it has committed, so a test that saw the rows may collect before the
// count.
func (m *Metrics) CollectWhen(tb testing.TB, name string, want map[string]int64, keys ...string) map[string]metricdata.Aggregation {
	tb.Helper()
	var data map[string]metricdata.Aggregation
	got := map[string]int64{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		data = m.Collect(tb)
		if sum, ok := data[name].(metricdata.Sum[int64]); ok {
			got = map[string]int64{}
			for _, dp := range sum.DataPoints {
				got[join(dp.Attributes, keys)] += dp.Value
			}
			if maps.Equal(got, want) {
				return data
			}
		}
		if time.Now().After(deadline) {
			require.Equal(tb, want, got, "%s after 10 s", name)
		}
	}
}

// SumBy returns an int64 sum's values keyed by the given attributes'
// values joined with "/".
func SumBy(tb testing.TB, data metricdata.Aggregation, keys ...string) map[string]int64 {
	tb.Helper()
	sum, ok := data.(metricdata.Sum[int64])
	require.True(tb, ok, "not an int64 sum: %T", data)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[join(dp.Attributes, keys)] += dp.Value
	}
	return out
}

// GaugeBy is SumBy for an int64 gauge.
func GaugeBy(tb testing.TB, data metricdata.Aggregation, keys ...string) map[string]int64 {
	tb.Helper()
	gauge, ok := data.(metricdata.Gauge[int64])
	require.True(tb, ok, "not an int64 gauge: %T", data)
	out := map[string]int64{}
	for _, dp := range gauge.DataPoints {
		out[join(dp.Attributes, keys)] = dp.Value
	}
	return out
}

func join(set attribute.Set, keys []string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := set.Value(attribute.Key(k))
		parts[i] = v.AsString()
	}
	return strings.Join(parts, "/")
}

// NewTracer returns a TracerProvider recording every span, shut down when
// the test ends, and its recorder.
func NewTracer(tb testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	tb.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, recorder
}
