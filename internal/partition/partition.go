package partition

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/wharfhq/wharf/internal/dbsqlc"
)

// DefaultDaysAhead is how many days of partitions beyond today Migrate
// creates and partition upkeep keeps by default.
const DefaultDaysAhead = 7

// lockClass namespaces Wharf's advisory locks (two-key form) so they cannot
// collide with an application's single-key locks. "whrf" as an int32.
const lockClass int32 = 0x77687266

// Day returns the start of t's UTC day.
func Day(t time.Time) time.Time {
	return t.UTC().Truncate(24 * time.Hour)
}

// Name returns the name of parent's partition holding day.
func Name(parent string, day time.Time) string {
	return parent + "_p" + Day(day).Format("20060102")
}

// ParseName returns the day of a partition named by Name, and false when name
// is not one of parent's partitions.
func ParseName(parent, name string) (time.Time, bool) {
	suffix, ok := strings.CutPrefix(name, parent+"_p")
	if !ok || len(suffix) != 8 {
		return time.Time{}, false
	}
	day, err := time.Parse("20060102", suffix)
	if err != nil {
		return time.Time{}, false
	}
	return day, true
}

// LockKey returns the second key of the advisory lock Wharf takes for work on
// name (a table, or any other named resource shared across nodes).
func LockKey(name string) int32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int32(h.Sum32())
}

// LockClass is the first key of every Wharf advisory lock.
func LockClass() int32 { return lockClass }

// Beginner is what Ensure runs its transaction on: a pool or a connection.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Ensure creates parent's partition for day unless it exists, and reports
// whether it created one. It is safe to call concurrently from many nodes.
func Ensure(ctx context.Context, db Beginner, parent string, day time.Time) (bool, error) {
	day = Day(day)
	name := Name(parent, day)
	created := false
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// A creator waiting longer than this is stuck behind something else
		// (a long DETACH, say); fail and let the caller retry rather than hang.
		q := dbsqlc.New(tx)
		if err := q.SetLocalLockTimeout(ctx, "10s"); err != nil {
			return err
		}
		if err := q.AdvisoryXactLock(ctx, dbsqlc.AdvisoryXactLockParams{Class: lockClass, Key: LockKey(parent)}); err != nil {
			return err
		}
		exists, err := q.CatalogRelationExists(ctx, pgx.Identifier{name}.Sanitize())
		if err != nil {
			return err
		}
		if exists {
			return nil
		}
		quotedParent := pgx.Identifier{parent}.Sanitize()
		quotedName := pgx.Identifier{name}.Sanitize()
		create := fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)",
			quotedName, quotedParent)
		if _, err := tx.Exec(ctx, create); err != nil {
			return fmt.Errorf("create partition %s: %w", name, err)
		}
		attach := fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')",
			quotedParent, quotedName, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := tx.Exec(ctx, attach); err != nil {
			return fmt.Errorf("attach partition %s: %w", name, err)
		}
		created = true
		return nil
	})
	return created, err
}

// EnsureRange ensures parent's partitions for every day from first through
// last (inclusive) and returns the names of those it created.
func EnsureRange(ctx context.Context, pool Beginner, parent string, first, last time.Time) ([]string, error) {
	var created []string
	for day := Day(first); !day.After(Day(last)); day = day.AddDate(0, 0, 1) {
		ok, err := Ensure(ctx, pool, parent, day)
		if err != nil {
			return created, err
		}
		if ok {
			created = append(created, Name(parent, day))
		}
	}
	return created, nil
}

// Tables lists Wharf's partitioned tables (every partitioned table whose name
// starts with "wharf_"), so that upkeep covers tables added by later
// migrations without a list to keep in step.
func Tables(ctx context.Context, db dbsqlc.DBTX) ([]string, error) {
	return dbsqlc.New(db).CatalogPartitionedTables(ctx)
}

// EnsureAll ensures every Wharf partitioned table has partitions from first
// through last and returns the names of the partitions it created.
func EnsureAll(ctx context.Context, pool *pgxpool.Pool, first, last time.Time) ([]string, error) {
	tables, err := Tables(ctx, pool)
	if err != nil {
		return nil, err
	}
	var created []string
	for _, table := range tables {
		names, err := EnsureRange(ctx, pool, table, first, last)
		created = append(created, names...)
		if err != nil {
			return created, err
		}
	}
	return created, nil
}

// Cache remembers which partitions are known to exist so that the insert
// path checks the catalog only on the first row of each day: a message must
// never fail to insert for want of a partition, whether the clock just
// crossed midnight or the upkeep job has not run for a week.
type Cache struct {
	pool  *pgxpool.Pool
	known sync.Map // Name(parent, day) → struct{}
	// slow serialises cache misses, so that a burst of first rows of a day
	// opens one connection to create the partition, not one per row.
	slow sync.Mutex
}

// NewCache returns a Cache for the partitions of pool's database.
func NewCache(pool *pgxpool.Pool) *Cache {
	return &Cache{pool: pool}
}

// Querier is what Ensure checks the catalog on: a pool, a connection or a
// transaction.
type Querier = dbsqlc.DBTX

// Ensure makes sure parent has a partition for t's day. The catalog check
// runs on db, the caller's transaction when it has one (nil: the pool), so
// that a caller holding a pooled connection never waits for a second one:
// with every connection held by such callers, that wait would never end.
// The rare creation uses a connection of its own, outside the pool, for the
// same reason.
func (c *Cache) Ensure(ctx context.Context, db Querier, parent string, t time.Time) error {
	name := Name(parent, t)
	if _, ok := c.known.Load(name); ok {
		return nil
	}
	c.slow.Lock()
	defer c.slow.Unlock()
	if _, ok := c.known.Load(name); ok {
		return nil // created while this caller waited
	}
	if db == nil {
		db = c.pool
	}
	exists, err := dbsqlc.New(db).CatalogRelationExists(ctx, pgx.Identifier{name}.Sanitize())
	if err != nil {
		return fmt.Errorf("wharf: look up partition %s: %w", name, err)
	}
	if !exists {
		conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
		if err != nil {
			return fmt.Errorf("wharf: create partition %s: connect: %w", name, err)
		}
		_, err = Ensure(ctx, conn, parent, t)
		_ = conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("wharf: create partition %s: %w", name, err)
		}
	}
	c.known.Store(name, struct{}{})
	return nil
}

// RetentionLockKey is the advisory-lock key that guards parent's partitions
// against being dropped while a writer revives an old row: retention holds it
// exclusively from its unfinished-rows check through the detach; Replay and
// other writers of old rows hold it shared for their transaction.
func RetentionLockKey(parent string) int32 {
	return LockKey("wharf.retention." + parent)
}
