package inbox_test

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

const (
	chaosURLEnv     = "WHARF_CHAOS_DATABASE_URL"
	chaosPooledEnv  = "WHARF_CHAOS_POLL_ONLY" // "1": the worker is behind a pooler
	chaosJobTimeout = 500 * time.Millisecond
	chaosRescue     = time.Second
	chaosInHandler  = "IN_HANDLER"
)

// TestWorkerKilledMidHandler kills -9 a worker process while its handler is
// inside the transaction (the effect written, not committed), then starts a
// fresh worker: River's rescuer must hand the job over and the effect must
// be applied exactly once. "batch" does the same to a job of several
// messages received together: the killed batch commits nothing, and its
// rescue hands each message to a job of its own.
func TestWorkerKilledMidHandler(t *testing.T) {
	t.Parallel()
	for name, events := range map[string][]string{
		"single": {"msg_chaos"},
		"batch":  {"msg_chaos_1", "msg_chaos_2", "msg_chaos_3"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := testdb.NewURL(t)
			pool, err := pgxpool.New(context.Background(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			killMidHandler(t, pool, url, events, false)
		})
	}
}

// killMidHandler runs the scenario of TestWorkerKilledMidHandler on pool,
// whose URL the worker process connects to; pooled (behind PgBouncer in
// transaction mode) runs both River clients poll-only.
func killMidHandler(t *testing.T, pool *pgxpool.Pool, url string, eventIDs []string, pooled bool) {
	t.Helper()
	ctx := context.Background()
	createEffects(t, pool)
	b := setup(t, &setupOpts{pool: pool})
	var batch []inbox.Incoming
	for _, id := range eventIDs {
		batch = append(batch, inbox.Incoming{Source: "payments", EventID: id, Body: []byte(`{"type":"payment.succeeded"}`)})
	}
	receiveMany(t, pool, b.inbox, batch)

	// A worker process that blocks inside the handler.
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaosWorkerProcess$", "-test.v")
	cmd.Env = append(os.Environ(), chaosURLEnv+"="+url)
	if pooled {
		cmd.Env = append(cmd.Env, chaosPooledEnv+"=1")
	}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	inHandler := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if strings.Contains(scanner.Text(), chaosInHandler) {
				close(inHandler)
			}
		}
	}()
	select {
	case <-inHandler:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("worker process never reached the handler")
	}
	require.NoError(t, cmd.Process.Kill()) // SIGKILL: no cleanup, no rollback from the client
	_ = cmd.Wait()

	// The killed transaction left nothing; the job is stuck in running.
	for _, id := range eventIDs {
		require.Zero(t, effectCount(t, pool, id))
	}
	var state string
	require.NoError(t, pool.QueryRow(ctx, "SELECT state FROM river_job WHERE kind LIKE 'wharf_inbox_process%'").Scan(&state))
	require.Equal(t, "running", state)

	// Once the job is older than the rescue window, a new worker's rescuer
	// (its first run is at start) retries it.
	require.Eventually(t, func() bool {
		var stuck bool
		err := pool.QueryRow(ctx, "SELECT attempted_at < now() - $1::interval FROM river_job WHERE kind LIKE 'wharf_inbox_process%'",
			chaosRescue.String()).Scan(&stuck)
		return err == nil && stuck
	}, 10*time.Second, 20*time.Millisecond)
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
	startChaosClient(t, pool, b.inbox, false, pooled)
	awaitSettled(t, pool, inbox.StatusProcessed)
	for _, id := range eventIDs {
		require.Equal(t, 1, effectCount(t, pool, id), id)
	}
}

// TestChaosWorkerProcess is the worker process of TestWorkerKilledMidHandler;
// it does nothing unless started by it.
func TestChaosWorkerProcess(t *testing.T) {
	url := os.Getenv(chaosURLEnv)
	if url == "" {
		return // not a subprocess: nothing to do, nothing to assert
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	ib, err := inbox.New(pool, &inbox.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ib.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		os.Stdout.WriteString(chaosInHandler + "\n")
		select {} // wait to be killed
	})
	startChaosClient(t, pool, ib, true, os.Getenv(chaosPooledEnv) == "1")
	select {}
}

// startChaosClient starts a River client with the chaos tests' short job
// timeout and rescue window; pollOnly is for a pool behind PgBouncer in
// transaction mode, where LISTEN does not survive.
func startChaosClient(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, subprocess, pollOnly bool) <-chan *river.Event {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, ib.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:               map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 2}},
		Workers:              workers,
		PollOnly:             pollOnly,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		JobTimeout:           chaosJobTimeout,
		RescueStuckJobsAfter: chaosRescue,
		RetryPolicy:          fastRetry{},
		// The doomed process must not hold leadership: its lease would
		// outlive it and delay the rescuer of the next one.
		LeaderElectionDisabled: subprocess,
		Logger:                 slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:               true,
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	require.NoError(t, client.Start(context.Background()))
	if !subprocess {
		t.Cleanup(func() {
			cancel()
			require.NoError(t, client.Stop(context.Background()))
		})
	}
	return events
}
