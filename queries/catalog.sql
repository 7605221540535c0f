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
-- force_generic_plan, its value before kept in wharf.plan_cache_mode for
-- PlanCacheModeRestore (kept first: the subquery, volatile, is not pulled
-- up, and is scanned before the outer target list is computed).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)
FROM (SELECT set_config('wharf.plan_cache_mode', current_setting('plan_cache_mode'), true)) AS kept;

-- name: PlanCacheModeRestore :exec
-- plan_cache_mode as it was before PlanCacheModeGeneric.
SELECT set_config('plan_cache_mode', current_setting('wharf.plan_cache_mode'), true);
