// Package telemetrytest gives tests an OpenTelemetry SDK to read Wharf's
// metrics and spans from. Test code only: the library imports the API.
package telemetrytest

import (
	"bytes"
	"context"
	"strings"
	"sync"
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

// CollectWhen collects until cond holds of the collection, and returns
// that collection; it fails the test, naming what, after 10 s. Wharf
// counts an outcome after the transaction that recorded it has committed,
// so a test that saw the rows may collect before the counts.
func (m *Metrics) CollectWhen(tb testing.TB, what string, cond func(map[string]metricdata.Aggregation) bool) map[string]metricdata.Aggregation {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		data := m.Collect(tb)
		if cond(data) {
			return data
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after 10 s, still not %s: %v", what, data)
		}
	}
}

// Sum is an int64 sum's values keyed as SumBy keys them; nil when data is
// not an int64 sum (not collected yet).
func Sum(data metricdata.Aggregation, keys ...string) map[string]int64 {
	sum, ok := data.(metricdata.Sum[int64])
	if !ok {
		return nil
	}
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[join(dp.Attributes, keys)] += dp.Value
	}
	return out
}

// Count is a float64 histogram's count of measurements; 0 when data is
// not one.
func Count(data metricdata.Aggregation) uint64 {
	h, ok := data.(metricdata.Histogram[float64])
	if !ok {
		return 0
	}
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
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

// Logs collects a logger's output (slog.NewJSONHandler(&logs, nil), say)
// for tests that read it; goroutines may share it.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns what was logged so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
