package jobs_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/inbox"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/jobs"
)

// holdSnapshot opens a transaction that has read the inbox's messages, as
// a long handler's does, and returns a function that ends it. DETACH …
// CONCURRENTLY (and its FINALIZE) waits for such transactions.
func holdSnapshot(t *testing.T, b *testBundle) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM wharf_inbox_messages").Scan(&n))
	var once sync.Once
	end := func() { once.Do(func() { require.NoError(t, tx.Rollback(ctx)) }) }
	t.Cleanup(end)
	return end
}

// awaitDetachWaiting waits until a backend of this database is inside a
// DETACH … CONCURRENTLY (or FINALIZE) of the inbox's messages.
func awaitDetachWaiting(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active'
			  AND query ILIKE '%DETACH PARTITION%' AND wait_event IS NOT NULL`).Scan(&n))
		return n > 0
	}, 20*time.Second, 10*time.Millisecond)
}

// expiredProcessedDay leaves one processed message on a day that the
// clock, moved 40 days on, puts past retention, and returns that day.
func expiredProcessedDay(t *testing.T, b *testBundle) time.Time {
	t.Helper()
	ctx := context.Background()
	day := partition.Day(time.Now())
	b.clock.Set(day.Add(time.Hour))
	b.receive(t, "s", "old")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'processed'")
	require.NoError(t, err)
	b.clock.Set(day.AddDate(0, 0, 40).Add(time.Hour))
	_, err = b.maint.Upkeep(ctx)
	require.NoError(t, err)
	return day
}

// TestReplayDoesNotWaitForADetach: a prune waiting in DETACH …
// CONCURRENTLY for a long transaction holds no lock that a replay needs:
// the replay of a message of another day goes through at once.
func TestReplayDoesNotWaitForADetach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	old := expiredProcessedDay(t, b)
	recent := b.receive(t, "s", "recent")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead' WHERE id = $1", recent.MessageID)
	require.NoError(t, err)

	end := holdSnapshot(t, b)
	pruned := make(chan error, 1)
	var res *jobs.PruneResult
	go func() {
		var err error
		res, err = b.maint.Prune(ctx, nil)
		pruned <- err
	}()
	awaitDetachWaiting(t, b)

	replayCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	require.NoError(t, b.inbox.Replay(replayCtx, recent.MessageID), "a replay waited for a detach")

	end()
	require.NoError(t, <-pruned)
	require.Contains(t, res.Dropped, partition.Name("wharf_inbox_messages", old))
}

// TestConcurrentPrunesAfterAnInterruptedDetach: with a detach left
// pending by an interrupted run, a second prune (another node, or the CLI)
// arriving while the first completes it neither deadlocks nor fails: it
// skips, and the partition is dropped once.
func TestConcurrentPrunesAfterAnInterruptedDetach(t *testing.T) {
	ctx := context.Background()
	b := setup(t, nil)
	old := expiredProcessedDay(t, b)
	name := partition.Name("wharf_inbox_messages", old)

	// Interrupt a DETACH … CONCURRENTLY in its second phase, as a prune
	// stopped mid-way leaves it.
	// The second phase waits for older snapshots (a virtualxid lock): it is
	// cancelled there, not by a timeout that a slow first phase would use
	// up.
	end := holdSnapshot(t, b)
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	pid := conn.Conn().PgConn().PID()
	detached, done := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(done)
		_, err := conn.Exec(ctx, "ALTER TABLE wharf_inbox_messages DETACH PARTITION "+pgx.Identifier{name}.Sanitize()+" CONCURRENTLY")
		detached <- err
	}()
	t.Cleanup(func() { // when the test fails before the release below
		end()
		<-done
		conn.Release()
	})
	require.Eventually(t, func() bool {
		var waiting bool
		err := b.pool.QueryRow(ctx, "SELECT wait_event = 'virtualxid' FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		return err == nil && waiting
	}, 20*time.Second, 5*time.Millisecond, "the detach never reached its second phase")
	_, err = b.pool.Exec(ctx, "SELECT pg_cancel_backend($1)", pid)
	require.NoError(t, err)
	require.ErrorContains(t, <-detached, "canceling statement")
	conn.Release()
	end()
	var pending bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = $1::regclass", name).Scan(&pending))
	require.True(t, pending, "the test's premise: a detach left pending")

	second, err := jobs.NewMaintainer(b.pool, &jobs.Config{Now: b.clock.Now, Logger: quiet})
	require.NoError(t, err)
	secondDone := make(chan error, 1)
	var secondRes *jobs.PruneResult
	var once sync.Once
	restore := jobs.SetBeforeFinalize(func() {
		once.Do(func() {
			// The second run starts now, while the first holds its turn,
			// and waits for it (or skips) before the first finalizes.
			go func() {
				var err error
				secondRes, err = second.Prune(ctx, nil)
				secondDone <- err
			}()
			require.Eventually(t, func() bool {
				if len(secondDone) > 0 {
					return true
				}
				var waiting int
				require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
					WHERE d.datname = current_database() AND l.locktype = 'advisory' AND NOT l.granted`).Scan(&waiting))
				return waiting > 0
			}, 10*time.Second, 5*time.Millisecond)
		})
	})
	defer restore()

	first, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err, "the first prune")
	require.NoError(t, <-secondDone, "the second prune")
	dropped := append(first.Dropped, secondRes.Dropped...)
	require.Contains(t, dropped, name)
	seen := map[string]bool{}
	for _, d := range dropped {
		require.False(t, seen[d], "%s dropped twice", d)
		seen[d] = true
	}
	require.True(t, first.Skipped != secondRes.Skipped, "one of the two ran, the other skipped")
}

