-- name: OutboxEndpointInsert :one
INSERT INTO wharf_outbox_endpoints (
    id, url, description, event_types, tenant, secret, max_in_flight, timeout_ms,
    ordered, created_at, updated_at
) VALUES (
    @id::uuid, @url::text, @description::text, @event_types::text[], @tenant::text,
    @secret::text, @max_in_flight::int, @timeout_ms::int, @ordered::boolean,
    @now::timestamptz, @now::timestamptz
)
RETURNING *;

-- name: OutboxEndpointGet :one
SELECT * FROM wharf_outbox_endpoints WHERE id = @id::uuid;

-- name: OutboxEndpointList :many
-- Oldest first; tenant is optional.
SELECT * FROM wharf_outbox_endpoints
WHERE (sqlc.narg('tenant')::text IS NULL OR tenant = sqlc.narg('tenant')::text)
ORDER BY created_at, id
LIMIT @max_rows::int;

-- name: OutboxEndpointUpdate :one
-- NULL parameters leave their column unchanged.
UPDATE wharf_outbox_endpoints
SET url = COALESCE(sqlc.narg('url')::text, url),
    description = COALESCE(sqlc.narg('description')::text, description),
    event_types = COALESCE(sqlc.narg('event_types')::text[], event_types),
    max_in_flight = COALESCE(sqlc.narg('max_in_flight')::int, max_in_flight),
    timeout_ms = COALESCE(sqlc.narg('timeout_ms')::int, timeout_ms),
    ordered = COALESCE(sqlc.narg('ordered')::boolean, ordered),
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointDisable :one
-- Keeps the first reason and time when the endpoint is already disabled.
UPDATE wharf_outbox_endpoints
SET disabled_reason = CASE WHEN enabled THEN @reason::text ELSE disabled_reason END,
    disabled_at = CASE WHEN enabled THEN @now::timestamptz ELSE disabled_at END,
    enabled = false,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointEnable :one
-- Enabling forgets the failure streak, so the endpoint is not disabled again
-- by its first failure.
UPDATE wharf_outbox_endpoints
SET enabled = true,
    disabled_reason = '',
    disabled_at = NULL,
    consecutive_failures = 0,
    failing_since = NULL,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointDelete :execrows
DELETE FROM wharf_outbox_endpoints WHERE id = @id::uuid;

-- name: OutboxEndpointRotateSecret :one
UPDATE wharf_outbox_endpoints
SET previous_secret = secret,
    previous_secret_expires_at = @previous_expires_at::timestamptz,
    secret = @secret::text,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxPublish :many
-- Stores events and, for each, one pending delivery per enabled endpoint of
-- the event's tenant whose filter matches its type. Returns the deliveries.
WITH input AS (
    SELECT i AS n,
           (@ids::uuid[])[i] AS id,
           (@types::text[])[i] AS type,
           (@payloads::bytea[])[i] AS payload,
           (@ordering_keys::text[])[i] AS ordering_key,
           (@tenants::text[])[i] AS tenant
    FROM generate_subscripts(@ids::uuid[], 1) AS i
),
events AS (
    INSERT INTO wharf_outbox_events (id, created_at, type, payload, ordering_key, tenant)
    SELECT input.id, @created_at::timestamptz, input.type, input.payload, input.ordering_key, input.tenant
    FROM input
    RETURNING wharf_outbox_events.id
)
INSERT INTO wharf_outbox_deliveries (
    id, event_id, event_created_at, endpoint_id, ordering_key, status, created_at, updated_at
)
SELECT gen_random_uuid(), input.id, @created_at::timestamptz, ep.id, input.ordering_key, 'pending',
       @created_at::timestamptz, @created_at::timestamptz
FROM input
JOIN events ON events.id = input.id
JOIN wharf_outbox_endpoints ep
  ON ep.enabled
 AND ep.tenant = input.tenant
 AND (cardinality(ep.event_types) = 0
      OR EXISTS (
          SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
          WHERE f.pattern = input.type
             OR f.pattern = '*'
             OR (right(f.pattern, 2) = '.*' AND starts_with(input.type, left(f.pattern, -1)))))
ORDER BY input.n, ep.id
RETURNING wharf_outbox_deliveries.id, wharf_outbox_deliveries.event_id;

-- name: OutboxDeliveryGetForWork :one
-- Everything a delivery attempt needs; payload is NULL when the event row is
-- gone or its payload was scrubbed by retention.
SELECT d.id, d.seq, d.event_id, d.event_created_at, d.endpoint_id, d.ordering_key,
       d.status, d.attempts,
       ep.url, ep.secret, ep.previous_secret, ep.previous_secret_expires_at,
       ep.max_in_flight, ep.timeout_ms, ep.ordered, ep.enabled,
       (CASE WHEN ev.scrubbed_at IS NULL THEN ev.payload END)::bytea AS payload
