package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/testdb"
)

// onDeadCounter counts Config.OnDead calls per message.
type onDeadCounter struct{ calls sync.Map } // message id → *atomic.Int32

func (c *onDeadCounter) onDead(_ context.Context, msg *inbox.Message, _ error) {
	n, _ := c.calls.LoadOrStore(msg.ID, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
}

func (c *onDeadCounter) of(id uuid.UUID) int {
	if n, ok := c.calls.Load(id); ok {
		return int(n.(*atomic.Int32).Load())
	}
	return 0
}

// jobState returns the state of River job id.
func jobState(t *testing.T, b *testBundle, id int64) string {
	t.Helper()
	var state string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT state FROM river_job WHERE id = $1", id).Scan(&state))
	return state
}

// awaitJobState waits until River job id is in state.
func awaitJobState(t *testing.T, b *testBundle, id int64, state string) {
	t.Helper()
	require.Eventually(t, func() bool { return jobState(t, b, id) == state }, 30*time.Second, 5*time.Millisecond,
		"job %d never %s", id, state)
}

// TestFailureRecordLeavesAReplayedMessage: an operator's Replay that gets
// in between a failed last attempt's rollback and its failure record (it
// waited for the row) stands: the old job's record does not make the
// message dead, OnDead is not called, the handler runs again on the new
// job, and River cancels the old job rather than retry it. Before, the
// record overwrote the replay with dead, the new job found the message dead
// and OnDead fired twice. For a message's own retry, and for the retry of
// one that failed in a batch.
func TestFailureRecordLeavesAReplayedMessage(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"own job", "after batch"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			died := &onDeadCounter{}
			b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 2, OnDead: died.onDead}})
			createEffects(t, b.pool)
			var replayed atomic.Bool
			var calls atomic.Int32
			b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
				if msg.EventType != "fails" {
					return nil
				}
				calls.Add(1)
				if !replayed.Load() {
					return errors.New("downstream down")
				}
				return applyEffect(ctx, tx, msg)
			})
			replay := make(chan error, 1)
			var oldJob atomic.Int64
			inbox.SetBeforeFailureRecord(b.inbox, func(ctx context.Context, msg *inbox.Message) {
				// The last attempt (one recorded before it) failed and rolled back.
				if msg.Attempts == 1 && !replayed.Swap(true) {
					oldJob.Store(msg.JobID)
					replay <- b.inbox.Replay(ctx, msg.ID)
				}
			})
			types := []string{"fails"}
			if path == "after batch" {
				types = []string{"ok", "fails"}
			}
			results := receiveMany(t, b.pool, b.inbox, typedPayments(types...))
			id := results[len(results)-1].MessageID
			b.startWorkers(t)

			select {
			case err := <-replay:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the last attempt never failed")
			}
			awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
			msg, err := b.inbox.Get(ctx, id)
			require.NoError(t, err)
			require.Equal(t, inbox.StatusProcessed, msg.Status, "the replay was undone; last_error %q", msg.LastError)
			require.NotEqual(t, oldJob.Load(), msg.JobID)
			require.Equal(t, 2, msg.Attempts, "the replayed run counts; the attempt the replay cut short does not")
			require.Equal(t, int32(3), calls.Load(), "two failed runs, then the replay's")
			require.Equal(t, 1, effectCount(t, b.pool, typedPayments(types...)[len(types)-1].EventID))
			require.Zero(t, died.of(id), "OnDead was called for a replayed message")
			awaitJobState(t, b, oldJob.Load(), "cancelled")
		})
	}
}

