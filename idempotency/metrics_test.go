package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

// Each keyed request is counted once by outcome.
func TestRequestOutcomeMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(ctx) })
	mw, err := idempotency.New(testdb.New(t), accountPrincipal, &idempotency.Config{MeterProvider: mp})
	require.NoError(t, err)
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	send := func(key, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/refunds", strings.NewReader(body))
		req.Header.Set(idempotency.HeaderKey, key)
		req.Header.Set("X-Account", "acct_1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, http.StatusCreated, send("k1", `{"a":1}`))
	require.Equal(t, http.StatusCreated, send("k1", `{"a":1}`)) // replayed
	require.Equal(t, http.StatusUnprocessableEntity, send("k1", `{"a":2}`))
	require.Equal(t, http.StatusCreated, send("k2", `{"a":1}`))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "wharf_idempotency_requests" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					v, _ := dp.Attributes.Value(attribute.Key("outcome"))
					got[v.AsString()] += dp.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"new": 2, "replayed": 1, "conflict": 1}, got)
}
