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
// Every statement Wharf sends goes through sqlc (queries/, generated into
// internal/dbsqlc), the catalog reads and session settings of this package
// included (queries/catalog.sql, queries/locks.sql), except those sqlc
// cannot express. Statements on table names known only at run time: CREATE
// TABLE and ATTACH PARTITION in Ensure, DETACH PARTITION (CONCURRENTLY and
// FINALIZE) and DROP TABLE in lifecycle.go, and CountRows' SELECT count(*);
// every identifier is quoted with pgx.Identifier and every bound is
// formatted from a time.Time. And transaction control: the inbox batch
// worker's SAVEPOINT, RELEASE SAVEPOINT and ROLLBACK TO SAVEPOINT, what
// pgx's nested transactions send, written out so that they can share a
// round trip with a handler's first statement.
//
// docs/retention.md describes the partitioned tables and their retention.
package partition
