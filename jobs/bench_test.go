package jobs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/signature"
)

// BenchmarkRetention measures, in one run:
//
//   - dropping one expired day of N processed messages (the prune job:
//     DETACH … CONCURRENTLY, then DROP) against DELETE of another day's N
//     rows, reported as delete_ms / drop_ms;
//   - HTTP ingest latency while a prune drops a third such day and deletes
//     N expired dedupe keys in batches, against the same ingest with no
//     prune, reported as the p99 ratio (target ≤ 1.2). Ingest is offered at
//     a fixed rate (WHARF_BENCH_INGEST_RATE per second, default 200), below
//     what the machine can take: at saturation, any other work lengthens
//     the queue, and p99 measures the queue rather than the interference.
//
// WHARF_BENCH_PRUNE_ROWS sets N (default 1,000,000).
func BenchmarkRetention(b *testing.B) {
	rows := loadtest.EnvInt("WHARF_BENCH_PRUNE_ROWS", 1_000_000)
	rate := loadtest.EnvFloat("WHARF_BENCH_INGEST_RATE", 200)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)

	today := partition.Day(time.Now())
	dropDay, deleteDay, loadDay := today.AddDate(0, 0, -40), today.AddDate(0, 0, -10), today.AddDate(0, 0, -41)
	for _, day := range []time.Time{dropDay, deleteDay} {
		fillDay(b, pool, day, rows)
	}
	if _, err := pool.Exec(ctx, "ANALYZE wharf_inbox_messages, wharf_inbox_keys"); err != nil {
		b.Fatal(err)
	}
	maint, err := jobs.NewMaintainer(pool, &jobs.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}

	for b.Loop() {
		// Drop vs DELETE: the drop day is the only expired one.
		t0 := time.Now()
		res, err := maint.Prune(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		dropTime := time.Since(t0)
		if len(res.Dropped) != 1 || res.Dropped[0] != partition.Name("wharf_inbox_messages", dropDay) {
			b.Fatalf("prune dropped %v, want the drop day only", res.Dropped)
		}
		t0 = time.Now()
		tag, err := pool.Exec(ctx, "DELETE FROM wharf_inbox_messages WHERE received_at >= $1 AND received_at < $2",
			deleteDay, deleteDay.AddDate(0, 0, 1))
		if err != nil {
			b.Fatal(err)
		}
		deleteTime := time.Since(t0)
		if tag.RowsAffected() != int64(rows) {
			b.Fatalf("deleted %d rows, want %d", tag.RowsAffected(), rows)
		}
		// DELETE leaves dead tuples behind; the space comes back only with
		// the VACUUM that a drop never needs.
		t0 = time.Now()
		if _, err := pool.Exec(ctx, "VACUUM "+partition.Name("wharf_inbox_messages", deleteDay)); err != nil {
			b.Fatal(err)
		}
		vacuumTime := time.Since(t0)
		b.ReportMetric(loadtest.Ms(dropTime), "drop_ms")
		b.ReportMetric(loadtest.Ms(deleteTime), "delete_ms")
		b.ReportMetric(loadtest.Ms(vacuumTime), "vacuum_ms")
		b.ReportMetric(deleteTime.Seconds()/dropTime.Seconds(), "delete/drop")
		b.ReportMetric((deleteTime+vacuumTime).Seconds()/dropTime.Seconds(), "delete+vacuum/drop")
		b.Logf("%d rows: prune (drop) %s; DELETE %s (%.1f×), and its VACUUM %s more (%.1f× in all)",
			rows, dropTime.Round(time.Millisecond), deleteTime.Round(time.Millisecond), deleteTime.Seconds()/dropTime.Seconds(),
			vacuumTime.Round(time.Millisecond), (deleteTime+vacuumTime).Seconds()/dropTime.Seconds())

		// Ingest with and without a prune running; the prune has a day to
		// drop and a day's worth of expired keys to delete.
		fillDay(b, pool, loadDay, rows)
		if _, err := pool.Exec(ctx, `
			INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at)
			SELECT 'bench', 'k' || i, '\x00', gen_random_uuid(), $1::timestamptz + (i % 86000) * interval '1 second'
			FROM generate_series(1, $2::int) i`, loadDay, rows); err != nil {
			b.Fatal(err)
		}
		// Settle the load: autovacuum of a million fresh rows would land in
		// whichever phase runs next.
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE wharf_inbox_keys"); err != nil {
			b.Fatal(err)
		}
		// Latency is compared window by window (2.5 s each; six before and
		// six after the prune, as many as it lasts during it), by the median
		// of their p99s: on a shared machine the p99 of one long run is
		// ruled by the odd stall that has nothing to do with the prune.
		ingest := newIngest(b, pool)
		ingest.run(b, "warm", rate, 300)
		var quiet, busy []time.Duration
		quietWindows := func(tag string) {
			for w := range 6 {
				quiet = append(quiet, ingest.run(b, fmt.Sprint(tag, w), rate, 500).Percentile(99))
			}
		}
		quietWindows("before")
		pruneDone := make(chan time.Duration, 1)
		go func() {
			t0 := time.Now()
			if _, err := maint.Prune(ctx, nil); err != nil {
				b.Error(err)
			}
			pruneDone <- time.Since(t0)
		}()
		var pruneTime time.Duration
	windows:
		for w := 0; ; w++ {
			busy = append(busy, ingest.run(b, fmt.Sprint("busy", w), rate, 500).Percentile(99))
			select {
			case pruneTime = <-pruneDone:
				break windows
			default:
			}
		}
		quietWindows("after")
		quietP99, busyP99 := median(quiet), median(busy)
		ratio := busyP99.Seconds() / quietP99.Seconds()
		b.ReportMetric(loadtest.Ms(quietP99), "ingest_p99_ms")
		b.ReportMetric(loadtest.Ms(busyP99), "ingest_during_prune_p99_ms")
		b.ReportMetric(ratio, "p99_ratio")
		b.Logf("ingest at %.0f/s, median of per-window p99: %.2f ms alone %v, %.2f ms during a prune %v (%s: drop of %d rows + %d keys deleted in batches): ratio %.2f",
			rate, loadtest.Ms(quietP99), quiet, loadtest.Ms(busyP99), busy, pruneTime.Round(time.Millisecond), rows, rows, ratio)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// fillDay inserts n processed messages spread over day, in a partition of
// its own.
func fillDay(b *testing.B, pool *pgxpool.Pool, day time.Time, n int) {
	b.Helper()
	if _, err := partition.Ensure(context.Background(), pool, "wharf_inbox_messages", day); err != nil {
		b.Fatal(err)
	}
	_, err := pool.Exec(context.Background(), `
		INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, event_type, headers, body, payload_hash,
		                                  status, attempts, processed_at, updated_at)
		SELECT gen_random_uuid(), $1::timestamptz + (i % 86000) * interval '1 second', 'bench', $1::text || i, 'bench.event',
		       '{}', convert_to(repeat('x', 200), 'UTF8'), '\x00', 'processed', 1, $1::timestamptz, $1::timestamptz
		FROM generate_series(1, $2::int) i`, day, n)
	if err != nil {
		b.Fatal(err)
	}
}

// ingestLoad sends signed 1 KB events to an inbox over HTTP at a fixed rate.
type ingestLoad struct {
	server *httptest.Server
	client *http.Client
}

const benchSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func newIngest(b *testing.B, pool *pgxpool.Pool) *ingestLoad {
	ib, err := inbox.New(pool, &inbox.Config{
		Sources: []inbox.Source{{Name: "bench", Verifier: signature.NewStandardWebhooks(signature.Secrets{benchSecret}, nil)}},
		Logger:  quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	server := httptest.NewServer(ib.SourceHandler("bench"))
	b.Cleanup(server.Close)
	return &ingestLoad{server: server, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

func (l *ingestLoad) run(b *testing.B, tag string, rate float64, n int) loadtest.Result {
	b.Helper()
	body := bytes.Repeat([]byte("x"), 1000)
	reqs := make([]*http.Request, n)
	for i := range reqs {
		data := []byte(fmt.Sprintf(`{"type":"t","pad":%q}`, body))
		h, err := signature.SignStandardWebhooks([]string{benchSecret}, fmt.Sprintf("%s-%d-%d", tag, time.Now().UnixNano(), i), time.Now(), data)
		if err != nil {
			b.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, l.server.URL, bytes.NewReader(data))
		req.Header = h
		reqs[i] = req
	}
	res, err := loadtest.RunRate(rate, n, func(i int) error {
		resp, err := l.client.Do(reqs[i])
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
	return res
}
