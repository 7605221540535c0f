package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// RowsRead returns how many rows of the tables whose names match pattern
// (LIKE) tx has read so far, through indexes or sequential scans, as
// pg_stat_xact_user_tables counts them: a test takes the difference
// around the statement it checks.
func RowsRead(tb testing.TB, tx pgx.Tx, pattern string) int64 {
	tb.Helper()
	var n int64
	err := tx.QueryRow(context.Background(), `SELECT coalesce(sum(idx_tup_fetch + seq_tup_read), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE relname LIKE $1`, pattern).Scan(&n)
	if err != nil {
		tb.Fatalf("testdb: rows read of %s: %v", pattern, err)
	}
	return n
}
