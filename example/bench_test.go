package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/signature"
)

// BenchmarkEndToEnd measures what a user of the example app would see: signed
// 1 KB payment events POSTed to /webhooks/payments while the app's River
// workers apply them (the whole path: verify, dedupe, store, enqueue, then
// the handler's balance update and its balance.updated publish). In the
// same run, on fresh databases of the same server, it measures what the
// user would otherwise write:
//
//   - naive: the receiver the seed documents describe: look the event id up,
//     process the payment in the request, record the id (three statements,
//     no transaction: concurrent duplicates double effects);
//   - river: a River-only receiver: a job unique by event id, whose worker
//     applies the payment in a JobCompleteTx transaction (River tuned:
//     loadtest.RiverWorkers workers, loadtest.RiverFetchCooldown);
//   - pgbench: raw Postgres writing the same key, message and job rows as
//     one prepared statement per transaction (-M prepared).
//
// Rates count effects applied: requests / time until the last balance
// update committed. Latencies of the open-loop runs run from each
// request's scheduled start. Every figure is printed as a BENCH line.
//
// WHARF_BENCH_REQUESTS sets the requests of a closed-loop run (default
// 6000), WHARF_BENCH_WARM those of each target's warm-up (default 4000),
// WHARF_BENCH_SENDERS its senders (default 32), WHARF_BENCH_RATE the
// open-loop rate (default 1000/s), WHARF_BENCH_CURVE=0 skips the sender
// curve, WHARF_BENCH_SVG names a file for the curve's chart, and
// WHARF_BENCH_PROFILE=1 runs the example alone (for -cpuprofile).
func BenchmarkEndToEnd(b *testing.B) {
	requests := loadtest.EnvInt("WHARF_BENCH_REQUESTS", 6000)
	senders := loadtest.EnvInt("WHARF_BENCH_SENDERS", 32)
	rate := loadtest.EnvFloat("WHARF_BENCH_RATE", 1000)
	if os.Getenv("WHARF_BENCH_PROFILE") != "" {
		// Profiling: the example alone, no baselines.
		wharf := newWharfTarget(b)
		wharf.warm(b)
		for b.Loop() {
			w := wharf.closedLoop(b, "profile", senders, requests)
			b.Logf("wharf alone: %.0f effects/s (%.0f answers/s, p99 %.1f ms)", w.rate, w.ingest, w.p99)
			if os.Getenv("WHARF_BENCH_RATE") != "" {
				o := wharf.openLoop(b, "profile_open", rate, int(rate*5))
				b.Logf("wharf alone, open loop %.0f/s: p50 %.1f ms, p99 %.1f ms (effects %.0f/s)", rate, o.p50, o.p99, o.rate)
			}
		}
		return
	}
	for b.Loop() {
		wharf := newWharfTarget(b)
		naive := newNaiveTarget(b)
		riverOnly := newRiverTarget(b)

		// Warm each path (connections, partitions, caches), then measure.
		for _, tg := range []*target{wharf, naive, riverOnly} {
			tg.warm(b)
		}
		w := wharf.closedLoop(b, "run", senders, requests)
		n := naive.closedLoop(b, "run", senders, requests)
		r := riverOnly.closedLoop(b, "run", senders, requests)
		raw := pgbench(b, senders, 5)
		b.Logf("%d senders, %d requests, effects/s (answers/s): wharf %.0f (%.0f, p99 %.1f ms), naive %.0f (%.0f, p99 %.1f ms), river-only %.0f (%.0f, p99 %.1f ms), pgbench one prepared statement %.0f tps",
			senders, requests, w.rate, w.ingest, w.p99, n.rate, n.ingest, n.p99, r.rate, r.ingest, r.p99, raw)
		loadtest.Bench(fmt.Sprintf("e2e_%d_senders_vs_pgbench_prepared_statement_per_s", senders), w.rate, raw)
		loadtest.Bench(fmt.Sprintf("e2e_%d_senders_vs_naive_receiver_per_s", senders), w.rate, n.rate)
		loadtest.Bench(fmt.Sprintf("e2e_%d_senders_vs_river_only_receiver_per_s", senders), w.rate, r.rate)
		loadtest.Bench(fmt.Sprintf("e2e_%d_senders_p99_ms_vs_naive_lower_is_better", senders), w.p99, n.p99)

		wo := wharf.openLoop(b, "open", rate, int(rate*5))
		no := naive.openLoop(b, "open", rate, int(rate*5))
		b.Logf("open loop %.0f/s: wharf p50 %.1f ms p99 %.1f ms (effects %.0f/s); naive p50 %.1f ms p99 %.1f ms",
			rate, wo.p50, wo.p99, wo.rate, no.p50, no.p99)
		loadtest.Bench(fmt.Sprintf("e2e_open_%.0f_per_s_p99_ms_vs_naive_lower_is_better", rate), wo.p99, no.p99)

		if os.Getenv("WHARF_BENCH_CURVE") != "0" {
			curve(b, wharf)
		}
	}
}

