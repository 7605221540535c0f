package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
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
}

func setupMerge(t *testing.T) *mergeBundle {
	t.Helper()
	b := &mergeBundle{
		testBundle: setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 10, MaxProcessing: 1, MaxAttempts: 5}}),
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
		if msg.EventID == b.failOnce && b.failed.CompareAndSwap(false, true) {
			return errors.New("fails once")
		}
		return nil
	})
	b.startWorkers(t)
	// The node learns that its handlers are quick: merges start then.
	for i := range 25 {
		receiveMany(t, b.pool, b.inbox, payments(fmt.Sprintf("warm_%d", i)))
	}
	awaitSettled(t, b.pool, inbox.StatusProcessed)
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
