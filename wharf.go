package wharf

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wharfhq/wharf/wharfmigrate"
)

// MigrationsTable is the table in which golang-migrate records the version of
// Wharf's schema (wharfmigrate.MigrationsTable).
const MigrationsTable = wharfmigrate.MigrationsTable

// PartitionDaysAhead is how many days of partitions beyond today Migrate
// creates (wharfmigrate.PartitionDaysAhead).
const PartitionDaysAhead = wharfmigrate.PartitionDaysAhead

// ErrDirty is wharfmigrate.ErrDirty: a previous Wharf migration failed
// half-way; repair by hand (docs/operations.md, "Migrations") before migrating again.
var ErrDirty = wharfmigrate.ErrDirty

// ErrPooledConnection is wharfmigrate.ErrPooledConnection: migrations need a
// direct connection to Postgres, not one through a pooler.
var ErrPooledConnection = wharfmigrate.ErrPooledConnection

// MigrationStatus is wharfmigrate.MigrationStatus.
type MigrationStatus = wharfmigrate.MigrationStatus

// Migrate is wharfmigrate.Migrate: River's and Wharf's migrations up, then
// the partitions ahead. A no-op when up to date; safe from several
// processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error { return wharfmigrate.Migrate(ctx, pool) }

// MigrateDown is wharfmigrate.MigrateDown.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, steps int) error {
	return wharfmigrate.MigrateDown(ctx, pool, steps)
}

// MigrateRiverDown is wharfmigrate.MigrateRiverDown.
func MigrateRiverDown(ctx context.Context, pool *pgxpool.Pool) error {
	return wharfmigrate.MigrateRiverDown(ctx, pool)
}

// Status is wharfmigrate.Status.
func Status(ctx context.Context, pool *pgxpool.Pool) (*MigrationStatus, error) {
	return wharfmigrate.Status(ctx, pool)
}

// Pooled is wharfmigrate.Pooled.
func Pooled(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	return wharfmigrate.Pooled(ctx, pool)
}