// TestNoOnDeadForAMessageSkippedOrErasedUnderItsJob: a job that runs on a
// message an operator skipped or erased while the job waited for its row
// leaves it alone: it is not counted or logged dead again and OnDead is not
// called (Config.OnDead promises operator actions never call it). Before,
// the own job's cancel of a skipped message went through the failure path.
// The batch worker is covered too.
func TestNoOnDeadForAMessageSkippedOrErasedUnderItsJob(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"own job", "batch"} {
		for _, op := range []string{"skip", "forget"} {
			t.Run(path+"/"+op, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				died := &onDeadCounter{}
				logged := &testdb.LockedBuffer{}
				b := setup(t, &setupOpts{cfg: &inbox.Config{OnDead: died.onDead, Logger: slog.New(slog.NewTextHandler(logged, nil))}})
				var calls atomic.Int32
				b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
					calls.Add(1)
					return nil
				})
				types := []string{"target"}
				if path == "batch" {
					types = []string{"target", "other"}
				}
				results := receiveMany(t, b.pool, b.inbox, typedPayments(types...))
				id, job := results[0].MessageID, results[0].JobID

				// The operator holds the row while the job starts and waits for it.
				tx, err := b.pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				_, err = tx.Exec(ctx, "SELECT 1 FROM wharf_inbox_messages WHERE id = $1 FOR UPDATE", id)
				require.NoError(t, err)
				b.startWorkers(t)
				awaitJobState(t, b, job, "running")
				if op == "skip" {
					require.NoError(t, b.inbox.SkipTx(ctx, tx, id, "bad data"))
				} else {
					n, err := b.inbox.ForgetTx(ctx, tx, "payments", typedPayments(types...)[0].EventID)
					require.NoError(t, err)
					require.Equal(t, 1, n)
				}
				require.NoError(t, tx.Commit(ctx))

				if path == "batch" {
					awaitJobState(t, b, job, "completed")
					require.Equal(t, int32(1), calls.Load(), "the other message ran, the skipped one did not")
				} else {
					awaitJobState(t, b, job, "cancelled")
					require.Zero(t, calls.Load())
				}
				msg, err := b.inbox.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, inbox.StatusDead, msg.Status)
				require.Zero(t, msg.Attempts, "an attempt was recorded for a message that never ran")
				require.Zero(t, died.of(id), "OnDead was called for a message an operator took (%s)", op)
				require.NotContains(t, logged.String(), "inbox: message dead")
			})
		}
	}
}

// TestRescueLeavesAMessageGivenAJobMeanwhile: a message Rescue finds
// stranded (its job gone) but that a Replay gives a new job after Rescue's
// statement began and before it locks the row is left alone. Before,
// Postgres re-checked the locked row against the job row joined at the
// start (none) and the message was made dead, "its River job … is gone",
// while its new job waited to run. The Replay commits while Rescue works
// through many messages it does not settle, read before this one: once
// Rescue has locked the first message, which is read before all of them.
func TestRescueLeavesAMessageGivenAJobMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	died := &onDeadCounter{}
	b := setup(t, &setupOpts{cfg: &inbox.Config{OnDead: died.onDead}})
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := b.pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	receive := func(eventID string) inbox.Result {
		r := receiveMany(t, b.pool, b.inbox, payments(eventID))[0]
		require.NoError(t, r.Err)
		return r
	}
	first := receive("evt_first") // stranded: Rescue locks it first
	live := receive("evt_live")   // its job waits to run
	// After the first, unfinished messages on a live job: Rescue reads and
	// leaves them, before it reaches the replayed one, stored after them.
	const between = 50000
	exec(`INSERT INTO wharf_inbox_messages (id, received_at, source, event_id, body, payload_hash, status, job_id, updated_at)
		SELECT gen_random_uuid(), $1::timestamptz + make_interval(secs => i / 1e6), 'payments', 'evt_between_' || i, '',
			'\x00', 'received', $2, $1
		FROM generate_series(1, $3::int) AS i`, first.ReceivedAt, live.JobID, between)
	b.clock.Advance(time.Second)
	replayed := receive("evt_replayed")
	exec("DELETE FROM river_job WHERE id = ANY($1)", []int64{first.JobID, replayed.JobID})
	exec("UPDATE wharf_inbox_messages SET updated_at = $1", b.clock.Now().Add(-inbox.RescueAfter-time.Minute))

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, b.inbox.ReplayTx(ctx, tx, replayed.MessageID))
	rescued := make(chan error, 1)
	go func() {
		_, err := b.inbox.Rescue(ctx)
		rescued <- err
	}()
	require.Eventually(t, func() bool {
		var locked bool
		err := b.pool.QueryRow(ctx, "SELECT xmax::text <> '0' FROM wharf_inbox_messages WHERE id = $1", first.MessageID).Scan(&locked)
		return err == nil && locked
	}, 30*time.Second, time.Millisecond, "Rescue never locked the first message")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-rescued)

	msg, err := b.inbox.Get(ctx, replayed.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusReceived, msg.Status, "Rescue settled a message given a job meanwhile: %q", msg.LastError)
	require.Equal(t, "available", jobState(t, b, msg.JobID))
	require.Zero(t, died.of(replayed.MessageID))
	first1, err := b.inbox.Get(ctx, first.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, first1.Status, "the first message, stranded, was settled")
}

