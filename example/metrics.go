package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// newMetrics returns the app's MeterProvider, which Wharf's components
// report to, and the handler serving its metrics in Prometheus's text
// format at GET /metrics. An app that already has a MeterProvider (an OTLP
// exporter, say) passes that one instead; Wharf's packages import the
// OpenTelemetry API only.
func newMetrics() (*sdkmetric.MeterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	return mp, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), nil
}

// shutdownMetrics stops mp's readers.
func shutdownMetrics(ctx context.Context, mp *sdkmetric.MeterProvider) { _ = mp.Shutdown(ctx) }
