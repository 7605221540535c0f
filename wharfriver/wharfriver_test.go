package wharfriver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetrytest"
	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/jobs"
	"github.com/wharfhq/wharf/outbox"
	"github.com/wharfhq/wharf/wharfriver"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// components returns an inbox and an outbox on a fresh database, whose
// handler sends each processed message's event id on processed and whose
// one endpoint sends each delivery's webhook-id on delivered.
func components(t *testing.T) (*pgxpool.Pool, *inbox.Inbox, *outbox.Outbox, chan string, chan string) {
	t.Helper()
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Logger: quiet})
	require.NoError(t, err)
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet, AllowPrivateNetworks: true})
	require.NoError(t, err)
	processed := make(chan string, 10)
	ib.Handle(inbox.Wildcard, inbox.Wildcard, func(_ context.Context, _ pgx.Tx, msg *inbox.Message) error {
		processed <- msg.EventID
		return nil
	})
	delivered := make(chan string, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		delivered <- r.Header.Get("webhook-id")
	}))
	t.Cleanup(sink.Close)
	_, err = ob.EndpointEnsure(context.Background(), &outbox.EndpointParams{URL: sink.URL})
	require.NoError(t, err)
	return pool, ib, ob, processed, delivered
}

// TestConfigure: one call wires the inbox, the outbox and the periodic
// jobs into an empty River config, and the client then processes a
// received message and delivers a published event.
func TestConfigure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ib, ob, processed, delivered := components(t)

	cfg := &river.Config{Logger: quiet, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Pool: pool, Inbox: ib, Outbox: ob}))
	require.Equal(t, map[string]river.QueueConfig{
		inbox.DefaultQueue:  {MaxWorkers: wharfriver.DefaultInboxWorkers},
		outbox.DefaultQueue: {MaxWorkers: wharfriver.DefaultOutboxWorkers},
		river.QueueDefault:  {MaxWorkers: wharfriver.DefaultJobsWorkers},
	}, cfg.Queues)
	require.Len(t, cfg.PeriodicJobs, 7, "partition upkeep, retention, the rollup, the queue check, the inbox's and the outbox's rescues, the outbox's notices")
	require.Equal(t, 90*time.Second, cfg.RescueStuckJobsAfter, "River's 1 min job timeout plus 30 s")

	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "evt_1", Body: []byte(`{}`)}); err != nil {
			return err
		}
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.created", Data: map[string]int{"n": 1}})
		return err
	}))
	select {
	case id := <-processed:
		require.Equal(t, "evt_1", id)
	case <-time.After(20 * time.Second):
		t.Fatal("the inbox message was not processed")
	}
	select {
	case id := <-delivered:
		require.NotEmpty(t, id)
	case <-time.After(20 * time.Second):
		t.Fatal("the outbox event was not delivered")
	}
}

// TestConfigureKeepsWhatIsSet: queues already configured keep their
// settings, and a set RescueStuckJobsAfter stays.
func TestConfigureKeepsWhatIsSet(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Logger: quiet})
	require.NoError(t, err)
	cfg := &river.Config{
		Queues:               map[string]river.QueueConfig{inbox.DefaultQueue: {MaxWorkers: 3}, "app": {MaxWorkers: 7}},
		JobTimeout:           20 * time.Second,
		RescueStuckJobsAfter: 45 * time.Second,
		FetchPollInterval:    2 * time.Second,
	}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, NoJobs: true}))
	// A cooldown neither the client nor the queue set is Wharf's to set.
	require.Equal(t, map[string]river.QueueConfig{
		inbox.DefaultQueue: {MaxWorkers: 3, FetchCooldown: wharfriver.DefaultFetchCooldown}, "app": {MaxWorkers: 7},
	}, cfg.Queues)
	require.Equal(t, 45*time.Second, cfg.RescueStuckJobsAfter)
	require.Equal(t, 2*time.Second, cfg.FetchPollInterval)
	require.Empty(t, cfg.PeriodicJobs)
}

