package inbox_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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

const pooledWorkerURLEnv = "WHARF_PGBOUNCER_WORKER_URL"

// pooledPool opens a pool on a fresh test database through PgBouncer in
// transaction mode, in pgx's mode, and returns it with its URL.
func pooledPool(t *testing.T, mode string) (*pgxpool.Pool, string) {
	t.Helper()
	url := testdb.NewPgBouncer(t, testdb.NewURL(t)).URL(mode)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, url
}

// pollOnly is the River setting a client behind PgBouncer in transaction
// mode needs: LISTEN does not survive transaction pooling.
func pollOnly(cfg *river.Config) { cfg.PollOnly = true }

// TestDuplicateStormThroughPgBouncer: 30 events, each sent 8 times at once
// (half the copies with another payload), received with group commit and
// processed at the same time by a poll-only River client, all through
// PgBouncer in transaction mode: every event is accepted once, the others
// are answered duplicate, and each effect is applied exactly once.
func TestDuplicateStormThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			pool, _ := pooledPool(t, mode)
			createEffects(t, pool)
			b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{BatchSize: 16, BatchWait: 20 * time.Millisecond}})
			b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
			b.startWorkersWith(t, pollOnly)

			const events, copies = 30, 8
			var reqs []*http.Request
			for c := range copies {
				for e := range events {
					body := fmt.Appendf(nil, `{"type":"payment.succeeded","copy":%d}`, c%2)
					reqs = append(reqs, b.signed(t, "payments", fmt.Sprintf("evt_%d", e), body, time.Now()))
				}
			}
			accepted := map[string]int{}
			for _, a := range sendAll(t, reqs) {
				require.Equal(t, http.StatusOK, a.Status, a.RawBody)
				if a.Body["status"] == "accepted" {
					accepted[a.Body["event_id"].(string)]++
				} else {
					require.Equal(t, "duplicate", a.Body["status"], a.RawBody)
				}
			}
			require.Len(t, accepted, events)
			for id, n := range accepted {
				require.Equal(t, 1, n, id)
			}

			awaitSettled(t, pool, inbox.StatusProcessed)
			for e := range events {
				require.Equal(t, 1, effectCount(t, pool, fmt.Sprintf("evt_%d", e)))
			}
			keys, messages, _ := b.counts(t)
			require.Equal(t, []int{events, events}, []int{keys, messages})
		})
	}
}

// TestWorkerKilledThroughPgBouncer: a worker process connected through
// PgBouncer in transaction mode is killed with SIGKILL inside its handler
// (the effect written, not committed). PgBouncer must drop the server
// connection of the dead client's open transaction, so its locks go and
// nothing commits; a fresh poll-only worker, also through PgBouncer,
// rescues the job and applies each effect exactly once.
func TestWorkerKilledThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, url := pooledPool(t, mode)
			createEffects(t, pool)
			b := setup(t, &setupOpts{pool: pool})
			eventIDs := []string{"msg_pooled_1", "msg_pooled_2", "msg_pooled_3"}
			receiveMany(t, pool, b.inbox, payments(eventIDs...))

			cmd := exec.Command(os.Args[0], "-test.run=^TestPgBouncerWorkerProcess$", "-test.v")
			cmd.Env = append(os.Environ(), pooledWorkerURLEnv+"="+url)
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
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()

			for _, id := range eventIDs {
				require.Zero(t, effectCount(t, pool, id))
			}
			var state string
			require.NoError(t, pool.QueryRow(ctx, "SELECT state FROM river_job WHERE kind LIKE 'wharf_inbox_process%'").Scan(&state))
			require.Equal(t, "running", state)
			require.Eventually(t, func() bool {
				var stuck bool
				err := pool.QueryRow(ctx, "SELECT attempted_at < now() - $1::interval FROM river_job WHERE kind LIKE 'wharf_inbox_process%'",
					chaosRescue.String()).Scan(&stuck)
				return err == nil && stuck
			}, 10*time.Second, 20*time.Millisecond)

			b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
			startPooledChaosClient(t, pool, b.inbox, false)
			awaitSettled(t, pool, inbox.StatusProcessed)
			for _, id := range eventIDs {
				require.Equal(t, 1, effectCount(t, pool, id), id)
			}
		})
	}
}

// TestPgBouncerWorkerProcess is the worker process of
// TestWorkerKilledThroughPgBouncer; it does nothing unless started by it.
func TestPgBouncerWorkerProcess(t *testing.T) {
	url := os.Getenv(pooledWorkerURLEnv)
	if url == "" {
		return // not a subprocess: nothing to do, nothing to assert
	}
	pool, err := pgxpool.New(context.Background(), url)
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
	startPooledChaosClient(t, pool, ib, true)
	select {}
}

// startPooledChaosClient is startChaosClient for a pool through PgBouncer:
// the same short job timeout and rescue window, in poll-only mode.
func startPooledChaosClient(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, subprocess bool) {
	t.Helper()
	workers := river.NewWorkers()
	require.NoError(t, ib.AddWorkers(workers))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:                 map[string]river.QueueConfig{ib.Queue(): {MaxWorkers: 2}},
		Workers:                workers,
		PollOnly:               true,
		FetchCooldown:          5 * time.Millisecond,
		FetchPollInterval:      20 * time.Millisecond,
		JobTimeout:             chaosJobTimeout,
		RescueStuckJobsAfter:   chaosRescue,
		RetryPolicy:            fastRetry{},
		LeaderElectionDisabled: subprocess,
		Logger:                 slog.New(slog.NewTextHandler(io.Discard, nil)),
		TestOnly:               true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(context.Background()))
	if !subprocess {
		t.Cleanup(func() { require.NoError(t, client.Stop(context.Background())) })
	}
}