FROM wharf_outbox_deliveries d
JOIN wharf_outbox_endpoints ep ON ep.id = d.endpoint_id
LEFT JOIN wharf_outbox_events ev ON ev.created_at = d.event_created_at AND ev.id = d.event_id
WHERE d.id = @id::uuid;

-- name: OutboxDeliveryEarlierPending :one
-- The first unfinished delivery to the same endpoint with the same ordering
-- key published before seq, if any.
SELECT id, status, next_attempt_at
FROM wharf_outbox_deliveries
WHERE endpoint_id = @endpoint_id::uuid
  AND ordering_key = @ordering_key::text
  AND ordering_key <> ''
  AND status IN ('pending', 'retrying')
  AND seq < @seq::bigint
ORDER BY seq
LIMIT 1;

-- name: OutboxLeaseAcquire :one
-- Takes a free slot up to last_slot (the one free longest) that no other
-- worker is taking at this moment. No row means every slot is held, locked by another worker,
-- or not created yet. It commits without waiting for its WAL flush: a lease
-- lost to a Postgres crash only lets one more request in flight for a while.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE wharf_outbox_leases l
SET delivery_id = @delivery_id::uuid, expires_at = @expires_at::timestamptz
FROM async_commit
WHERE l.ctid = (
    SELECT f.ctid
    FROM wharf_outbox_leases f
    WHERE f.endpoint_id = @endpoint_id::uuid
      AND f.slot <= @last_slot::int
      AND f.expires_at <= @now::timestamptz
    ORDER BY f.expires_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING l.slot;

-- name: OutboxLeaseSlotsCreate :exec
INSERT INTO wharf_outbox_leases (endpoint_id, slot)
SELECT @endpoint_id::uuid, s.slot FROM generate_series(0, @last_slot::int) AS s(slot)
ON CONFLICT (endpoint_id, slot) DO NOTHING;

-- name: OutboxLeaseCount :one
-- The endpoint's slots below last_slot, and how many of them are held.
SELECT count(*) AS slots,
       count(*) FILTER (WHERE expires_at > @now::timestamptz) AS held
FROM wharf_outbox_leases
WHERE endpoint_id = @endpoint_id::uuid AND slot <= @last_slot::int;

-- name: OutboxLeaseRelease :exec
UPDATE wharf_outbox_leases
SET delivery_id = NULL, expires_at = '-infinity'
WHERE endpoint_id = @endpoint_id::uuid AND slot = @slot::int AND delivery_id = @delivery_id::uuid;

-- name: OutboxAttemptRecord :one
-- Records one attempt in one statement: the attempt row, the delivery's new
-- state, the release of the attempt's lease (slot -1 when it held none) and
-- the endpoint's health. A failure disables the endpoint when gone (410) or
-- when it has been failing since before disable_before (NULL: never). A
-- success skips the endpoint write while nothing would change but a
-- last_success_at newer than stale_before, so that busy endpoints do not
-- serialise on their row. No row means the delivery no longer exists.
--
-- The statement commits without waiting for its WAL flush
-- (synchronous_commit off for this transaction only): River records the
-- job's outcome afterwards with a synchronous commit, which flushes this
-- commit too, as WAL is flushed in order. If Postgres crashes before that,
-- River's record is lost as well and the job is retried: at least once,
-- as after a worker crash.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
attempt AS (
    INSERT INTO wharf_outbox_attempts (
        id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status,
        status_code, response_body, response_truncated, error, duration_us
    )
    SELECT @attempt_id::uuid, @attempted_at::timestamptz, d.id, d.endpoint_id, d.event_id,
           d.attempts + 1, CASE WHEN @succeeded::boolean THEN 'succeeded' ELSE 'failed' END,
           sqlc.narg('status_code')::int, @response_body::bytea, @response_truncated::boolean,
           @error::text, @duration_us::bigint
    FROM wharf_outbox_deliveries d
    WHERE d.id = @delivery_id::uuid
),
lease AS (
    UPDATE wharf_outbox_leases
    SET delivery_id = NULL, expires_at = '-infinity'
    WHERE endpoint_id = @endpoint_id::uuid AND slot = @lease_slot::int AND delivery_id = @delivery_id::uuid
),
health AS (
    UPDATE wharf_outbox_endpoints ep
    SET consecutive_failures = CASE WHEN @succeeded::boolean THEN 0 ELSE ep.consecutive_failures + 1 END,
        failing_since = CASE WHEN @succeeded::boolean THEN NULL ELSE COALESCE(ep.failing_since, @now::timestamptz) END,
        last_success_at = CASE WHEN @succeeded::boolean THEN @now::timestamptz ELSE ep.last_success_at END,
        last_failure_at = CASE WHEN @succeeded::boolean THEN ep.last_failure_at ELSE @now::timestamptz END,
        enabled = ep.enabled AND NOT (@gone::boolean
            OR (NOT @succeeded::boolean AND COALESCE(ep.failing_since, @now::timestamptz) <= sqlc.narg('disable_before')::timestamptz) IS TRUE),
        disabled_reason = CASE
            WHEN NOT ep.enabled THEN ep.disabled_reason
            WHEN @gone::boolean THEN @gone_reason::text
            WHEN (NOT @succeeded::boolean AND COALESCE(ep.failing_since, @now::timestamptz) <= sqlc.narg('disable_before')::timestamptz) IS TRUE
                THEN @failing_reason::text
            ELSE ep.disabled_reason END,
        disabled_at = CASE
            WHEN ep.enabled AND (@gone::boolean
                OR (NOT @succeeded::boolean AND COALESCE(ep.failing_since, @now::timestamptz) <= sqlc.narg('disable_before')::timestamptz) IS TRUE)
                THEN @now::timestamptz
            ELSE ep.disabled_at END
    WHERE ep.id = @endpoint_id::uuid
      AND (NOT @succeeded::boolean
           OR ep.consecutive_failures > 0
           OR ep.last_success_at IS NULL
           OR ep.last_success_at < @stale_before::timestamptz)
    RETURNING ep.enabled, ep.disabled_at, ep.disabled_reason
),
delivery AS (
    UPDATE wharf_outbox_deliveries
    SET status = @delivery_status::text,
        attempts = attempts + 1,
        last_status_code = sqlc.narg('status_code')::int,
        last_error = @error::text,
        next_attempt_at = sqlc.narg('next_attempt_at')::timestamptz,
        succeeded_at = CASE WHEN @succeeded::boolean THEN @now::timestamptz ELSE succeeded_at END,
        updated_at = @now::timestamptz
    WHERE id = @delivery_id::uuid
    RETURNING attempts
)
SELECT delivery.attempts,
       COALESCE((SELECT NOT h.enabled AND h.disabled_at = @now::timestamptz FROM health h), false)::boolean AS disabled_now,
       COALESCE((SELECT h.disabled_reason FROM health h), '')::text AS disabled_reason
FROM delivery, async_commit;

-- name: OutboxDeliveryMarkDead :exec
-- Dead-letters an unfinished delivery without an attempt (its endpoint was
-- disabled, or its event is gone).
UPDATE wharf_outbox_deliveries
SET status = 'dead', last_error = @reason::text, next_attempt_at = NULL, updated_at = @now::timestamptz
WHERE id = @id::uuid AND status IN ('pending', 'retrying');

-- name: OutboxDeliveryGet :one
SELECT * FROM wharf_outbox_deliveries WHERE id = @id::uuid;

-- name: OutboxDeliveryList :many
-- Newest first; filters are optional.
SELECT * FROM wharf_outbox_deliveries
WHERE (sqlc.narg('endpoint_id')::uuid IS NULL OR endpoint_id = sqlc.narg('endpoint_id')::uuid)
  AND (sqlc.narg('event_id')::uuid IS NULL OR event_id = sqlc.narg('event_id')::uuid)
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status')::text)
ORDER BY seq DESC
LIMIT @max_rows::int;

-- name: OutboxDeliveryRequeue :one
-- Moves a finished delivery of an enabled endpoint back to pending, for
-- replay, while its event's payload is still stored.
UPDATE wharf_outbox_deliveries d
SET status = 'pending', last_error = '', next_attempt_at = @now::timestamptz, updated_at = @now::timestamptz
FROM wharf_outbox_endpoints ep
WHERE d.id = @id::uuid
  AND ep.id = d.endpoint_id
  AND ep.enabled
  AND d.status IN ('succeeded', 'dead')
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL)
RETURNING d.id;

-- name: OutboxDeliveryRequeueDead :many
-- Moves an endpoint's dead deliveries published at or after since back to
-- pending, for replay; those whose event is gone or scrubbed stay dead.
UPDATE wharf_outbox_deliveries d
SET status = 'pending', last_error = '', next_attempt_at = @now::timestamptz, updated_at = @now::timestamptz
WHERE d.endpoint_id = @endpoint_id::uuid
  AND d.status = 'dead'
  AND d.created_at >= @since::timestamptz
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL)
RETURNING d.id;

-- name: OutboxAttemptList :many
SELECT * FROM wharf_outbox_attempts
WHERE delivery_id = @delivery_id::uuid
ORDER BY attempted_at, attempt;
