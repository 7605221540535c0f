package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/telemetrytest"
)

// mergeBundle is an inbox whose processing holds one transaction at a
// time (MaxProcessing 1), with a handler that records each message's
// transaction and a message type that holds the slot until released.
type mergeBundle struct {
	*testBundle
	release  chan struct{}
	holding  chan struct{}
	failOnce string // the event whose handler fails its first run
	failed   atomic.Bool
	slow     atomic.Bool // the recording handler takes 150 ms
}

// mergeOpts adjust setupMerge's inbox and workers.
type mergeOpts struct {
	logger     *slog.Logger
	jobTimeout time.Duration
}

func setupMerge(t *testing.T, opts ...mergeOpts) *mergeBundle {
	t.Helper()
	var o mergeOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	b := &mergeBundle{
		testBundle: setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 10, MaxProcessing: 1, MaxAttempts: 5, Logger: o.logger}}),
		release:    make(chan struct{}), holding: make(chan struct{}, 1),
	}
	_, err := b.pool.Exec(context.Background(),
		"CREATE TABLE merged (event_id text NOT NULL, tx bigint NOT NULL DEFAULT txid_current())")
	require.NoError(t, err)
	b.inbox.Handle("payments", "hold", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		b.holding <- struct{}{}
		<-b.release
		return nil
	})
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if _, err := tx.Exec(ctx, "INSERT INTO merged (event_id) VALUES ($1)", msg.EventID); err != nil {
			return err
		}
		if b.slow.Load() {
			time.Sleep(150 * time.Millisecond)
		}
		if msg.EventID == b.failOnce && b.failed.CompareAndSwap(false, true) {
			return errors.New("fails once")
		}
		return nil
	})
	// The handlers are quick, however long a loaded machine takes to run
	// them (TestSlowHandlersDoNotMerge shows the rule).
	inbox.SetQuickHandlers(b.inbox)
	b.startWorkersWith(t, func(c *river.Config) {
		if o.jobTimeout > 0 {
			c.JobTimeout = o.jobTimeout
		}
	})
	return b
}

// hold receives a message whose handler holds the node's one processing
// transaction until released, and waits until it does.
func (b *mergeBundle) hold(t *testing.T) {
	t.Helper()
	msgs := payments("holder")
	msgs[0].EventType = "hold"
	receiveMany(t, b.pool, b.inbox, msgs)
	select {
	case <-b.holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the holding handler never ran")
	}
}

// batches commits, in one transaction, a batch job per group of ids.
func (b *mergeBundle) batches(t *testing.T, groups ...[]inbox.Incoming) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, g := range groups {
			if _, err := b.inbox.ReceiveManyTx(ctx, tx, g); err != nil {
				return err
			}
		}
		return nil
	}))
}

