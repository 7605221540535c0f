package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/idempotency"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestIdempotencyKeysThroughPgBouncer: through PgBouncer in transaction
// mode, in pgx's exec and simple_protocol modes and in both middleware
// modes, a burst of requests with one key runs the handler once and a
// retry replays the stored response.
func TestIdempotencyKeysThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, pgxMode := range testdb.Modes {
		t.Run(pgxMode, func(t *testing.T) {
			t.Parallel()
			modes(t, func(t *testing.T, transactional bool) {
				b := setup(t, testOptions{config: idempotency.Config{Transactional: transactional}, pgbouncerMode: pgxMode})

				var original result
				for _, res := range b.sendTogether(t, 8, payoutOf("pooled")) {
					switch {
					case res.status == http.StatusConflict, res.status == http.StatusCreated && res.replayed():
					case res.status == http.StatusCreated:
						require.Empty(t, original.body, "two requests ran the handler")
						original = res
					default:
						t.Fatalf("unexpected answer %d: %s", res.status, res.body)
					}
				}
				require.NotEmpty(t, original.body)

				again := b.do(t, payoutOf("pooled"))
				require.True(t, again.replayed())
				require.Equal(t, original.body, again.body)
				require.Equal(t, "completed", b.keyStatus(t, "pooled"))
				require.EqualValues(t, 1, b.calls.Load())
				require.EqualValues(t, 90, b.balance(t, "acct_1"))
			})
		})
	}
}
