package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestReceiveManyPerMessage: in one batch every message keeps its own
// verdict: a repeat within the batch is a duplicate of its first occurrence
// (a different payload counted as a mismatch), a key claimed before is a
// duplicate, bad input is rejected alone, and the new messages share one job.
func TestReceiveManyPerMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	msg := func(id, body string) inbox.Incoming {
		return inbox.Incoming{Source: "payments", EventID: id, Body: []byte(body)}
	}
	var old *inbox.Result
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var err error
		old, err = b.inbox.ReceiveTx(ctx, tx, msg("evt_old", `{"n":0}`))
		return err
	}))

	batch := []inbox.Incoming{
		msg("evt_a", `{"n":1}`),
		msg("", `{"n":2}`), // no event id
		msg("evt_a", `{"n":1}`),
		msg("evt_a", `{"n":"other"}`),
		msg("evt_old", `{"n":0}`),
		msg("evt_b", `{"n":3}`),
		{Source: "payments", EventID: "evt_nul", Header: http.Header{"X-Bad": {"a\x00b"}}, Body: []byte(`{}`)},
	}
	results := receiveMany(t, b.pool, b.inbox, batch)
	require.Len(t, results, len(batch))

	a, bb := results[0], results[5]
	require.NoError(t, a.Err)
	require.False(t, a.Duplicate)
	require.NoError(t, bb.Err)
	require.False(t, bb.Duplicate)
	require.Equal(t, a.JobID, bb.JobID, "the batch's new messages share one job")
	require.Equal(t, a.ReceivedAt, bb.ReceivedAt)

	require.ErrorIs(t, results[1].Err, inbox.ErrInvalidMessage)
	require.ErrorIs(t, results[6].Err, inbox.ErrInvalidMessage)

	require.True(t, results[2].Duplicate)
	require.Equal(t, a.MessageID, results[2].MessageID)
	require.False(t, results[2].PayloadMismatch)
	require.True(t, results[3].Duplicate)
	require.True(t, results[3].PayloadMismatch)
	require.True(t, results[4].Duplicate)
	require.Equal(t, old.MessageID, results[4].MessageID)

	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{3, 3, 2}, []int{keys, messages, jobs}, "keys, messages and jobs: evt_old's and one for the batch")
	var mismatches int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT mismatch_count FROM wharf_inbox_keys WHERE event_id = 'evt_a'").Scan(&mismatches))
	require.Equal(t, 1, mismatches)
	rows, err := b.pool.Query(ctx, "SELECT event_id, duplicate_count FROM wharf_inbox_keys")
	require.NoError(t, err)
	duplicates := map[string]int32{}
	for rows.Next() {
		var id string
		var n int32
		require.NoError(t, rows.Scan(&id, &n))
		duplicates[id] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int32{"evt_a": 2, "evt_old": 1, "evt_b": 0}, duplicates, "duplicates blocked per key")
	var nulKeys int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_keys WHERE event_id = 'evt_nul'").Scan(&nulKeys))
	require.Zero(t, nulKeys, "a rejected message writes nothing")

	createEffects(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
	events := b.startWorkers(t)
	awaitJob(t, events, river.EventKindJobCompleted)
	awaitJob(t, events, river.EventKindJobCompleted)
	for _, id := range []string{"evt_a", "evt_b", "evt_old"} {
		require.Equal(t, 1, effectCount(t, b.pool, id), id)
	}
}

// gate makes the receive transaction of one event ("gate") wait on an
// advisory lock the test holds, so that the HTTP handler sees a commit in
// flight and gathers the next deliveries into batches as they come.
type gate struct {
	conn *pgxpool.Conn
	done chan answer
}