// TestConfigureSetsFetchCooldown: the inbox's and the outbox's queues get
// DefaultFetchCooldown (River's 100 ms made a webhook or an event wait up
// to that long for a fetch) unless the client or the queue sets one; the
// periodic jobs' queue keeps River's.
func TestConfigureSetsFetchCooldown(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Logger: quiet})
	require.NoError(t, err)
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet})
	require.NoError(t, err)
	cfg := &river.Config{}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Pool: pool, Inbox: ib, Outbox: ob}))
	require.Equal(t, wharfriver.DefaultFetchCooldown, cfg.Queues[inbox.DefaultQueue].FetchCooldown)
	require.Equal(t, wharfriver.DefaultFetchCooldown, cfg.Queues[outbox.DefaultQueue].FetchCooldown)
	require.Zero(t, cfg.Queues[river.QueueDefault].FetchCooldown, "the periodic jobs' queue")
	_, err = river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)

	cfg = &river.Config{Queues: map[string]river.QueueConfig{outbox.DefaultQueue: {MaxWorkers: 9, FetchCooldown: 40 * time.Millisecond}}}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, Outbox: ob, NoJobs: true}))
	require.Equal(t, river.QueueConfig{MaxWorkers: 9, FetchCooldown: 40 * time.Millisecond}, cfg.Queues[outbox.DefaultQueue])
	cfg = &river.Config{FetchCooldown: 30 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, Outbox: ob, NoJobs: true}))
	require.Zero(t, cfg.Queues[inbox.DefaultQueue].FetchCooldown, "the client's cooldown applies")
}

