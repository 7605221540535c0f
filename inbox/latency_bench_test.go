package inbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/signature"
	"github.com/wharfhq/wharf/wharfriver"
)

// BenchmarkHandlerLatency measures receive-to-handler latency with the
// default configuration: inbox.New with one Standard Webhooks source and
// defaults, River wired by wharfriver.Configure on an empty river.Config,
// signed 1 KB webhooks POSTed at a fixed rate (50/s, then 200/s;
// WHARF_BENCH_LATENCY_SECONDS each, default 8). A latency runs from the
// request's scheduled start to the start of its handler. Reported as
// BENCH lines against the targets (loadtest.LatencyTargetP50, P99).
func BenchmarkHandlerLatency(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b, 20)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ib, err := inbox.New(pool, &inbox.Config{
		Sources: []inbox.Source{{Name: "bench", Verifier: signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)}},
		Logger:  quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]time.Time{}
	ib.Handle("bench", inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := handled[msg.EventID]; !ok {
			handled[msg.EventID] = time.Now()
		}
		return nil
	})
	server := httptest.NewServer(ib.SourceHandler("bench"))
	b.Cleanup(server.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	cfg := &river.Config{Logger: quiet}
	if err := wharfriver.Configure(cfg, &wharfriver.Components{Pool: pool, Inbox: ib, NoJobs: true}); err != nil {
		b.Fatal(err)
	}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := riverClient.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = riverClient.Stop(stopCtx)
	})
	seconds := loadtest.EnvInt("WHARF_BENCH_LATENCY_SECONDS", 8)
	body := []byte(`{"type":"payment.succeeded","data":{"pad":"` + string(bytes.Repeat([]byte("x"), 980)) + `"}}`)

	for b.Loop() {
		for _, rate := range []int{50, 200} {
			n := rate * seconds
			reqs := make([]*http.Request, n)
			ids := make([]string, n)
			for i := range reqs {
				ids[i] = fmt.Sprintf("msg_%d_%d", rate, i)
				h, err := signature.SignStandardWebhooks([]string{testSecret}, ids[i], time.Now(), body)
				if err != nil {
					b.Fatal(err)
				}
				reqs[i], _ = http.NewRequest(http.MethodPost, server.URL, bytes.NewReader(body))
				reqs[i].Header = h
			}
			scheduled := make([]time.Time, n)
			loadtest.Checkpoint(b)
			_, err := loadtest.RunSchedule(float64(rate), n, func(i int, at time.Time) error {
				scheduled[i] = at
				resp, err := client.Do(reqs[i])
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			latencies, err := loadtest.AwaitLatencies(n, time.Minute, func() []time.Duration {
				mu.Lock()
				defer mu.Unlock()
				var got []time.Duration
				for i, id := range ids {
					if at, ok := handled[id]; ok {
						got = append(got, at.Sub(scheduled[i]))
					}
				}
				return got
			})
			if err != nil {
				b.Fatal(err)
			}
			loadtest.ReportLatencies(b, fmt.Sprintf("inbox_receive_to_handler_%d_per_s", rate),
				fmt.Sprintf("%d webhooks/s, receive to handler", rate), latencies)
		}
	}
	b.ReportMetric(0, "ns/op")
}
