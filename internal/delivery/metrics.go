package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/telemetry"
)

const gaugeTimeout = 5 * time.Second

// metrics are the outbox's instruments (docs/operations.md, "Metrics and traces").
type metrics struct {
	published metric.Int64Counter
	attempts  metric.Int64Counter
	duration  metric.Float64Histogram
	latency   metric.Float64Histogram
	dead      metric.Int64Counter
	deferred  metric.Int64Counter
	openings  metric.Int64Counter

	byOutcome  *telemetry.Attrs
	byEndpoint *telemetry.Attrs
	byReason   *telemetry.Attrs
}

func newMetrics(mp metric.MeterProvider, pool *pgxpool.Pool) (*metrics, error) {
	meter := telemetry.Meter(mp, "outbox")
	m := &metrics{
		byOutcome: telemetry.NewAttrs("outcome"), byEndpoint: telemetry.NewAttrs("endpoint_id"), byReason: telemetry.NewAttrs("reason"),
	}
	var errs []error
	var err error
	m.published, err = meter.Int64Counter("wharf_outbox_published",
		metric.WithDescription("Events published (committed or not: counted when PublishTx returns)."))
	errs = append(errs, err)
	m.attempts, err = meter.Int64Counter("wharf_outbox_attempts",
		metric.WithDescription("Delivery attempts by outcome: 2xx, 3xx, 4xx, 5xx, timeout, refused (SSRF guard), error (no answer)."))
	errs = append(errs, err)
	m.duration, err = meter.Float64Histogram("wharf_outbox_attempt_duration",
		metric.WithDescription("Time of one delivery attempt's request."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	errs = append(errs, err)
	m.latency, err = meter.Float64Histogram("wharf_outbox_delivery_latency",
		metric.WithDescription("Time from an event's publish to its successful delivery to an endpoint."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	errs = append(errs, err)
	m.dead, err = meter.Int64Counter("wharf_outbox_deliveries_dead",
		metric.WithDescription("Deliveries dead-lettered (attempts exhausted, 410, endpoint disabled, cancelled)."))
	errs = append(errs, err)
	m.deferred, err = meter.Int64Counter("wharf_outbox_deferred",
		metric.WithDescription("Delivery runs that ended without an attempt, to run again later (River job snoozed), by reason: rate_limit, circuit_open, concurrency, ordering, database."))
	errs = append(errs, err)
	m.openings, err = meter.Int64Counter("wharf_outbox_circuit_openings",
		metric.WithDescription("Times an endpoint's circuit opened (its threshold of consecutive failures reached, or its probe failed), by endpoint."))
	errs = append(errs, err)

	pending, err := meter.Int64ObservableGauge("wharf_outbox_pending_deliveries",
		metric.WithDescription("Deliveries to attempt or retry now, by endpoint (read from the database)."))
	errs = append(errs, err)
	deadNow, err := meter.Int64ObservableGauge("wharf_outbox_dead_deliveries",
		metric.WithDescription("Dead deliveries now, by endpoint (read from the database)."))
	errs = append(errs, err)
	disabled, err := meter.Int64ObservableGauge("wharf_outbox_endpoints_disabled",
		metric.WithDescription("Endpoints disabled now (read from the database)."))
	errs = append(errs, err)
	circuitOpen, err := meter.Int64ObservableGauge("wharf_outbox_circuit_open",
		metric.WithDescription("1 while an endpoint's circuit is open or half-open (probing), else 0, by endpoint (read from the database)."))
	errs = append(errs, err)
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		q := dbsqlc.New(pool)
		rows, err := q.OutboxGaugeByEndpoint(ctx)
		if err != nil {
			return err
		}
		for _, row := range rows {
			attrs := m.byEndpoint.Of(row.EndpointID.String())
			o.ObserveInt64(pending, row.Pending, attrs)
			o.ObserveInt64(deadNow, row.Dead, attrs)
			var open int64
			if row.CircuitOpen {
				open = 1
			}
			o.ObserveInt64(circuitOpen, open, attrs)
		}
		n, err := q.OutboxGaugeEndpointsDisabled(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(disabled, n)
		return nil
	}, pending, deadNow, disabled, circuitOpen)
	errs = append(errs, err)
	return m, errors.Join(errs...)
}

// CountPublished counts n events published (PublishManyTx).
func (e *Engine) CountPublished(ctx context.Context, n int) { e.metrics.published.Add(ctx, int64(n)) }
