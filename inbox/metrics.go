package inbox

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/inboxjob"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// Results of the HTTP receiver, the result label of
// wharf_inbox_requests_total.
const (
	resultAccepted      = "accepted"
	resultDuplicate     = "duplicate"
	resultIgnored       = "ignored"
	resultLate          = "late"
	resultBadSignature  = "bad_signature"
	resultMalformed     = "malformed"
	resultTooLarge      = "too_large"
	resultUnknownSource = "unknown_source"
	resultConflict      = "conflict"
	resultUnavailable   = "unavailable"
	resultMethod        = "method"
)

// UnknownSourceLabel is the source label of requests to a source that is
// not configured: never the name the request gave, so that no sender can
// create label values (and time series) at will.
const UnknownSourceLabel = "_unknown"

// gaugeTimeout bounds the query behind the database gauges at each
// collection.
const gaugeTimeout = 5 * time.Second

// metrics are the inbox's instruments (see docs/operations.md, "Metrics and
// traces" for each name as Prometheus shows it).
type metrics struct {
	requests        metric.Int64Counter
	receiveDuration metric.Float64Histogram
	mismatches      metric.Int64Counter
	outcomes        metric.Int64Counter // processed, failed, dead
	handlerDuration metric.Float64Histogram
	lag             metric.Float64Histogram

	bySourceResult *telemetry.Attrs
	bySource       *telemetry.Attrs
	bySourceStatus *telemetry.Attrs
}

func newMetrics(mp metric.MeterProvider, pool *pgxpool.Pool, sources []string) (*metrics, error) {
	meter := telemetry.Meter(mp, "inbox")
	var errs []error
	var err error
	m := &metrics{
		bySourceResult: telemetry.NewAttrs("source", "result"),
		bySource:       telemetry.NewAttrs("source"),
		bySourceStatus: telemetry.NewAttrs("source", "status"),
	}
	m.requests, err = meter.Int64Counter("wharf_inbox_requests",
		metric.WithDescription("Answers of the inbox's HTTP receiver, by source and result."))
	errs = append(errs, err)
	m.receiveDuration, err = meter.Float64Histogram("wharf_inbox_receive_duration",
		metric.WithDescription("Time to answer a webhook (verify, dedupe, store, commit)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	errs = append(errs, err)
	m.mismatches, err = meter.Int64Counter("wharf_inbox_payload_mismatches",
		metric.WithDescription("Duplicates whose payload differs from the first receipt's."))
	errs = append(errs, err)
	m.outcomes, err = meter.Int64Counter("wharf_inbox_messages_handled",
		metric.WithDescription("Handler outcomes by source and status: processed, failed (will retry), dead."))
	errs = append(errs, err)
	m.handlerDuration, err = meter.Float64Histogram("wharf_inbox_handler_duration",
		metric.WithDescription("Time a handler ran, successful or not."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	errs = append(errs, err)
	m.lag, err = meter.Float64Histogram("wharf_inbox_processing_lag",
		metric.WithDescription("Time from a message's receipt to the commit of its processing."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(telemetry.LatencyBuckets...))
	errs = append(errs, err)

	dead, err := meter.Int64ObservableGauge("wharf_inbox_dead_messages",
		metric.WithDescription("Dead messages now, by source (read from the database)."))
	errs = append(errs, err)
	oldest, err := meter.Float64ObservableGauge("wharf_inbox_oldest_unprocessed_age",
		metric.WithDescription("Age of the oldest message still to process or retrying, by source (read from the database)."),
		metric.WithUnit("s"))
	errs = append(errs, err)
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, gaugeTimeout)
		defer cancel()
		rows, err := dbsqlc.New(pool).InboxGaugeBySource(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		seen := map[string]bool{}
		for _, row := range rows {
			attrs := m.bySource.Of(row.Source)
			o.ObserveInt64(dead, row.Dead, attrs)
			o.ObserveFloat64(oldest, max(now.Sub(row.OldestUnfinished).Seconds(), 0), attrs)
			seen[row.Source] = true
		}
		// A configured source with nothing unfinished reports 0, so that
		// a series exists for alerts and dashboards before the first dead
		// message.
		for _, source := range sources {
			if !seen[source] {
				o.ObserveInt64(dead, 0, m.bySource.Of(source))
				o.ObserveFloat64(oldest, 0, m.bySource.Of(source))
			}
		}
		return nil
	}, dead, oldest)
	errs = append(errs, err)
	return m, errors.Join(errs...)
}

// request records one answer of the HTTP receiver.
func (m *metrics) request(ctx context.Context, source, result string, took time.Duration) {
	attrs := m.bySourceResult.Of(source, result)
	m.requests.Add(ctx, 1, attrs)
	m.receiveDuration.Record(ctx, took.Seconds(), attrs)
}

// Handled records a handler's outcome (the process engine's Metrics).
func (m *metrics) Handled(ctx context.Context, msg *dbsqlc.WharfInboxMessage, status string, took time.Duration) {
	m.outcomes.Add(ctx, 1, m.bySourceStatus.Of(msg.Source, status))
	m.handlerDuration.Record(ctx, took.Seconds(), m.bySource.Of(msg.Source))
	if status == inboxjob.StatusProcessed {
		m.lag.Record(ctx, time.Since(msg.ReceivedAt).Seconds(), m.bySource.Of(msg.Source))
	}
}
