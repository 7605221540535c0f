package inbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// BenchmarkIngest measures HTTP ingest of signed 1 KB events from 32
// concurrent senders, and in the same run the raw Postgres rate of the same
// writes (one transaction inserting the key, message and job rows, no HTTP,
// no verification). It reports both rates, their ratio (target ≥ 0.5) and
// ingest latency percentiles (target p99 ≤ 10 ms).
//
// It then measures the same ingest with 1M existing keys and 100k messages
// in today's partition (WHARF_BENCH_EXISTING_KEYS, 0 skips;
// WHARF_BENCH_EXISTING_MESSAGES, a tenth of the keys unless set), then with
// as many past keys besides, one request in a hundred a late arrival of
// one (target ≥ 0.95 of the runs without, before and after), and compares
// group commit (the default) with one transaction per delivery (BatchSize
// 1) at that concurrency and for a single sender.
//
// WHARF_BENCH_REQUESTS sets the requests per phase (default 4000),
// WHARF_BENCH_SENDERS the concurrency (default 32).
func BenchmarkIngest(b *testing.B) {
	senders := loadtest.EnvInt("WHARF_BENCH_SENDERS", 32)
	requests := loadtest.EnvInt("WHARF_BENCH_REQUESTS", 4000)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(senders)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)

	newServer := func(batchSize int) *httptest.Server {
		ib, err := inbox.New(pool, &inbox.Config{
			Sources:   []inbox.Source{{Name: "bench", Verifier: signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)}},
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			BatchSize: batchSize,
		})
		if err != nil {
			b.Fatal(err)
		}
		server := httptest.NewServer(ib.SourceHandler("bench"))
		b.Cleanup(server.Close)
		return server
	}
	server := newServer(0)          // group commit (the default)
	unbatchedServer := newServer(1) // each delivery its own transaction
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: senders, MaxConnsPerHost: senders}}
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		b.Fatal(err)
	}

	body := func(i int, run string) []byte {
		prefix := fmt.Sprintf(`{"type":"payment.succeeded","id":"%s_%d","data":{"pad":"`, run, i)
		return []byte(prefix + strings.Repeat("x", 1024-len(prefix)-3) + `"}}`)
	}

	raw := func(run string, n int) loadtest.Result {
		return hammer(b, senders, n, func(i int) error {
			data := body(i, run)
			sum := sha256.Sum256(data)
			now := time.Now().UTC().Truncate(time.Microsecond)
			id, _ := uuid.NewV7()
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				q := dbsqlc.New(tx)
				if _, err := q.InboxKeyClaim(ctx, dbsqlc.InboxKeyClaimParams{
					Source: "raw", EventID: fmt.Sprintf("%s_%d", run, i), PayloadHash: sum[:], MessageID: id, ReceivedAt: now,
				}); err != nil {
					return err
				}
				job, err := riverClient.InsertTx(ctx, tx, rawArgs{ID: id, ReceivedAt: now}, &river.InsertOpts{Queue: "bench_raw"})
				if err != nil {
					return err
				}
				return q.InboxMessageInsert(ctx, dbsqlc.InboxMessageInsertParams{
					ID: id, ReceivedAt: now, Source: "raw", EventID: fmt.Sprintf("%s_%d", run, i), EventType: "payment.succeeded",
					Headers: []byte(`{}`), Body: data, PayloadHash: sum[:], JobID: &job.Job.ID,
				})
			})
		})
	}
	ingestTo := func(server *httptest.Server, senders int, run string, n int) loadtest.Result {
		reqs := make([]*http.Request, n)
		for i := range reqs {
			data := body(i, run)
			h, err := signature.SignStandardWebhooks([]string{testSecret}, fmt.Sprintf("msg_%s_%d", run, i), time.Now(), data)
			if err != nil {
				b.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodPost, server.URL, bytes.NewReader(data))
			req.Header = h
			req.Header.Set("Content-Type", "application/json")
			reqs[i] = req
		}
		return hammer(b, senders, n, func(i int) error {
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
	}

	ingest := func(run string, n int) loadtest.Result { return ingestTo(server, senders, run, n) }

	for b.Loop() {
		// Warm both paths (connections, partitions, caches), then measure.
		raw("warm", 200)
		ingest("warm", 200)
		rawRes := raw("run", requests)
		httpRes := ingest("run", requests)

		ratio := httpRes.Rate() / rawRes.Rate()
		b.ReportMetric(rawRes.Rate(), "raw_req/s")
		b.ReportMetric(httpRes.Rate(), "ingest_req/s")
		b.ReportMetric(ratio, "ratio")
		loadtest.Bench(fmt.Sprintf("inbox_http_ingest_%d_senders_vs_raw_three_inserts_per_s", senders), httpRes.Rate(), rawRes.Rate())
		b.ReportMetric(loadtest.Ms(httpRes.Percentile(50)), "ingest_p50_ms")
		b.ReportMetric(loadtest.Ms(httpRes.Percentile(99)), "ingest_p99_ms")
		b.ReportMetric(loadtest.Ms(rawRes.Percentile(99)), "raw_p99_ms")
		b.Logf("%d requests, %d senders: raw %.0f/s (p50 %.2f ms, p99 %.2f ms); ingest %.0f/s (p50 %.2f ms, p99 %.2f ms); ratio %.2f",
			requests, senders, rawRes.Rate(), loadtest.Ms(rawRes.Percentile(50)), loadtest.Ms(rawRes.Percentile(99)),
			httpRes.Rate(), loadtest.Ms(httpRes.Percentile(50)), loadtest.Ms(httpRes.Percentile(99)), ratio)

		// Cost as tables grow: the same ingest once the key table holds
		// WHARF_BENCH_EXISTING_KEYS keys and today's partition
		// WHARF_BENCH_EXISTING_MESSAGES messages, a tenth as many by default
		// (vacuumed and analysed, as autovacuum would).
		// (EnvInt takes 0 for unset: "0" is read here.)
		if existing := loadtest.EnvInt("WHARF_BENCH_EXISTING_KEYS", 1_000_000); os.Getenv("WHARF_BENCH_EXISTING_KEYS") != "0" {
			messages := loadtest.EnvInt("WHARF_BENCH_EXISTING_MESSAGES", existing/10)
			grow(b, pool, existing, messages)
			ingest("warm_grown", 200)
			grown := ingest("grown", requests)
			b.Logf("with %d existing keys and %d messages: %.0f/s (p99 %.2f ms) against %.0f/s (p99 %.2f ms) on near-empty tables",
				existing, messages, grown.Rate(), loadtest.Ms(grown.Percentile(99)), httpRes.Rate(), loadtest.Ms(httpRes.Percentile(99)))
			name := fmt.Sprintf("inbox_http_ingest_with_%d_keys_vs_empty_per_s", existing)
			if messages != existing/10 {
				name = fmt.Sprintf("inbox_http_ingest_with_%d_keys_%d_messages_vs_empty_per_s", existing, messages)
			}
			loadtest.Bench(name, grown.Rate(), httpRes.Rate())

			// The cost of late-arrival detection (Source.LateArrivals): the
			// same ingest once the past keys (the keys pruned while their
			// messages are retained) hold as many rows again, one request
			// in a hundred a late arrival of one of them, against the mean
			// of the grown run before it and of a run after it with the
			// past keys emptied again (the tables grow with every run).
			growPast(b, pool, existing, requests)
			ingest("warm_past", 200)
			past := ingest("past", requests)
			if _, err := pool.Exec(ctx, "TRUNCATE wharf_inbox_past_keys"); err != nil {
				b.Fatal(err)
			}
			after := ingest("after_past", requests)
			without := (grown.Rate() + after.Rate()) / 2
			b.Logf("with %d past keys (1%% of requests late arrivals): %.0f/s (p99 %.2f ms) against %.0f/s without (%.0f/s before, %.0f/s after)",
				existing, past.Rate(), loadtest.Ms(past.Percentile(99)), without, grown.Rate(), after.Rate())
			loadtest.Bench(fmt.Sprintf("inbox_http_ingest_with_%d_past_keys_vs_none_per_s", existing), past.Rate(), without)
		}

		// Group commit against none, at full concurrency and for a lone
		// sender (where an idle inbox must not wait).
		for _, n := range []int{senders, 1} {
			reqs := requests
			if n == 1 {
				reqs = requests / 4
			}
			ingestTo(unbatchedServer, n, fmt.Sprintf("warm_unbatched_%d", n), 100)
			unbatched := ingestTo(unbatchedServer, n, fmt.Sprintf("unbatched_%d", n), reqs)
			batched := ingestTo(server, n, fmt.Sprintf("batched_%d", n), reqs)
			b.Logf("%d senders: group commit %.0f/s (p99 %.2f ms), one transaction per delivery %.0f/s (p99 %.2f ms)",
				n, batched.Rate(), loadtest.Ms(batched.Percentile(99)), unbatched.Rate(), loadtest.Ms(unbatched.Percentile(99)))
			loadtest.Bench(fmt.Sprintf("inbox_group_commit_vs_unbatched_%d_senders_per_s", n), batched.Rate(), unbatched.Rate())
			loadtest.Bench(fmt.Sprintf("inbox_group_commit_vs_unbatched_%d_senders_p99_ms_lower_is_better", n),
				loadtest.Ms(batched.Percentile(99)), loadtest.Ms(unbatched.Percentile(99)))
		}
	}
}

// grow fills the key table with keys keys and today's message partition
// with messages small processed messages, then vacuums and analyses them.
func grow(b *testing.B, pool *pgxpool.Pool, keys, messages int) {
	b.Helper()
	ctx := context.Background()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at)
		 SELECT 'grown', 'evt_' || g, sha256(g::text::bytea), gen_random_uuid(), now() - interval '1 hour'
		 FROM generate_series(1, $1::int) g`, []any{keys}},
		{`INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, headers, body, payload_hash, status, attempts, processed_at, updated_at)
		 SELECT gen_random_uuid(), date_trunc('day', now()) + (g % 3600) * interval '1 second', 'grown', 'evt_' || g, '{}', '\x7b7d', sha256(g::text::bytea), 'processed', 1, now(), now()
		 FROM generate_series(1, $1::int) g`, []any{messages}},
		// What autovacuum would have done by then in a running app.
		{`VACUUM (ANALYZE) wharf_inbox_keys`, nil},
		{`VACUUM (ANALYZE) wharf_inbox_messages`, nil},
	} {
		if _, err := pool.Exec(ctx, st.sql, st.args...); err != nil {
			b.Fatal(err)
		}
	}
}

// growPast fills the past keys with n keys of source "bench", among them
// every hundredth event of the "past" run's requests (a late arrival when
// it is sent: its earlier message is gone), and analyses the table.
func growPast(b *testing.B, pool *pgxpool.Pool, n, requests int) {
	b.Helper()
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO wharf_inbox_past_keys (source, event_id, message_id, received_at)
		 SELECT 'bench', CASE WHEN g % 100 = 0 AND g < $2::int THEN 'msg_past_' || g ELSE 'pastfill_' || g END,
		        gen_random_uuid(), now() - interval '10 days'
		 FROM generate_series(0, $1::int - 1) g`, []any{n, requests}},
		{`VACUUM (ANALYZE) wharf_inbox_past_keys`, nil},
	} {
		if _, err := pool.Exec(context.Background(), st.sql, st.args...); err != nil {
			b.Fatal(err)
		}
	}
}

