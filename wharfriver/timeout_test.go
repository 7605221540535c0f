package wharfriver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/wharfriver"
)

// TestEndpointTimeoutLongerThanJobTimeout: an endpoint whose timeout is
// longer than the client's JobTimeout gets its whole timeout: River does
// not cut the request short (and send it again).
func TestEndpointTimeoutLongerThanJobTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet, AllowPrivateNetworks: true,
		EndpointTimeout: time.Second, RetrySchedule: []time.Duration{0, 100 * time.Millisecond}, RetryJitter: -1})
	require.NoError(t, err)
	var got atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		select { // a receiver that takes 3 s (its endpoint allows 5 s)
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(sink.Close)
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: sink.URL, Timeout: 5 * time.Second})
	require.NoError(t, err)

	cfg := &river.Config{Logger: quiet, JobTimeout: 2 * time.Second, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Outbox: ob, NoJobs: true}), "Configure accepted the config")
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "x", Data: 1})
		return err
	}))
	// Until the delivery is settled: succeeded, or dead after its two
	// attempts were cut short.
	require.Eventually(t, func() bool {
		var st string
		err := pool.QueryRow(ctx, "SELECT status FROM wharf_outbox_deliveries").Scan(&st)
		return err == nil && (st == "succeeded" || st == "dead")
	}, 60*time.Second, 20*time.Millisecond)
	rows, _ := pool.Query(ctx, "SELECT attempt, status, error, duration_us FROM wharf_outbox_attempts")
	for rows.Next() {
		var a int
		var st, e string
		var d int64
		_ = rows.Scan(&a, &st, &e, &d)
		t.Logf("attempt %d %s %q %dms", a, st, e, d/1000)
	}
	rows.Close()
	var st string
	var next *time.Time
	_ = pool.QueryRow(ctx, "SELECT status, next_attempt_at FROM wharf_outbox_deliveries").Scan(&st, &next)
	t.Logf("delivery %s next %v (now %v)", st, next, time.Now())
	require.Equal(t, "succeeded", st, "a receiver answering in 3 s within its endpoint's 5 s timeout was cut off by River's JobTimeout, which Configure accepted")
	require.Equal(t, int64(1), got.Load(), "requests sent")
}
