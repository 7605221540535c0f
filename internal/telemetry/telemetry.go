// Package telemetry holds what Wharf's packages share to report metrics
// through the OpenTelemetry API: the meter of a package (from the
// application's MeterProvider, or the global one), cached attribute sets
// for hot-path recording, and the histogram buckets. It imports the API
// only, never an SDK or an exporter.
package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
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
