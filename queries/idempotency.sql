-- name: IdempotencyKeyTryLock :one
-- Takes the transaction-scoped advisory lock that every claimant of one key
-- takes first, without waiting: false means another request holds the key
-- right now (or, rarely, a key whose lock_key collides), so the caller
-- answers 409 at once instead of queueing behind a running handler.
SELECT pg_try_advisory_xact_lock(@lock_class::int, @lock_key::int) AS locked;

-- name: IdempotencyKeyGetForUpdate :one
-- Reads the key's latest committed version and locks it until the caller's
-- transaction ends. Run after IdempotencyKeyTryLock, in a new statement, so
-- its snapshot includes everything the previous holder committed.
--
-- Whether the key has expired, and whether its in_progress claim is older
-- than the takeover timeout, are judged here by the database's clock, the
-- one that wrote claimed_at and expires_at: a node whose own clock runs
-- ahead must not take over a claim whose handler is still within its
-- timeout, or treat a live key as expired.
SELECT sqlc.embed(k),
       (k.expires_at <= now())::bool AS expired,
       (k.claimed_at <= now() - make_interval(secs => @in_progress_timeout_seconds::float8))::bool AS claim_timed_out
FROM wharf_idempotency_keys k
WHERE k.route = @route::text AND k.principal = @principal::text AND k.idempotency_key = @idempotency_key::text
FOR UPDATE;

-- name: IdempotencyKeyClaim :execrows
-- Claims a key for a request: inserts it in_progress or, when the key exists,
-- overwrites it only while it is still the version the caller examined
-- (previous_claim_id; NULL when the caller found no row): an expired key, or
-- an in_progress one whose claimant is presumed dead. Zero rows means the key
-- changed under the caller. Claim and expiry times are the database's clock
-- (now(): the start of the caller's short transaction), never a node's.
INSERT INTO wharf_idempotency_keys AS k (
    route, principal, idempotency_key, fingerprint, status, claim_id, claimed_at, expires_at
) VALUES (
    @route::text, @principal::text, @idempotency_key::text, @fingerprint::bytea,
    'in_progress', @claim_id::uuid, now(), now() + make_interval(secs => @key_retention_seconds::float8)
)
ON CONFLICT (route, principal, idempotency_key) DO UPDATE
SET fingerprint = excluded.fingerprint,
    status = 'in_progress',
    claim_id = excluded.claim_id,
    claimed_at = excluded.claimed_at,
    expires_at = excluded.expires_at,
    completed_at = NULL,
    response_status = NULL,
    response_headers = NULL,
    response_body = NULL
WHERE k.claim_id = sqlc.narg('previous_claim_id')::uuid;

-- name: IdempotencyKeyComplete :execrows
-- Records the response of the claim claim_id. Zero rows means the claim was
-- lost (taken over, released or pruned) and nothing was recorded.
UPDATE wharf_idempotency_keys
SET status = 'completed',
    -- The moment of completion, also in a long transactional-mode
    -- transaction (whose now() is its start).
    completed_at = clock_timestamp(),
    response_status = @response_status::int,
    response_headers = @response_headers::jsonb,
    response_body = sqlc.narg('response_body')::bytea
WHERE route = @route::text AND principal = @principal::text AND idempotency_key = @idempotency_key::text
  AND claim_id = @claim_id::uuid AND status = 'in_progress';

-- name: IdempotencyKeyRelease :execrows
-- Deletes the in_progress claim claim_id so that a retry runs the handler
-- again. A completed key or someone else's claim is left alone.
DELETE FROM wharf_idempotency_keys
WHERE route = @route::text AND principal = @principal::text AND idempotency_key = @idempotency_key::text
  AND claim_id = @claim_id::uuid AND status = 'in_progress';

-- name: IdempotencyKeyDeleteExpired :execrows
-- Deletes at most max_rows keys that expired by the database's clock, oldest
-- first. Keys locked by a request in flight (one reclaiming an expired key)
-- are skipped rather than waited for.
DELETE FROM wharf_idempotency_keys
WHERE (route, principal, idempotency_key) IN (
    SELECT route, principal, idempotency_key
    FROM wharf_idempotency_keys
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT @max_rows::int
    FOR UPDATE SKIP LOCKED
);
