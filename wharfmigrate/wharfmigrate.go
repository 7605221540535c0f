package wharfmigrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/wharfhq/wharf/internal/dbsqlc"
	"github.com/wharfhq/wharf/internal/partition"
	"github.com/wharfhq/wharf/schema"
)

// MigrationsTable is the table in which golang-migrate records the version of
// Wharf's schema. It is not golang-migrate's default, so an application that
// uses golang-migrate for its own schema keeps its own version table.
const MigrationsTable = "wharf_schema_migrations"

// PartitionDaysAhead is how many days of partitions beyond today Migrate
// creates; it is also the default horizon of the partition upkeep job.
const PartitionDaysAhead = partition.DefaultDaysAhead

// ErrDirty is returned when a previous Wharf migration failed half-way and
// golang-migrate marked the schema dirty; it must be repaired by hand (see
// docs/operations.md, "Migrations") before migrating again.
var ErrDirty = errors.New("wharf: schema is dirty after a failed migration")

// ErrPooledConnection is returned by Migrate, MigrateDown, MigrateRiverDown
// and Status when the pool's connections reach Postgres through a
// connection pooler (PgBouncer, say) instead of directly. Migrations hold
// session advisory locks (golang-migrate's, and Wharf's around River's
// migrator), which a pooler in transaction mode does not keep: a lock
// taken on one server connection and released on another would stay held
// and make every later migration wait forever. Run migrations with a URL
// that reaches Postgres directly; everything else works through the pooler.
var ErrPooledConnection = errors.New("wharf: migrations need a direct connection to Postgres, not one through a connection pooler")

// Pooled reports whether pool's connections reach Postgres through a
// connection pooler such as PgBouncer: the server process running a
// statement is not the one the connection was given at startup (a pooler
// hands out its own). It cannot tell a pooler's session mode from its
// transaction mode. An application that finds itself pooled should run
// its River client with PollOnly (see docs/operations.md, "PgBouncer").
func Pooled(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	pid, err := dbsqlc.New(conn).SessionBackendPID(ctx)
	if err != nil {
		return false, fmt.Errorf("wharf: backend pid: %w", err)
	}
	return uint32(pid) != conn.Conn().PgConn().PID(), nil
}

// requireDirect returns an error where errors.Is(err, ErrPooledConnection)
// is true when pool's connections go through a pooler. It takes no lock,
// so it answers at once where a migration would hang.
func requireDirect(ctx context.Context, pool *pgxpool.Pool) error {
	pooled, err := Pooled(ctx, pool)
	if err != nil {
		return err
	}
	if pooled {
		cc := pool.Config().ConnConfig
		return fmt.Errorf("%w: %s:%d hands statements to server processes other than the connection's own; "+
			"run migrations with a URL that reaches Postgres itself (its host and port, not PgBouncer's)",
			ErrPooledConnection, cc.Host, cc.Port)
	}
	return nil
}

// Migrate brings River's tables (through rivermigrate) and Wharf's own
// (through golang-migrate, from the embedded schema directory) to their latest
// versions, then creates the daily partitions for yesterday through
// PartitionDaysAhead days ahead. Running it again is a no-op. It is safe to run
// from several processes at once: each step takes an advisory lock. It needs
// a direct connection: through a connection pooler it returns an error
// where errors.Is(err, ErrPooledConnection) is true, before changing
// anything.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if err := requireDirect(ctx, pool); err != nil {
		return err
	}
	if err := migrateRiverUp(ctx, pool); err != nil {
		return err
	}
	err := withWharfMigrator(pool, func(m *migrate.Migrate) error {
		if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wharf: migrate up: %w", err)
	}
	now := time.Now()
	if _, err := partition.EnsureAll(ctx, pool, now.AddDate(0, 0, -1), now.AddDate(0, 0, PartitionDaysAhead)); err != nil {
		return fmt.Errorf("wharf: create partitions: %w", err)
	}
	return nil
}

// MigrateDown reverts steps of Wharf's migrations (all of them when steps is
// zero or less), dropping Wharf's tables and their data. River's tables are
// left alone: the application may use River for its own jobs. Use
// MigrateRiverDown to remove them too. Like Migrate, it needs a direct
// connection.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, steps int) error {
	if err := requireDirect(ctx, pool); err != nil {
		return err
	}
	err := withWharfMigrator(pool, func(m *migrate.Migrate) error {
		var err error
		if steps <= 0 {
			err = m.Down()
		} else {
			err = m.Steps(-steps)
		}
		if errors.Is(err, migrate.ErrNoChange) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("wharf: migrate down: %w", err)
	}
	return nil
}