// deadlockingHandler upserts, for each message, the accounts its body
// lists, in that order; the first upsert of a message whose type is
// "holds" waits, once, until parties such upserts have happened, so that
// each holds its first row before any takes its next.
func deadlockingHandler(t *testing.T, b *testBundle, parties int32) (inbox.Handler, *atomic.Int32) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), "CREATE TABLE balances (account text PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)
	var arrived, calls atomic.Int32
	allIn := make(chan struct{})
	var held sync.Map
	return func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
		calls.Add(1)
		var body struct{ Accounts []string }
		if err := json.Unmarshal(msg.Body, &body); err != nil {
			return inbox.Permanent(err)
		}
		for i, account := range body.Accounts {
			if _, err := tx.Exec(ctx, `INSERT INTO balances (account, n) VALUES ($1, 1)
				ON CONFLICT (account) DO UPDATE SET n = balances.n + 1`, account); err != nil {
				return fmt.Errorf("upsert %s: %w", account, err)
			}
			if _, again := held.LoadOrStore(msg.ID, true); i == 0 && msg.EventType == "holds" && !again {
				if arrived.Add(1) == parties {
					close(allIn)
				}
				select {
				case <-allIn:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}, &calls
}

// accounts returns an Incoming of source "payments" whose body lists
// accounts.
func accounts(eventID, eventType string, accounts ...string) inbox.Incoming {
	body, _ := json.Marshal(map[string][]string{"accounts": accounts})
	return inbox.Incoming{Source: "payments", EventID: eventID, EventType: eventType, Body: body}
}

// TestDeadlockUsesNoAttempt: a handler that loses a deadlock (40P01) is
// run again at once, alone, without using an attempt or being recorded as
// failed. In a batch: two batch jobs whose plain upserts take the same rows
// in opposite orders (each handler's locks are held until its batch
// commits); on a message's own job: two handlers that take two rows in
// opposite orders. Before, the deadlock's victim was a failed attempt
// (attempts 2, last_error "deadlock detected") retried after a backoff.
func TestDeadlockUsesNoAttempt(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"batch", "own job"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 3}})
			h, calls := deadlockingHandler(t, b, 2)
			b.inbox.Handle("payments", inbox.Wildcard, h)
			var batches [][]inbox.Incoming
			if path == "batch" {
				batches = [][]inbox.Incoming{
					{accounts("evt_1", "holds", "a"), accounts("evt_2", "", "b")},
					{accounts("evt_3", "holds", "b"), accounts("evt_4", "", "a")},
				}
			} else {
				batches = [][]inbox.Incoming{{accounts("evt_1", "holds", "a", "b")}, {accounts("evt_2", "holds", "b", "a")}}
			}
			var ids []uuid.UUID
			for _, batch := range batches {
				for _, r := range receiveMany(t, b.pool, b.inbox, batch) {
					require.NoError(t, r.Err)
					ids = append(ids, r.MessageID)
				}
				b.clock.Advance(time.Millisecond)
			}
			b.startWorkers(t)
			awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)
			for _, id := range ids {
				msg, err := b.inbox.Get(ctx, id)
				require.NoError(t, err)
				require.Equal(t, inbox.StatusProcessed, msg.Status, msg.EventID)
				require.Equal(t, 1, msg.Attempts, "%s: the deadlock used an attempt (last_error %q)", msg.EventID, msg.LastError)
				require.Empty(t, msg.LastError, msg.EventID)
			}
			require.Greater(t, calls.Load(), int32(len(ids)), "no handler lost a deadlock")
			var a, bal int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT (SELECT n FROM balances WHERE account = 'a'), (SELECT n FROM balances WHERE account = 'b')").Scan(&a, &bal))
			require.Equal(t, []int{2, 2}, []int{a, bal}, "each upsert committed once")
		})
	}
}

// operate runs an operator's action on message id (event eventID of
// "payments"): "replay", "skip" or "forget". Forget's error is nil when it
// erased the message.
func operate(ctx context.Context, ib *inbox.Inbox, op string, id uuid.UUID, eventID string) error {
	switch op {
	case "replay":
		return ib.Replay(ctx, id)
	case "skip":
		return ib.Skip(ctx, id, "operator says so")
	default:
		n, err := ib.Forget(ctx, "payments", eventID)
		if err == nil && n != 1 {
			err = fmt.Errorf("forget erased %d messages", n)
		}
		return err
	}
}

// awaitJobsFinished waits until no inbox processing job can run again.
func awaitJobsFinished(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		var open int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind IN ('wharf_inbox_process', 'wharf_inbox_process_batch')
			  AND state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&open)
		return err == nil && open == 0
	}, 60*time.Second, 10*time.Millisecond)
}

