package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/signature"
)

// Benchmark sizes: each iteration delivers benchDeliveries events and works
// as many no-op jobs, so `-benchtime 1x` (make bench) gives usable numbers.
// WHARF_BENCH_DELIVERIES sets benchDeliveries for steadier figures.
var benchDeliveries = max(loadtest.EnvInt("WHARF_BENCH_DELIVERIES", 5000), 2)

const (
	benchWorkers = loadtest.RiverWorkers
	benchTxs     = 300
)

// noopArgs is a River job that does nothing: River's own throughput.
type noopArgs struct{}

func (noopArgs) Kind() string { return "wharf_bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// plainSendArgs is what a River user would write instead of the outbox: a
// job that signs a body (Standard Webhooks) and POSTs it, done on 2xx.
type plainSendArgs struct {
	URL  string `json:"url"`
	ID   string `json:"id"`
	Body []byte `json:"body"`
}

func (plainSendArgs) Kind() string { return "wharf_bench_plain_send" }

type plainSendWorker struct {
	river.WorkerDefaults[plainSendArgs]
	client *http.Client
	secret string
}

func (w *plainSendWorker) Work(ctx context.Context, job *river.Job[plainSendArgs]) error {
	header, err := signature.SignStandardWebhooks([]string{w.secret}, job.Args.ID, time.Now(), job.Args.Body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, job.Args.URL, bytes.NewReader(job.Args.Body))
	if err != nil {
		return err
	}
	req.Header = header
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// benchRiverConfig is the River config of the outbox and of its River
// peers (no-op jobs, the plain sender) alike: the benchmarks' tuned River
// (loadtest.RiverWorkers workers on the outbox queue, fetch cooldown
// loadtest.RiverFetchCooldown, poll loadtest.RiverFetchPollInterval).
func benchRiverConfig(ob *outbox.Outbox) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	if err := ob.AddWorkers(workers); err != nil {
		panic(err)
	}
	cfg := riverConfig(ob, workers, benchWorkers)
	cfg.FetchCooldown = loadtest.RiverFetchCooldown
	cfg.FetchPollInterval = loadtest.RiverFetchPollInterval
	cfg.CompletedJobRetentionPeriod = time.Hour
	return cfg
}

// plainHTTPClient is the plain sender's client: one that keeps a
// connection per worker, as a competent user configures it (Go's default
// keeps 2 idle connections a host, so 100 workers would dial for most
// requests).
func plainHTTPClient() *http.Client {
	return &http.Client{
		Timeout:   15 * time.Second,
		Transport: &http.Transport{MaxIdleConns: benchWorkers, MaxIdleConnsPerHost: benchWorkers, IdleConnTimeout: time.Minute},
	}
}

// benchConfig is testConfig with the default DeliveryBatchSpan, or
// WHARF_BENCH_DELIVERY_SPAN_MS milliseconds: the benchmarks time batches
// as they split in production. A shorter span splits batches on a busy
// machine the way the default does on a slower one.
func benchConfig() *outbox.Config {
	cfg := testConfig()
	cfg.DeliveryBatchSpan = time.Duration(loadtest.EnvInt("WHARF_BENCH_DELIVERY_SPAN_MS", 0)) * time.Millisecond
	return cfg
}

// benchPoolConns is the pool size of the benchmarks. pgxpool's default
// (the larger of 4 and the CPU count) would make 100 workers queue for 4
// connections.
const benchPoolConns = 40

func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	poolCfg, err := pgxpool.ParseConfig(testdb.NewURL(b))
	require.NoError(b, err)
	poolCfg.MaxConns = benchPoolConns
	pool, err := pgxpool.NewWithConfig(context.Background(), poolCfg)
	require.NoError(b, err)
	b.Cleanup(pool.Close)
	return pool
}

