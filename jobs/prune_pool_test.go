package jobs_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf/internal/testdb"
)

// TestPruneOnAOneConnectionPoolReleasesItsLease: a prune on a pool of one
// connection releases its lease without a second connection. Through the
// pool, the release waited 5 s for one, failed, and the next prune within
// pruneLeaseTTL (10 min) skipped: "another prune is running", none was.
func TestPruneOnAOneConnectionPoolReleasesItsLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupOn(t, testdb.NewWithMaxConns(t, 1), nil)
	res, err := b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.False(t, res.Skipped)
	var held int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM wharf_leases WHERE name = 'wharf.jobs.prune'").Scan(&held))
	require.Zero(t, held, "the prune's lease was left behind")
	res, err = b.maint.Prune(ctx, nil)
	require.NoError(t, err)
	require.False(t, res.Skipped, "the second prune skipped: the first left its lease behind")
}