// curve measures Wharf's end-to-end rate and p99 at several sender counts
// against pgbench's one-statement rate at the same client counts.
func curve(b *testing.B, wharf *target) {
	var rows []string
	var xs []float64
	wharfRates, rawRates := []float64{}, []float64{}
	for _, n := range []int{1, 4, 16, 32, 64, 128} {
		reqs := 4000
		if n < 16 {
			reqs = 1000
		}
		res := wharf.closedLoop(b, fmt.Sprintf("curve%d", n), n, reqs)
		// Postgres's max_connections (100 by default) leaves room for 64
		// pgbench clients beside the example's pool, not 128.
		raw := pgbench(b, min(n, 64), 3)
		rows = append(rows, fmt.Sprintf("| %d | %.0f | %.1f | %.0f | %.2f |", n, res.rate, res.p99, raw, res.rate/raw))
		xs = append(xs, float64(n))
		wharfRates = append(wharfRates, res.rate)
		rawRates = append(rawRates, raw)
		loadtest.Bench(fmt.Sprintf("curve_%d_senders_vs_pgbench_prepared_statement_per_s", n), res.rate, raw)
	}
	fmt.Println("| senders | Wharf example, effects/s | Wharf p99 ms | pgbench one prepared statement (≤ 64 clients), tps | ratio |")
	fmt.Println("|---|---|---|---|---|")
	fmt.Println(strings.Join(rows, "\n"))
	if path := os.Getenv("WHARF_BENCH_SVG"); path != "" {
		svg := loadtest.ChartSVG("End to end: Wharf example vs raw Postgres", "senders (log scale)", "per second", xs,
			[]loadtest.Series{{Name: "Wharf example (effects/s)", Values: wharfRates}, {Name: "pgbench, same rows as one prepared statement (tps)", Values: rawRates}})
		if err := os.WriteFile(path, []byte(svg), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// target is a receiver under test: where to send, how to sign, and how to
// learn how many effects have been applied.
type target struct {
	url     string
	secret  string
	client  *http.Client
	applied func() (int, error) // effects applied so far
	done    int                 // effects applied before the current run
	db      *pgxpool.Pool       // the target's database
}

// warm sends the target WHARF_BENCH_WARM requests (default 4000) and
// settles it: connections, partitions and caches are warm, and the tables
// hold enough rows for their statistics to look like a running app's.
//
// A running app's river_job holds a day of finished jobs (River's
// retention), so Postgres plans River's job updates as lookups by id. From
// the 77 jobs of a 500-request warm-up it planned them as scans of the
// whole table, which then grew with the run: River's job completion
// (JobSetStateIfRunningMany) took 0.7–0.95 ms a call instead of 0.25 ms,
// a fifth of the machine's CPU at 1,000 requests/s.
func (tg *target) warm(b *testing.B) {
	tg.closedLoop(b, "warm", 32, loadtest.EnvInt("WHARF_BENCH_WARM", 4000))
	tg.settle(b)
}

// settle brings the target's database to the state a running app's is in:
// its tables analyzed (a fresh database has no statistics, and River's
// prepared statements then plan sequential scans of river_job).
func (tg *target) settle(b *testing.B) {
	if _, err := tg.db.Exec(context.Background(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}

type runResult struct{ rate, ingest, p50, p99 float64 }

// event returns a signed 1 KB payment event. Accounts spread over 1000 so
// concurrent updates of one balance are rare, as in a real payments app.
func (tg *target) request(b *testing.B, run string, i int) *http.Request {
	prefix := fmt.Sprintf(`{"type":"payment.succeeded","data":{"account":"acct_%d","amount":1,"pad":"`, i%1000)
	body := []byte(prefix + strings.Repeat("x", 1024-len(prefix)-3) + `"}}`)
	h, err := signature.SignStandardWebhooks([]string{tg.secret}, fmt.Sprintf("evt_%s_%d", run, i), time.Now(), body)
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, tg.url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	return req
}

func (tg *target) send(req *http.Request) error {
	resp, err := tg.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (tg *target) closedLoop(b *testing.B, run string, senders, n int) runResult {
	return tg.measure(b, run, n, func(op func(int) error) (loadtest.Result, error) { return loadtest.Run(senders, n, op) })
}

func (tg *target) openLoop(b *testing.B, run string, perSecond float64, n int) runResult {
	return tg.measure(b, run, n, func(op func(int) error) (loadtest.Result, error) { return loadtest.RunRate(perSecond, n, op) })
}

// measure signs n requests, sends them with load, and waits until all n
// effects are applied: the rate is n over that time.
func (tg *target) measure(b *testing.B, run string, n int, load func(op func(int) error) (loadtest.Result, error)) runResult {
	b.Helper()
	reqs := make([]*http.Request, n)
	for i := range reqs {
		reqs[i] = tg.request(b, run, i)
	}
	loadtest.Checkpoint(b)
	start := time.Now()
	res, err := load(func(i int) error { return tg.send(reqs[i]) })
	if err != nil {
		b.Fatal(err)
	}
	want := tg.done + n
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, err := tg.applied()
		if err != nil {
			b.Fatal(err)
		}
		if got == want {
			break
		}
		if got > want {
			b.Fatalf("%d effects applied for %d events", got, want)
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d effects applied after 5 minutes", got, want)
		}
		time.Sleep(5 * time.Millisecond) // polling the database for progress
	}
	tg.done = want
	elapsed := time.Since(start)
	return runResult{rate: float64(n) / elapsed.Seconds(), ingest: res.Rate(), p50: loadtest.Ms(res.Percentile(50)), p99: loadtest.Ms(res.Percentile(99))}
}

func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute}
}

// sumBalances counts applied payments (each adds 1).
func sumBalances(pool *pgxpool.Pool, table string) func() (int, error) {
	return func() (int, error) {
		var n int
		err := pool.QueryRow(context.Background(), "SELECT coalesce(sum(balance), 0) FROM "+table).Scan(&n)
		return n, err
	}
}

func newWharfTarget(b *testing.B) *target {
	base, url := startExampleDB(b, config{})
	pool := benchPool(b, url)
	return &target{url: base + "/webhooks/payments", secret: DevSecret, client: httpClient(), applied: sumBalances(pool, "example_balances"), db: pool}
}

func benchPool(b *testing.B, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// serve serves h on a loopback port until the benchmark ends.
func serve(b *testing.B, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	server := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(ln) }()
	b.Cleanup(func() { _ = server.Close() })
	return "http://" + ln.Addr().String()
}

// payment is what both baselines decode from a verified request.
type payment struct {
	EventID string
	Account string
	Amount  int64
}

// verifiedPayment verifies r as the example does and decodes its payment.
func verifiedPayment(w http.ResponseWriter, r *http.Request, v signature.Verifier) (*payment, bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return nil, false
	}
	if err := v.Verify(r.Context(), &signature.Request{Method: r.Method, Header: r.Header, Body: raw}); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return nil, false
	}
	var ev paymentEvent
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Data.Amount == nil {
		http.Error(w, "bad event", http.StatusBadRequest)
		return nil, false
	}
	amount, _ := ev.Data.Amount.Int64()
	return &payment{EventID: r.Header.Get(signature.HeaderWebhookID), Account: ev.Data.Account, Amount: amount}, true
}

// The baselines apply the example's effect as its handler does: add the
// payment to the balance, then record a balance.updated event (the example
// publishes one through its outbox).
const baselineSchema = `
CREATE TABLE balances (account text PRIMARY KEY, balance bigint NOT NULL DEFAULT 0);
CREATE TABLE balance_events (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), type text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE processed_webhooks (event_id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now());`

// applyPaymentTo applies p's effect through db (a pool or a transaction).
func applyPaymentTo(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, p *payment) error {
	var balance int64
	if err := db.QueryRow(ctx, `INSERT INTO balances (account, balance) VALUES ($1, $2)
		ON CONFLICT (account) DO UPDATE SET balance = balances.balance + excluded.balance
		RETURNING balance`, p.Account, p.Amount).Scan(&balance); err != nil {
		return err
	}
	payload, _ := json.Marshal(map[string]any{"account": p.Account, "balance": balance})
	_, err := db.Exec(ctx, "INSERT INTO balance_events (type, payload) VALUES ('balance.updated', $1)", payload)
	return err
}

// newNaiveTarget is the look-up, process, record receiver.
func newNaiveTarget(b *testing.B) *target {
	pool := testdb.New(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, baselineSchema); err != nil {
		b.Fatal(err)
	}
	v := signature.NewStandardWebhooks(signature.Secrets{DevSecret}, nil)
	url := serve(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := verifiedPayment(w, r, v)
		if !ok {
			return
		}
		var seen bool
		if err := pool.QueryRow(r.Context(), "SELECT EXISTS (SELECT 1 FROM processed_webhooks WHERE event_id = $1)", p.EventID).Scan(&seen); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if !seen {
			if err := applyPaymentTo(r.Context(), pool, p); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			if _, err := pool.Exec(r.Context(), "INSERT INTO processed_webhooks (event_id) VALUES ($1) ON CONFLICT DO NOTHING", p.EventID); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"received":true}`))
	}))
	return &target{url: url, secret: DevSecret, client: httpClient(), applied: sumBalances(pool, "balances"), db: pool}
}

type paymentArgs struct {
	EventID string `json:"event_id" river:"unique"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

func (paymentArgs) Kind() string { return "bench_payment" }

type paymentWorker struct {
	river.WorkerDefaults[paymentArgs]
	pool *pgxpool.Pool
}

func (w *paymentWorker) Work(ctx context.Context, job *river.Job[paymentArgs]) error {
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if err := applyPaymentTo(ctx, tx, &payment{EventID: job.Args.EventID, Account: job.Args.Account, Amount: job.Args.Amount}); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// newRiverTarget is the River-only receiver: a job unique by event id.
func newRiverTarget(b *testing.B) *target {
	pool := testdb.New(b)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, baselineSchema); err != nil {
		b.Fatal(err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &paymentWorker{pool: pool})
	cfg := riverConfig(workers, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// One short job per event: River tuned as the benchmarks tune every
	// River peer (loadtest.RiverWorkers workers, its fetch cooldown and
	// poll), not the example's config for Wharf's batches.
	cfg.Queues = map[string]river.QueueConfig{"wharf_inbox": {MaxWorkers: loadtest.RiverWorkers}}
	cfg.FetchCooldown = loadtest.RiverFetchCooldown
	cfg.FetchPollInterval = loadtest.RiverFetchPollInterval
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Stop(ctx) })
	v := signature.NewStandardWebhooks(signature.Secrets{DevSecret}, nil)
	uniqueByArgs := &river.InsertOpts{Queue: "wharf_inbox", UniqueOpts: river.UniqueOpts{ByArgs: true}}
	url := serve(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := verifiedPayment(w, r, v)
		if !ok {
			return
		}
		if _, err := client.Insert(r.Context(), paymentArgs{EventID: p.EventID, Account: p.Account, Amount: p.Amount}, uniqueByArgs); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"received":true}`))
	}))
	return &target{url: url, secret: DevSecret, client: httpClient(), applied: sumBalances(pool, "balances"), db: pool}
}

// pgbenchScript writes, per transaction and as one statement, the rows
// Wharf writes for one webhook: its dedupe key, its 1 KB message and its
// River job.
const pgbenchScript = `\set id random(1, 9000000000000000000)
WITH k AS (
  INSERT INTO wharf_inbox_keys (source, event_id, payload_hash, message_id, received_at)
  VALUES ('pgbench', 'evt_' || :id, sha256(:id::text::bytea), gen_random_uuid(), now())
  RETURNING message_id
), j AS (
  INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
  SELECT jsonb_build_object('message_id', message_id, 'received_at', now()), 'pgbench', 20, 'pgbench', 'available', now() FROM k
  RETURNING id
)
INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, event_type, headers, body, payload_hash, status, job_id, updated_at)
SELECT k.message_id, now(), 'pgbench', 'evt_' || :id, 'payment.succeeded', '{}', convert_to(repeat('x', 1024), 'UTF8'), sha256(:id::text::bytea), 'received', j.id, now()
FROM k, j;
`

var tpsPattern = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbench runs the one-statement write with clients connections for
// seconds and returns its transactions per second.
func pgbench(b *testing.B, clients, seconds int) float64 {
	b.Helper()
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		b.Fatal("pgbench is not installed (Debian: apt-get install postgresql-client): the raw-Postgres baseline needs it")
	}
	url := testdb.NewURL(b)
	script := filepath.Join(b.TempDir(), "rows.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o644); err != nil {
		b.Fatal(err)
	}
	threads := min(clients, 2)
	loadtest.Checkpoint(b)
	// -M prepared: a competent user's baseline plans the statement once per
	// connection, as Wharf's statements are (simple mode parses and plans
	// the CTE on every transaction: about half the rate).
	out, err := exec.Command(bin, "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", strconv.Itoa(threads),
		"-T", strconv.Itoa(seconds), "-f", script, url).CombinedOutput()
	if err != nil {
		b.Fatalf("pgbench: %v\n%s", err, out)
	}
	m := tpsPattern.FindSubmatch(out)
	if m == nil {
		b.Fatal(errors.New("pgbench printed no tps:\n" + string(out)))
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	return tps
}