func holdGate(t *testing.T, b *testBundle) *gate {
	t.Helper()
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION test_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'gate' THEN PERFORM pg_advisory_xact_lock(4242); END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_gate BEFORE INSERT ON wharf_inbox_keys FOR EACH ROW EXECUTE FUNCTION test_gate();`)
	require.NoError(t, err)
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(4242)")
	require.NoError(t, err)
	g := &gate{conn: conn, done: make(chan answer, 1)}
	req := b.signed(t, "payments", "gate", []byte(`{}`), time.Now())
	go func() { g.done <- do(t, req) }()
	require.Eventually(t, func() bool {
		var waiting bool
		// This database's: parallel tests hold gates of their own.
		err := b.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the gate's receive never reached its lock")
	return g
}

// open lets the gate's receive commit and returns its answer.
func (g *gate) open(t *testing.T) answer {
	t.Helper()
	_, err := g.conn.Exec(context.Background(), "SELECT pg_advisory_unlock(4242)")
	require.NoError(t, err)
	g.conn.Release()
	return <-g.done
}

// sendAll posts every request at once and returns the answers in order.
func sendAll(t *testing.T, reqs []*http.Request) []answer {
	t.Helper()
	answers := make([]answer, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { answers[i] = do(t, req) })
	}
	wg.Wait()
	return answers
}

// TestDuplicateStormThroughGroupCommit: deliveries gathered into shared
// transactions keep exactly-once: each of 20 events sent 10 times at once is
// accepted once and its effect applied once, and the deliveries did share
// transactions (fewer batch jobs than events).
func TestDuplicateStormThroughGroupCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 16, BatchWait: 50 * time.Millisecond}})
	createEffects(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
	g := holdGate(t, b)

	const events, copies = 20, 10
	var reqs []*http.Request
	for c := range copies {
		for e := range events {
			body := fmt.Appendf(nil, `{"type":"payment.succeeded","copy":%d}`, c%2) // half the copies differ
			reqs = append(reqs, b.signed(t, "payments", fmt.Sprintf("evt_%d", e), body, time.Now()))
		}
	}
	answers := sendAll(t, reqs)
	require.Equal(t, http.StatusOK, g.open(t).Status)

	accepted := map[string]int{}
	for _, a := range answers {
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
		if a.Body["status"] == "accepted" {
			accepted[a.Body["event_id"].(string)]++
		} else {
			require.Equal(t, "duplicate", a.Body["status"])
		}
	}
	require.Len(t, accepted, events)
	for id, n := range accepted {
		require.Equal(t, 1, n, id)
	}
	var batchJobs, batched int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*), coalesce(sum(jsonb_array_length(args->'message_ids')), 0) FROM river_job WHERE kind = 'wharf_inbox_process_batch'`).
		Scan(&batchJobs, &batched))
	require.Positive(t, batchJobs)
	require.Less(t, batchJobs, batched, "deliveries shared transactions")

	b.startWorkers(t)
	require.Eventually(t, func() bool {
		var unprocessed int
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM wharf_inbox_messages WHERE status <> 'processed'").Scan(&unprocessed))
		return unprocessed == 0
	}, 20*time.Second, 10*time.Millisecond)
	for e := range events {
		require.Equal(t, 1, effectCount(t, b.pool, fmt.Sprintf("evt_%d", e)))
	}
	require.Equal(t, 1, effectCount(t, b.pool, "gate"))
}

// TestBatchWaitEndsWithTheCommitBeforeIt: a delivery that leads a batch
// while another commits waits for others until that commit ends, not for
// all of BatchWait: it is answered once the gate's batch has committed
// although BatchWait is a minute.
func TestBatchWaitEndsWithTheCommitBeforeIt(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 16, BatchWait: time.Minute}})
	g := holdGate(t, b) // its batch is committing
	done := make(chan answer, 1)
	req := b.signed(t, "payments", "evt_after_gate", []byte(`{}`), time.Now())
	go func() { done <- do(t, req) }()
	require.Eventually(t, func() bool { return inbox.GatheringDeliveries(b.inbox) == 1 },
		10*time.Second, time.Millisecond, "the delivery never joined a batch")
	require.Equal(t, http.StatusOK, g.open(t).Status)
	select {
	case a := <-done:
		require.Equal(t, "accepted", a.Body["status"], a.RawBody)
	case <-time.After(20 * time.Second):
		t.Fatal("the delivery still waits for others after the commit before it ended")
	}
}

