// Package telemetry holds what Wharf's packages share to report metrics
// through the OpenTelemetry API: the meter of a package (from the
// application's MeterProvider, or the global one), cached attribute sets
// for hot-path recording, and the histogram buckets. It imports the API
// only, never an SDK or an exporter.
package telemetry

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Wharf's meters; each package
// appends its name.
const ScopeName = "github.com/wharfhq/wharf"

// Meter returns the meter of package pkg from mp, or from the global
// MeterProvider when mp is nil (a no-op until the application installs an
// SDK; instruments created before that are forwarded to it).
func Meter(mp metric.MeterProvider, pkg string) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(ScopeName + "/" + pkg)
}

// LatencyBuckets are the bucket bounds, in seconds, of Wharf's latency
// histograms: 1 ms to 10 min.
var LatencyBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600}

// Attrs caches one measurement option per combination of attribute values,
// so that recording on a hot path allocates nothing after the first time.
type Attrs struct {
	keys []attribute.Key
	m    sync.Map // string (values joined by \x00) -> metric.MeasurementOption
}

// NewAttrs returns a cache of attribute sets with these keys.
func NewAttrs(keys ...string) *Attrs {
	a := &Attrs{}
	for _, k := range keys {
		a.keys = append(a.keys, attribute.Key(k))
	}
	return a
}

// Of returns the measurement option with the given values, one per key.
func (a *Attrs) Of(values ...string) metric.MeasurementOption {
	var id string
	for i, v := range values {
		if i > 0 {
			id += "\x00"
		}
		id += v
	}
	if opt, ok := a.m.Load(id); ok {
		return opt.(metric.MeasurementOption)
	}
	kvs := make([]attribute.KeyValue, len(a.keys))
	for i, k := range a.keys {
		kvs[i] = k.String(values[i])
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	a.m.Store(id, opt)
	return opt
}

// Tracer returns the tracer of package pkg from tp, or from the global
// TracerProvider when tp is nil.
func Tracer(tp trace.TracerProvider, pkg string) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName + "/" + pkg)
}

// traceContext is the W3C propagator Wharf stores and sends trace context
// with, whatever the application's global propagator.
var traceContext = propagation.TraceContext{}

// StoredContext returns the traceparent of ctx's span when that span is
// sampled (so that a trace nobody records costs no storage), else "".
func StoredContext(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsSampled() {
		return ""
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// Link returns a link to the span whose traceparent was stored (none when
// stored is empty or malformed).
func Link(stored string) []trace.Link {
	if stored == "" {
		return nil
	}
	sc := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier{"traceparent": stored}))
	if !sc.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: sc}}
}

// Parent returns ctx with the stored traceparent as its remote parent
// span context (ctx unchanged when stored is empty or malformed).
func Parent(ctx context.Context, stored string) context.Context {
	if stored == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": stored})
}

// Extract returns ctx continuing the trace context an incoming request
// carries in its traceparent header, if any.
func Extract(ctx context.Context, h http.Header) context.Context {
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's trace context into h as a traceparent header.
func Inject(ctx context.Context, h http.Header) {
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}