// MigrateRiverDown removes River's tables (all River migrations down). It
// destroys every River job, Wharf's and the application's. Like Migrate, it
// needs a direct connection.
func MigrateRiverDown(ctx context.Context, pool *pgxpool.Pool) error {
	if err := requireDirect(ctx, pool); err != nil {
		return err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("wharf: river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1}); err != nil {
		return fmt.Errorf("wharf: migrate river down: %w", err)
	}
	return nil
}

// MigrationStatus describes the schema versions in a database.
type MigrationStatus struct {
	// WharfVersion is the applied version of Wharf's schema, 0 when none.
	WharfVersion uint
	// WharfLatest is the newest version this build of Wharf knows.
	WharfLatest uint
	// WharfDirty is true after a migration failed half-way.
	WharfDirty bool
	// RiverVersion is the newest applied River migration, 0 when none.
	RiverVersion int
	// RiverLatest is the newest River migration this build knows.
	RiverLatest int
}

// UpToDate reports whether both schemas are at the latest version.
func (s *MigrationStatus) UpToDate() bool {
	return !s.WharfDirty && s.WharfVersion == s.WharfLatest && s.RiverVersion == s.RiverLatest
}

// Status reports the applied and latest versions of River's and Wharf's
// schemas. It changes no schema, but golang-migrate creates Wharf's version
// table when it is missing and waits while a migration holds its lock. It
// takes golang-migrate's session lock, so like Migrate it needs a direct
// connection.
func Status(ctx context.Context, pool *pgxpool.Pool) (*MigrationStatus, error) {
	if err := requireDirect(ctx, pool); err != nil {
		return nil, err
	}
	status := &MigrationStatus{}

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return nil, fmt.Errorf("wharf: river migrator: %w", err)
	}
	all := migrator.AllVersions()
	if len(all) > 0 {
		status.RiverLatest = all[len(all)-1].Version
	}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("wharf: river versions: %w", err)
	}
	if len(existing) > 0 {
		status.RiverVersion = existing[len(existing)-1].Version
	}

	latest, err := latestWharfVersion()
	if err != nil {
		return nil, err
	}
	status.WharfLatest = latest
	err = withWharfMigrator(pool, func(m *migrate.Migrate) error {
		version, dirty, err := m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil
		}
		status.WharfVersion, status.WharfDirty = version, dirty
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wharf: schema version: %w", err)
	}
	return status, nil
}

// ErrNotMigrated is returned by Check for a database whose schema is not
// the one this build of Wharf works with: Wharf's or River's tables are
// missing, older, or newer.
var ErrNotMigrated = errors.New("wharf: the database's schema is not this build's")

// Check returns nil when pool's database has River's tables and Wharf's
// schema at the newest version this build knows, and otherwise an error
// that says what to do, where errors.Is(err, ErrNotMigrated) (or ErrDirty,
// after a failed migration) is true. Unlike Status it only reads, with
// plain statements, so it works through PgBouncer; it cannot tell River's
// version, only that River's tables are there.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	const how = "run `wharf migrate up` (Migrate; on a direct connection, not through PgBouncer)"
	q := dbsqlc.New(pool)
	for _, table := range []string{MigrationsTable, "river_job"} {
		ok, err := q.CatalogRelationExists(ctx, pgx.Identifier{table}.Sanitize())
		if err != nil {
			return fmt.Errorf("wharf: check the schema: %w", err)
		}
		if !ok {
			return fmt.Errorf("%w: it has no %s table: %s", ErrNotMigrated, table, how)
		}
	}
	latest, err := latestWharfVersion()
	if err != nil {
		return err
	}
	row, err := q.SchemaVersion(ctx)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: it has no Wharf tables: %s", ErrNotMigrated, how)
	case err != nil:
		return fmt.Errorf("wharf: check the schema: %w", err)
	case row.Dirty:
		return fmt.Errorf("%w (version %d): fix what failed, set the version by hand, then migrate again", ErrDirty, row.Version)
	case row.Version == 0:
		return fmt.Errorf("%w: it has no Wharf tables: %s", ErrNotMigrated, how)
	case uint(row.Version) < latest:
		return fmt.Errorf("%w: its Wharf schema is older (version %d of %d): %s", ErrNotMigrated, row.Version, latest, how)
	case uint(row.Version) > latest:
		return fmt.Errorf("%w: its Wharf schema is newer (version %d; this build knows %d): upgrade this program", ErrNotMigrated, row.Version, latest)
	}
	return nil
}

func migrateRiverUp(ctx context.Context, pool *pgxpool.Pool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("wharf: river migrator: %w", err)
	}
	// rivermigrate does not lock against a concurrent run, and its migrations
	// cannot share one transaction. Serialise on a session advisory lock held
	// by a connection of its own: a waiter holding a pooled connection could
	// starve the holder of the pool it migrates through.
	lockConn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("wharf: migrate river: lock connection: %w", err)
	}
	defer lockConn.Close(context.Background())
	if err := dbsqlc.New(lockConn).AdvisorySessionLock(ctx, dbsqlc.AdvisorySessionLockParams{
		Class: partition.LockClass(), Key: partition.LockKey("wharf.migrate.river"),
	}); err != nil {
		return fmt.Errorf("wharf: migrate river: lock: %w", err)
	}
	// Closing lockConn releases the lock.
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("wharf: migrate river up: %w", err)
	}
	return nil
}

// withWharfMigrator runs fn with a golang-migrate instance over pool. The
// instance is closed before returning: closing the pool while it is open
// would hang.
func withWharfMigrator(pool *pgxpool.Pool, fn func(*migrate.Migrate) error) (err error) {
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	driver, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: MigrationsTable})
	if err != nil {
		_ = db.Close()
		return err
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		_ = driver.Close()
		return err
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if err == nil {
			err = errors.Join(srcErr, dbErr)
		}
	}()
	return translateDirty(fn(m))
}

// translateDirty turns golang-migrate's dirty error into ErrDirty, keeping
// its message (which names the version).
func translateDirty(err error) error {
	var dirty migrate.ErrDirty
	if errors.As(err, &dirty) {
		return fmt.Errorf("%w: version %d", ErrDirty, dirty.Version)
	}
	return err
}

func latestWharfVersion() (uint, error) {
	src, err := iofs.New(schema.FS, ".")
	if err != nil {
		return 0, err
	}
	defer src.Close()
	version, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(version)
		if err != nil {
			return version, nil //nolint:nilerr // fs.ErrNotExist marks the last version
		}
		version = next
	}
}