// TestFailedBatchCommitAnswers503ToAll: when the shared transaction fails
// at commit, every delivery in it is answered 503 and none is recorded.
func TestFailedBatchCommitAnswers503ToAll(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{BatchSize: 5, BatchWait: 10 * time.Second}})
	ctx := context.Background()
	// A deferred constraint trigger fails the commit of any transaction
	// that stores the event "poison".
	_, err := b.pool.Exec(ctx, `
		CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'poison' THEN RAISE EXCEPTION 'poisoned commit'; END IF;
			RETURN NEW;
		END $$;
		CREATE CONSTRAINT TRIGGER test_poison AFTER INSERT ON wharf_inbox_keys
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_poison();`)
	require.NoError(t, err)
	g := holdGate(t, b)

	var reqs []*http.Request
	for _, id := range []string{"evt_1", "evt_2", "poison", "evt_3", "evt_4"} {
		reqs = append(reqs, b.signed(t, "payments", id, []byte(`{}`), time.Now()))
	}
	for _, a := range sendAll(t, reqs) {
		require.Equal(t, http.StatusServiceUnavailable, a.Status, a.RawBody)
		require.Contains(t, a.Body["error"], "nothing was recorded")
	}
	require.Equal(t, http.StatusOK, g.open(t).Status)
	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{1, 1, 1}, []int{keys, messages, jobs}, "only the gate's delivery is stored")

	// The senders retry; without the poison the others go through.
	a := do(t, b.signed(t, "payments", "evt_1", []byte(`{}`), time.Now()))
	require.Equal(t, "accepted", a.Body["status"])
}

// TestReceiveRoundTrips: a delivery's receive transaction is pipelined:
// BEGIN goes with the key claim, then the job insert, then the message
// insert with COMMIT, three round trips; a duplicate takes two. A message
// insert that fails, sent only with COMMIT, still fails the delivery and
// stores nothing.
func TestReceiveRoundTrips(t *testing.T) {
	t.Parallel()
	pool, writes := testdb.NewCountingWrites(t)
	b := setup(t, &setupOpts{pool: pool})
	receive := func(id string) (answer, int64) {
		before := writes.Count()
		a := do(t, b.signed(t, "payments", id, []byte(`{}`), time.Now()))
		return a, writes.Count() - before
	}
	a, _ := receive("evt_warm") // prepares and caches the statements
	require.Equal(t, "accepted", a.Body["status"], a.RawBody)
	a, trips := receive("evt_1")
	require.Equal(t, "accepted", a.Body["status"], a.RawBody)
	require.EqualValues(t, 3, trips, "round trips of a new delivery")
	a, trips = receive("evt_1")
	require.Equal(t, "duplicate", a.Body["status"], a.RawBody)
	require.EqualValues(t, 2, trips, "round trips of a duplicate")

	_, err := pool.Exec(context.Background(), `
		CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'refused' THEN RAISE EXCEPTION 'refused message'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_refuse BEFORE INSERT ON wharf_inbox_messages
			FOR EACH ROW EXECUTE FUNCTION test_refuse();`)
	require.NoError(t, err)
	a, _ = receive("refused")
	require.Equal(t, http.StatusServiceUnavailable, a.Status, a.RawBody)
	keys, messages, jobs := b.counts(t)
	require.Equal(t, []int{2, 2, 2}, []int{keys, messages, jobs}, "the refused delivery left nothing")
	a, _ = receive("evt_2")
	require.Equal(t, "accepted", a.Body["status"], "the connection works after the failure: %s", a.RawBody)
}

