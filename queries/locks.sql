-- name: AdvisoryXactLockShared :exec
-- Held by writers that may revive old rows (replays), so that retention
-- cannot drop their partition between its check and its detach.
SELECT pg_advisory_xact_lock_shared(@class::int, @key::int);

-- name: AdvisoryTryLock :one
-- Session-level: released by AdvisoryUnlock or when the session ends.
SELECT pg_try_advisory_lock(@class::int, @key::int);

-- name: AdvisoryLock :exec
SELECT pg_advisory_lock(@class::int, @key::int);

-- name: AdvisoryUnlock :exec
SELECT pg_advisory_unlock(@class::int, @key::int);

-- name: AdvisoryXactLock :exec
-- Held by retention batches that must not interleave with replays.
SELECT pg_advisory_xact_lock(@class::int, @key::int);
