-- Catalog reads and session settings, kept here with every other statement
-- so that sqlc checks them. Only DDL and reads on table names known at run
-- time (partitions) stay hand-written, in internal/partition.

-- name: CatalogRelationExists :one
-- Whether a relation (a quoted, possibly schema-qualified name) exists.
SELECT (to_regclass(@quoted_name::text) IS NOT NULL)::boolean AS exists;

-- name: CatalogPartitions :many
-- The partitions of a parent table (a quoted name), by name; detach_pending
-- marks one whose DETACH … CONCURRENTLY was interrupted.
SELECT c.relname::text AS name, i.inhdetachpending AS detach_pending,
       c.reltuples::bigint AS estimated_rows, pg_total_relation_size(c.oid)::bigint AS total_bytes
FROM pg_catalog.pg_inherits i
JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass(@quoted_parent::text)
ORDER BY c.relname;

-- name: CatalogUnattachedTables :many
-- Plain tables of the current schema whose name matches a LIKE pattern and
-- that are no partition: what an interrupted drop leaves between its DETACH
-- and its DROP.
SELECT c.relname::text AS name
FROM pg_catalog.pg_class c
WHERE c.relnamespace = current_schema()::regnamespace
  AND c.relkind = 'r' AND NOT c.relispartition
  AND c.relname LIKE @name_pattern::text
ORDER BY c.relname;

-- name: CatalogPartitionedTables :many
-- Wharf's partitioned tables: every partitioned table of the current schema
-- whose name starts with "wharf_".
SELECT c.relname::text AS name
FROM pg_catalog.pg_partitioned_table p
JOIN pg_catalog.pg_class c ON c.oid = p.partrelid
WHERE c.relname LIKE 'wharf\_%' AND c.relnamespace = current_schema()::regnamespace
ORDER BY c.relname;

-- name: SetLocalLockTimeout :exec
-- SET LOCAL lock_timeout for the rest of the transaction ('10s', say).
SELECT set_config('lock_timeout', @timeout::text, true);

-- name: SetLocalStatementTimeout :exec
-- SET LOCAL statement_timeout for the rest of the transaction (or of the
-- savepoint it is set in): '500ms', say.
SELECT set_config('statement_timeout', @timeout::text, true);

-- name: PlanCacheModeGeneric :exec
-- For the rest of the transaction (or savepoint): plan_cache_mode
-- force_generic_plan, enable_seqscan off and jit off, their values before
-- kept in wharf.plan_cache_mode, wharf.enable_seqscan and wharf.jit for
-- PlanCacheModeRestore (kept first: the subquery, volatile, is not pulled
-- up, and is scanned before the outer target list is computed). A generic
-- plan is kept for the connection's life, until the tables' statistics
-- change: made while a table was nearly empty (River's job table, a new
-- day's partition) it would scan the whole table as it grows, where a
-- lookup by key needs its index whatever the size. A scan that no index
-- can replace then costs the planner's penalty for a disabled plan, far
-- above jit_above_cost: without jit off it would be compiled on every run.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true),
       set_config('jit', 'off', true)
FROM (SELECT set_config('wharf.plan_cache_mode', current_setting('plan_cache_mode'), true),
             set_config('wharf.enable_seqscan', current_setting('enable_seqscan'), true),
             set_config('wharf.jit', current_setting('jit'), true)) AS kept;

-- name: PlanCacheModeRestore :exec
-- plan_cache_mode, enable_seqscan and jit as they were before
-- PlanCacheModeGeneric.
SELECT set_config('plan_cache_mode', current_setting('wharf.plan_cache_mode'), true),
       set_config('enable_seqscan', current_setting('wharf.enable_seqscan'), true),
       set_config('jit', current_setting('wharf.jit'), true);

-- name: SchemaVersion :one
-- The version of Wharf's schema golang-migrate recorded, and whether a
-- migration failed half-way. A plain read, without golang-migrate's
-- session lock: it works through PgBouncer.
SELECT version, dirty FROM wharf_schema_migrations LIMIT 1;