// awaitWaiting waits until n inbox jobs besides the holder's are running:
// fetched, their runs waiting for the processing slot.
func (b *mergeBundle) awaitWaiting(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var running int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind IN ('wharf_inbox_process', 'wharf_inbox_process_batch') AND state = 'running'`).Scan(&running)
		return err == nil && running == n+1
	}, 20*time.Second, 5*time.Millisecond)
}

// transactions returns how many transactions ran the handlers of the
// events with ids starting with prefix (the warm-up's left out), and how
// many handler runs committed.
func (b *mergeBundle) transactions(t *testing.T, prefix string) (txs, runs int) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(DISTINCT tx), count(*) FROM merged WHERE event_id LIKE $1 || '%' AND event_id NOT LIKE 'warm\\_%'", prefix).Scan(&txs, &runs))
	return txs, runs
}

func group(prefix string, n int) []inbox.Incoming {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%d", prefix, i)
	}
	return payments(ids...)
}

// TestBatchJobsWaitingTogetherShareATransaction: batch jobs that wait
// together for a processing slot run in one transaction, up to BatchSize
// messages: jobs of 5, 5, 4 and 1 messages (the last a message's own job,
// received alone) in two transactions, whatever their order, each handler
// once.
func TestBatchJobsWaitingTogetherShareATransaction(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	b.hold(t)
	b.batches(t, group("a", 5), group("b", 5), group("c", 4), group("e", 1))
	b.awaitWaiting(t, 4)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	txs, runs := b.transactions(t, "")
	require.Equal(t, 15, runs, "each handler committed once")
	require.Equal(t, 2, txs, "15 messages in two")
}

// TestMergedFailureRetriesAlone: a handler that fails in a merged batch is
// rolled back alone and retried on a job of its own; the others commit
// once.
func TestMergedFailureRetriesAlone(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	b.failOnce = "a_2"
	b.hold(t)
	b.batches(t, group("a", 5), group("b", 5))
	b.awaitWaiting(t, 2)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.True(t, b.failed.Load())
	txs, runs := b.transactions(t, "a_2")
	require.Equal(t, []int{1, 1}, []int{txs, runs}, "the failed run's write rolled back, its retry's committed")
	txs, runs = b.transactions(t, "")
	require.Equal(t, 10, runs, "every handler committed once")
	require.Equal(t, 2, txs, "the merged transaction and a_2's retry")
	require.Equal(t, 2, getByEvent(t, b, "a_2").Attempts, "one failed attempt, one success")
	require.Equal(t, 1, getByEvent(t, b, "b_2").Attempts)
}

// TestLostMergedTransactionRunsEachJobAlone: a merged transaction that
// fails at its commit (a deferred constraint one message breaks) rolls
// every job back; each runs again alone, using no attempt, and only the
// job of the message that broke it fails.
func TestLostMergedTransactionRunsEachJobAlone(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	_, err := b.pool.Exec(context.Background(), `
		CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'b_3' THEN RAISE EXCEPTION 'poisoned commit'; END IF;
			RETURN NEW;
		END $$;
		CREATE CONSTRAINT TRIGGER test_poison AFTER INSERT ON merged
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_poison();`)
	require.NoError(t, err)
	b.hold(t)
	b.batches(t, group("a", 5), group("b", 5))
	b.awaitWaiting(t, 2)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	for i := range 5 {
		msg := getByEvent(t, b, fmt.Sprintf("a_%d", i))
		require.Equal(t, inbox.StatusProcessed, msg.Status)
		require.Equal(t, 1, msg.Attempts, "the lost merged transaction used no attempt of a_%d", i)
	}
	txs, runs := b.transactions(t, "a_")
	require.Equal(t, []int{1, 5}, []int{txs, runs}, "a's job, alone, committed once")
	_, runs = b.transactions(t, "b_")
	require.Equal(t, 4, runs, "b's other messages committed once, on jobs of their own")
	msg := getByEvent(t, b, "b_3")
	require.NotEqual(t, inbox.StatusProcessed, msg.Status)
}

// TestOrderedJobsDoNotMerge: batch jobs with an ordered message each run
// in a transaction of their own, whatever waits beside them.
func TestOrderedJobsDoNotMerge(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	b.hold(t)
	var groups [][]inbox.Incoming
	for _, p := range []string{"a", "b", "c"} {
		g := group(p, 3)
		g[1].OrderingKey = "key_" + p
		groups = append(groups, g)
	}
	b.batches(t, groups...)
	b.awaitWaiting(t, 3)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	txs, runs := b.transactions(t, "")
	require.Equal(t, 9, runs)
	require.Equal(t, 3, txs, "a transaction per ordered job")
}

// TestMaxProcessingBoundsTransactions: no more handlers run at once than
// MaxProcessing, however many workers River runs.
func TestMaxProcessingBoundsTransactions(t *testing.T) {
	t.Parallel()
	// BatchSize 1: a transaction per message, none adopting others.
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxProcessing: 2, BatchSize: 1}})
	var running, most atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond) // long enough for the others to pile up
		return nil
	})
	for i := range 20 {
		receiveMany(t, b.pool, b.inbox, payments(fmt.Sprintf("evt_%d", i)))
	}
	b.startWorkers(t) // 10 workers
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.Equal(t, int32(2), most.Load())
}

// getByEvent returns the message of eventID from "payments".
func getByEvent(t *testing.T, b *mergeBundle, eventID string) *inbox.Message {
	t.Helper()
	var id string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT id::text FROM wharf_inbox_messages WHERE source = 'payments' AND event_id = $1", eventID).Scan(&id))
	msg, err := b.inbox.Get(context.Background(), uuid.MustParse(id))
	require.NoError(t, err)
	return msg
}

// messageID returns the id of event eventID's message from "payments".
func messageID(t *testing.T, b *testBundle, eventID string) uuid.UUID {
	t.Helper()
	var id string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT id::text FROM wharf_inbox_messages WHERE source = 'payments' AND event_id = $1", eventID).Scan(&id))
	return uuid.MustParse(id)
}

// cancelJob cancels job id through River, as an operator would (River UI,
// Client.JobCancel): a running job's context is cancelled. It waits until
// the worker's client has seen the request.
func cancelJob(t *testing.T, b *testBundle, id int64) {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
	require.NoError(t, err)
	_, err = client.JobCancel(context.Background(), id)
	require.NoError(t, err)
	// Without a notification reaching the worker, River polls for
	// cancellations every 2 s (once a minute with a notifier).
	time.Sleep(2500 * time.Millisecond)
}

// TestCancelledJobWaitingAtTheGate: a message's own job cancelled
// (River's JobCancel) while it waits at the gate ends cancelled with its
// message unprocessed, whether it would have run alone or merged with
// another job's.
func TestCancelledJobWaitingAtTheGate(t *testing.T) {
	t.Parallel()
	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		b := setupMerge(t)
		b.hold(t)
		receiveMany(t, b.pool, b.inbox, payments("b_0"))
		b.awaitWaiting(t, 1)
		job := jobOf(t, b.pool, messageID(t, b.testBundle, "b_0"))
		cancelJob(t, b.testBundle, job)
		close(b.release)
		require.Eventually(t, func() bool { return jobState(t, b.testBundle, job) != "running" }, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, "cancelled", jobState(t, b.testBundle, job))
		require.Equal(t, inbox.StatusReceived, getByEvent(t, b, "b_0").Status)
	})
	t.Run("merged follower", func(t *testing.T) {
		t.Parallel()
		b := setupMerge(t)
		b.hold(t)
		// a_0's job leads the gate's open batch; b_0's joins it as a follower.
		receiveMany(t, b.pool, b.inbox, payments("a_0"))
		b.awaitWaiting(t, 1)
		receiveMany(t, b.pool, b.inbox, payments("b_0"))
		b.awaitWaiting(t, 2)
		job := jobOf(t, b.pool, messageID(t, b.testBundle, "b_0"))
		cancelJob(t, b.testBundle, job)
		close(b.release)
		require.Eventually(t, func() bool { return jobState(t, b.testBundle, job) != "running" }, 10*time.Second, 10*time.Millisecond)
		txs, _ := b.transactions(t, "")
		t.Logf("b's job %d: %s; b_0 %s; transactions %d", job, jobState(t, b.testBundle, job), getByEvent(t, b, "b_0").Status, txs)
		require.Equal(t, "cancelled", jobState(t, b.testBundle, job), "the cancelled follower was completed by the merged transaction")
		require.Equal(t, inbox.StatusReceived, getByEvent(t, b, "b_0").Status, "the cancelled follower's messages were processed")
	})
}

// TestMergedHandlerEndingTheTransaction: a handler that commits a merged
// transaction itself (through tx.Conn()), then fails: what ran before it
// committed once, nothing runs twice, every message ends processed, and no
// job is left running.
func TestMergedHandlerEndingTheTransaction(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	b.inbox.Handle("payments", "commits", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error {
			_, err := inner.Exec(ctx, "INSERT INTO merged (event_id) VALUES ($1)", msg.EventID)
			return err
		}); err != nil {
			return err
		}
		return errors.New("fails after committing")
	})
	b.hold(t)
	a, c := group("a", 4), group("c", 4)
	a[2].EventType = "commits"
	alone := payments("e_0")
	b.batches(t, a, c, alone)
	b.awaitWaiting(t, 3)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	for _, m := range append(append(a, c...), alone...) {
		_, runs := b.transactions(t, m.EventID)
		require.Equal(t, 1, runs, "%s's effect committed once", m.EventID)
		require.Equal(t, inbox.StatusProcessed, getByEvent(t, b, m.EventID).Status, m.EventID)
	}
	awaitInboxJobsFinalized(t, b.testBundle)
}

// TestMergedLateHandOver: a merged batch whose handlers turn slow hands
// what it has not reached at half its leader's timeout over to new jobs:
// each message processed once.
func TestMergedLateHandOver(t *testing.T) {
	t.Parallel()
	b := setupMerge(t, mergeOpts{jobTimeout: 2 * time.Second})
	b.hold(t)
	b.batches(t, group("a", 5), group("c", 4), payments("e_0"))
	b.awaitWaiting(t, 3)
	b.slow.Store(true)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	txs, runs := b.transactions(t, "")
	require.Equal(t, 10, runs, "each handler committed once")
	require.Greater(t, txs, 1, "the merged batch handed some over")
	awaitInboxJobsFinalized(t, b.testBundle)
}

// TestMergedFailureLoggedWithItsOwnJob: a message that fails in a merged
// batch is logged with its own job's id (the job whose args list it), not
// the leader's.
func TestMergedFailureLoggedWithItsOwnJob(t *testing.T) {
	t.Parallel()
	var buf telemetrytest.Logs
	b := setupMerge(t, mergeOpts{logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	b.failOnce = "b_1"
	b.hold(t)
	receiveMany(t, b.pool, b.inbox, group("a", 3)) // leads the gate's open batch
	b.awaitWaiting(t, 1)
	receiveMany(t, b.pool, b.inbox, group("b", 3)) // joins it
	b.awaitWaiting(t, 2)
	bJob := jobOf(t, b.pool, messageID(t, b.testBundle, "b_1"))
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "will retry") && strings.Contains(l, `"event_id":"b_1"`) {
			line = l
		}
	}
	require.NotEmpty(t, line, buf.String())
	require.Contains(t, line, fmt.Sprintf(`"job_id":%d,`, bJob), "b_1's failure is logged under another job: %s", line)
}

// TestOperatorWhileWaitingAtTheGate: messages skipped, erased, and
// skipped then replayed while their jobs wait at the gate to merge are not
// run by the merged batch (a replayed one runs once, on its new job); the
// others run once each.
func TestOperatorWhileWaitingAtTheGate(t *testing.T) {
	t.Parallel()
	b := setupMerge(t)
	ctx := context.Background()
	b.hold(t)
	b.batches(t, group("a", 3), group("c", 3), payments("e_0"))
	b.awaitWaiting(t, 3)
	require.NoError(t, b.inbox.Skip(ctx, messageID(t, b.testBundle, "a_1"), "operator says so"))
	_, err := b.inbox.Forget(ctx, "payments", "c_1")
	require.NoError(t, err)
	replayed := messageID(t, b.testBundle, "e_0")
	require.NoError(t, b.inbox.Skip(ctx, replayed, "operator says so"))
	require.NoError(t, b.inbox.Replay(ctx, replayed))
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	awaitInboxJobsFinalized(t, b.testBundle)
	for event, want := range map[string]int{"a_0": 1, "a_1": 0, "a_2": 1, "c_0": 1, "c_1": 0, "c_2": 1, "e_0": 1} {
		_, runs := b.transactions(t, event)
		require.Equal(t, want, runs, event)
	}
}

// awaitInboxJobsFinalized waits until no inbox job is left to run.
func awaitInboxJobsFinalized(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind IN ('wharf_inbox_process', 'wharf_inbox_process_batch')
			  AND state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&n)
		return err == nil && n == 0
	}, 30*time.Second, 10*time.Millisecond)
}

// TestGateWaitUsesNoAttempt: jobs that wait at the processing gate
// (MaxProcessing slots) longer than half their River JobTimeout run again
// later, using no attempt: every handler runs, with MaxAttempts 1. (The
// gate once waited with the job's cancellation stripped and ran it on its
// expired context: the handler never ran, River counted a failed attempt
// and discarded the job.)
func TestGateWaitUsesNoAttempt(t *testing.T) {
	t.Parallel()
	// BatchSize 1: a job per message, no merge, no adoption.
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxProcessing: 1, BatchSize: 1, MaxAttempts: 1}})
	var mu sync.Mutex
	runs := map[string]int{}
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		mu.Lock()
		runs[msg.EventID]++
		mu.Unlock()
		time.Sleep(100 * time.Millisecond) // a handler well inside the job timeout
		return nil
	})
	for i := range 6 {
		receiveMany(t, b.pool, b.inbox, payments(fmt.Sprintf("gate_%d", i)))
	}
	b.startWorkersWith(t, func(c *river.Config) { c.JobTimeout = 250 * time.Millisecond })
	awaitInboxJobsFinalized(t, b)

	rows, err := b.pool.Query(context.Background(), `
		SELECT m.event_id, m.status, m.attempts, j.state::text, j.attempt, coalesce(j.errors[array_length(j.errors, 1)]->>'error', '')
		FROM wharf_inbox_messages m JOIN river_job j ON j.id = m.job_id ORDER BY m.event_id`)
	require.NoError(t, err)
	defer rows.Close()
	var neverRan []string
	for rows.Next() {
		var event, status, state, lastErr string
		var attempts, attempt int
		require.NoError(t, rows.Scan(&event, &status, &attempts, &state, &attempt, &lastErr))
		mu.Lock()
		n := runs[event]
		mu.Unlock()
		t.Logf("%s: message %s (attempts %d), job %s (attempt %d), handler runs %d, job error %q", event, status, attempts, state, attempt, n, lastErr)
		if n == 0 && status != string(inbox.StatusProcessed) {
			neverRan = append(neverRan, fmt.Sprintf("%s (job %s after attempt %d: %s)", event, state, attempt, lastErr))
		}
	}
	require.NoError(t, rows.Err())
	require.Empty(t, neverRan, "jobs used their attempts waiting at the gate, their handlers never ran:\n%s", strings.Join(neverRan, "\n"))
}

// TestGateWaitSplitsNoBatch: batch jobs that wait at the gate behind a
// slow transaction longer than half their JobTimeout are not split into a
// job per message: they run again later, each as the batch it was.
func TestGateWaitSplitsNoBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxProcessing: 1, BatchSize: 5}})
	holding := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	batchRuns := 0
	b.inbox.Handle("payments", "hold", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		once.Do(func() { close(holding); time.Sleep(600 * time.Millisecond) })
		return nil
	})
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		mu.Lock()
		batchRuns++
		mu.Unlock()
		return nil
	})
	b.startWorkersWith(t, func(c *river.Config) { c.JobTimeout = 300 * time.Millisecond })
	holder := payments("holder")
	holder[0].EventType = "hold"
	receiveMany(t, b.pool, b.inbox, holder)
	<-holding
	for g := range 2 {
		receiveMany(t, b.pool, b.inbox, group(fmt.Sprintf("split%d", g), 5))
	}
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	var singles int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM wharf_inbox_messages m
		JOIN river_job j ON j.id = m.job_id WHERE j.kind = 'wharf_inbox_process' AND m.event_id LIKE 'split%'`).Scan(&singles))
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, singles, "batch jobs that only waited at the gate (their handlers ran %d times in all, each once on its own job) were split into %d jobs of their own", batchRuns, singles)
}