// TestBatchWorkerIsolatesFailures: in one batch job, each handler runs in
// its own savepoint: the successes commit, a failure rolls back only its own
// writes and is retried alone on a job of its own, a permanent failure is
// dead, a snooze uses no attempt.
func TestBatchWorkerIsolatesFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 3}})
	ctx := context.Background()
	createEffects(t, b.pool)
	var calls sync.Map // event id → *atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		n, _ := calls.LoadOrStore(msg.EventID, new(atomic.Int32))
		call := n.(*atomic.Int32).Add(1)
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		switch msg.EventType {
		case "fails_once":
			if call == 1 {
				return errors.New("flaky downstream")
			}
		case "bad_sql_once": // aborts the transaction, which the savepoint rescues
			if call == 1 {
				_, err := tx.Exec(ctx, "SELECT 1/0")
				return err
			}
		case "panics":
			panic("handler bug")
		case "permanent":
			return inbox.Permanent(errors.New("unknown account"))
		case "snoozes_once":
			if call == 1 {
				return river.JobSnooze(10 * time.Millisecond)
			}
		}
		return nil
	})
	types := []string{"ok", "fails_once", "ok", "bad_sql_once", "panics", "permanent", "snoozes_once", "ok"}
	batch := typedPayments(types...)
	results := receiveMany(t, b.pool, b.inbox, batch)
	batchJob := results[0].JobID

	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)

	for i, typ := range types {
		id := batch[i].EventID
		msg, err := b.inbox.Get(ctx, results[i].MessageID)
		require.NoError(t, err)
		jobID := jobOf(t, b.pool, msg.ID)
		switch typ {
		case "ok":
			require.Equal(t, inbox.StatusProcessed, msg.Status, id)
			require.Equal(t, 1, msg.Attempts, id)
			require.Equal(t, batchJob, jobID, "%s stayed on the batch's job", id)
			require.Equal(t, 1, effectCount(t, b.pool, id), id)
		case "fails_once", "bad_sql_once":
			require.Equal(t, inbox.StatusProcessed, msg.Status, id)
			require.Equal(t, 2, msg.Attempts, "%s: the batch's attempt counted", id)
			require.NotEqual(t, batchJob, jobID, "%s was retried on a job of its own", id)
			require.Equal(t, 1, effectCount(t, b.pool, id), "%s: the failed attempt's write rolled back", id)
		case "snoozes_once":
			require.Equal(t, inbox.StatusProcessed, msg.Status, id)
			require.Equal(t, 1, msg.Attempts, "%s: a snooze is not an attempt", id)
			require.Equal(t, 1, effectCount(t, b.pool, id), id)
		case "panics":
			require.Equal(t, inbox.StatusDead, msg.Status, id)
			require.Equal(t, 3, msg.Attempts, id)
			require.Contains(t, msg.LastError, "handler bug")
			require.Zero(t, effectCount(t, b.pool, id), id)
		case "permanent":
			require.Equal(t, inbox.StatusDead, msg.Status, id)
			require.Equal(t, 1, msg.Attempts, id)
			require.Contains(t, msg.LastError, "unknown account")
			require.Zero(t, effectCount(t, b.pool, id), id)
		}
	}
}

// A message that fails in a batch is retried on a job of its own that is
// available at once and hands the failure to River, which keeps a retry
// due within its scheduler's interval available: a job inserted for later
// waits for River's scheduler (every 5 s), which held a failure due for a
// retry in 1 s, and every later message of its ordering key, for up to 6.
func TestBatchRetryDoesNotWaitForRiversScheduler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	var calls atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventType == "fails_once" && calls.Add(1) == 1 {
			return errors.New("flaky downstream")
		}
		return nil
	})
	batch := typedPayments("ok", "fails_once")
	results := receiveMany(t, b.pool, b.inbox, batch)
	// River's default policy: about a second for a first retry, within its
	// scheduler's 5 s interval.
	b.startWorkersWith(t, func(cfg *river.Config) { cfg.RetryPolicy = &river.DefaultClientRetryPolicy{} })
	var state string
	var scheduledAt time.Time
	require.Eventually(t, func() bool {
		var errs int
		err := b.pool.QueryRow(ctx, `SELECT j.state, j.scheduled_at, coalesce(array_length(j.errors, 1), 0) FROM wharf_inbox_messages m
			JOIN river_job j ON j.id = m.job_id WHERE m.id = $1 AND m.job_id <> $2`,
			results[1].MessageID, results[0].JobID).Scan(&state, &scheduledAt, &errs)
		return err == nil && errs > 0
	}, 30*time.Second, 5*time.Millisecond, "the retry job's first run")
	// Seen as soon as the failure was handed to River: waiting for its
	// retry time available ('retryable' would wait for River's scheduler).
	require.Contains(t, []string{"available", "running", "completed"}, state)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	msg, err := b.inbox.Get(ctx, results[1].MessageID)
	require.NoError(t, err)
	require.Equal(t, 2, msg.Attempts)
	// The retry job's first attempt stood for the batch's: it ran no
	// handler (calls counts two runs in all) and River retried it.
	require.Equal(t, int32(2), calls.Load())
	var attempt, errs int
	var attemptedAt time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT j.attempt, coalesce(array_length(j.errors, 1), 0), j.attempted_at FROM wharf_inbox_messages m
		JOIN river_job j ON j.id = m.job_id WHERE m.id = $1`, results[1].MessageID).Scan(&attempt, &errs, &attemptedAt))
	require.Equal(t, 2, attempt)
	require.Equal(t, 1, errs)
	require.False(t, attemptedAt.Before(scheduledAt), "retried at the policy's time, not before: %s, %s", attemptedAt, scheduledAt)
}

// TestBatchRetryFollowsTheClientsRetryPolicy: a message that failed in a
// batch is retried when the River client's RetryPolicy says, as one that
// failed on a job of its own is (it was retried after River's default
// backoff, whatever the policy), and its attempts still count handler runs.
func TestBatchRetryFollowsTheClientsRetryPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 3}})
	ctx := context.Background()
	var calls atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventType == "fails" {
			calls.Add(1)
			return errors.New("downstream down")
		}
		return nil
	})
	results := receiveMany(t, b.pool, b.inbox, typedPayments("ok", "fails"))
	policy := &recordingRetry{after: time.Hour}
	b.startWorkersWith(t, func(cfg *river.Config) { cfg.RetryPolicy = policy })
	var scheduledAt time.Time
	require.Eventually(t, func() bool {
		var state string
		err := b.pool.QueryRow(ctx, `SELECT j.state, j.scheduled_at FROM wharf_inbox_messages m
			JOIN river_job j ON j.id = m.job_id WHERE m.id = $1 AND m.job_id <> $2`,
			results[1].MessageID, results[0].JobID).Scan(&state, &scheduledAt)
		return err == nil && state == "retryable"
	}, 30*time.Second, 10*time.Millisecond, "the retry waits for the policy's time")
	require.WithinDuration(t, time.Now().Add(time.Hour), scheduledAt, 5*time.Minute)
	require.Equal(t, []int{1}, policy.attempts(), "asked once, about the retry job's first attempt")
	msg, err := b.inbox.Get(ctx, results[1].MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusFailed, msg.Status)
	require.Equal(t, 1, msg.Attempts)
	require.Equal(t, int32(1), calls.Load())
	var maxAttempts int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT j.max_attempts FROM river_job j WHERE j.id = $1`, msg.JobID).Scan(&maxAttempts))
	require.Equal(t, 3, maxAttempts, "the batch's attempt and the two left")
}