// workAll starts a River client, waits until n jobs completed and returns
// the steady time of n jobs: the span of the jobs' own finish times
// (FinalizedAt), scaled from n-1 to n. It leaves out the client's start (a
// fixed cost that weighed most on the fastest runs), and River's completer,
// which reports finished jobs in batches every 50 ms or more, cannot shift
// either end.
func workAll(b *testing.B, pool *pgxpool.Pool, cfg *river.Config, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(b, err)
	completed, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: n + 100,
	})
	defer cancel()
	loadtest.Checkpoint(b)
	require.NoError(b, client.Start(ctx))
	var first, last time.Time
	for range n {
		select {
		case ev := <-completed:
			require.NotNil(b, ev.Job.FinalizedAt)
			at := *ev.Job.FinalizedAt
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		case <-time.After(time.Minute):
			b.Fatalf("jobs stopped completing")
		}
	}
	elapsed := last.Sub(first) * time.Duration(n) / time.Duration(n-1)
	stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	require.NoError(b, client.Stop(stopCtx))
	return elapsed
}

// deliverAll publishes n events of data in one transaction, delivers them
// and returns the time they took: the longer of the span of the delivery
// jobs' finish times (FinalizedAt, scaled as workAll scales it) and the
// span from the first attempt's start to the last success. A batch job
// finishes after all its deliveries, so the first job's finish leaves out
// more of the run than a job per delivery does; the attempts' span does
// not. It waits until every delivery succeeded and no delivery job is left
// to run, however many jobs the batches split into.
func deliverAll(b *testing.B, pool *pgxpool.Pool, ob *outbox.Outbox, n int, data json.RawMessage) time.Duration {
	b.Helper()
	ctx := context.Background()
	since := time.Now()
	publishBench(b, pool, ob, n, data)
	client, err := river.NewClient(riverpgxv5.New(pool), benchRiverConfig(ob))
	require.NoError(b, err)
	loadtest.Checkpoint(b)
	require.NoError(b, client.Start(ctx))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		// Both through partial or leading-column indexes: cheap to ask
		// every 50 ms.
		var busy bool
		require.NoError(b, pool.QueryRow(ctx, `
			SELECT EXISTS (SELECT 1 FROM wharf_outbox_deliveries WHERE status <> 'succeeded')
			    OR EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'scheduled', 'retryable', 'pending')
			                 AND kind IN ($1, $2))`,
			outbox.DeliveryKind, outbox.DeliveryBatchKind).Scan(&busy))
		if !busy {
			break
		}
		require.True(b, time.Now().Before(deadline), "deliveries stopped succeeding")
		time.Sleep(50 * time.Millisecond)
	}
	stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	require.NoError(b, client.Stop(stopCtx))

	var jobs int
	var jobSpan, span float64
	require.NoError(b, pool.QueryRow(ctx, `
		SELECT count(*), COALESCE(EXTRACT(EPOCH FROM max(finalized_at) - min(finalized_at))::float8, 0)
		FROM river_job WHERE kind IN ($1, $2) AND created_at >= $3`,
		outbox.DeliveryKind, outbox.DeliveryBatchKind, since).Scan(&jobs, &jobSpan))
	if jobs > 1 {
		jobSpan = jobSpan * float64(jobs) / float64(jobs-1)
	}
	var delivered int
	require.NoError(b, pool.QueryRow(ctx, `
		SELECT count(*), EXTRACT(EPOCH FROM max(d.succeeded_at) - min(a.attempted_at))::float8
		FROM wharf_outbox_deliveries d JOIN wharf_outbox_attempts a ON a.delivery_id = d.id
		WHERE d.created_at >= $1`, since).Scan(&delivered, &span))
	require.Equal(b, n, delivered, "every delivery succeeded at its first attempt")
	return time.Duration(max(jobSpan, span) * float64(time.Second))
}

