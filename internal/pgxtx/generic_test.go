package pgxtx_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/pgxtx"
	"github.com/wharfhq/wharf/internal/testdb"
)

// GenericPlans runs a query or a statement with a generic plan and leaves
// the transaction's plan_cache_mode as it was; a failing query fails with
// its own error.
func TestGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	mode := func(tx pgx.Tx) string {
		var m string
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&m))
		return m
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan")
		require.NoError(t, err)
		rows, err := pgxtx.GenericPlans{DBTX: tx}.Query(ctx, "SELECT current_setting('plan_cache_mode') UNION ALL SELECT $1::text", "second")
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"force_generic_plan", "second"}, got, "the query ran with a generic plan")
		require.Equal(t, "force_custom_plan", mode(tx), "the mode was not restored")
		tag, err := pgxtx.GenericPlans{DBTX: tx}.Exec(ctx, "CREATE TEMP TABLE seen AS SELECT current_setting('plan_cache_mode') AS mode")
		require.NoError(t, err)
		require.Equal(t, "SELECT 1", tag.String())
		var seen string
		require.NoError(t, tx.QueryRow(ctx, "SELECT mode FROM seen").Scan(&seen))
		require.Equal(t, "force_generic_plan", seen)
		require.Equal(t, "force_custom_plan", mode(tx), "the mode was not restored")
		return nil
	}))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := pgxtx.GenericPlans{DBTX: tx}.Query(ctx, "SELECT 1/0")
	if err == nil {
		_, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	require.ErrorContains(t, err, "division by zero")
}

// GenericPlans on a pool, outside any transaction: the statement runs with a
// generic plan, and the connection's own mode is untouched afterwards (a
// pool of one connection, so that the check runs on the same one).
func TestGenericPlansOutsideATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewWithMaxConns(t, 1)
	for range 2 {
		rows, err := pgxtx.GenericPlans{DBTX: pool}.Query(ctx, "SELECT current_setting('plan_cache_mode') WHERE $1::int > 0", 1)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"force_generic_plan"}, got)
		var mode string
		require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode))
		require.Equal(t, "auto", mode, "the connection kept the generic mode")
	}
	rows, err := pgxtx.GenericPlans{DBTX: pool}.Query(ctx, "SELECT 1/0")
	if err == nil {
		_, err = pgx.CollectRows(rows, pgx.RowTo[int])
	}
	require.ErrorContains(t, err, "division by zero")
	var mode string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode))
	require.Equal(t, "auto", mode, "a failed query left the generic mode")
}

// GenericTx runs a statement sent through its Query, QueryRow or Exec (as
// River's JobCompleteTx sends its own) with a generic plan, and restores
// the mode the transaction had. QueryRow answers as pgx's own: the first
// row, pgx.ErrNoRows, or the statement's error.
func TestGenericTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		gtx := pgxtx.GenericTx{Tx: tx}
		rows, err := gtx.Query(ctx, "SELECT current_setting('plan_cache_mode') WHERE $1::int > 0", 1)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{"force_generic_plan"}, got)
		_, err = gtx.Exec(ctx, "CREATE TEMP TABLE seen AS SELECT current_setting('plan_cache_mode') AS mode")
		require.NoError(t, err)
		var seen, mode string
		require.NoError(t, tx.QueryRow(ctx, "SELECT mode FROM seen").Scan(&seen))
		require.Equal(t, "force_generic_plan", seen)
		require.NoError(t, gtx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode') FROM generate_series(1, $1::int)", 3).Scan(&mode))
		require.Equal(t, "force_generic_plan", mode)
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode))
		require.Equal(t, "auto", mode, "the mode was not restored")
		require.ErrorIs(t, gtx.QueryRow(ctx, "SELECT 1 WHERE $1::int < 0", 1).Scan(&mode), pgx.ErrNoRows)
		var n int
		require.ErrorContains(t, gtx.QueryRow(ctx, "SELECT 'x'::text").Scan(&n), "cannot scan")
		require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode))
		require.Equal(t, "auto", mode, "a failed scan left the generic mode")
		return nil
	}))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var n int
	require.ErrorContains(t, pgxtx.GenericTx{Tx: tx}.QueryRow(ctx, "SELECT 1/0").Scan(&n), "division by zero")
}

