package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/audit"
	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/signature"
)

// Messages with the same ordering key are processed one at a time, in
// receipt order; a failing one holds the later ones of its key until it
// succeeds, and no other key waits for it.
func TestOrderingKeyProcessesInReceiptOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	verifier := signature.NewStandardWebhooks(signature.Secrets{testSecret}, nil)
	b := setup(t, &setupOpts{cfg: &inbox.Config{Sources: []inbox.Source{
		{Name: "payments", Verifier: verifier, OrderingFields: []string{"data.subscription"}},
	}}})
	_, err := b.pool.Exec(ctx, "CREATE TABLE applied (event_id text NOT NULL, subscription text NOT NULL, n serial)")
	require.NoError(t, err)

	var mu sync.Mutex
	failuresLeft := map[string]int{"evt_a1": 3}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		mu.Lock()
		fail := failuresLeft[msg.EventID] > 0
		if fail {
			failuresLeft[msg.EventID]--
		}
		mu.Unlock()
		if fail {
			return errors.New("not yet")
		}
		_, err := tx.Exec(ctx, "INSERT INTO applied (event_id, subscription) VALUES ($1, $2)", msg.EventID, msg.OrderingKey)
		return err
	})

	send := func(id, sub string) {
		body := fmt.Appendf(nil, `{"type":"subscription.updated","data":{"subscription":%q}}`, sub)
		a := do(t, b.signed(t, "payments", id, body, time.Now()))
		require.Equal(t, http.StatusOK, a.Status, a.RawBody)
	}
	// Received one by one, so that receipt order is unambiguous.
	send("evt_a1", "sub_a")
	send("evt_b1", "sub_b")
	send("evt_a2", "sub_a")
	send("evt_a3", "sub_a")
	send("evt_b2", "sub_b")
	send("evt_none", "") // no key: no order

	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	order := map[string][]string{}
	rows, err := b.pool.Query(ctx, "SELECT event_id, subscription FROM applied ORDER BY n")
	require.NoError(t, err)
	for rows.Next() {
		var id, sub string
		require.NoError(t, rows.Scan(&id, &sub))
		order[sub] = append(order[sub], id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"evt_a1", "evt_a2", "evt_a3"}, order["sub_a"])
	require.Equal(t, []string{"evt_b1", "evt_b2"}, order["sub_b"])
	require.Equal(t, []string{"evt_none"}, order[""])

	// sub_b did not wait for sub_a's failures: both of its messages were
	// applied before evt_a1 finally was.
	var a1, b2 int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT n FROM applied WHERE event_id = 'evt_a1'").Scan(&a1))
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT n FROM applied WHERE event_id = 'evt_b2'").Scan(&b2))
	require.Less(t, b2, a1, "another key was held by sub_a's failing message")

	// Waiting used no attempts: evt_a1 took three failures and a success,
	// every other message its one success.
	attempts := map[string]int32{}
	rows, err = b.pool.Query(ctx, "SELECT event_id, attempts FROM wharf_inbox_messages")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var n int32
		require.NoError(t, rows.Scan(&id, &n))
		attempts[id] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int32{"evt_a1": 4, "evt_a2": 1, "evt_a3": 1, "evt_b1": 1, "evt_b2": 1, "evt_none": 1}, attempts)
}

