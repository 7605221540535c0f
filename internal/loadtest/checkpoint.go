package loadtest

import (
	"cmp"
	"context"
	"os"

	"github.com/jackc/pgx/v5"
)

// Logger is what Checkpoint reports through: a testing.TB.
type Logger interface {
	Helper()
	Logf(format string, args ...any)
}

// Checkpoint runs a CHECKPOINT on DATABASE_URL, so that the run about to
// start does not share its time with one that the WAL of earlier runs
// would trigger: cloning test databases and filling them writes hundreds
// of MB, and a checkpoint spread over 11 s fell within one run of a
// comparison and not the other (it took the naive receiver's p99 at 1,000
// requests/s from 5–8 ms to 30–60 ms). Every run then starts just after
// one. It needs a superuser or the pg_checkpoint role; without, it says so
// and the runs go on unaligned.
func Checkpoint(tb Logger) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err == nil {
		_, err = conn.Exec(ctx, "CHECKPOINT")
		err = cmp.Or(err, conn.Close(ctx))
	}
	if err != nil {
		tb.Logf("CHECKPOINT before a run failed, so a checkpoint may fall within it: %v", err)
	}
}
