package wharf_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wharfhq/wharf"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/internal/testdb"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UpIsIdempotentAndCreatesPartitions", func(t *testing.T) {
		t.Parallel()
		pool := testdb.New(t) // already migrated once by the template

		require.NoError(t, wharf.Migrate(ctx, pool))
		require.NoError(t, wharf.Migrate(ctx, pool))

		status, err := wharf.Status(ctx, pool)
		require.NoError(t, err)
		require.True(t, status.UpToDate(), "status: %+v", status)
		require.Positive(t, status.WharfVersion)
		require.Positive(t, status.RiverVersion)

		tables, err := partition.Tables(ctx, pool)
		require.NoError(t, err)
		require.Contains(t, tables, "wharf_inbox_messages")
		today := time.Now().UTC()
		for _, table := range tables {
			for d := -1; d <= wharf.PartitionDaysAhead; d++ {
				name := partition.Name(table, today.AddDate(0, 0, d))
				var exists bool
				require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&exists))
				require.True(t, exists, "partition %s", name)
			}
		}
	})

	t.Run("DownRemovesWharfTablesAndKeepsRiver", func(t *testing.T) {
		t.Parallel()
		pool := testdb.New(t)

		require.NoError(t, wharf.MigrateDown(ctx, pool, 0))
		status, err := wharf.Status(ctx, pool)
		require.NoError(t, err)
		require.Zero(t, status.WharfVersion)
		require.Equal(t, status.RiverLatest, status.RiverVersion)

		var wharfTables int
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT count(*) FROM pg_class WHERE relname LIKE 'wharf\_%' AND relname <> $1 AND relkind IN ('r','p')`,
			wharf.MigrationsTable).Scan(&wharfTables))
		require.Zero(t, wharfTables)

		// And back up again.
		require.NoError(t, wharf.Migrate(ctx, pool))
		status, err = wharf.Status(ctx, pool)
		require.NoError(t, err)
		require.True(t, status.UpToDate())
	})

	t.Run("ConcurrentRunsAgree", func(t *testing.T) {
		t.Parallel()
		pool := testdb.New(t)
		require.NoError(t, wharf.MigrateDown(ctx, pool, 0))
		require.NoError(t, wharf.MigrateRiverDown(ctx, pool))

		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- wharf.Migrate(ctx, pool) }()
		}
		for range 4 {
			require.NoError(t, <-errs)
		}
		status, err := wharf.Status(ctx, pool)
		require.NoError(t, err)
		require.True(t, status.UpToDate(), "status: %+v", status)
	})
}