// A message that fails for good is dead and releases the later ones of its
// key; an operator's Skip does the same for one still retrying.
func TestOrderingDeadOrSkippedReleasesTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1000}})
	createEffects(t, b.pool)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		switch msg.EventID {
		case "evt_perm":
			return inbox.Permanent(errors.New("bad payload"))
		case "evt_stuck":
			return errors.New("the downstream is down")
		}
		return applyEffect(ctx, tx, msg)
	})
	msgs := []inbox.Incoming{
		{Source: "payments", EventID: "evt_perm", Body: []byte(`{}`), OrderingKey: "k1"},
		{Source: "payments", EventID: "evt_after_perm", Body: []byte(`{}`), OrderingKey: "k1"},
		{Source: "payments", EventID: "evt_stuck", Body: []byte(`{}`), OrderingKey: "k2"},
		{Source: "payments", EventID: "evt_after_stuck", Body: []byte(`{}`), OrderingKey: "k2"},
	}
	for _, m := range msgs {
		receiveMany(t, b.pool, b.inbox, []inbox.Incoming{m})
	}
	b.startWorkers(t)
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_after_perm") == 1 }, 20*time.Second, 10*time.Millisecond,
		"a dead message releases its key")

	stuck := messageByEvent(t, b, "evt_stuck")
	require.Zero(t, effectCount(t, b.pool, "evt_after_stuck"), "held while evt_stuck retries")
	require.NoError(t, b.inbox.Skip(ctx, stuck.ID, "downstream retired"))
	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_after_stuck") == 1 }, 20*time.Second, 10*time.Millisecond,
		"a skipped message releases its key")
	got, err := b.inbox.Get(ctx, stuck.ID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, got.Status)
	require.Contains(t, got.LastError, "skipped by an operator: downstream retired")
	require.ErrorIs(t, b.inbox.Skip(ctx, stuck.ID, "again"), inbox.ErrNotSkippable)
	entries, err := audit.List(ctx, b.pool, nil)
	require.NoError(t, err)
	require.Len(t, entries, 1, "one skip recorded; the refused one is not")
	require.Equal(t, "message.skip", entries[0].Action)
	require.Equal(t, stuck.ID.String(), entries[0].ObjectID)
	require.Equal(t, "downstream retired", entries[0].Reason)
}

func messageByEvent(t *testing.T, b *testBundle, eventID string) *inbox.Message {
	t.Helper()
	res, err := b.inbox.List(context.Background(), &inbox.ListParams{Source: "payments"})
	require.NoError(t, err)
	for _, m := range res {
		if m.EventID == eventID {
			return m
		}
	}
	t.Fatalf("no message %s", eventID)
	return nil
}

