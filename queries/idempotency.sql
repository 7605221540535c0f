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
SELECT * FROM wharf_idempotency_keys
WHERE route = @route::text AND principal = @principal::text AND idempotency_key = @idempotency_key::text
FOR UPDATE;

-- name: IdempotencyKeyClaim :execrows
-- Claims a key for a request: inserts it in_progress or, when the key exists,
-- overwrites it only while it is still the version the caller examined
-- (previous_claim_id; NULL when the caller found no row): an expired key, or
-- an in_progress one whose claimant is presumed dead. Zero rows means the key
-- changed under the caller.
INSERT INTO wharf_idempotency_keys AS k (
    route, principal, idempotency_key, fingerprint, status, claim_id, claimed_at, expires_at
) VALUES (
    @route::text, @principal::text, @idempotency_key::text, @fingerprint::bytea,
    'in_progress', @claim_id::uuid, @claimed_at::timestamptz, @expires_at::timestamptz
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
    completed_at = @completed_at::timestamptz,
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
-- Deletes at most max_rows keys that expired at or before now, oldest first.
-- Keys locked by a request in flight (one reclaiming an expired key) are
-- skipped rather than waited for.
DELETE FROM wharf_idempotency_keys
WHERE (route, principal, idempotency_key) IN (
    SELECT route, principal, idempotency_key
    FROM wharf_idempotency_keys
    WHERE expires_at <= @now::timestamptz
    ORDER BY expires_at
    LIMIT @max_rows::int
    FOR UPDATE SKIP LOCKED
);
