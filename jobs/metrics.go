package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/telemetry"
)

// metrics are the retention jobs' instruments (docs/operations.md, "Metrics and
// traces").
type metrics struct {
	rows     metric.Int64Counter // rows deleted or scrubbed, by kind
	dropped  metric.Int64Counter
	deferred metric.Int64Gauge
	failures metric.Int64Counter
	byKind   *telemetry.Attrs
}

func newMetrics(mp metric.MeterProvider, pool *pgxpool.Pool) (*metrics, error) {
	meter := telemetry.Meter(mp, "jobs")
	m := &metrics{byKind: telemetry.NewAttrs("kind")}
	var errs []error
	var err error
	m.rows, err = meter.Int64Counter("wharf_retention_rows",
		metric.WithDescription("Rows the prune deleted or scrubbed, by kind: dedupe_keys, idempotency_keys, deliveries (deleted); messages, events, responses (scrubbed)."))
	errs = append(errs, err)
	m.dropped, err = meter.Int64Counter("wharf_retention_partitions_dropped",
		metric.WithDescription("Day partitions dropped by the prune."))
	errs = append(errs, err)
	m.deferred, err = meter.Int64Gauge("wharf_retention_partitions_deferred",
		metric.WithDescription("Expired partitions the last prune kept because they hold unfinished work."))
	errs = append(errs, err)
	m.failures, err = meter.Int64Counter("wharf_retention_prune_failures",
		metric.WithDescription("Prune runs that failed."))
	errs = append(errs, err)
	oldest, err := meter.Float64ObservableGauge("wharf_retention_oldest_unfinished_age",
		metric.WithDescription("Age of the oldest unfinished row (inbox message to process, outbox delivery to attempt), by table: what retention must keep."),
		metric.WithUnit("s"))
	errs = append(errs, err)
	byTable := telemetry.NewAttrs("table")
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		q := dbsqlc.New(pool)
		now := time.Now()
		for table, read := range map[string]func(context.Context) (time.Time, error){
			"wharf_inbox_messages":    q.RetentionInboxOldestUnfinished,
			"wharf_outbox_deliveries": q.RetentionOutboxOldestUnfinished,
		} {
			at, err := read(ctx)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				o.ObserveFloat64(oldest, 0, byTable.Of(table))
			case err != nil:
				return err
			default:
				o.ObserveFloat64(oldest, max(now.Sub(at).Seconds(), 0), byTable.Of(table))
			}
		}
		return nil
	}, oldest)
	errs = append(errs, err)
	return m, errors.Join(errs...)
}

// prune records a prune run's result.
func (m *metrics) prune(ctx context.Context, res *PruneResult, err error) {
	if res.DryRun || res.Skipped {
		return
	}
	for kind, n := range map[string]int64{
		"dedupe_keys": res.DedupeKeysDeleted, "past_keys": res.PastKeysDeleted, "idempotency_keys": res.IdempotencyKeysDeleted,
		"deliveries": res.DeliveriesDeleted, "messages": res.MessagesScrubbed,
		"events": res.EventsScrubbed, "responses": res.ResponsesScrubbed,
	} {
		if n > 0 {
			m.rows.Add(ctx, n, m.byKind.Of(kind))
		}
	}
	m.dropped.Add(ctx, int64(len(res.Dropped)))
	if err != nil {
		m.failures.Add(ctx, 1)
		return
	}
	m.deferred.Record(ctx, int64(len(res.Deferred)))
}