// Under load (batches, 10 keys, handlers that fail now and then, several
// workers) each key's messages are still applied in receipt order, each
// once.
func TestOrderingHoldsUnderLoad(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	applyInOrder(t, b, func(seq int) bool { return seq%7 == 3 }) // every seventh fails once
	const total, keys = 400, 10
	for start := 0; start < total; start += 50 {
		var batch []inbox.Incoming
		for i := start; i < start+50; i++ {
			batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`),
				OrderingKey: fmt.Sprintf("key_%d", i%keys)})
		}
		receiveMany(t, b.pool, b.inbox, batch)
	}
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)

	requireAppliedInOrder(t, b.pool, total)
}

// The parked messages of a key that follow one that finishes, received
// together, wake together: one batch job processes them in order, where
// each used to get a job of its own, woken by the one before it (a hot
// key's backlog drained at some 40 messages a second).
func TestOrderingWakesAParkedRunOnOneJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	applyInOrder(t, b, func(seq int) bool { return seq == 0 }) // evt_0 fails once: the others park behind it
	msg := func(i int) inbox.Incoming {
		return inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`), OrderingKey: "order_1"}
	}
	receiveMany(t, b.pool, b.inbox, []inbox.Incoming{msg(0)})
	var later []inbox.Incoming
	for i := 1; i <= 6; i++ {
		later = append(later, msg(i))
	}
	received := receiveMany(t, b.pool, b.inbox, later)
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	requireAppliedInOrder(t, b.pool, 7)

	rows, err := b.pool.Query(ctx, `SELECT m.event_id, j.kind, j.id FROM wharf_inbox_messages m JOIN river_job j ON j.id = m.job_id
		WHERE m.event_id <> 'evt_0' ORDER BY m.event_id`)
	require.NoError(t, err)
	type processedBy struct {
		Event, Kind string
		Job         int64
	}
	run, err := pgx.CollectRows(rows, pgx.RowToStructByPos[processedBy])
	require.NoError(t, err)
	require.Len(t, run, 6)
	require.NotEqual(t, received[0].JobID, run[0].Job, "woken: not the job they were received with")
	for _, m := range run {
		require.Equal(t, "wharf_inbox_process_batch", m.Kind, m.Event)
		require.Equal(t, run[0].Job, m.Job, "one job for the run: %v", run)
	}
	var parked int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process'
		AND args->>'message_id' IN (SELECT id::text FROM wharf_inbox_messages WHERE event_id <> 'evt_0')`).Scan(&parked))
	require.Zero(t, parked, "no message of the run got a job of its own")
}

// A batch's finish wakes the next parked message of each key with the
// parked messages that follow it unbroken in its receive batch, the runs of
// one receive batch on one batch job; a next message that has failed
// before goes alone, on a job of its own, and the ones after it wait.
func TestOrderingWakeNextOfRuns(t *testing.T) {
	t.Parallel()
	for name, firstFailed := range map[string]bool{"Runs": false, "FailedHeadAlone": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, nil)
			in := func(id, key string) inbox.Incoming {
				return inbox.Incoming{Source: "payments", EventID: id, Body: []byte(`{}`), OrderingKey: key}
			}
			first := receiveMany(t, b.pool, b.inbox, []inbox.Incoming{in("a", "order_1"), in("c", "order_2")})
			receiveMany(t, b.pool, b.inbox, []inbox.Incoming{in("b1", "order_1"), in("b2", "order_1"), in("b3", "order_1"), in("d1", "order_2")})
			// a and c processed; b1..b3 parked behind a, b1 failed before
			// or not; d1 parked behind c.
			_, err := b.pool.Exec(ctx, `UPDATE wharf_inbox_messages SET job_id = NULL,
				status = CASE WHEN event_id IN ('a', 'c') THEN 'processed' WHEN event_id = 'b1' AND $1 THEN 'failed' ELSE 'received' END`,
				firstFailed)
			require.NoError(t, err)
			_, err = b.pool.Exec(ctx, `DELETE FROM river_job`)
			require.NoError(t, err)
			var finished []*inbox.Message
			for _, r := range first {
				m, err := b.inbox.Get(ctx, r.MessageID)
				require.NoError(t, err)
				finished = append(finished, m)
			}

			require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				return inbox.WakeNextOf(ctx, b.inbox, tx, finished[0].ReceivedAt, finished)
			}))
			rows, err := b.pool.Query(ctx, `SELECT m.event_id, coalesce(j.kind, '') FROM wharf_inbox_messages m
				LEFT JOIN river_job j ON j.id = m.job_id WHERE m.event_id NOT IN ('a', 'c') ORDER BY m.event_id`)
			require.NoError(t, err)
			type woken struct{ Event, Kind string }
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[woken])
			require.NoError(t, err)
			batch, single := "wharf_inbox_process_batch", "wharf_inbox_process"
			want, jobs := []woken{{"b1", batch}, {"b2", batch}, {"b3", batch}, {"d1", batch}}, 1
			if firstFailed {
				want, jobs = []woken{{"b1", single}, {"b2", ""}, {"b3", ""}, {"d1", single}}, 2
			}
			require.Equal(t, want, got)
			var n int
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&n))
			require.Equal(t, jobs, n)
		})
	}
}

// applyInOrder creates the table applied (key, seq, n) and handles every
// message evt_<seq> by adding its row, failing once first when fails(seq).
func applyInOrder(t *testing.T, b *testBundle, fails func(seq int) bool) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), "CREATE TABLE applied (key text NOT NULL, seq int NOT NULL, n serial)")
	require.NoError(t, err)
	var mu sync.Mutex
	failed := map[string]bool{}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var seq int
		if _, err := fmt.Sscanf(msg.EventID, "evt_%d", &seq); err != nil {
			return inbox.Permanent(err)
		}
		mu.Lock()
		fail := fails(seq) && !failed[msg.EventID]
		failed[msg.EventID] = true
		mu.Unlock()
		if fail {
			return errors.New("transient")
		}
		_, err := tx.Exec(ctx, "INSERT INTO applied (key, seq) VALUES ($1, $2)", msg.OrderingKey, seq)
		return err
	})
}

// requireAppliedInOrder asserts that the table applied (key, seq, n) holds
// total rows, one per message, and that each key's seqs rise with n.
func requireAppliedInOrder(t *testing.T, pool *pgxpool.Pool, total int) {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT key, seq FROM applied ORDER BY n")
	require.NoError(t, err)
	last := map[string]int{}
	count := 0
	for rows.Next() {
		var key string
		var seq int
		require.NoError(t, rows.Scan(&key, &seq))
		prev, seen := last[key]
		require.True(t, !seen || seq > prev, "%s: evt_%d applied after evt_%d", key, seq, prev)
		last[key] = seq
		count++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, total, count, "each message applied once")
}

// A batch whose messages wait for earlier ones of their keys parks them in
// its own transaction, and the batch that processes the earlier ones wakes
// them together, on one batch job: no message gets a job of its own. When
// the earlier messages are being processed at that moment (their rows
// locked), the waiting ones go on together to a new batch job, at most
// three times, then to jobs of their own, which park them or, once the
// earlier ones are done, process them. Order holds either way.
func TestOrderingParksHeldMessagesInTheirBatch(t *testing.T) {
	t.Parallel()
	const keys = 10
	type bundle struct {
		*testBundle
		unblock chan struct{} // closing it lets evt_0's handler return
		entered chan struct{} // closed when evt_0's handler runs
	}
	// setupTwoBatches receives two batches of one message per key, the
	// second's held by the first's; evt_0's handler blocks until unblock
	// is closed. The job of batch waiting (0 or 1) waits until the test
	// makes it available (release).
	setupTwoBatches := func(t *testing.T, waiting int) *bundle {
		ctx := context.Background()
		b := &bundle{testBundle: setup(t, nil), unblock: make(chan struct{}), entered: make(chan struct{})}
		var enter sync.Once
		_, err := b.pool.Exec(ctx, "CREATE TABLE applied (key text NOT NULL, seq int NOT NULL, n serial)")
		require.NoError(t, err)
		b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			var seq int
			if _, err := fmt.Sscanf(msg.EventID, "evt_%d", &seq); err != nil {
				return inbox.Permanent(err)
			}
			if seq == 0 {
				enter.Do(func() { close(b.entered) })
				select {
				case <-b.unblock:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			_, err := tx.Exec(ctx, "INSERT INTO applied (key, seq) VALUES ($1, $2)", msg.OrderingKey, seq)
			return err
		})
		for start := 0; start < 2*keys; start += keys {
			var batch []inbox.Incoming
			for i := start; i < start+keys; i++ {
				batch = append(batch, inbox.Incoming{Source: "payments", EventID: fmt.Sprintf("evt_%d", i), Body: []byte(`{}`),
					OrderingKey: fmt.Sprintf("key_%d", i%keys)})
			}
			receiveMany(t, b.pool, b.inbox, batch)
			if start/keys == waiting {
				_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'scheduled', scheduled_at = now() + interval '1 hour'
					WHERE id = (SELECT max(id) FROM river_job)`)
				require.NoError(t, err)
			}
		}
		return b
	}
	release := func(t *testing.T, b *bundle) {
		_, err := b.pool.Exec(context.Background(), `UPDATE river_job SET state = 'available', scheduled_at = now() WHERE state = 'scheduled'`)
		require.NoError(t, err)
	}
	// startWhileFirstRuns starts the workers and, once evt_0's handler
	// runs (and blocks), makes the second batch's job available.
	startWhileFirstRuns := func(t *testing.T, b *bundle) {
		b.startWorkers(t)
		select {
		case <-b.entered:
		case <-time.After(30 * time.Second):
			t.Fatal("evt_0's handler never ran")
		}
		release(t, b)
	}
	// check asserts that every message was applied once, in order per key,
	// and returns how many jobs of their own messages got.
	check := func(t *testing.T, b *bundle) (single int) {
		ctx := context.Background()
		awaitSettled(t, b.pool, inbox.StatusProcessed)
		requireAppliedInOrder(t, b.pool, 2*keys)
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process'").Scan(&single))
		return single
	}
	count := func(t *testing.T, b *bundle, query string) int {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), query).Scan(&n))
		return n
	}

	t.Run("ParkedAndWokenTogether", func(t *testing.T) {
		t.Parallel()
		// The second batch runs first, while the first one waits.
		b := setupTwoBatches(t, 0)
		close(b.unblock)
		b.startWorkers(t)
		require.Eventually(t, func() bool {
			return count(t, b, "SELECT count(*) FROM wharf_inbox_messages WHERE job_id IS NULL AND status = 'received'") == keys
		}, 30*time.Second, 5*time.Millisecond, "the second batch never parked its messages")
		release(t, b)
		require.Zero(t, check(t, b), "held messages got jobs of their own")
		require.Equal(t, 3, count(t, b, "SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process_batch'"),
			"the woken messages were not processed on one batch job")
	})
	t.Run("EarlierFinishesWhileWaiting", func(t *testing.T) {
		t.Parallel()
		// The second batch runs while the first one is processing evt_0
		// and waits for it; evt_0's handler returns meanwhile, and the
		// second batch then processes its messages itself: nothing parks,
		// nothing is handed over.
		b := setupTwoBatches(t, 1)
		startWhileFirstRuns(t, b)
		require.Eventually(t, func() bool {
			return count(t, b, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND wait_event_type = 'Lock' AND query LIKE '%InboxMessagesAwaitUnlocked%'`) > 0
		}, 30*time.Second, 2*time.Millisecond, "the second batch never waited for the first")
		close(b.unblock)
		require.Zero(t, check(t, b), "held messages got jobs of their own")
		require.Equal(t, 2, count(t, b, "SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process_batch'"),
			"the held messages were parked or handed over")
	})
	t.Run("EarlierBeingProcessed", func(t *testing.T) {
		t.Parallel()
		// The second batch runs while the first one is processing evt_0,
		// its rows locked; evt_0 is held until the second batch has handed
		// its messages on to new batch jobs as often as it may and then to
		// jobs of their own.
		b := setupTwoBatches(t, 1)
		startWhileFirstRuns(t, b)
		require.Eventually(t, func() bool {
			return count(t, b, "SELECT count(*) FROM river_job WHERE kind = 'wharf_inbox_process'") > 0
		}, 30*time.Second, 5*time.Millisecond)
		close(b.unblock)
		require.Equal(t, keys, check(t, b), "each held message gets one job of its own")
		require.Equal(t, 3, count(t, b, "SELECT max((args->>'waits')::int) FROM river_job WHERE kind = 'wharf_inbox_process_batch'"),
			"the held messages were not handed over to new batch jobs first")
	})
}

// A batch's message that dies at once (Permanent) holds none of the later
// ones of its key: they wait, if at all, for the earlier ones outside the
// batch. Here y, outside the batch, lies between a and b (all three
// received in the same microsecond by concurrent requests, ids a < y < b),
// and an operator skips y while a fails: the skip's wake runs before the
// batch commits and the batch's wake of a's successor sees y unfinished, so
// b, had it been parked behind a, would have waited for ever.
func TestOrderingDeadInBatchStrandsNoLaterMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, first, between, _ := interleavedBatch(t)

	var skipOnce sync.Once
	skipping := make(chan pgx.Tx, 1)
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		if msg.ID != first {
			return applyEffect(ctx, tx, msg)
		}
		// The operator's skip of y, not yet committed.
		skipOnce.Do(func() {
			skipTx, err := b.pool.Begin(context.Background())
			if err == nil {
				err = b.inbox.SkipTx(context.Background(), skipTx, between, "retired")
			}
			if err != nil {
				t.Errorf("skip: %v", err)
			}
			skipping <- skipTx
		})
		return inbox.Permanent(errors.New("bad payload"))
	})
	b.startWorkers(t)
	skipTx := <-skipping
	require.Eventually(t, func() bool {
		m, err := b.inbox.Get(ctx, first)
		return err == nil && m.Status == inbox.StatusDead
	}, 30*time.Second, 5*time.Millisecond, "the first message never died")
	require.NoError(t, skipTx.Commit(ctx))

	require.Eventually(t, func() bool { return effectCount(t, b.pool, "evt_3") == 1 }, 30*time.Second, 10*time.Millisecond,
		"the last message was stranded: parked, with nothing left to wake it")
	awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
	require.Zero(t, effectCount(t, b.pool, "evt_1")+effectCount(t, b.pool, "evt_2"))
}

// The batch's ordering statements run with generic plans; the handlers, in
// the same transaction, see plan_cache_mode as it was.
func TestOrderingLeavesPlanCacheModeAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var mu sync.Mutex
	seen := map[string]string{}
	b.inbox.Handle(inbox.Wildcard, inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		var mode string
		if err := tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode); err != nil {
			return err
		}
		mu.Lock()
		seen[msg.EventID] = mode
		mu.Unlock()
		return nil
	})
	msgs := payments("evt_1", "evt_2", "evt_3")
	for i := range msgs {
		msgs[i].OrderingKey = fmt.Sprintf("sub_%d", i%2)
	}
	receiveMany(t, b.pool, b.inbox, msgs[:1]) // evt_3 waits for it outside the second batch
	receiveMany(t, b.pool, b.inbox, msgs[1:])
	b.startWorkers(t)
	awaitSettled(t, b.pool, inbox.StatusProcessed)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]string{"evt_1": "auto", "evt_2": "auto", "evt_3": "auto"}, seen)
}

// interleavedBatch receives three messages of one key in one batch and
// moves the middle one by id (between) to a job of its own, due in an
// hour: first and last stay on the batch's job, with between, as if
// received by a concurrent request in the same microsecond, between them.
func interleavedBatch(t *testing.T) (b *testBundle, first, between, last uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	b = setup(t, nil)
	createEffects(t, b.pool)
	msgs := payments("evt_1", "evt_2", "evt_3")
	for i := range msgs {
		msgs[i].OrderingKey = "sub_1"
	}
	results := receiveMany(t, b.pool, b.inbox, msgs)
	ids := []uuid.UUID{results[0].MessageID, results[1].MessageID, results[2].MessageID}
	slices.SortFunc(ids, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	first, between, last = ids[0], ids[1], ids[2]

	var batchJob int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT id FROM river_job WHERE kind = 'wharf_inbox_process_batch'").Scan(&batchJob))
	var ownJob int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT jsonb_build_object('message_id', $1::text, 'received_at', args->'received_at'), 'wharf_inbox_process', 25, queue,
			'scheduled', now() + interval '1 hour'
		FROM river_job WHERE id = $2 RETURNING id`, between.String(), batchJob).Scan(&ownJob))
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET job_id = $1 WHERE id = $2", ownJob, between)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "UPDATE river_job SET args = jsonb_set(args, '{message_ids}', to_jsonb($1::text[])) WHERE id = $2",
		[]string{first.String(), last.String()}, batchJob)
	require.NoError(t, err)
	return b, first, between, last
}