// publishBench publishes n events of data in one transaction.
func publishBench(b *testing.B, pool *pgxpool.Pool, ob *outbox.Outbox, n int, data json.RawMessage) {
	b.Helper()
	ctx := context.Background()
	events := make([]*outbox.Event, n)
	for i := range events {
		events[i] = &outbox.Event{Type: "bench.event", Data: data}
	}
	require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishManyTx(ctx, tx, events)
		return err
	}))
}

// BenchmarkDelivery compares the outbox's delivery throughput (1 KB events
// to a loopback sink answering 204, one endpoint with a cap of 100 in
// flight, published in one transaction: 100 batch jobs of 50) with River's
// throughput for no-op jobs and with a plain River sender (a job signing
// and POSTing the same body to the same sink), under the same River
// config, in the same run; and the outbox's throughput with a job per
// delivery (DeliveryBatchSize 1: what events published one per
// transaction get), and with batches whose span is 250 ms (which they
// outlast on a busy machine), against the same plain sender. WHARF_BENCH_DELIVERY_RATE_LIMIT
// gives the endpoint a rate limit (requests per second, the same burst). Reported: deliveries/s,
// noop_jobs/s, plain_sends/s and the ratios, as BENCH lines too.
func BenchmarkDelivery(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	cfg := benchConfig()
	// WHARF_BENCH_DELIVERY_BATCH sets DeliveryBatchSize (default 64).
	cfg.DeliveryBatchSize = loadtest.EnvInt("WHARF_BENCH_DELIVERY_BATCH", 0)
	ob, err := outbox.New(pool, cfg)
	require.NoError(b, err)
	receiver := newSink(b, status(http.StatusNoContent))
	params := &outbox.EndpointParams{URL: receiver.URL(), MaxInFlight: benchWorkers}
	if limit := loadtest.EnvFloat("WHARF_BENCH_DELIVERY_RATE_LIMIT", 0); limit > 0 {
		// The rate limit's own cost: a limit the run never reaches still
		// takes a token with each slot.
		params.RateLimit = &outbox.RateLimit{PerSecond: limit, Burst: int(limit)}
	}
	_, err = ob.EndpointCreate(ctx, params)
	require.NoError(b, err)
	data := json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))

	// The same deliveries with a job each, as events published one per
	// transaction get them (DeliveryBatchSize 1).
	singleCfg := benchConfig()
	singleCfg.DeliveryBatchSize = 1
	single, err := outbox.New(pool, singleCfg)
	require.NoError(b, err)

	// The same batches with a span of 250 ms, which a busy machine's
	// batches outlast (a slower machine's outlast the default's).
	shortCfg := benchConfig()
	shortCfg.DeliveryBatchSpan = 250 * time.Millisecond
	shortCfg.DeliveryBatchSize = cfg.DeliveryBatchSize
	short, err := outbox.New(pool, shortCfg)
	require.NoError(b, err)

	var deliveryTime, singleTime, shortTime, noopTime, plainTime time.Duration
	for b.Loop() {
		plain := make([]river.InsertManyParams, benchDeliveries)
		for i := range plain {
			body, _ := json.Marshal(map[string]any{"type": "bench.event", "data": data})
			plain[i] = river.InsertManyParams{Args: plainSendArgs{URL: receiver.URL(), ID: fmt.Sprintf("msg_%d", i), Body: body}, InsertOpts: &river.InsertOpts{Queue: ob.Queue()}}
		}
		plainInserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		require.NoError(b, err)
		_, err = plainInserter.InsertManyFast(ctx, plain)
		require.NoError(b, err)
		plainCfg := benchRiverConfig(ob)
		river.AddWorker(plainCfg.Workers, &plainSendWorker{client: plainHTTPClient(), secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})
		plainTime += workAll(b, pool, plainCfg, benchDeliveries)

		noops := make([]river.InsertManyParams, benchDeliveries)
		for i := range noops {
			noops[i] = river.InsertManyParams{Args: noopArgs{}, InsertOpts: &river.InsertOpts{Queue: ob.Queue()}}
		}
		riverCfg := benchRiverConfig(ob)
		inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
		require.NoError(b, err)
		_, err = inserter.InsertManyFast(ctx, noops)
		require.NoError(b, err)
		noopTime += workAll(b, pool, riverCfg, benchDeliveries)

		deliveryTime += deliverAll(b, pool, ob, benchDeliveries, data)
		singleTime += deliverAll(b, pool, single, benchDeliveries, data)
		shortTime += deliverAll(b, pool, short, benchDeliveries, data)
	}
	deliveriesPerSec := float64(b.N*benchDeliveries) / deliveryTime.Seconds()
	noopsPerSec := float64(b.N*benchDeliveries) / noopTime.Seconds()
	b.ReportMetric(deliveriesPerSec, "deliveries/s")
	b.ReportMetric(noopsPerSec, "noop_jobs/s")
	plainPerSec := float64(b.N*benchDeliveries) / plainTime.Seconds()
	b.ReportMetric(plainPerSec, "plain_sends/s")
	singlePerSec := float64(b.N*benchDeliveries) / singleTime.Seconds()
	b.ReportMetric(singlePerSec, "single_job_deliveries/s")
	shortPerSec := float64(b.N*benchDeliveries) / shortTime.Seconds()
	b.ReportMetric(shortPerSec, "250ms_span_deliveries/s")
	b.ReportMetric(deliveriesPerSec/noopsPerSec, "ratio")
	b.ReportMetric(0, "ns/op")
	loadtest.Bench("outbox_delivery_vs_river_noop_job_per_s", deliveriesPerSec, noopsPerSec)
	loadtest.Bench("outbox_delivery_vs_plain_river_sender_per_s", deliveriesPerSec, plainPerSec)
	loadtest.Bench("outbox_delivery_job_each_vs_plain_river_sender_per_s", singlePerSec, plainPerSec)
	loadtest.Bench("outbox_delivery_250ms_span_vs_plain_river_sender_per_s", shortPerSec, plainPerSec)
	require.GreaterOrEqual(b, len(receiver.all()), 4*b.N*benchDeliveries)
}