// TestReplayRefusedWhileItsDayIsDropped: once retention has marked a day
// for dropping (it then detaches without a lock), a replay of that day's
// message is refused instead of reviving a row about to vanish.
func TestReplayRefusedWhileItsDayIsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	res := b.receive(t, "s", "doomed")
	_, err := b.pool.Exec(ctx, "UPDATE wharf_inbox_messages SET status = 'dead'")
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, "INSERT INTO wharf_partition_drops (parent, day, marked_at) VALUES ('wharf_inbox_messages', $1, now())",
		partition.Day(b.clock.Now()))
	require.NoError(t, err)
	require.ErrorIs(t, b.inbox.Replay(ctx, res.MessageID), inbox.ErrNotReplayable)
	msg, err := b.inbox.Get(ctx, res.MessageID)
	require.NoError(t, err)
	require.Equal(t, inbox.StatusDead, msg.Status, "nothing changed")
}

// TestCancelledPruneReleasesItsLease: a prune whose context ends while its
// DETACH … CONCURRENTLY waits loses its connection (pgx closes it to
// interrupt the statement). Its lease must still be released, so that the
// next prune runs at once instead of skipping for the lease's lifetime and
// drops the partition the cancelled one was detaching.
func TestCancelledPruneReleasesItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	old := expiredProcessedDay(t, b)
	name := partition.Name("wharf_inbox_messages", old)

	end := holdSnapshot(t, b)
	pruneCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	pruned := make(chan error, 1)
	go func() {
		_, err := b.maint.Prune(pruneCtx, nil)
		pruned <- err
	}()
	detaching := func() int {
		return b.count(t, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active' AND query ILIKE '%DETACH PARTITION%' AND pid <> pg_backend_pid()`)
	}
	awaitDetachWaiting(t, b)
	cancel()
	require.ErrorIs(t, <-pruned, context.Canceled, "the cancelled prune reports its interruption")
	end()
	// The server finishes the detach the closed connection started (or
	// leaves it pending); either way the next prune completes it.
	require.Eventually(t, func() bool { return detaching() == 0 }, 20*time.Second, 5*time.Millisecond)
	require.Zero(t, b.count(t, "SELECT count(*) FROM wharf_leases WHERE name = 'wharf.jobs.prune'"), "the cancelled prune kept its lease")

	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.False(t, res.Skipped, "the next prune skipped: the lease was still held")
	require.Contains(t, res.Dropped, name, "the next prune drops the partition the cancelled one was detaching")
	require.Zero(t, b.count(t, "SELECT count(*) FROM pg_class WHERE relname = '"+name+"'"))
}
