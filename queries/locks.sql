-- name: AdvisoryXactLockShared :exec
-- Held by writers that may revive old rows (replays), so that retention
-- cannot drop their partition between its check and its detach.
SELECT pg_advisory_xact_lock_shared(@class::int, @key::int);

-- name: AdvisoryXactLock :exec
-- Held by retention batches that must not interleave with replays.
SELECT pg_advisory_xact_lock(@class::int, @key::int);

-- name: LeaseTake :one
-- Takes the lease name for holder until ttl_seconds from now, by the
-- database's clock, when it is free, expired or already holder's (a
-- renewal). No row: another holder has it.
INSERT INTO wharf_leases (name, holder, expires_at)
VALUES (@name, @holder, now() + make_interval(secs => @ttl_seconds::double precision))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE wharf_leases.expires_at < now() OR wharf_leases.holder = EXCLUDED.holder
RETURNING holder;

-- name: LeaseRelease :exec
DELETE FROM wharf_leases WHERE name = @name AND holder = @holder;

-- name: PartitionDropMark :exec
-- Marks a day's partition as being dropped: replays of its rows are
-- refused from now on.
INSERT INTO wharf_partition_drops (parent, day, marked_at)
VALUES (@parent, @day::timestamptz, now())
ON CONFLICT (parent, day) DO NOTHING;

-- name: PartitionDropUnmark :exec
DELETE FROM wharf_partition_drops WHERE parent = @parent AND day = @day::timestamptz;

-- name: PartitionDropMarked :one
SELECT EXISTS (SELECT 1 FROM wharf_partition_drops WHERE parent = @parent AND day = @day::timestamptz);

-- name: AdvisorySessionLock :exec
-- Held by a connection of its own until it closes (river migrations, which
-- cannot share one transaction).
SELECT pg_advisory_lock(@class::int, @key::int);