// TestCommitWakesWorkers: messages received and events published one per
// transaction, milliseconds apart, are processed and delivered without
// waiting for the workers' poll (30 s here). With River's 100 ms between
// insert notifications, only the first of a burst notified the workers and
// the others waited for the poll.
func TestCommitWakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ib, ob, processed, delivered := components(t)
	cfg := &river.Config{Logger: quiet, FetchPollInterval: 30 * time.Second}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, Outbox: ob, NoJobs: true}))
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })

	await := func(ch chan string, what string, n int) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for i := range n {
			select {
			case <-ch:
			case <-timeout:
				t.Fatalf("%d of %d %s within 10 s: the others wait for the poll", i, n, what)
			}
		}
	}
	// One of each first: the workers are listening once it arrived.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "first", Body: []byte(`{}`)}); err != nil {
			return err
		}
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "t", Data: map[string]int{"n": 0}})
		return err
	}))
	await(processed, "messages processed", 1)
	await(delivered, "events delivered", 1)

	const burst = 4
	for i := range burst {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`)})
			return err
		}))
		time.Sleep(2 * time.Millisecond) // the burst's pace: commits 2 ms apart
	}
	for i := range burst {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "t", Data: map[string]int{"n": i}})
			return err
		}))
		time.Sleep(2 * time.Millisecond)
	}
	await(processed, "messages processed", burst)
	await(delivered, "events delivered", burst)
}

// TestConfigureSetsPollInterval: an unset FetchPollInterval becomes
// DefaultFetchPollInterval, or FetchCooldown if that is longer.
func TestConfigureSetsPollInterval(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ib, err := inbox.New(pool, &inbox.Config{Logger: quiet})
	require.NoError(t, err)
	cfg := &river.Config{}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, NoJobs: true}))
	require.Equal(t, wharfriver.DefaultFetchPollInterval, cfg.FetchPollInterval)
	cfg = &river.Config{FetchCooldown: 300 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, NoJobs: true}))
	require.Equal(t, 300*time.Millisecond, cfg.FetchPollInterval)
	// A queue's own cooldown counts too, unless it has its own poll; River
	// accepts the result.
	cfg = &river.Config{Queues: map[string]river.QueueConfig{
		"app":    {MaxWorkers: 1, FetchCooldown: 250 * time.Millisecond},
		"polled": {MaxWorkers: 1, FetchCooldown: 2 * time.Second, FetchPollInterval: 3 * time.Second},
	}}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, NoJobs: true}))
	require.Equal(t, 250*time.Millisecond, cfg.FetchPollInterval)
	_, err = river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
}

// TestConfigureRefusesBrokenGuarantees: each set value that would break a
// guarantee is named, and the config is left as it was.
func TestConfigureRefusesBrokenGuarantees(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet})
	require.NoError(t, err)
	for _, tt := range []struct {
		cfg   river.Config
		comps wharfriver.Components
		want  string
	}{
		{river.Config{}, wharfriver.Components{Pool: pool, Jobs: &jobs.Config{DedupeWindow: time.Hour}}, "DedupeWindow 1h0m0s is outside"},
		{river.Config{JobTimeout: time.Minute, RescueStuckJobsAfter: 30 * time.Second}, wharfriver.Components{Pool: pool}, "RescueStuckJobsAfter 30s is shorter than JobTimeout 1m0s"},
		{river.Config{}, wharfriver.Components{Outbox: ob}, "Components.Pool is required"},
	} {
		cfg := tt.cfg
		err := wharfriver.Configure(&cfg, &tt.comps)
		require.ErrorContains(t, err, tt.want)
		require.ErrorIs(t, err, wharfriver.ErrInvalidConfig)
		require.Nil(t, cfg.Workers, "a refused config is left alone")
		require.Nil(t, cfg.Queues)
	}
	// Registering the same component twice is refused too.
	cfg := &river.Config{}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Outbox: ob, NoJobs: true}))
	err = wharfriver.Configure(cfg, &wharfriver.Components{Outbox: ob, NoJobs: true})
	require.ErrorContains(t, err, "already registered")
	require.ErrorIs(t, err, wharfriver.ErrInvalidConfig)
}

// TestUnworkedQueueIsReported: deliveries waiting in a queue that no
// client works (an outbox on its own queue, left out of this client) are
// reported at error once when the leader starts.
func TestUnworkedQueueIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	ob, err := outbox.New(pool, &outbox.Config{Logger: quiet, Queue: "forgotten"})
	require.NoError(t, err)
	_, err = ob.EndpointEnsure(ctx, &outbox.EndpointParams{URL: "https://hooks.example.com/x"})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "a", Data: map[string]int{}})
		return err
	}))
	// The delivery has waited 20 minutes.
	_, err = pool.Exec(ctx, "UPDATE river_job SET scheduled_at = now() - interval '20 minutes' WHERE queue = 'forgotten'")
	require.NoError(t, err)

	var logs testdb.LockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
	cfg := &river.Config{Logger: quiet, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	metrics := telemetrytest.NewMetrics(t)
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Pool: pool, Logger: logger, MeterProvider: metrics.Provider}))
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })

	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "queue=forgotten") }, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, logs.String(), "no River client works")
	require.Equal(t, 1, strings.Count(logs.String(), "queue=forgotten"))

	// And the metric: one job waits in the unworked queue.
	require.Equal(t, map[string]int64{"forgotten": 1}, telemetrytest.GaugeBy(t, metrics.Collect(t)["wharf_unworked_queue_jobs"], "queue"))
}

type failingArgs struct{}

func (failingArgs) Kind() string { return "app_failing" }

type failingWorker struct {
	river.WorkerDefaults[failingArgs]
}

func (failingWorker) Work(context.Context, *river.Job[failingArgs]) error {
	return errors.New("app job failed")
}

// TestOneLogLinePerFailure: at info, a failed inbox handler is one line,
// Wharf's own, not also River's "Job errored" without its context; River's
// line about the application's own failing job stays.
func TestOneLogLinePerFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var logs telemetrytest.Logs
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ib, err := inbox.New(pool, &inbox.Config{Logger: logger, BatchSize: 1})
	require.NoError(t, err)
	ib.Handle(inbox.Wildcard, inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		return errors.New("downstream down")
	})
	workers := river.NewWorkers()
	river.AddWorker(workers, failingWorker{})
	cfg := &river.Config{Logger: logger, Workers: workers, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, &wharfriver.Components{Inbox: ib, NoJobs: true}))
	cfg.Queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: 1}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)

	var msgJob int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ib.ReceiveTx(ctx, tx, inbox.Incoming{Source: "s", EventID: "evt_1", Body: []byte(`{}`)})
		msgJob = res.JobID
		return err
	}))
	appJob, err := client.Insert(ctx, failingArgs{}, nil)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })

	// River logs a failure before it records it on the job.
	for _, id := range []int64{msgJob, appJob.Job.ID} {
		require.Eventually(t, func() bool {
			job, err := client.JobGet(ctx, id)
			require.NoError(t, err)
			return len(job.Errors) > 0
		}, 20*time.Second, 20*time.Millisecond, "job %d never failed", id)
	}
	out := logs.String()
	require.Equal(t, 1, strings.Count(out, "inbox: message failed, will retry"), out)
	require.Equal(t, 1, strings.Count(out, "Job errored"), "River's line for the app's job only:\n%s", out)
	require.Contains(t, out, "job_kind=app_failing")
}

// awaitJobFailure starts a River client configured for comps, logging to
// logger (which writes to logs), waits until a job of kind has recorded a
// failure, and returns the logs. River logs a failure before it records it
// on the job.
func awaitJobFailure(t *testing.T, pool *pgxpool.Pool, logger *slog.Logger, logs *telemetrytest.Logs, comps *wharfriver.Components, kind string) string {
	t.Helper()
	ctx := context.Background()
	cfg := &river.Config{Logger: logger, FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	require.NoError(t, wharfriver.Configure(cfg, comps))
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { require.NoError(t, client.Stop(ctx)) })
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job
			WHERE kind = $1 AND array_length(errors, 1) > 0`, kind).Scan(&n)
		return err == nil && n > 0
	}, 60*time.Second, 50*time.Millisecond, "the %s job never failed", kind)
	return logs.String()
}

