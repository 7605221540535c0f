package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
	"github.com/wharfhq/wharf/wharfriver"
)

// BenchmarkDeliveryLatency measures publish-to-arrival latency with the
// default configuration: outbox.New with defaults (private networks
// allowed, for the loopback sink), River wired by wharfriver.Configure on
// an empty river.Config, one endpoint with the default cap answering 204 at
// once, one event published per transaction at a fixed rate (50/s, then
// 200/s; WHARF_BENCH_LATENCY_SECONDS each, default 8). A latency runs from
// the publish's scheduled start to the request's arrival at the sink.
// Reported as BENCH lines against the targets (loadtest.LatencyTargetP50, P99).
func BenchmarkDeliveryLatency(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	ob, err := outbox.New(pool, &outbox.Config{AllowPrivateNetworks: true, Logger: quietLogger()})
	require.NoError(b, err)
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	receiver := newSink(b, func(_ int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived[r.Header.Get(signature.HeaderWebhookID)] = time.Now()
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: receiver.URL()})
	require.NoError(b, err)
	cfg := &river.Config{Logger: quietLogger()}
	require.NoError(b, wharfriver.Configure(cfg, &wharfriver.Components{Pool: pool, Outbox: ob, NoJobs: true}))
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(b, err)
	require.NoError(b, client.Start(ctx))
	b.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})
	event := &outbox.Event{Type: "bench.event", Data: json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))}
	seconds := loadtest.EnvInt("WHARF_BENCH_LATENCY_SECONDS", 8)

	for b.Loop() {
		for _, rate := range []int{50, 200} {
			n := rate * seconds
			scheduled := make([]time.Time, n)
			ids := make([]string, n)
			loadtest.Checkpoint(b)
			_, err := loadtest.RunSchedule(float64(rate), n, func(i int, at time.Time) error {
				scheduled[i] = at
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					res, err := ob.PublishTx(ctx, tx, event)
					if err == nil {
						ids[i] = res.EventID
					}
					return err
				})
			})
			require.NoError(b, err)
			latencies, err := loadtest.AwaitLatencies(n, time.Minute, func() []time.Duration {
				mu.Lock()
				defer mu.Unlock()
				var got []time.Duration
				for i, id := range ids {
					if at, ok := arrived[id]; ok {
						got = append(got, at.Sub(scheduled[i]))
					}
				}
				return got
			})
			require.NoError(b, err)
			loadtest.ReportLatencies(b, fmt.Sprintf("outbox_publish_to_arrival_%d_per_s", rate),
				fmt.Sprintf("%d events/s, one per transaction, publish to arrival", rate), latencies)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPublishOnePerTx measures the rate of events published one per
// transaction from 32 goroutines (an app publishing in its own
// transactions, no workers running), against the same transactions
// inserting the same 1 KB payload into an application table instead: what
// the publish costs beside the app's own write. Reported as a BENCH line.
func BenchmarkPublishOnePerTx(b *testing.B) {
	const senders = 32
	ctx := context.Background()
	pool := benchPool(b)
	ob, err := outbox.New(pool, benchConfig())
	require.NoError(b, err)
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/hook"})
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `CREATE TABLE bench_events (id bigserial PRIMARY KEY, type text NOT NULL, payload jsonb NOT NULL)`)
	require.NoError(b, err)
	data := json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))
	event := &outbox.Event{Type: "bench.event", Data: data}
	n := loadtest.EnvInt("WHARF_BENCH_PUBLISHES", 6000)
	publish := func(int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.PublishTx(ctx, tx, event)
			return err
		})
	}
	insert := func(int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO bench_events (type, payload) VALUES ('bench.event', $1)`, data)
			return err
		})
	}
	// Warm both: connections, statements, the partition cache.
	_, err = loadtest.Run(senders, 500, publish)
	require.NoError(b, err)
	_, err = loadtest.Run(senders, 500, insert)
	require.NoError(b, err)
	var published, inserted float64
	for b.Loop() {
		loadtest.Checkpoint(b)
		res, err := loadtest.Run(senders, n, publish)
		require.NoError(b, err)
		published = res.Rate()
		res, err = loadtest.Run(senders, n, insert)
		require.NoError(b, err)
		inserted = res.Rate()
	}
	b.ReportMetric(published, "publishes/s")
	b.ReportMetric(inserted, "inserts/s")
	b.ReportMetric(0, "ns/op")
	loadtest.Bench(fmt.Sprintf("outbox_publish_one_per_tx_%d_senders_vs_plain_insert_per_s", senders), published, inserted)
}