type rawArgs struct {
	ID         uuid.UUID `json:"message_id"`
	ReceivedAt time.Time `json:"received_at"`
}

func (rawArgs) Kind() string { return "bench_raw" }

// hammer runs a load, just after a checkpoint, and fails the benchmark on
// error.
func hammer(b *testing.B, workers, n int, op func(i int) error) loadtest.Result {
	b.Helper()
	loadtest.Checkpoint(b)
	res, err := loadtest.Run(workers, n, op)
	if err != nil {
		b.Fatal(err)
	}
	return res
}

// BenchmarkProcess measures inbox processing with a no-op handler against
// River's own no-op job rate, under the same River config (River tuned as
// for every River peer: loadtest.RiverWorkers workers on one queue,
// loadtest.RiverFetchCooldown, loadtest.RiverFetchPollInterval) in the
// same run. N messages are received in batches of 50 (as group commit
// stores them under load), then a River client works them; the rate is N
// over the time until the last is processed. The same N received one per
// transaction (ReceiveTx in an app's own transaction: a job each) are
// timed against the same no-op rate. The baseline inserts N no-op
// jobs and times their completion the same way. Target: ratio ≥ 0.5. The
// same messages spread over orderedKeys ordering keys, and all under one
// (a hot key: its backlog goes on one batch at a time), are timed against
// the unordered run.
//
// WHARF_BENCH_MESSAGES sets N (default 10000).
func BenchmarkProcess(b *testing.B) {
	n := loadtest.EnvInt("WHARF_BENCH_MESSAGES", 10000)
	ctx := context.Background()
	riverConfig := func(workers *river.Workers) *river.Config {
		return &river.Config{
			Queues:            map[string]river.QueueConfig{inbox.DefaultQueue: {MaxWorkers: loadtest.RiverWorkers}},
			Workers:           workers,
			FetchCooldown:     loadtest.RiverFetchCooldown,
			FetchPollInterval: loadtest.RiverFetchPollInterval,
			Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
	}
	// work starts a client with workers, waits until left() reports no item
	// left to do, and returns the elapsed time.
	work := func(pool *pgxpool.Pool, workers *river.Workers, left func() (int, error)) time.Duration {
		client, err := river.NewClient(riverpgxv5.New(pool), riverConfig(workers))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := client.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = client.Stop(ctx) }()
		for {
			got, err := left()
			if err != nil {
				b.Fatal(err)
			}
			if got == 0 {
				return time.Since(start)
			}
			time.Sleep(5 * time.Millisecond) // polling the database for progress
		}
	}
	count := func(pool *pgxpool.Pool, sql string) func() (int, error) {
		return func() (int, error) {
			var got int
			err := pool.QueryRow(ctx, sql).Scan(&got)
			return got, err
		}
	}

	// Each run first processes warmup items on the same pool, then times n:
	// Postgres plans a prepared statement afresh on each of its first
	// executions on a connection (five, then it may settle on a generic
	// plan), and Wharf's statements on partitioned tables take milliseconds
	// to plan; a long-running app pays that once per pooled connection, so
	// the timed part is the steady state it sees. River's run is warmed the
	// same way.
	warmup := n / 2

	// runInbox receives n messages (with orderingKeys keys, spread evenly;
	// 0: none), perTx to a transaction, and returns how long the workers
	// took to process them.
	runInbox := func(orderingKeys, perTx int) time.Duration {
		pool := benchPool(b, 32)
		// Closed when the run is done: Postgres's max_connections (100)
		// leaves no room for every run's pool at once.
		defer pool.Close()
		ib, err := inbox.New(pool, &inbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		ib.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error { return nil })
		receive := func(prefix string, count int) {
			receiveTx := func(start int) error {
				var batch []inbox.Incoming
				for i := start; i < min(count, start+perTx); i++ {
					msg := inbox.Incoming{Source: "bench", EventID: fmt.Sprintf("%s_%d", prefix, i), Body: []byte(`{"type":"noop"}`)}
					if orderingKeys > 0 {
						msg.OrderingKey = fmt.Sprintf("%s_key_%d", prefix, i%orderingKeys)
					}
					batch = append(batch, msg)
				}
				return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := ib.ReceiveManyTx(ctx, tx, batch)
					return err
				})
			}
			// From 16 goroutines: one transaction a message takes a while.
			if _, err := loadtest.Run(16, (count+perTx-1)/perTx, func(i int) error { return receiveTx(i * perTx) }); err != nil {
				b.Fatal(err)
			}
		}
		workers := river.NewWorkers()
		if err := ib.AddWorkers(workers); err != nil {
			b.Fatal(err)
		}
		// Read from the index of unfinished messages: the polling costs
		// little beside the work it waits for.
		left := count(pool, "SELECT count(*) FROM wharf_inbox_messages WHERE status IN ('received', 'failed')")
		receive("warm", warmup)
		work(pool, workers, left)
		receive("evt", n)
		return work(pool, workers, left)
	}

	for b.Loop() {
		inboxTime := runInbox(0, 50)
		orderedTime := runInbox(orderedKeys, 50)
		hotTime := runInbox(1, 50)
		oneTime := runInbox(0, 1)

		rpool := benchPool(b, 32)
		rclient, err := river.NewClient(riverpgxv5.New(rpool), &river.Config{})
		if err != nil {
			b.Fatal(err)
		}
		insertNoops := func(count int) {
			for start := 0; start < count; start += 1000 {
				var params []river.InsertManyParams
				for range min(count-start, 1000) {
					params = append(params, river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: inbox.DefaultQueue}})
				}
				if _, err := rclient.InsertMany(ctx, params); err != nil {
					b.Fatal(err)
				}
			}
		}
		rworkers := river.NewWorkers()
		river.AddWorker(rworkers, river.WorkFunc(func(context.Context, *river.Job[noopArgs]) error { return nil }))
		left := count(rpool, "SELECT count(*) FROM river_job WHERE state IN ('available', 'running')")
		insertNoops(warmup)
		work(rpool, rworkers, left)
		insertNoops(n)
		riverTime := work(rpool, rworkers, left)

		inboxRate := float64(n) / inboxTime.Seconds()
		riverRate := float64(n) / riverTime.Seconds()
		b.ReportMetric(inboxRate, "inbox_msg/s")
		b.ReportMetric(riverRate, "river_noop_job/s")
		b.Logf("%d messages: inbox no-op handler %.0f/s, River no-op jobs %.0f/s, ratio %.2f", n, inboxRate, riverRate, inboxRate/riverRate)
		loadtest.Bench("process_noop_handler_vs_river_noop_job_per_s", inboxRate, riverRate)
		oneRate := float64(n) / oneTime.Seconds()
		b.ReportMetric(oneRate, "inbox_one_per_tx_msg/s")
		b.Logf("received one per transaction (a job each): %.0f/s, %.2f of River's no-op jobs", oneRate, oneRate/riverRate)
		loadtest.Bench("process_received_one_per_tx_vs_river_noop_job_per_s", oneRate, riverRate)
		orderedRate := float64(n) / orderedTime.Seconds()
		b.ReportMetric(orderedRate, "inbox_ordered_msg/s")
		b.Logf("ordered by %d keys: %.0f/s, %.2f of unordered", orderedKeys, orderedRate, orderedRate/inboxRate)
		loadtest.Bench("process_ordered_1000_keys_vs_unordered_per_s", orderedRate, inboxRate)
		hotRate := float64(n) / hotTime.Seconds()
		b.ReportMetric(hotRate, "inbox_one_key_msg/s")
		b.Logf("ordered by 1 key: %.0f/s, %.2f of unordered", hotRate, hotRate/inboxRate)
		loadtest.Bench("process_ordered_1_key_vs_unordered_per_s", hotRate, inboxRate)
	}
}

// orderedKeys is how many ordering keys BenchmarkProcess's ordered run
// spreads its messages over: 100 resources, each getting a sequence.
const orderedKeys = 1000

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

// benchPool opens a pool of size connections on a fresh database.
func benchPool(b *testing.B, size int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(testdb.NewURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = size
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}
