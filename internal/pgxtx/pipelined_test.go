package pgxtx_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/testdb"
)

// pipelinedSetup returns a pool of one connection that counts its writes
// and a table t (n int unique) on it.
func pipelinedSetup(t *testing.T) (*pgxpool.Pool, *testdb.Writes) {
	t.Helper()
	pool, writes := testdb.NewCountingWrites(t)
	_, err := pool.Exec(context.Background(), "CREATE TABLE t (n int PRIMARY KEY)")
	require.NoError(t, err)
	return pool, writes
}

func tableOf(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT n FROM t ORDER BY n")
	require.NoError(t, err)
	ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return ns
}

// A transaction of an insert, a query whose rows are read and an insert
// commits in two round trips: BEGIN goes with the first insert and the
// query, the second insert with COMMIT.
func TestPipelinedTxRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, writes := pipelinedSetup(t)
	run := func(first int) (int, int64) {
		before := writes.Count()
		var seen int
		require.NoError(t, pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", first)
			require.NoError(t, err)
			require.Empty(t, tag.String(), "a held statement has no tag yet")
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM t WHERE n >= $1", first).Scan(&seen); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO t VALUES ($1)", first+1)
			return err
		}))
		return seen, writes.Count() - before
	}
	run(1) // prepares and caches the statements
	seen, trips := run(10)
	require.Equal(t, 1, seen, "the query ran after the insert before it, in the transaction")
	require.EqualValues(t, 2, trips)
	require.Equal(t, []int{1, 2, 10, 11}, tableOf(t, pool))

	// Only held statements: one round trip, with COMMIT.
	before := writes.Count()
	require.NoError(t, pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", 20)
		return err
	}))
	require.EqualValues(t, 1, writes.Count()-before)
	require.Equal(t, []int{1, 2, 10, 11, 20}, tableOf(t, pool))

	// Nothing at all: no round trip.
	before = writes.Count()
	require.NoError(t, pgxtx.RunPipelined(ctx, pool, func(pgx.Tx) error { return nil }))
	require.EqualValues(t, 0, writes.Count()-before)
}

// A held statement that fails fails the call that sends it, and nothing of
// the transaction commits; the connection is then usable again.
func TestPipelinedTxFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := pipelinedSetup(t)
	_, err := pool.Exec(ctx, "INSERT INTO t VALUES (1)")
	require.NoError(t, err)

	t.Run("AtCommit", func(t *testing.T) {
		err := pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(ctx, "INSERT INTO t VALUES (2) RETURNING n").Scan(&n))
			_, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)") // a duplicate
			return err
		})
		require.ErrorContains(t, err, "duplicate key")
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("AtTheNextQuery", func(t *testing.T) {
		var queryErr error
		err := pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO t VALUES (3)")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "INSERT INTO t VALUES (1)")
			require.NoError(t, err)
			rows, err := tx.Query(ctx, "SELECT n FROM t")
			if err == nil {
				_, err = pgx.CollectRows(rows, pgx.RowTo[int])
			}
			queryErr = err
			return err
		})
		require.ErrorContains(t, queryErr, "duplicate key")
		require.ErrorIs(t, err, queryErr)
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("FnError", func(t *testing.T) {
		stop := errors.New("stop")
		err := pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(ctx, "INSERT INTO t VALUES (4) RETURNING n").Scan(&n))
			_, err := tx.Exec(ctx, "INSERT INTO t VALUES (5)")
			require.NoError(t, err)
			return stop
		})
		require.ErrorIs(t, err, stop)
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("Panic", func(t *testing.T) {
		require.PanicsWithValue(t, "boom", func() {
			_ = pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
				var n int
				require.NoError(t, tx.QueryRow(ctx, "INSERT INTO t VALUES (6) RETURNING n").Scan(&n))
				panic("boom")
			})
		})
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("RollbackKeepsTheConnection", func(t *testing.T) {
		// Rolled back, not abandoned: the pool's one connection is the
		// same after a failed fn and after a panic.
		before := backendPID(t, pool)
		stop := errors.New("stop")
		require.ErrorIs(t, pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(ctx, "INSERT INTO t VALUES (10) RETURNING n").Scan(&n))
			return stop
		}), stop)
		require.Panics(t, func() {
			_ = pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
				var n int
				require.NoError(t, tx.QueryRow(ctx, "INSERT INTO t VALUES (11) RETURNING n").Scan(&n))
				panic("boom")
			})
		})
		require.Equal(t, before, backendPID(t, pool))
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("IgnoredErrorNeverCommits", func(t *testing.T) {
		err := pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)") // a duplicate
			require.NoError(t, err)
			var n int
			require.ErrorContains(t, tx.QueryRow(ctx, "SELECT 1").Scan(&n), "duplicate key")
			_, err = tx.Exec(ctx, "INSERT INTO t VALUES (12)")
			require.ErrorContains(t, err, "duplicate key", "nothing more is taken once a held statement failed")
			return nil // the caller ignores both errors
		})
		require.ErrorContains(t, err, "duplicate key")
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("CancelledBeforeCommit", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		err := pgxtx.RunPipelined(cctx, pool, func(tx pgx.Tx) error {
			var n int
			require.NoError(t, tx.QueryRow(cctx, "INSERT INTO t VALUES (7) RETURNING n").Scan(&n))
			_, err := tx.Exec(cctx, "INSERT INTO t VALUES (8)")
			cancel()
			return err
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
	t.Run("EndedTransaction", func(t *testing.T) {
		var kept pgx.Tx
		require.NoError(t, pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
			kept = tx
			_, err := tx.Begin(ctx)
			require.Error(t, err, "savepoints are not supported")
			return nil
		}))
		_, err := kept.Exec(ctx, "INSERT INTO t VALUES (9)")
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		_, err = kept.Query(ctx, "SELECT 1")
		require.ErrorIs(t, err, pgx.ErrTxClosed)
		require.ErrorIs(t, kept.Commit(ctx), pgx.ErrTxClosed)
		require.ErrorIs(t, kept.Rollback(ctx), pgx.ErrTxClosed)
		require.Equal(t, []int{1}, tableOf(t, pool))
	})
}

func backendPID(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var pid int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// In the exec modes that send nothing when an argument cannot be encoded
// (PgBouncer's), a held statement that never reached the server, BEGIN
// with it, still keeps the transaction from committing: the statements
// after it would otherwise run outside any transaction, each on its own.
func TestPipelinedTxUnsentBeginNeverCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(testdb.NewURL(t))
			require.NoError(t, err)
			cfg.MaxConns = 1
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			_, err = pool.Exec(ctx, "CREATE TABLE t (n int PRIMARY KEY)")
			require.NoError(t, err)

			err = pgxtx.RunPipelined(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1)", make(chan int)) // pgx cannot encode it
				require.NoError(t, err)
				var n int
				require.Error(t, tx.QueryRow(ctx, "SELECT 1").Scan(&n))
				_, _ = tx.Exec(ctx, "INSERT INTO t VALUES (21)")
				return nil // the caller ignores the errors
			})
			require.Error(t, err)
			require.Empty(t, tableOf(t, pool))
		})
	}
}