// BenchmarkDeliverySlowEndpoint checks that batch jobs cost a burst to an
// endpoint that takes a while to answer nothing against a job per
// delivery: benchDeliveries 1 KB events published in one transaction to an
// endpoint answering 204 after 20 ms, capped at 100 in flight, delivered
// with the default batching and with DeliveryBatchSize 1, in the same run.
// Batches of 64 alone would give the burst 79 jobs, so 79 requests in
// flight where the cap allows 100; a publish spreads them over the cap.
// Reported as a BENCH line: the ratio is at least 1 when batching costs
// nothing here.
func BenchmarkDeliverySlowEndpoint(b *testing.B) {
	const answerAfter = 20 * time.Millisecond
	ctx := context.Background()
	pool := benchPool(b)
	receiver := newSink(b, func(int, http.ResponseWriter, *http.Request) { time.Sleep(answerAfter) })
	data := json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))
	batched, err := outbox.New(pool, benchConfig())
	require.NoError(b, err)
	singleCfg := benchConfig()
	singleCfg.DeliveryBatchSize = 1
	single, err := outbox.New(pool, singleCfg)
	require.NoError(b, err)
	_, err = batched.EndpointCreate(ctx, &outbox.EndpointParams{URL: receiver.URL(), MaxInFlight: benchWorkers})
	require.NoError(b, err)
	var batchedRate, singleRate float64
	for b.Loop() {
		batchedRate = float64(benchDeliveries) / deliverAll(b, pool, batched, benchDeliveries, data).Seconds()
		singleRate = float64(benchDeliveries) / deliverAll(b, pool, single, benchDeliveries, data).Seconds()
	}
	b.ReportMetric(batchedRate, "deliveries/s_batched")
	b.ReportMetric(singleRate, "deliveries/s_job_each")
	b.ReportMetric(0, "ns/op")
	loadtest.Bench("outbox_delivery_20ms_endpoint_batched_vs_job_each_per_s", batchedRate, singleRate)
}

