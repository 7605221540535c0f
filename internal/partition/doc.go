// Package partition creates and inspects the daily partitions of Wharf's
// partitioned tables (wharf_inbox_messages, wharf_outbox_events,
// wharf_outbox_attempts, and any later "wharf_" table that [Tables] finds),
// and names Wharf's advisory locks ([LockClass], [LockKey],
// [RetentionLockKey]).
//
// Partitions are named <parent>_pYYYYMMDD ([Name], [ParseName]) and cover
// one UTC day, [00:00, 24:00). A new partition is created as a plain table
// and then ATTACHed ([Ensure], [EnsureRange], [EnsureAll]), which takes only
// a SHARE UPDATE EXCLUSIVE lock on the parent, so creating one never blocks
// or deadlocks against transactions inserting rows. [Cache] lets the insert
// path check the catalog only on a day's first row. Retention lists
// partitions ([List], [ListDetached]) and removes them with [Detach] (DETACH
// … CONCURRENTLY), [Finalize] and [Drop].
//
// The rest of Wharf's SQL goes through sqlc (queries/, generated into
// internal/dbsqlc); this package writes its own. It must for the statements
// on variable table names, which queries cannot parameterise: CREATE TABLE
// and ATTACH PARTITION in Ensure, DETACH PARTITION (CONCURRENTLY and
// FINALIZE) and DROP TABLE in lifecycle.go, and CountRows' SELECT count(*).
// Every identifier is quoted with pgx.Identifier and every bound is
// formatted from a time.Time. It also holds statements on fixed names that
// sqlc could carry but does not yet: the catalog reads of Tables, List and
// ListDetached, the to_regclass look-ups of Ensure and Cache.Ensure, and
// Ensure's SET LOCAL lock_timeout and pg_advisory_xact_lock. Outside this
// package, library code sends three more kinds of statement of its own:
// wharf.Migrate's pg_advisory_lock and the inbox batch worker's SAVEPOINT,
// RELEASE SAVEPOINT and ROLLBACK TO SAVEPOINT.
//
// The README's "Retention: partitions and pruning" section describes the
// partitioned tables and their retention.
package partition