// TestOperatorRacingAFailingJob: a Replay, Skip or Forget that meets a
// failing job, on the message's own job or on its retry after failing in a
// batch, never leaves the message dead without a run after a replay,
// processed twice, or reported to OnDead when skipped or erased. First with
// the action put between a last attempt's rollback and its failure record
// (the test hook), then with actions started, unordered, as handlers fail.
func TestOperatorRacingAFailingJob(t *testing.T) {
	t.Parallel()
	ops := []string{"replay", "skip", "forget"}
	for _, path := range []string{"own job", "after batch"} {
		for _, op := range ops {
			t.Run("between rollback and record/"+path+"/"+op, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				died := &onDeadCounter{}
				logged := &testdb.LockedBuffer{}
				b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 2, OnDead: died.onDead, Logger: slog.New(slog.NewTextHandler(logged, nil))}})
				createEffects(t, b.pool)
				var acted atomic.Bool
				b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
					if msg.EventType == "ok" || acted.Load() {
						return applyEffect(ctx, tx, msg)
					}
					return errors.New("downstream down")
				})
				types := []string{"target"}
				if path == "after batch" {
					types = []string{"ok", "target"}
				}
				incoming := typedPayments(types...)
				target := incoming[len(incoming)-1].EventID
				done := make(chan error, 1)
				var oldJob atomic.Int64
				inbox.SetBeforeFailureRecord(b.inbox, func(ctx context.Context, msg *inbox.Message) {
					if msg.Attempts == 1 && !acted.Swap(true) {
						oldJob.Store(msg.JobID)
						done <- operate(ctx, b.inbox, op, msg.ID, msg.EventID)
					}
				})
				results := receiveMany(t, b.pool, b.inbox, incoming)
				id := results[len(results)-1].MessageID
				b.startWorkers(t)
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(30 * time.Second):
					t.Fatal("the last attempt never failed")
				}
				awaitJobsFinished(t, b)
				msg, err := b.inbox.Get(ctx, id)
				require.NoError(t, err)
				switch op {
				case "replay":
					require.Equal(t, inbox.StatusProcessed, msg.Status, msg.LastError)
					require.Equal(t, 1, effectCount(t, b.pool, target))
				case "skip":
					require.Equal(t, inbox.StatusDead, msg.Status)
					require.Equal(t, "skipped by an operator: operator says so", msg.LastError)
					require.Equal(t, 1, msg.Attempts, "the attempt the skip cut short is not recorded")
				case "forget":
					require.Equal(t, inbox.StatusDead, msg.Status)
					require.Equal(t, "erased on request before processing", msg.LastError)
					require.Empty(t, msg.Body)
				}
				require.Zero(t, died.of(id), "OnDead called")
				require.NotContains(t, logged.String(), "inbox: message dead")
				require.Equal(t, "cancelled", jobState(t, b, oldJob.Load()), "River retries or discards a job whose message is not its own")
			})
		}
	}

	t.Run("unordered", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		died := &onDeadCounter{}
		b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 2, OnDead: died.onDead}})
		createEffects(t, b.pool)
		type target struct {
			id, op  string // event id, action ("" for none)
			msg     uuid.UUID
			failing chan struct{} // closed at its second failed run: its last attempt
			once    sync.Once
			fails   atomic.Int32
			asked   atomic.Bool // a replay was asked for: the handler succeeds from then on
			err     error       // the action's
		}
		targets := map[string]*target{}
		var batches [][]inbox.Incoming
		for i := range 8 {
			var batch []inbox.Incoming
			for _, op := range append([]string{""}, ops...) {
				tg := &target{id: fmt.Sprintf("evt_%d_%s", i, op), op: op, failing: make(chan struct{})}
				targets[tg.id] = tg
				batch = append(batch, inbox.Incoming{Source: "payments", EventID: tg.id, Body: []byte(`{}`)})
			}
			if i%2 == 0 { // on jobs of their own
				for _, m := range batch {
					batches = append(batches, []inbox.Incoming{m})
				}
			} else {
				batches = append(batches, batch)
			}
		}
		b.inbox.Handle("payments", inbox.Wildcard, func(ctx context.Context, tx pgx.Tx, msg *inbox.Message) error {
			tg := targets[msg.EventID]
			if err := applyEffect(ctx, tx, msg); err != nil {
				return err
			}
			if tg.asked.Load() {
				return nil
			}
			if tg.fails.Add(1) == 2 {
				tg.once.Do(func() { close(tg.failing) })
			}
			return errors.New("downstream down")
		})
		for _, batch := range batches {
			for i, r := range receiveMany(t, b.pool, b.inbox, batch) {
				targets[batch[i].EventID].msg = r.MessageID
			}
		}
		var acting sync.WaitGroup
		for _, tg := range targets {
			if tg.op == "" {
				continue
			}
			acting.Add(1)
			go func() {
				defer acting.Done()
				select {
				case <-tg.failing: // its handler has just returned; the job has yet to roll back and record
				case <-time.After(60 * time.Second):
					tg.err = errors.New("its last attempt never failed")
					return
				}
				if tg.op == "replay" {
					tg.asked.Store(true)
				}
				tg.err = operate(ctx, b.inbox, tg.op, tg.msg, tg.id)
			}()
		}
		b.startWorkers(t)
		acting.Wait()
		awaitJobsFinished(t, b)
		awaitSettled(t, b.pool, inbox.StatusProcessed, inbox.StatusDead)

		for _, tg := range targets {
			msg, err := b.inbox.Get(ctx, tg.msg)
			require.NoError(t, err)
			effects := effectCount(t, b.pool, tg.id)
			require.LessOrEqual(t, effects, 1, "%s processed twice", tg.id)
			switch tg.op {
			case "":
				require.Equal(t, inbox.StatusDead, msg.Status, tg.id)
				require.Equal(t, 1, died.of(tg.msg), "%s: OnDead once", tg.id)
			case "replay":
				// Before its record (no OnDead) or after it (dead, then replayed).
				require.NoError(t, tg.err, tg.id)
				require.Equal(t, inbox.StatusProcessed, msg.Status, "%s: replayed, yet dead without a run: %q", tg.id, msg.LastError)
				require.Equal(t, 1, effects, tg.id)
				require.LessOrEqual(t, died.of(tg.msg), 1, tg.id)
			case "skip":
				require.Equal(t, inbox.StatusDead, msg.Status, tg.id)
				if tg.err == nil {
					require.Zero(t, died.of(tg.msg), "%s: OnDead called for a skipped message", tg.id)
					require.Equal(t, "skipped by an operator: operator says so", msg.LastError, tg.id)
				} else {
					// Its record came first: dead on its own, then not skippable.
					require.ErrorIs(t, tg.err, inbox.ErrNotSkippable, tg.id)
					require.Equal(t, 1, died.of(tg.msg), tg.id)
				}
			case "forget":
				require.NoError(t, tg.err, tg.id)
				require.Equal(t, inbox.StatusDead, msg.Status, tg.id)
				if msg.LastError == "erased on request before processing" {
					require.Zero(t, died.of(tg.msg), "%s: OnDead called for an erased message", tg.id)
				} else {
					require.Equal(t, "erased on request", msg.LastError, tg.id) // dead on its own first
					require.Equal(t, 1, died.of(tg.msg), tg.id)
				}
			}
		}
	})
}