// BenchmarkDeliveryBacklog checks that delivery does not slow as the
// backlog grows: the rate of draining benchBacklog deliveries queued at
// once against the rate of draining benchDeliveries, to the same endpoint
// (a cap of 100 in flight), in the same run, the backlog's statistics
// taken after the small drain (every delivery succeeded), as after an
// outage. Recording a batch of successes once read the endpoint's whole
// backlog, and cost more with every delivery queued; so did every record,
// hand-over and dead-lettering on such statistics (0.05× the small
// drain's rate). Reported as a BENCH line: the ratio is 1 when the cost is
// flat.
func BenchmarkDeliveryBacklog(b *testing.B) {
	const benchBacklog = 30000
	ctx := context.Background()
	pool := benchPool(b)
	ob, err := outbox.New(pool, benchConfig())
	require.NoError(b, err)
	receiver := newSink(b, status(http.StatusNoContent))
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: receiver.URL(), MaxInFlight: benchWorkers})
	require.NoError(b, err)
	data := json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))
	drain := func(n int) float64 {
		return float64(n) / deliverAll(b, pool, ob, n, data).Seconds()
	}
	var small, large float64
	for b.Loop() {
		small = drain(benchDeliveries)
		// The backlog comes as after an outage or a burst: the statistics
		// were taken while every delivery had succeeded, so the planner
		// believes almost none is unfinished.
		_, err := pool.Exec(ctx, "ANALYZE wharf_outbox_deliveries")
		require.NoError(b, err)
		large = drain(benchBacklog)
	}
	b.ReportMetric(small, "deliveries/s_small")
	b.ReportMetric(large, "deliveries/s_backlog")
	b.ReportMetric(0, "ns/op")
	loadtest.Bench(fmt.Sprintf("outbox_delivery_%d_queued_vs_%d_queued_per_s", benchBacklog, benchDeliveries), large, small)
}

// BenchmarkPublishOverhead measures what PublishTx adds to an application
// transaction: a transaction inserting one row, against the same
// transaction also publishing one 1 KB event to one endpoint. Reported: the
// microseconds of each and the difference.
func BenchmarkPublishOverhead(b *testing.B) {
	ctx := context.Background()
	pool := benchPool(b)
	ob, err := outbox.New(pool, benchConfig())
	require.NoError(b, err)
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "https://example.com/hook"})
	require.NoError(b, err)
	_, err = pool.Exec(ctx, `CREATE TABLE bench_accounts (id bigserial PRIMARY KEY, balance bigint NOT NULL)`)
	require.NoError(b, err)
	event := &outbox.Event{Type: "balance.updated", Data: json.RawMessage(fmt.Sprintf(`{"filler":%q}`, strings.Repeat("x", 1000)))}

	appTx := func(publish bool) time.Duration {
		start := time.Now()
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO bench_accounts (balance) VALUES (42)`); err != nil {
				return err
			}
			if publish {
				_, err := ob.PublishTx(ctx, tx, event)
				return err
			}
			return nil
		}))
		return time.Since(start)
	}
	appTx(true) // warm the partition cache and statement caches
	var plain, withPublish time.Duration
	for b.Loop() {
		for range benchTxs {
			plain += appTx(false)
			withPublish += appTx(true)
		}
	}
	n := float64(b.N * benchTxs)
	b.ReportMetric(float64(plain.Microseconds())/n, "µs/tx")
	b.ReportMetric(float64(withPublish.Microseconds())/n, "µs/tx+publish")
	b.ReportMetric(float64((withPublish-plain).Microseconds())/n, "µs_overhead")
	b.ReportMetric(0, "ns/op")
}