// TestSlowHandlersDoNotMerge: batch jobs merge only while the node's
// handlers are quick (a mean under a millisecond a message): jobs of
// handlers that take longer each run in a transaction of their own, side
// by side, even when they wait for a slot together.
func TestSlowHandlersDoNotMerge(t *testing.T) {
	t.Parallel()
	b := &mergeBundle{
		testBundle: setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 10, MaxProcessing: 1}}),
		release:    make(chan struct{}), holding: make(chan struct{}, 1),
	}
	_, err := b.pool.Exec(context.Background(),
		"CREATE TABLE merged (event_id text NOT NULL, tx bigint NOT NULL DEFAULT txid_current())")
	require.NoError(t, err)
	b.inbox.Handle("payments", "hold", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		b.holding <- struct{}{}
		<-b.release
		return nil
	})
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		time.Sleep(5 * time.Millisecond) // an API call, say
		_, err := tx.Exec(ctx, "INSERT INTO merged (event_id) VALUES ($1)", msg.EventID)
		return err
	})
	b.startWorkers(t)
	for i := range 25 {
		receiveMany(t, b.pool, b.inbox, payments(fmt.Sprintf("warm_%d", i)))
	}
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	b.hold(t)
	b.batches(t, group("a", 2), group("b", 2), group("c", 2))
	b.awaitWaiting(t, 3)
	close(b.release)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	txs, runs := b.transactions(t, "")
	require.Equal(t, []int{3, 6}, []int{txs, runs}, "a transaction per job")
}
