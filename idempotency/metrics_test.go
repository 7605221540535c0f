package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
)

// Each keyed request is counted once by outcome.
func TestRequestOutcomeMetrics(t *testing.T) {
	t.Parallel()
	metrics := telemetrytest.NewMetrics(t)
	mw, err := idempotency.New(testdb.New(t), accountPrincipal, &idempotency.Config{MeterProvider: metrics.Provider})
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

	require.Equal(t, map[string]int64{"new": 2, "replayed": 1, "conflict": 1},
		telemetrytest.SumBy(t, metrics.Collect(t)["wharf_idempotency_requests"], "outcome"))
}