// TestBatchHandsOnWhatItHasNotReachedAtHalfItsTimeout: a batch whose
// handlers would outlast its job's timeout starts none past half of it and
// hands the messages it has not reached to a new batch job, in the
// transaction that commits the others: every handler runs once. (A batch
// that timed out lost all its work and ran every handler again.) The first
// handler runs until just past half the job's timeout; with a
// BatchHandler, after its call for the group failed.
func TestBatchHandsOnWhatItHasNotReachedAtHalfItsTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	// pastHalf waits until just past half the timeout of ctx's job.
	pastHalf := func(ctx context.Context) error {
		deadline, ok := ctx.Deadline()
		if !ok {
			return errors.New("the job has no deadline")
		}
		select {
		case <-time.After(time.Until(deadline.Add(-timeout/2 + 50*time.Millisecond))):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprintf("BatchHandler=%t", batched), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := context.Background()
			createEffects(t, b.pool)
			var mu sync.Mutex
			calls := map[string]int{} // calls for one message
			one := func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
				mu.Lock()
				calls[msg.EventID]++
				mu.Unlock()
				if err := applyEffect(ctx, tx, msg); err != nil {
					return err
				}
				if msg.EventType == "slow" {
					return pastHalf(ctx)
				}
				return nil
			}
			if batched {
				b.inbox.HandleBatch("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msgs []*inbox.Message) error {
					if len(msgs) > 1 {
						return errors.New("the group fails: each message goes again alone")
					}
					return one(ctx, tx, msgs[0])
				})
			} else {
				b.inbox.Handle("payments", inbox.Wildcard, one)
			}
			batch := typedPayments("slow", "b", "c", "d", "e", "f")
			results := receiveMany(t, b.pool, b.inbox, batch)
			b.startWorkersWith(t, func(cfg *river.Config) { cfg.JobTimeout = timeout })
			awaitSettled(t, b.pool, inbox.StatusProcessed)
			mu.Lock()
			defer mu.Unlock()
			next := jobOf(t, b.pool, results[1].MessageID)
			require.NotEqual(t, results[0].JobID, next, "the rest went on to a new job")
			for i := range batch {
				require.Equal(t, 1, calls[batch[i].EventID], "each handler ran once: %v", calls)
				require.Equal(t, 1, effectCount(t, b.pool, batch[i].EventID), batch[i].EventID)
				if i > 0 {
					require.Equal(t, next, jobOf(t, b.pool, results[i].MessageID), "message %d went on with the rest", i)
				}
			}
			require.Equal(t, results[0].JobID, jobOf(t, b.pool, results[0].MessageID), "the first stayed on its batch")
			var kind string
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT kind FROM river_job WHERE id = $1", next).Scan(&kind))
			require.Equal(t, "wharf_inbox_process_batch", kind)
		})
	}
}

