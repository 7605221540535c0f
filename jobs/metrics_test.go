package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// A prune reports what it did, and the gauge of the oldest unfinished row
// covers both tables retention must keep rows of.
func TestPruneMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	metrics := telemetrytest.NewMetrics(t)
	_, err := pool.Exec(ctx, `INSERT INTO wharf_idempotency_keys (route, principal, idempotency_key, fingerprint, status, claim_id, claimed_at, expires_at, completed_at, response_status)
		VALUES ('r', 'p', 'k', sha256('x'), 'completed', gen_random_uuid(), now() - interval '3 days', now() - interval '1 day', now() - interval '3 days', 201)`)
	require.NoError(t, err, "seed an expired idempotency key")
	m, err := jobs.NewMaintainer(pool, &jobs.Config{Logger: quiet, MeterProvider: metrics.Provider})
	require.NoError(t, err)
	res, err := m.Prune(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.IdempotencyKeysDeleted)

	data := metrics.Collect(t)
	require.Equal(t, map[string]int64{"idempotency_keys": 1}, telemetrytest.SumBy(t, data["wharf_retention_rows"], "kind"))
	require.Equal(t, map[string]int64{"": 0}, telemetrytest.GaugeBy(t, data["wharf_retention_partitions_deferred"]))
	require.Len(t, data["wharf_retention_oldest_unfinished_age"].(metricdata.Gauge[float64]).DataPoints, 2)
}