// TestOnDeadOnceWhenTheFailureRecordFails: a last attempt whose failure
// cannot be recorded (the row is held past the record's 10 s) leaves the
// message unfinished on a discarded job; Rescue makes it dead, and OnDead
// is called then, once. It was called at the failed record too, though
// nothing was recorded: twice for one death.
func TestOnDeadOnceWhenTheFailureRecordFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	died := &onDeadCounter{}
	b := setup(t, &setupOpts{cfg: &inbox.Config{MaxAttempts: 1, OnDead: died.onDead}})
	b.inbox.Handle("payments", inbox.Wildcard, func(context.Context, pgx.Tx, *inbox.Message) error {
		return errors.New("downstream down")
	})
	held := make(chan pgx.Tx, 1)
	inbox.SetBeforeFailureRecord(b.inbox, func(_ context.Context, msg *inbox.Message) {
		tx, err := b.pool.Begin(ctx)
		if err != nil {
			panic(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM wharf_inbox_messages WHERE id = $1 FOR UPDATE", msg.ID); err != nil {
			panic(err)
		}
		held <- tx
	})
	r := receiveMany(t, b.pool, b.inbox, payments("evt_1"))[0]
	require.NoError(t, r.Err)
	b.startWorkers(t)
	var tx pgx.Tx
	select {
	case tx = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("never failed")
	}
	awaitJobState(t, b, r.JobID, "discarded")
	require.NoError(t, tx.Rollback(ctx))
	msg, err := b.inbox.Get(ctx, r.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusReceived, msg.Status, "nothing was recorded")
	require.Zero(t, died.of(r.MessageID), "OnDead called for a death nothing recorded")

	b.clock.Advance(inbox.RescueAfter + time.Minute)
	n, err := b.inbox.Rescue(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	msg, err = b.inbox.Get(ctx, r.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, msg.Status)
	require.Equal(t, 1, died.of(r.MessageID), "OnDead once for one death")
}