// TestBatchSplitsWhenItsTransactionFails: when the batch's transaction is
// lost (here a handler kills its own connection), nothing of the batch
// commits and each message continues on a job of its own: every effect
// still commits once.
func TestBatchSplitsWhenItsTransactionFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	createEffects(t, b.pool)
	var rogueCalls atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		if msg.EventType == "rogue" && rogueCalls.Add(1) == 1 {
			_, err := tx.Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
			return err
		}
		return nil
	})
	var batch []inbox.Incoming
	for i, typ := range []string{"ok", "rogue", "ok", "ok"} {
		batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), EventType: typ, Body: []byte(`{}`)})
	}
	results := receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	for i := range batch {
		require.Equal(t, 1, effectCount(t, b.pool, batch[i].EventID), batch[i].EventID)
		jobID := jobOf(t, b.pool, results[i].MessageID)
		require.NotEqual(t, results[i].JobID, jobID, "message %d moved to a job of its own", i)
	}
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT state FROM river_job WHERE id = $1", results[0].JobID).Scan(&state))
	require.Equal(t, "completed", state)
}

// TestHandlerCannotEndItsTransaction: a handler's Commit or Rollback fails
// and changes nothing, alone or in a batch: its effect commits once, with
// its message's processed mark.
func TestHandlerCannotEndItsTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	var endErrs sync.Map
	var failedOnce atomic.Bool
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		endErrs.Store(msg.EventID+"/commit", tx.Commit(ctx))
		endErrs.Store(msg.EventID+"/rollback", tx.Rollback(ctx))
		if msg.EventID == "fails_once" && failedOnce.CompareAndSwap(false, true) {
			// Committed (as it thinks), then failed: the retry must not
			// find a first effect already applied.
			return errors.New("failed after committing")
		}
		return nil // ignoring the errors, as a careless handler would
	})
	receiveMany(t, b.pool, b.inbox, payments("fails_once"))
	receiveMany(t, b.pool, b.inbox, payments("alone"))
	receiveMany(t, b.pool, b.inbox, payments("batched_1", "batched_2"))
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	for _, id := range []string{"fails_once", "alone", "batched_1", "batched_2"} {
		require.Equal(t, 1, effectCount(t, b.pool, id), id)
		for _, op := range []string{"/commit", "/rollback"} {
			err, _ := endErrs.Load(id + op)
			require.ErrorIs(t, err.(error), inbox.ErrHandlerEndedTx, id+op)
		}
	}
}

// TestBatchHandlersReachTheDatabaseEveryWay: the savepoint taken before a
// handler's first statement works whichever way the handler reaches the
// database (Exec, Query read to its end without Close, QueryRow, a nested
// transaction, CopyFrom, SendBatch), and a handler that fails before any
// statement leaves the previous handler's writes alone.
func TestBatchHandlersReachTheDatabaseEveryWay(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	ctx := context.Background()
	createEffects(t, b.pool)
	const insert = "INSERT INTO effects (event_id) VALUES ($1)"
	ways := map[string]inbox.Handler{
		"exec": applyEffect,
		"query": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			rows, err := tx.Query(ctx, insert+" RETURNING event_id", msg.EventID)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			return rows.Err()
		},
		"query_row": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			var id string
			return tx.QueryRow(ctx, insert+" RETURNING event_id", msg.EventID).Scan(&id)
		},
		"nested": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			return pgx.BeginFunc(ctx, tx, func(nested pgx.Tx) error { return applyEffect(ctx, nested, msg) })
		},
		"copy": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"effects"}, []string{"event_id"}, pgx.CopyFromRows([][]any{{msg.EventID}}))
			return err
		},
		"batch": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			batch := &pgx.Batch{}
			batch.Queue(insert, msg.EventID)
			return tx.SendBatch(ctx, batch).Close()
		},
		"query_row_then_fail": func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			var id string
			if err := tx.QueryRow(ctx, insert+" RETURNING event_id", msg.EventID).Scan(&id); err != nil {
				return err
			}
			return errors.New("fails after writing")
		},
		"fail_before_any_statement": func(context.Context, pgx.Tx, *inbox.Message) error {
			return errors.New("fails before writing")
		},
	}
	order := []string{"exec", "query", "fail_before_any_statement", "query_row", "query_row_then_fail", "nested", "copy", "batch", "exec"}
	for typ, h := range ways {
		b.inbox.Handle("payments", typ, h)
	}
	batch := typedPayments(order...)
	results := receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	for i, typ := range order {
		msg, err := b.inbox.Get(ctx, results[i].MessageID)
		require.NoError(t, err)
		if strings.HasPrefix(typ, "fail") || strings.HasSuffix(typ, "fail") {
			require.Equal(t, inbox.StatusDead, msg.Status, typ)
			require.Zero(t, effectCount(t, b.pool, batch[i].EventID), typ)
			continue
		}
		require.Equal(t, inbox.StatusProcessed, msg.Status, "%s: %s", typ, msg.LastError)
		require.Equal(t, 1, effectCount(t, b.pool, batch[i].EventID), typ)
		jobID := jobOf(t, b.pool, msg.ID)
		require.Equal(t, results[0].JobID, jobID, "%s was processed in the batch", typ)
	}
}