// TestPeriodicJobFailureIsLogged: a failing periodic job of Wharf's (here
// the inbox's rescue), which leaves its failure to River to log, still
// shows in the logs at info: the quiet logger drops River's line only for
// the workers that log their failures themselves.
func TestPeriodicJobFailureIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var logs telemetrytest.Logs
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ib, err := inbox.New(pool, &inbox.Config{Logger: logger})
	require.NoError(t, err)
	// Breaks the rescue's query only.
	_, err = pool.Exec(ctx, "ALTER TABLE wharf_inbox_messages RENAME COLUMN updated_at TO updated_at_broken")
	require.NoError(t, err)
	out := awaitJobFailure(t, pool, logger, &logs, &wharfriver.Components{Pool: pool, Inbox: ib}, "wharf_inbox_rescue")
	require.Contains(t, out, "job_kind=wharf_inbox_rescue", "the rescue's failure appears nowhere in the logs:\n%s", out)
	require.Contains(t, out, "updated_at")
}

// TestDeliveryJobFailureIsLogged: a delivery job that fails before any
// attempt (here its delivery cannot be loaded) is logged by the outbox,
// since the quiet logger leaves River's line for it out.
func TestDeliveryJobFailureIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var logs telemetrytest.Logs
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ob, err := outbox.New(pool, &outbox.Config{Logger: logger, AllowPrivateNetworks: true, DeliveryBatchSize: 1})
	require.NoError(t, err)
	_, err = ob.EndpointCreate(ctx, &outbox.EndpointParams{URL: "http://127.0.0.1:9/never"})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ob.PublishTx(ctx, tx, &outbox.Event{Type: "order.created", Data: map[string]int{"n": 1}})
		return err
	}))
	// Breaks the load of the delivery (not a transient error: no snooze).
	_, err = pool.Exec(ctx, "ALTER TABLE wharf_outbox_deliveries RENAME COLUMN generation TO generation_broken")
	require.NoError(t, err)
	out := awaitJobFailure(t, pool, logger, &logs, &wharfriver.Components{Outbox: ob, NoJobs: true}, outbox.DeliveryKind)
	require.Contains(t, out, "outbox: the job failed", "the job's failure appears nowhere in the logs:\n%s", out)
	require.Contains(t, out, "generation")
}
