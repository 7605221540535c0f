package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/outboxtype"
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

// TestSendKeepsAConnectionPerRequestInFlight: 100 requests at a time to one
// endpoint, again and again, reuse their connections: the default
// transport keeps as many idle as were in flight (with 64 a host it closed
// and dialled about one in eight).
func TestSendKeepsAConnectionPerRequestInFlight(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			conns.Add(1)
		}
	}
	server.Start()
	t.Cleanup(server.Close)
	c := New(&Config{AllowPrivateNetworks: true})
	const inFlight = 100
	for range 10 {
		var wg sync.WaitGroup
		for i := range inFlight {
			wg.Go(func() {
				out := c.Send(context.Background(), &Request{URL: server.URL, EventID: fmt.Sprintf("evt_%d", i),
					Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Auth: &outboxtype.Auth{}, Body: []byte(`{}`), Timeout: 10 * time.Second})
				require.NoError(t, out.Err)
				require.True(t, out.Succeeded())
			})
		}
		wg.Wait()
	}
	require.LessOrEqual(t, conns.Load(), int64(inFlight), "connections for 1,000 requests, 100 at a time")
}
