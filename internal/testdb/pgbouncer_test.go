package testdb

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestPgBouncerPoolsTransactions: the helper's PgBouncer answers in both
// modes and pools by transaction: a connection's statements reach server
// processes other than the one it was given at startup, and a second
// client's transaction can run on the server process that served the
// first client's previous statement.
func TestPgBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := NewPgBouncer(t, NewURL(t))
	for _, mode := range Modes {
		t.Run(mode, func(t *testing.T) {
			first, err := pgx.Connect(ctx, b.URL(mode))
			require.NoError(t, err)
			defer first.Close(ctx)
			var pid uint32
			require.NoError(t, first.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
			require.NotEqual(t, first.PgConn().PID(), pid, "PgBouncer gives clients its own pids")

			// Transaction pooling: with first idle between transactions,
			// its server process is free for another client.
			second, err := pgx.Connect(ctx, b.URL(mode))
			require.NoError(t, err)
			defer second.Close(ctx)
			var secondPID uint32
			require.NoError(t, second.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&secondPID))
			require.Equal(t, pid, secondPID, "an idle client holds no server connection")
		})
	}
}

// TestMissingPgBouncerFailsLoudly: without a pgbouncer binary the test
// fails (never skips) and says how to install one.
func TestMissingPgBouncerFailsLoudly(t *testing.T) {
	t.Parallel()
	tb := &recordingTB{}
	requirePgBouncer(tb, func() (string, error) { return "", errors.New("pgbouncer not found") })
	require.Contains(t, tb.failure, "pgbouncer not found")
	require.Contains(t, tb.failure, "apt-get install pgbouncer")

	found := &recordingTB{}
	require.NotEmpty(t, requirePgBouncer(found, pgbouncerPath))
	require.Empty(t, found.failure, "this machine has pgbouncer")
}