// TestBatchSurvivesLosingTheDatabase: the database goes away while a batch
// is being processed; nothing of the batch commits, and once the database
// is back every message is processed exactly once.
func TestBatchSurvivesLosingTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, proxied := testdb.NewProxy(t, testdb.NewURL(t))
	cfg, err := pgxpool.ParseConfig(proxied)
	require.NoError(t, err)
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// MaxAttempts 1: the batch job's own attempts must not run out during
	// the outage, or its messages would stay received with no job.
	b := setup(t, &setupOpts{pool: pool, cfg: &inbox.Config{MaxAttempts: 1}})
	createEffects(t, pool)
	inHandler := make(chan struct{})
	var cut sync.Once
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if err := applyEffect(ctx, tx, msg); err != nil {
			return err
		}
		cut.Do(func() { proxy.SetDown(true); close(inHandler) })
		return nil
	})
	var batch []inbox.Incoming
	for i := range 5 {
		batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`)})
	}
	receiveMany(t, pool, b.inbox, batch)
	b.startWorkers(t)
	select {
	case <-inHandler:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch never reached a handler")
	}
	time.Sleep(200 * time.Millisecond) // the outage lasts a while: the batch and its split fail meanwhile
	proxy.SetDown(false)
	awaitSettled(t, pool, inbox.StatusProcessed)
	for i := range batch {
		var n int
		require.Eventually(t, func() bool {
			return pool.QueryRow(ctx, "SELECT count(*) FROM effects WHERE event_id = $1", batch[i].EventID).Scan(&n) == nil
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, 1, n, batch[i].EventID)
	}
}

// TestForgetInABatch: erasing a message of a batch keeps the batch's job
// for its neighbour, which is still processed; erasing the last one the job
// waits for deletes the job.
func TestForgetInABatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	createEffects(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, applyEffect)
	receive := func(ids ...string) int64 { return receiveMany(t, b.pool, b.inbox, payments(ids...))[0].JobID }
	jobExists := func(id int64) bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE id = $1", id).Scan(&n))
		return n == 1
	}
	kept := receive("kept_forgotten", "kept_processed")
	gone := receive("gone_1", "gone_2")
	for _, id := range []string{"kept_forgotten", "gone_1", "gone_2"} {
		_, err := b.inbox.Forget(ctx, "payments", id)
		require.NoError(t, err)
	}
	require.True(t, jobExists(kept), "a neighbour still waits for the job")
	require.False(t, jobExists(gone), "no message waits for the job")

	b.startWorkers(t)
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "kept_processed") == 1 }, 20*time.Second, 10*time.Millisecond)
	for _, id := range []string{"kept_forgotten", "gone_1", "gone_2"} {
		require.Zero(t, effectCount(t, b.pool, id), id)
	}
}

// TestBatchHandlerEndingTheTransaction: a handler that commits the batch's
// transaction behind Wharf's back (through Conn, as a library taking a
// *pgx.Conn would) loses nothing and doubles nothing: its mark committed
// with its writes, and the messages after it continue alone. Alone, on a
// job of its own, such a handler that then fails does not run again.
func TestBatchHandlerEndingTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if !strings.HasPrefix(msg.EventID, "evt_2") {
			return applyEffect(ctx, tx, msg)
		}
		if err := pgx.BeginFunc(ctx, tx.Conn(), func(inner pgx.Tx) error { return applyEffect(ctx, inner, msg) }); err != nil {
			return err
		}
		if msg.EventID == "evt_2_alone" {
			return errors.New("fails after committing") // the effect stands: it must not run again
		}
		return nil
	})
	batch := payments("evt_1", "evt_2", "evt_3", "evt_4", "evt_5")
	receiveMany(t, b.pool, b.inbox, batch)
	receiveMany(t, b.pool, b.inbox, payments("evt_2_alone")) // a job of its own
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	for _, m := range append(batch, payments("evt_2_alone")...) {
		require.Equal(t, 1, effectCount(t, b.pool, m.EventID), m.EventID)
	}
}

// TestBatchHandlerStatementErrors: a handler statement that fails before
// it runs (it does not parse, or its arguments do not fit) fails that
// message alone; its neighbours stay processed in the batch.
func TestBatchHandlerStatementErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1}})
	ctx := context.Background()
	createEffects(t, b.pool)
	const insert = "INSERT INTO effects (event_id) VALUES ($1)"
	b.inbox.Handle("payments", "ok", applyEffect)
	b.inbox.Handle("payments", "ok_proves", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		_, err := tx.Exec(ctx, insert, msg.EventID)
		return err
	})
	b.inbox.Handle("payments", "typo", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		_, err := tx.Exec(ctx, "INSERT INTO no_such_table (x) VALUES ($1)", msg.EventID)
		return err
	})
	b.inbox.Handle("payments", "missing_arg", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		_, err := tx.Exec(ctx, insert) // without its argument
		return err
	})
	b.inbox.Handle("payments", "query_error", func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		rows, _ := tx.Query(ctx, "SELECT 1/x FROM generate_series(0, 0) x") // pgx's idiom: the error comes back from CollectRows
		_, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		return err
	})
	types := []string{"ok", "ok_proves", "typo", "ok", "missing_arg", "ok", "query_error", "ok"}
	batch := typedPayments(types...)
	results := receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	for i, typ := range types {
		msg, err := b.inbox.Get(ctx, results[i].MessageID)
		require.NoError(t, err)
		jobID := jobOf(t, b.pool, msg.ID)
		switch typ {
		case "ok", "ok_proves":
			require.Equal(t, inbox.StatusProcessed, msg.Status, typ)
			require.Equal(t, results[0].JobID, jobID, "%s stayed in the batch", typ)
			require.Equal(t, 1, effectCount(t, b.pool, msg.EventID))
		default:
			require.Equal(t, inbox.StatusDead, msg.Status, typ)
			require.NotContains(t, msg.LastError, "panicked", typ)
		}
	}
	msg, err := b.inbox.Get(ctx, results[6].MessageID)
	require.NoError(t, err)
	require.Contains(t, msg.LastError, "division by zero")
}

// TestConcurrentReplaysOfOneBatch: replaying every dead message of several
// batches at once neither deadlocks nor fails.
func TestConcurrentReplaysOfOneBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		return inbox.Permanent(errors.New("nope"))
	})
	var results []inbox.Result
	for i := range 10 {
		results = append(results, receiveMany(t, b.pool, b.inbox, payments(fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i), fmt.Sprint("d", i)))...)
	}
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusDead)
	errs := make([]error, len(results))
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { errs[i] = b.inbox.Replay(ctx, results[i].MessageID) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "replay %d", i)
	}
}

// TestBatchHandlerUsingConnAfterTimeout: a handler that outlives the job's
// timeout and then commits through Conn with a context of its own must not
// commit its effect without its mark (it would run again, and apply twice).
func TestBatchHandlerUsingConnAfterTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffects(t, b.pool)
	var calls atomic.Int32
	b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.EventID != "evt_2" || calls.Add(1) > 1 {
			return applyEffect(ctx, tx, msg)
		}
		<-ctx.Done() // outlives the job's timeout
		detached := context.WithoutCancel(ctx)
		return pgx.BeginFunc(detached, tx.Conn(), func(inner pgx.Tx) error { return applyEffect(detached, inner, msg) })
	})
	batch := payments("evt_1", "evt_2", "evt_3")
	receiveMany(t, b.pool, b.inbox, batch)
	b.startWorkersWith(t, func(cfg *river.Config) { cfg.JobTimeout = 300 * time.Millisecond })
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	for _, m := range batch {
		require.Equal(t, 1, effectCount(t, b.pool, m.EventID), m.EventID)
	}
}
