package wharfmigrate_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
	"github.com/wharfhq/wharf/wharfmigrate"
)

// TestCheck: a database at this build's version passes; one whose version
// is older, newer, dirty or missing is refused with what to do.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	require.NoError(t, wharfmigrate.Check(ctx, pool))
	status, err := wharfmigrate.Status(ctx, pool)
	require.NoError(t, err)
	latest := status.WharfLatest

	set := func(version uint, dirty bool) {
		t.Helper()
		_, err := pool.Exec(ctx, `UPDATE wharf_schema_migrations SET version = $1, dirty = $2`, version, dirty)
		require.NoError(t, err)
	}
	set(latest-1, false)
	err = wharfmigrate.Check(ctx, pool)
	require.ErrorIs(t, err, wharfmigrate.ErrNotMigrated)
	require.ErrorContains(t, err, "older")
	require.ErrorContains(t, err, "wharf migrate up")

	set(latest+1, false)
	err = wharfmigrate.Check(ctx, pool)
	require.ErrorIs(t, err, wharfmigrate.ErrNotMigrated)
	require.ErrorContains(t, err, "newer")

	set(latest, true)
	require.ErrorIs(t, wharfmigrate.Check(ctx, pool), wharfmigrate.ErrDirty)

	_, err = pool.Exec(ctx, `DELETE FROM wharf_schema_migrations`)
	require.NoError(t, err)
	err = wharfmigrate.Check(ctx, pool)
	require.ErrorIs(t, err, wharfmigrate.ErrNotMigrated)
	require.ErrorContains(t, err, "no Wharf tables")

	_, err = pool.Exec(ctx, `DROP TABLE river_job CASCADE`)
	require.NoError(t, err)
	require.ErrorContains(t, wharfmigrate.Check(ctx, pool), "no river_job table")
}