// Only a prepared, cached statement keeps a generic plan: on connections
// whose statements are not (pgx's other exec modes, as behind PgBouncer)
// GenericPlans and GenericTx send the statement as it is, since a generic
// plan made on every call cannot prune the day partitions and costs
// milliseconds with a hundred of them. An error is reported once.
func TestGenericPlansOnlyWhereStatementsAreCached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	for mode, generic := range map[pgx.QueryExecMode]bool{
		pgx.QueryExecModeCacheStatement: true,
		pgx.QueryExecModeCacheDescribe:  false,
		pgx.QueryExecModeDescribeExec:   false,
		pgx.QueryExecModeExec:           false,
		pgx.QueryExecModeSimpleProtocol: false,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(url)
			require.NoError(t, err)
			cfg.ConnConfig.DefaultQueryExecMode = mode
			cfg.MaxConns = 2
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			want := map[bool]string{true: "force_generic_plan", false: "auto"}[generic]
			require.Equal(t, generic, pgxtx.CachesPlans(pool))

			rows, err := pgxtx.GenericPlans{DBTX: pool}.Query(ctx, "SELECT current_setting('plan_cache_mode') WHERE $1::int > 0", 1)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{want}, got)

			require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				require.Equal(t, generic, pgxtx.CachesPlans(tx))
				require.Equal(t, generic, pgxtx.CachesPlans(tx.Conn()))
				var m string
				require.NoError(t, pgxtx.GenericTx{Tx: tx}.QueryRow(ctx, "SELECT current_setting('plan_cache_mode') WHERE $1::int > 0", 1).Scan(&m))
				require.Equal(t, want, m)
				b := &pgx.Batch{}
				pgxtx.QueueGeneric(b, tx, "SELECT current_setting('plan_cache_mode') WHERE $1::int > 0", 1)
				require.NoError(t, tx.SendBatch(ctx, b).Close())
				require.Equal(t, generic, b.Len() == 3, "%d statements queued", b.Len())
				return nil
			}))

			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			var n int
			err = pgxtx.GenericTx{Tx: tx}.QueryRow(ctx, "SELECT 1/$1::int", 0).Scan(&n)
			require.ErrorContains(t, err, "division by zero")
			require.Equal(t, 1, strings.Count(err.Error(), "division by zero"), "%v", err)
		})
	}
	require.False(t, pgxtx.CachesPlans(nil))
	require.False(t, pgxtx.CachesPlans(struct{}{}))
}

// A generic plan is made once and kept for the connection's life (until
// the table's statistics change): one made while a table was nearly empty
// must not scan the whole table once it has grown. River's job table and
// each new day's message partition start nearly empty, and a cached plan
// that scanned river_job took River's job completion from 0.1 ms to
// 0.8–16 ms a call as the table grew in a benchmark run. GenericPlans
// plans with sequential scans off, so that lookups by key keep their
// index; the transaction's own setting is restored afterwards.
func TestGenericPlansKeepIndexesAsTablesGrow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.NewWithMaxConns(t, 1)
	_, err := pool.Exec(ctx, `CREATE TABLE grows (id bigint PRIMARY KEY, v text NOT NULL);
		INSERT INTO grows SELECT i, 'v' FROM generate_series(1, 5) AS i;
		ANALYZE grows`)
	require.NoError(t, err)
	const lookup = "SELECT v FROM grows WHERE id = ANY($1::bigint[])"
	// The scans of the lookup alone: pg_stat_xact_user_tables also counts
	// those of earlier transactions not yet reported (ANALYZE's, say).
	run := func() (seqScans, idxScans int64) {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "SET LOCAL jit = off") // restored as the transaction had it
			require.NoError(t, err)
			const scans = `SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0)
				FROM pg_stat_xact_user_tables WHERE relname = 'grows'`
			var seq0, idx0 int64
			require.NoError(t, tx.QueryRow(ctx, scans).Scan(&seq0, &idx0))
			rows, err := pgxtx.GenericPlans{DBTX: tx}.Query(ctx, lookup, []int64{1, 2})
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{"v", "v"}, got)
			var seqScan, jit string
			require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('enable_seqscan'), current_setting('jit')").Scan(&seqScan, &jit))
			require.Equal(t, []string{"on", "off"}, []string{seqScan, jit}, "the transaction's settings were not restored")
			require.NoError(t, tx.QueryRow(ctx, scans).Scan(&seqScans, &idxScans))
			seqScans, idxScans = seqScans-seq0, idxScans-idx0
			return nil
		}))
		return seqScans, idxScans
	}
	// River's completer sends the statement River's JobCompleteTx sends,
	// in the connection's own plan mode: after five runs Postgres caches a
	// generic plan for it too, made with sequential scans on.
	for range 7 {
		rows, err := pool.Query(ctx, lookup, []int64{1, 2})
		require.NoError(t, err)
		_, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
	}
	seq, idx := run() // the generic plan is made now, for five rows
	require.Zero(t, seq, "a lookup by key planned as a scan of the table")
	require.Positive(t, idx)
	_, err = pool.Exec(ctx, "INSERT INTO grows SELECT i, 'v' FROM generate_series(6, 20000) AS i")
	require.NoError(t, err)
	seq, idx = run() // the same cached plan: no ANALYZE in between
	require.Zero(t, seq, "the plan made for five rows scans all 20,000")
	require.Positive(t, idx)
}
