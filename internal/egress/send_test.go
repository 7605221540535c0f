package egress

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	require.Equal(t, 120*time.Second, parseRetryAfter("120", now))
	require.Equal(t, 90*time.Second, parseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
	for _, bad := range []string{"", "0", "-5", "soon", now.Add(-time.Hour).Format(http.TimeFormat)} {
		require.Zero(t, parseRetryAfter(bad, now), bad)
	}
}
