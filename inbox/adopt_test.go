package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/loadtest"
)

// createSeen makes the table where handlers note the transaction they ran
// in.
func createSeen(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "CREATE TABLE seen (event_id text NOT NULL, xid bigint NOT NULL DEFAULT txid_current())")
	require.NoError(t, err)
}

func noteSeen(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
	_, err := tx.Exec(ctx, "INSERT INTO seen (event_id) VALUES ($1)", msg.EventID)
	return err
}

// seenOnce asserts that each of ids ran exactly once (in a transaction that
// committed) and returns how many transactions they ran in.
func seenOnce(t *testing.T, pool *pgxpool.Pool, ids []string) (transactions int) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, "SELECT event_id, count(*) FROM seen GROUP BY event_id")
	require.NoError(t, err)
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct {
		id string
		n  int
	}, error) {
		var c struct {
			id string
			n  int
		}
		return c, r.Scan(&c.id, &c.n)
	})
	require.NoError(t, err)
	got := map[string]int{}
	for _, c := range counts {
		got[c.id] = c.n
	}
	for _, id := range ids {
		require.Equal(t, 1, got[id], "runs of %s", id)
	}
	require.Len(t, got, len(ids))
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(DISTINCT xid) FROM seen").Scan(&transactions))
	return transactions
}

// receiveEach receives each message with ReceiveTx in a transaction of
// its own: a job each.
func receiveEach(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, msgs []inbox.Incoming) {
	t.Helper()
	for _, m := range msgs {
		require.NoError(t, pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
			_, err := ib.ReceiveTx(context.Background(), tx, m)
			return err
		}))
	}
}

func eventIDs(msgs []inbox.Incoming) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID
	}
	return ids
}

func numbered(prefix string, n int) []inbox.Incoming {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s_%02d", prefix, i)
	}
	return payments(ids...)
}

func oneWorker(cfg *river.Config) {
	q := cfg.Queues[inbox.DefaultQueue]
	q.MaxWorkers = 1
	cfg.Queues[inbox.DefaultQueue] = q
}

// TestOwnJobsAdoptWaitingMessages: messages received one per transaction
// (a job each) are processed many to a transaction when they wait
// together, each exactly once, and every job ends completed.
func TestOwnJobsAdoptWaitingMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createSeen(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, noteSeen)
	msgs := numbered("evt", 40)
	receiveEach(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	txs := seenOnce(t, b.pool, eventIDs(msgs))
	// A job's own message and 29 adopted: two transactions, three if
	// River's fetch takes a job while the first transaction holds others.
	require.LessOrEqual(t, txs, 3, "40 waiting messages ran in %d transactions", txs)
	var notCompleted int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process' AND (state <> 'completed' OR finalized_at IS NULL)").Scan(&notCompleted))
	require.Zero(t, notCompleted)
}

// TestBatchSizeOneAdoptsNothing: BatchSize 1 keeps a transaction per
// message.
func TestBatchSizeOneAdoptsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 1}})
	createSeen(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, noteSeen)
	msgs := numbered("evt", 8)
	receiveEach(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.Equal(t, 8, seenOnce(t, b.pool, eventIDs(msgs)))
}

// TestAdoptedFailureRetriesAlone: an adopted message whose handler fails
// is rolled back alone, its attempt recorded, and retried on a job of its
// own; the others of its transaction stay processed, and the effect of
// every message happens once.
func TestAdoptedFailureRetriesAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createSeen(t, b.pool)
	var mu sync.Mutex
	failed := false
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := noteSeen(ctx, tx, msg); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if msg.EventID == "evt_03" && !failed {
			failed = true
			return errors.New("fails once")
		}
		return nil
	})
	msgs := numbered("evt", 10)
	receiveEach(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	txs := seenOnce(t, b.pool, eventIDs(msgs))
	require.LessOrEqual(t, txs, 3)
	var attempts int
	var lastError string
	require.NoError(t, b.pool.QueryRow(context.Background(),
		"SELECT attempts, coalesce(last_error, '') FROM wharf_inbox_messages WHERE event_id = 'evt_03'").Scan(&attempts, &lastError))
	require.Equal(t, 2, attempts, "the failed run counts as an attempt")
	require.Contains(t, lastError, "fails once")
}

// TestAdoptedHandlerEndingTheTransaction: an adopted message's handler
// that commits the transaction behind Wharf's back loses nothing and
// doubles nothing: what ran before it committed with its marks, and the
// rest go on alone.
func TestAdoptedHandlerEndingTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createSeen(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if !strings.HasSuffix(msg.EventID, "_04") {
			return noteSeen(ctx, tx, msg)
		}
		return pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error { return noteSeen(ctx, inner, msg) })
	})
	msgs := numbered("evt", 10)
	receiveEach(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	seenOnce(t, b.pool, eventIDs(msgs))
}

// TestAdoptionUnderConcurrency: messages received one per transaction
// while many workers process them, some adopting what others would fetch,
// each run exactly once.
func TestAdoptionUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createSeen(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, noteSeen)
	msgs := numbered("evt", 400)
	b.startWorkers(t)
	_, err := loadtest.Run(8, len(msgs), func(i int) error {
		return pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
			_, err := b.inbox.ReceiveTx(context.Background(), tx, msgs[i])
			return err
		})
	})
	require.NoError(t, err)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	txs := seenOnce(t, b.pool, eventIDs(msgs))
	t.Logf("400 messages in %d transactions", txs)
}
