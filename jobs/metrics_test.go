package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// A prune reports what it did, and the gauge of the oldest unfinished row
// covers both tables retention must keep rows of.
func TestPruneMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	_, err := pool.Exec(ctx, `INSERT INTO wharf_idempotency_keys (route, principal, idempotency_key, fingerprint, status, claim_id, claimed_at, expires_at, completed_at, response_status)
		VALUES ('r', 'p', 'k', sha256('x'), 'completed', gen_random_uuid(), now() - interval '3 days', now() - interval '1 day', now() - interval '3 days', 201)`)
	require.NoError(t, err, "seed an expired idempotency key")
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Logger: quiet, MeterProvider: mp})
	require.NoError(t, err)
	res, err := m.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.IdempotencyKeysDeleted)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	data := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			data[mt.Name] = mt.Data
		}
	}
	rows := data["wharf_retention_rows"].(metricdata.Sum[int64])
	require.Len(t, rows.DataPoints, 1)
	kind, _ := rows.DataPoints[0].Attributes.Value(attribute.Key("kind"))
	require.Equal(t, "idempotency_keys", kind.AsString())
	require.EqualValues(t, 1, rows.DataPoints[0].Value)
	require.EqualValues(t, 0, data["wharf_retention_partitions_deferred"].(metricdata.Gauge[int64]).DataPoints[0].Value)
	require.Len(t, data["wharf_retention_oldest_unfinished_age"].(metricdata.Gauge[float64]).DataPoints, 2)
}
