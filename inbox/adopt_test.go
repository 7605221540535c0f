package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/loadtest"
	"github.com/wharfhq/wharf/internal/telemetrytest"
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

// TestAdoptedFailureAtCommitChargesOnlyItsMessage: an adopted handler
// whose write fails only at the commit (a deferred constraint) loses the
// whole transaction; the adopting job's own message is not charged with
// it (with MaxAttempts 1 it would be dead), and the bad message fails on
// its own job.
func TestAdoptedFailureAtCommitChargesOnlyItsMessage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	dead := map[string]bool{}
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1, OnDead: func(_ context.Context, msg *inbox.Message, _ error) {
		mu.Lock()
		defer mu.Unlock()
		dead[msg.EventID] = true
	}}})
	ctx := context.Background()
	createSeen(t, b.pool)
	_, err := b.pool.Exec(ctx, "CREATE TABLE d (id int PRIMARY KEY, ref int REFERENCES d (id) DEFERRABLE INITIALLY DEFERRED)")
	require.NoError(t, err)
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventID == "evt_03" {
			_, err := tx.Exec(ctx, "INSERT INTO d VALUES (1, 999)")
			return err
		}
		return noteSeen(ctx, tx, msg)
	})
	msgs := numbered("evt", 8)
	receiveEach(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)

	rows, err := b.pool.Query(ctx, "SELECT event_id FROM wharf_inbox_messages WHERE status = 'dead'")
	require.NoError(t, err)
	deadIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"evt_03"}, deadIDs)
	good := slices.DeleteFunc(eventIDs(msgs), func(id string) bool { return id == "evt_03" })
	seenOnce(t, b.pool, good)
	require.Eventually(t, func() bool { // OnDead runs after the commit
		mu.Lock()
		defer mu.Unlock()
		return maps.Equal(dead, map[string]bool{"evt_03": true})
	}, 10*time.Second, 10*time.Millisecond)
}

// TestAdoptionHoldsNoJobItLeaves: a job the adopting transaction does not
// take (an ordered message's) stays free for River's fetch while the
// adopted handlers run.
func TestAdoptionHoldsNoJobItLeaves(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	msgs := numbered("evt", 3)
	msgs[1].OrderingKey = "k"
	receiveEach(t, b.pool, b.inbox, msgs)
	var orderedJob int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT job_id FROM wharf_inbox_messages WHERE event_id = 'evt_01'").Scan(&orderedJob))
	fetchable := make(chan int, 3)
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventID != "evt_02" {
			return nil
		}
		// As River's fetch locks it, from another connection.
		var n int
		err := pgx.BeginFunc(ctx, b.pool, func(other pgx.Tx) error {
			return other.QueryRow(ctx, "SELECT count(*) FROM (SELECT id FROM river_job WHERE id = $1 FOR UPDATE SKIP LOCKED) j", orderedJob).Scan(&n)
		})
		fetchable <- n
		return err
	})
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	require.Equal(t, 1, <-fetchable, "the ordered message's job was held")
}

// TestAdoptedHandlerEndingTheTransaction: an adopted message's handler
// that commits the transaction behind Wharf's back loses nothing and
// doubles nothing: what ran before it committed with its marks, and is
// counted processed once each; the rest go on alone.
func TestAdoptedHandlerEndingTheTransaction(t *testing.T) {
	t.Parallel()
	metrics := telemetrytest.NewMetrics(t)
	b := setup(t, &setupOpts{cfg: &inbox.Config{MeterProvider: metrics.Provider}})
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
	data := metrics.CollectWhen(t, "every message counted", func(data map[string]metricdata.Aggregation) bool {
		return maps.Equal(telemetrytest.Sum(data["wharf_inbox_messages_handled"], "source", "status"),
			map[string]int64{"payments/processed": 10})
	})
	require.Equal(t, map[string]int64{"payments/processed": 10},
		telemetrytest.SumBy(t, data["wharf_inbox_messages_handled"], "source", "status"))
}

// TestAdoptedHandlerEndingTheTransactionCountsWhatCommitted and its batch
// twin: when a handler commits the transaction itself, only what that
// commit made processed is counted: not a message before it whose handler
// failed (rolled back, its failure not yet recorded) nor one whose handler
// never touched the database (its mark was still to come); both run again
// on their own jobs and are counted then, once.
func TestAdoptedHandlerEndingTheTransactionCountsWhatCommitted(t *testing.T) {
	t.Parallel()
	endingTheTransactionCounts(t, receiveEach)
}

func TestBatchHandlerEndingTheTransactionCountsWhatCommitted(t *testing.T) {
	t.Parallel()
	endingTheTransactionCounts(t, func(t *testing.T, pool *pgxpool.Pool, ib *inbox.Inbox, msgs []inbox.Incoming) {
		receiveMany(t, pool, ib, msgs) // one batch job
	})
}

func endingTheTransactionCounts(t *testing.T, receive func(*testing.T, *pgxpool.Pool, *inbox.Inbox, []inbox.Incoming)) {
	metrics := telemetrytest.NewMetrics(t)
	b := setup(t, &setupOpts{cfg: &inbox.Config{MeterProvider: metrics.Provider}})
	createSeen(t, b.pool)
	var failedOnce sync.Once
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		switch {
		case strings.HasSuffix(msg.EventID, "_01"):
			var err error
			failedOnce.Do(func() { err = errors.New("fails once") })
			if err != nil {
				return err
			}
		case strings.HasSuffix(msg.EventID, "_02"):
			return nil // never touches the database
		case strings.HasSuffix(msg.EventID, "_04"):
			return pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error { return noteSeen(ctx, inner, msg) })
		}
		return noteSeen(ctx, tx, msg)
	})
	msgs := numbered("evt", 8)
	receive(t, b.pool, b.inbox, msgs)
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	seenOnce(t, b.pool, slices.DeleteFunc(eventIDs(msgs), func(id string) bool { return id == "evt_02" }))
	want := map[string]int64{"payments/processed": 8}
	data := metrics.CollectWhen(t, "every message counted", func(data map[string]metricdata.Aggregation) bool {
		return maps.Equal(telemetrytest.Sum(data["wharf_inbox_messages_handled"], "source", "status"), want)
	})
	require.Equal(t, want, telemetrytest.SumBy(t, data["wharf_inbox_messages_handled"], "source", "status"))
}

// TestAdoptedLogLinesNameTheirOwnMessage: an adopted message's failure is
// logged with its own id once, and the adopting job's id apart.
func TestAdoptedLogLinesNameTheirOwnMessage(t *testing.T) {
	t.Parallel()
	var buf telemetrytest.Logs
	b := setup(t, &setupOpts{cfg: &inbox.Config{Logger: slog.New(slog.NewJSONHandler(&buf, nil))}})
	var once sync.Once
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var err error
		if msg.EventID == "evt_01" {
			once.Do(func() { err = errors.New("fails once") })
		}
		return err
	})
	receiveEach(t, b.pool, b.inbox, numbered("evt", 3))
	b.startWorkersWith(t, oneWorker)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "will retry") {
			line = l
		}
	}
	require.NotEmpty(t, line, buf.String())
	require.Equal(t, 1, strings.Count(line, `"message_id"`), line)
	require.Contains(t, line, `"adopted_by_job_id"`)
	require.Contains(t, line, `"event_id":"evt_01"`)
}
