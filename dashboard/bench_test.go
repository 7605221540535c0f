package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/dashboard"
	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
)

// BenchmarkPages renders each page over 1M messages received over the last
// 23 hours (WHARF_BENCH_DASHBOARD_MESSAGES overrides), all inside the
// overview's 24-hour window, with as many dedupe keys and a tenth as many
// delivery attempts over the same hours, and reports the median time of
// five renders per page against the 100 ms target: the overview and the
// endpoints page without the rollup job first (every hour counted live),
// then every page after a rollup run.
func BenchmarkPages(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("WHARF_BENCH_DASHBOARD_MESSAGES")); err == nil && v > 0 {
		n = v
	}
	pool := testdb.New(b)
	ctx := context.Background()
	start := time.Now()
	growForDashboard(b, pool, n)
	b.Logf("seeded %d messages in %s", n, time.Since(start).Round(time.Second))
	h, err := dashboard.New(pool, &dashboard.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	server := httptest.NewServer(h)
	defer server.Close()
	var deadID string
	if err := pool.QueryRow(ctx, "SELECT id::text FROM wharf_inbox_messages WHERE status = 'dead' LIMIT 1").Scan(&deadID); err != nil {
		b.Fatal(err)
	}
	pages := []struct{ name, path string }{
		{"overview_without_rollup", "/"},
		{"endpoints_without_rollup", "/outbox/endpoints"},
		{"overview", "/"},
		{"inbox", "/inbox"},
		{"inbox_dead", "/inbox?status=dead"},
		{"inbox_source_type_since", "/inbox?source=s3&type=t.2&since=1h"},
		{"inbox_event_id", "/inbox?q=evt_500000"},
		{"message", "/inbox/" + deadID},
		{"outbox", "/outbox"},
		{"endpoints", "/outbox/endpoints"},
		{"partitions", "/partitions"},
	}
	maintainer, err := jobs.NewMaintainer(pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := pool.Exec(ctx, "TRUNCATE wharf_inbox_hourly, wharf_outbox_attempts_hourly, wharf_rollups"); err != nil {
			b.Fatal(err)
		}
		for _, p := range pages {
			if p.name == "overview" {
				t0 := time.Now()
				if _, err := maintainer.Rollup(ctx); err != nil {
					b.Fatal(err)
				}
				b.Logf("rollup of %d messages and %d attempts: %s", n, n/10, time.Since(t0).Round(time.Millisecond))
			}
			median := medianGet(b, server.URL+p.path, 5)
			loadtest.Bench(fmt.Sprintf("dashboard_%s_ms_%dk_messages_vs_100ms_target_lower_is_better", p.name, n/1000),
				loadtest.Ms(median), 100)
		}
	}
}

// medianGet fetches url runs times and returns the median time.
func medianGet(b *testing.B, url string, runs int) time.Duration {
	b.Helper()
	var times []time.Duration
	for range runs {
		t0 := time.Now()
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d", url, resp.StatusCode)
		}
		times = append(times, time.Since(t0))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times[len(times)/2]
}

// growForDashboard writes n messages received over the last 23 hours from
// 4 sources of 5 types (0.1% dead, 0.1% failed, the rest processed), n keys
// with a duplicate for every 100th, and n/10 delivery attempts to one
// endpoint over the same 23 hours (90% answered 2xx), then analyses the
// tables as autovacuum would have.
func growForDashboard(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, event_type, headers, body, payload_hash, status, attempts, last_error, processed_at, updated_at)
		 SELECT gen_random_uuid(),
		        lo.t + (now() - lo.t) * (g::float8 / $1::int),
		        's' || (g % 4), 'evt_' || g, 't.' || (g % 5), '{"Content-Type":["application/json"]}',
		        convert_to('{"id":"evt_' || g || '","amount":1999,"customer":"cus_' || (g % 1000) || '"}', 'UTF8'),
		        sha256(g::text::bytea),
		        CASE WHEN g % 1000 = 0 THEN 'dead' WHEN g % 1000 = 1 THEN 'failed' ELSE 'processed' END,
		        1, CASE WHEN g % 1000 IN (0, 1) THEN 'handler: no account' END, now(), now()
		 FROM generate_series(1, $1::int) g,
		      (SELECT now() - interval '23 hours' AS t) lo`,
		`INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at, duplicate_count)
		 SELECT source, event_id, payload_hash, id, received_at, CASE WHEN event_id LIKE '%00' THEN 1 ELSE 0 END
		 FROM wharf_inbox_messages`,
		`INSERT INTO wharf_outbox_endpoints (id, url, secret, max_in_flight, timeout_ms, created_at, updated_at)
		 VALUES ('00000000-0000-0000-0000-0000000000e1', 'https://hooks.example.com/wharf', 'whsec_x', 16, 15000, now(), now())`,
		`INSERT INTO wharf_outbox_attempts (id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status, status_code, duration_us)
		 SELECT gen_random_uuid(), lo.t + (now() - lo.t) * (g::float8 / ($1::int / 10)), gen_random_uuid(), '00000000-0000-0000-0000-0000000000e1', gen_random_uuid(), 1,
		        CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END, CASE WHEN g % 10 = 0 THEN 503 ELSE 200 END, 1000
		 FROM generate_series(1, $1::int / 10) g,
		      (SELECT now() - interval '23 hours' AS t) lo`,
		`VACUUM (ANALYZE) wharf_inbox_messages`,
		`VACUUM (ANALYZE) wharf_inbox_keys`,
		`VACUUM (ANALYZE) wharf_outbox_attempts`,
	} {
		var err error
		if strings.Contains(sql, "$1") {
			_, err = pool.Exec(ctx, sql, n)
		} else {
			_, err = pool.Exec(ctx, sql)
		}
		if err != nil {
			b.Fatalf("%v: %s", err, sql)
		}
	}
}
