package wharf_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/internal/testdb"
)

// TestMigrateThroughPgBouncer: migrations through PgBouncer in transaction
// mode would take session locks that the pooler does not keep (and hang the
// next run); they fail at once instead, say why, and change nothing. The
// same database migrates fine on a direct connection afterwards.
func TestMigrateThroughPgBouncer(t *testing.T) {
	t.Parallel()
	directURL := testdb.NewURL(t)
	bouncer := testdb.NewPgBouncer(t, directURL)
	direct := openPool(t, directURL)
	// Work to do: a migration would start by taking its locks.
	require.NoError(t, wharf.MigrateDown(context.Background(), direct, 0))

	pooled, err := wharf.Pooled(context.Background(), direct)
	require.NoError(t, err)
	require.False(t, pooled, "a direct connection is not pooled")

	for _, mode := range testdb.Modes {
		t.Run(mode, func(t *testing.T) {
			pool := openPool(t, bouncer.URL(mode))
			// Fails fast: far sooner than this, which only bounds a hang.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			pooled, err := wharf.Pooled(ctx, pool)
			require.NoError(t, err)
			require.True(t, pooled)

			err = wharf.Migrate(ctx, pool)
			require.ErrorIs(t, err, wharf.ErrPooledConnection)
			require.Contains(t, err.Error(), "direct connection")
			require.NotContains(t, err.Error(), "pgtdbpass", "no password in the error")
			require.ErrorIs(t, wharf.MigrateDown(ctx, pool, 1), wharf.ErrPooledConnection)
			require.ErrorIs(t, wharf.MigrateRiverDown(ctx, pool), wharf.ErrPooledConnection)
			_, err = wharf.Status(ctx, pool)
			require.ErrorIs(t, err, wharf.ErrPooledConnection)
			require.NoError(t, ctx.Err(), "failed fast, not at the deadline")
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	status, err := wharf.Status(ctx, direct)
	require.NoError(t, err)
	require.Zero(t, status.WharfVersion, "the refused runs changed nothing")
	require.Equal(t, status.RiverLatest, status.RiverVersion, "River's tables are still there")
	require.NoError(t, wharf.Migrate(ctx, direct), "no lock was left behind")
	status, err = wharf.Status(ctx, direct)
	require.NoError(t, err)
	require.True(t, status.UpToDate())
}

func openPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}
