-- name: OutboxEndpointInsert :one
INSERT INTO wharf_outbox_endpoints (
    id, url, description, event_types, tenant, secret, max_in_flight, timeout_ms,
    ordered, headers, auth, rate_limit_per_second, rate_limit_burst, created_at, updated_at,
    data_filter
) VALUES (
    @id::uuid, @url::text, @description::text, @event_types::text[], @tenant::text,
    @secret::text, @max_in_flight::int, @timeout_ms::int, @ordered::boolean,
    @headers::jsonb, @auth::jsonb, @rate_limit_per_second::float8, @rate_limit_burst::int,
    @now::timestamptz, @now::timestamptz, sqlc.narg('data_filter')::jsonb
)
RETURNING *;

-- name: OutboxEndpointGet :one
SELECT * FROM wharf_outbox_endpoints WHERE id = @id::uuid;

-- name: OutboxEndpointList :many
-- Oldest first; tenant is optional; a page after a cursor starts after
-- (after_created_at, after_id).
SELECT * FROM wharf_outbox_endpoints
WHERE (sqlc.narg('tenant')::text IS NULL OR tenant = sqlc.narg('tenant')::text)
  AND (sqlc.narg('after_created_at')::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg('after_created_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY created_at, id
LIMIT @max_rows::int;

-- name: OutboxEndpointUpdate :one
-- NULL parameters leave their column unchanged (data_filter: unless
-- set_data_filter, which sets it, NULL removing it). Like every statement that
-- changes how the endpoint's deliveries are sent or admitted, it counts a
-- version, which a running batch job compares (see the migration). A new rate limit empties
-- the queue of deliveries waiting for its tokens (they keep their turns,
-- taken at the old rate; others need not queue behind them).
WITH requeue AS (
    UPDATE wharf_outbox_rate_buckets
    SET queued_until = '-infinity'
    WHERE endpoint_id = @id::uuid AND sqlc.narg('rate_limit_per_second')::float8 IS NOT NULL
)
UPDATE wharf_outbox_endpoints
SET url = COALESCE(sqlc.narg('url')::text, url),
    description = COALESCE(sqlc.narg('description')::text, description),
    event_types = COALESCE(sqlc.narg('event_types')::text[], event_types),
    max_in_flight = COALESCE(sqlc.narg('max_in_flight')::int, max_in_flight),
    timeout_ms = COALESCE(sqlc.narg('timeout_ms')::int, timeout_ms),
    ordered = COALESCE(sqlc.narg('ordered')::boolean, ordered),
    headers = COALESCE(sqlc.narg('headers')::jsonb, headers),
    auth = COALESCE(sqlc.narg('auth')::jsonb, auth),
    rate_limit_per_second = COALESCE(sqlc.narg('rate_limit_per_second')::float8, rate_limit_per_second),
    rate_limit_burst = COALESCE(sqlc.narg('rate_limit_burst')::int, rate_limit_burst),
    data_filter = CASE WHEN @set_data_filter::boolean THEN sqlc.narg('data_filter')::jsonb ELSE data_filter END,
    version = version + 1,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointDisable :one
-- Keeps the first reason and time when the endpoint is already disabled.
UPDATE wharf_outbox_endpoints
SET disabled_reason = CASE WHEN enabled THEN @reason::text ELSE disabled_reason END,
    disabled_at = CASE WHEN enabled THEN @now::timestamptz ELSE disabled_at END,
    enabled = false,
    version = version + 1,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointEnable :one
-- Enabling forgets the failure streak, so the endpoint is not disabled again
-- by its first failure, and closes its circuit.
UPDATE wharf_outbox_endpoints
SET enabled = true,
    disabled_reason = '',
    disabled_at = NULL,
    consecutive_failures = 0,
    failing_since = NULL,
    circuit_state = 'closed',
    circuit_opened_at = NULL,
    circuit_open_until = NULL,
    circuit_openings = 0,
    circuit_probe_delivery_id = NULL,
    circuit_probe_expires_at = NULL,
    version = version + 1,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxEndpointDelete :many
-- The deleted endpoint (no row: none had the id), for the audit log.
DELETE FROM wharf_outbox_endpoints WHERE id = @id::uuid RETURNING *;

-- name: OutboxEndpointRotateSecret :one
UPDATE wharf_outbox_endpoints
SET previous_secret = secret,
    previous_secret_expires_at = @previous_expires_at::timestamptz,
    secret = @secret::text,
    version = version + 1,
    updated_at = @now::timestamptz
WHERE id = @id::uuid
RETURNING *;

-- name: OutboxPublish :many
-- Stores events and, for each, one pending delivery per enabled endpoint of
-- the event's tenant whose filter matches its type, and whose content
-- filter, if any, its data contains, due at first_attempt_at.
-- Returns the deliveries in the order they were stored (by event, then
-- endpoint), with their endpoint's concurrency cap and whether it is rate
-- limited, which the jobs' grouping heeds.
WITH input AS (
    -- unnest, not a subscript per element: reaching element i of an array
    -- of variable-length values walks the i-1 before it, which made a
    -- batch's cost grow with the square of its size (30,000 events took
    -- 14 s). Set-returning functions in one select list run in step.
    SELECT generate_subscripts(@ids::text[], 1) AS n,
           unnest(@ids::text[])::uuid AS id,
           unnest(@types::text[]) AS type,
           unnest(@payloads::bytea[]) AS payload,
           unnest(@ordering_keys::text[]) AS ordering_key,
           unnest(@tenants::text[]) AS tenant,
           unnest(@filterable::boolean[]) AS filterable
),
events AS (
    INSERT INTO wharf_outbox_events (id, created_at, type, payload, ordering_key, tenant, trace_context, filterable)
    SELECT input.id, @created_at::timestamptz, input.type, input.payload, input.ordering_key, input.tenant,
           @trace_context::text, input.filterable
    FROM input
    RETURNING wharf_outbox_events.id
),
stored AS (
    INSERT INTO wharf_outbox_deliveries (
        id, event_id, event_created_at, endpoint_id, ordering_key, status, next_attempt_at, created_at, updated_at
    )
    SELECT gen_random_uuid(), input.id, @created_at::timestamptz, ep.id, input.ordering_key, 'pending',
           @first_attempt_at::timestamptz, @created_at::timestamptz, @created_at::timestamptz
    FROM input
    JOIN events ON events.id = input.id
    JOIN wharf_outbox_endpoints ep
      ON ep.enabled
     AND ep.tenant = input.tenant
     AND CASE WHEN starts_with(input.type, 'wharf.')
         -- An operational event (wharf.endpoint.disabled, …) goes only to
         -- the endpoints whose filter names it or a "wharf." prefix of it:
         -- never through "*", another prefix or an empty filter.
         THEN EXISTS (
              SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
              WHERE f.pattern = input.type
                 OR (starts_with(f.pattern, 'wharf.') AND right(f.pattern, 2) = '.*'
                     AND starts_with(input.type, left(f.pattern, -1))))
         ELSE cardinality(ep.event_types) = 0
          OR EXISTS (
              SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
              WHERE f.pattern = input.type
                 OR f.pattern = '*'
                 OR (right(f.pattern, 2) = '.*' AND starts_with(input.type, left(f.pattern, -1))))
         END
     -- The content filter, read from the envelope only for an endpoint
     -- that has one; an operational event is the outbox's, not filtered.
     -- No filter takes a payload jsonb cannot hold (the CASE keeps it from
     -- being cast).
     AND (ep.data_filter IS NULL OR starts_with(input.type, 'wharf.')
          OR CASE WHEN input.filterable
                  THEN (convert_from(input.payload, 'UTF8')::jsonb -> 'data') @> ep.data_filter
                  ELSE false END)
    ORDER BY input.n, ep.id
    -- seq is drawn in this order.
    RETURNING wharf_outbox_deliveries.id, wharf_outbox_deliveries.seq, wharf_outbox_deliveries.event_id,
              wharf_outbox_deliveries.endpoint_id, wharf_outbox_deliveries.ordering_key
),
jobs AS (
    -- When the caller asks (one event: a delivery job each, see
    -- delivery.InlineJobs), each delivery's River job, as River's insert
    -- writes it, in this round trip rather than one of its own.
    INSERT INTO river_job (args, kind, max_attempts, queue, scheduled_at, state)
    SELECT jsonb_build_object('delivery_id', stored.id), @job_kind::text, @job_max_attempts,
           @job_queue::text, coalesce(sqlc.narg('job_scheduled_at')::timestamptz, now()),
           -- Cast here: a parameter sent as text (PgBouncer's modes) would not be.
           CAST(@job_state::text AS river_job_state)
    FROM stored
    WHERE @insert_jobs::boolean
    RETURNING river_job.id
),
notified AS (
    -- River's insert notification, which wakes a worker at once, on its
    -- channel as River names it.
    SELECT pg_notify(concat(current_schema(), '.', @notify_topic::text), @notify_payload::text)
    FROM (SELECT 1 FROM jobs LIMIT 1) AS inserted
    WHERE @notify::boolean
)
SELECT stored.id, stored.event_id, stored.endpoint_id, stored.ordering_key,
       ep.max_in_flight, ep.rate_limit_per_second > 0 AS rate_limited
FROM stored
JOIN wharf_outbox_endpoints ep ON ep.id = stored.endpoint_id
-- Always true: it makes the notification run (a CTE that only reads runs
-- when read).
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY stored.seq;

-- name: OutboxDeliveryGetForWork :many
-- Everything an attempt of each delivery needs (a row per delivery that
-- still exists), for the jobs that start together; payload is NULL when
-- the event row is gone or its payload was scrubbed by retention. db_now
-- is the database's clock, which the circuit's and the rate limit's times
-- are set by: waits are measured against it, never a node's clock.
SELECT d.id, d.seq, d.event_id, d.event_created_at, d.endpoint_id, d.ordering_key,
       d.status, d.attempts, d.generation, d.throttled_until,
       ep.url, ep.secret, ep.previous_secret, ep.previous_secret_expires_at,
       ep.max_in_flight, ep.timeout_ms, ep.ordered, ep.enabled, ep.headers, ep.auth,
       ep.rate_limit_per_second, ep.circuit_state, ep.circuit_open_until, ep.circuit_probe_expires_at,
       ep.version AS endpoint_version,
       (CASE WHEN ev.scrubbed_at IS NULL THEN ev.payload END)::bytea AS payload,
       COALESCE(ev.trace_context, '')::text AS trace_context,
       now()::timestamptz AS db_now
FROM wharf_outbox_deliveries d
JOIN wharf_outbox_endpoints ep ON ep.id = d.endpoint_id
LEFT JOIN wharf_outbox_events ev ON ev.created_at = d.event_created_at AND ev.id = d.event_id
WHERE d.id = ANY((@ids::text[])::uuid[]);

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
-- Takes a free slot under the endpoint's cap (the one free longest) that no
-- other worker is taking at this moment, for lease_seconds. No row means
-- every slot is held, locked by another worker or not created yet, or that
-- a live lease holds a slot at or above the cap: the cap was lowered while
-- it was in flight, and OutboxLeaseAcquireCounted must count it. The cap is
-- read here, not passed in, so that a delivery loaded before the cap
-- changed still obeys the new one. Lease times are the database's clock,
-- never a node's, so that nodes whose clocks disagree still agree on which
-- leases have expired: now(), the start of this statement's own
-- transaction (run it outside any other), which unlike clock_timestamp()
-- can bound the index scan. It commits without waiting for its WAL flush:
-- a lease lost to a Postgres crash only lets one more request in flight
-- for a while.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
endpoint AS MATERIALIZED (
    SELECT ep.max_in_flight
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
      AND NOT EXISTS (
          SELECT 1 FROM wharf_outbox_leases above
          WHERE above.endpoint_id = ep.id
            AND above.slot >= ep.max_in_flight
            AND above.expires_at > now())
)
UPDATE wharf_outbox_leases l
SET delivery_id = @delivery_id::uuid,
    expires_at = now() + make_interval(secs => @lease_seconds::float8)
FROM async_commit
WHERE l.ctid = (
    SELECT f.ctid
    FROM wharf_outbox_leases f, endpoint
    WHERE f.endpoint_id = @endpoint_id::uuid
      AND f.slot < endpoint.max_in_flight
      AND f.expires_at <= now()
    ORDER BY f.expires_at
    LIMIT 1
    FOR UPDATE OF f SKIP LOCKED)
RETURNING l.slot;

-- name: OutboxLeaseAcquireMany :many
-- OutboxLeaseAcquire for many deliveries to one endpoint at once: each
-- delivery, in the order given, takes a free slot under the cap (the ones
-- free longest) that no other worker is taking at this moment, while there
-- are some. A delivery without a row takes its slot as OutboxLeaseAcquire
-- says. It commits as OutboxLeaseAcquire does.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
endpoint AS MATERIALIZED (
    SELECT ep.max_in_flight
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
      AND NOT EXISTS (
          SELECT 1 FROM wharf_outbox_leases above
          WHERE above.endpoint_id = ep.id
            AND above.slot >= ep.max_in_flight
            AND above.expires_at > now())
),
free AS MATERIALIZED (
    SELECT f.slot, f.expires_at
    FROM wharf_outbox_leases f, endpoint
    WHERE f.endpoint_id = @endpoint_id::uuid
      AND f.slot < endpoint.max_in_flight
      AND f.expires_at <= now()
    ORDER BY f.expires_at
    LIMIT cardinality(@delivery_ids::text[])
    FOR UPDATE OF f SKIP LOCKED
),
numbered AS (
    SELECT free.slot, row_number() OVER (ORDER BY free.expires_at, free.slot) AS n
    FROM free
),
wanted AS (
    SELECT w.delivery_id, w.n
    FROM unnest((@delivery_ids::text[])::uuid[]) WITH ORDINALITY AS w(delivery_id, n)
)
UPDATE wharf_outbox_leases l
SET delivery_id = wanted.delivery_id,
    expires_at = now() + make_interval(secs => @lease_seconds::float8)
FROM numbered
JOIN wanted ON wanted.n = numbered.n
CROSS JOIN async_commit
WHERE l.endpoint_id = @endpoint_id::uuid AND l.slot = numbered.slot
RETURNING l.delivery_id::uuid AS delivery_id, l.slot;

-- name: OutboxRateTake :one
-- Takes a token of the endpoint's rate limit for a delivery, right after
-- it took its concurrency slot (if the endpoint has a cap: a slot without
-- a token is given back at once). The limit is read here, not passed in.
-- A statement of its own, short, so that the bucket's row, which every
-- take of the endpoint locks in turn, is held briefly: folded into
-- OutboxLeaseAcquire it was held for that whole statement, and an
-- endpoint limited far above its traffic delivered 40% less.
--
-- The endpoint's bucket row is locked (lock order: slot, then bucket; no
-- statement holding a bucket row waits for another lock) and the GCRA
-- gives the time due at which one more request conforms to the limit. Its
-- clock is clock_timestamp() as the row is locked (a locked row is read
-- again once its lock is granted), not now(): a take that waited for the
-- lock must not be granted a token as of before its wait, which would let
-- its request go closer to the previous one than the limit allows. A token
-- due within max_sleep_seconds (and within max_sleepers tokens' time:
-- fewer at high rates) is taken (token_granted; wait_seconds until it is
-- due: the caller waits that long in the worker, then sends). While
-- deliveries wait their turn (queued_until is ahead) only those whose turn
-- has come (queued) take one: a delivery that has not waited goes to the
-- back of the queue. A delivery that gets no token gets a turn instead
-- (ticketed, in wait_seconds; the caller stores it and snoozes until
-- then), one token after the last, unless that is beyond horizon_seconds:
-- then nothing changes and the caller asks again later. With turn_only it
-- takes no token and only gives the delivery a turn: one of a capped
-- endpoint at its cap comes back when a token would be its, rather than
-- polling. No limit (rate_limited false) or no bucket row (bucket_missing:
-- OutboxRateBucketCreate, then again) changes nothing. It commits without
-- waiting for its WAL flush: a token lost to a Postgres crash only lets
-- one more request go.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
endpoint AS MATERIALIZED (
    SELECT ep.rate_limit_per_second AS rate, ep.rate_limit_burst AS burst
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
),
bucket AS MATERIALIZED (
    SELECT b.endpoint_id, b.tat, b.queued_until, clock_timestamp() AS at,
           interval '1 second' / e.rate AS spacing,
           GREATEST(clock_timestamp(), b.tat - interval '1 second' * ((e.burst - 1) / e.rate)) AS due,
           clock_timestamp() + interval '1 second' * LEAST(@max_sleep_seconds::float8, sqlc.arg(max_sleepers)::float8 / e.rate) AS sleep_until
    FROM wharf_outbox_rate_buckets b, endpoint e
    WHERE b.endpoint_id = @endpoint_id::uuid AND e.rate > 0
    FOR NO KEY UPDATE OF b
),
decision AS (
    SELECT k.endpoint_id, k.tat, k.queued_until, k.at, k.spacing, k.due,
           (NOT @turn_only::boolean AND (@queued::boolean OR k.queued_until <= k.at) AND k.due <= k.sleep_until) AS granted,
           GREATEST(k.queued_until, k.due) AS turn
    FROM bucket k
),
take AS (
    UPDATE wharf_outbox_rate_buckets b
    SET tat = CASE WHEN d.granted THEN GREATEST(d.tat, d.at) + d.spacing ELSE d.tat END,
        queued_until = CASE WHEN d.granted THEN d.queued_until ELSE d.turn + d.spacing END
    FROM decision d
    WHERE b.endpoint_id = d.endpoint_id
      AND (d.granted OR d.turn <= d.at + interval '1 second' * @horizon_seconds::float8)
    RETURNING d.granted
)
SELECT (COALESCE((SELECT e.rate FROM endpoint e), 0) > 0)::boolean AS rate_limited,
       COALESCE((SELECT t.granted FROM take t), false)::boolean AS token_granted,
       EXISTS (SELECT 1 FROM take t WHERE NOT t.granted)::boolean AS ticketed,
       COALESCE((SELECT extract(epoch FROM (CASE WHEN d.granted THEN d.due ELSE d.turn END) - d.at)
                 FROM decision d), 0)::float8 AS wait_seconds,
       (COALESCE((SELECT e.rate FROM endpoint e), 0) > 0
        AND NOT EXISTS (SELECT 1 FROM bucket))::boolean AS bucket_missing
FROM async_commit;

-- name: OutboxRateBucketCreate :exec
INSERT INTO wharf_outbox_rate_buckets (endpoint_id)
SELECT ep.id FROM wharf_outbox_endpoints ep WHERE ep.id = @endpoint_id::uuid
ON CONFLICT (endpoint_id) DO NOTHING;

-- name: OutboxDeliveryThrottle :execrows
-- Stores a delivery's turn for a rate limit token (OutboxRateTake), due
-- turn_in_seconds from now by the database's clock, while the delivery is
-- unfinished and of the job's generation. Like the turn, it commits without waiting for its WAL
-- flush: a turn lost to a crash only loses the delivery its place in the
-- queue.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE wharf_outbox_deliveries
SET throttled_until = now() + make_interval(secs => @turn_in_seconds::float8)
FROM async_commit
WHERE id = @id::uuid AND generation = @generation::int
  -- "|| ''": see OutboxAttemptRecordSucceeded.
  AND status || '' IN ('pending', 'retrying');

-- name: OutboxCircuitProbeClaim :one
-- Makes the delivery the probe of an endpoint whose circuit is open and
-- whose cool-down is over, or half-open with a probe that expired (its
-- worker died): the circuit turns half-open and the probe is the
-- delivery's until probe_seconds from now. Only one worker can: the
-- update re-checks the row it locks. No row means another delivery probes,
-- or the circuit closed meanwhile (closed is true: go ahead).
UPDATE wharf_outbox_endpoints ep
SET circuit_state = CASE WHEN ep.circuit_state = 'closed' THEN 'closed' ELSE 'half_open' END,
    circuit_probe_delivery_id = CASE WHEN ep.circuit_state = 'closed' THEN NULL ELSE @delivery_id::uuid END,
    circuit_probe_expires_at = CASE WHEN ep.circuit_state = 'closed' THEN NULL
                                    ELSE now() + make_interval(secs => @probe_seconds::float8) END
WHERE ep.id = @endpoint_id::uuid
  AND (ep.circuit_state = 'closed'
       OR (ep.circuit_state = 'open' AND ep.circuit_open_until <= now())
       OR (ep.circuit_state = 'half_open' AND ep.circuit_probe_expires_at <= now()))
RETURNING (ep.circuit_state = 'closed')::boolean AS closed;

-- name: OutboxCircuitProbeRelease :exec
-- Gives up a probe that was not sent (its worker stopping, its endpoint at
-- its concurrency cap or rate limit): another delivery may probe at once.
UPDATE wharf_outbox_endpoints
SET circuit_probe_expires_at = '-infinity'
WHERE id = @endpoint_id::uuid AND circuit_state = 'half_open' AND circuit_probe_delivery_id = @delivery_id::uuid;

-- name: OutboxLeaseAcquireCounted :one
-- OutboxLeaseAcquire for an endpoint whose cap was lowered while more
-- leases were live than the new cap allows: it takes a free slot under the
-- cap only while fewer leases than the cap are live, counting every slot.
-- It locks the endpoint's slots, all of them in slot order, so such
-- acquisitions of one endpoint run one at a time, and OutboxLeaseAcquire
-- (SKIP LOCKED) cannot take a slot while one counts. The endpoint row is
-- locked first (KEY SHARE: only its deletion waits), the lock order of
-- every statement that locks more than one of these rows: endpoint, then
-- delivery, then lease (see OutboxAttemptRecord). No row means the
-- endpoint is at its cap, or was deleted.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
endpoint AS (
    SELECT ep.id, ep.max_in_flight FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
    FOR KEY SHARE
),
slots AS (
    SELECT l.slot, l.expires_at, endpoint.max_in_flight
    FROM wharf_outbox_leases l
    JOIN endpoint ON l.endpoint_id = endpoint.id
    ORDER BY l.slot
    FOR UPDATE OF l
),
free AS (
    SELECT s.slot
    FROM slots s
    WHERE s.slot < s.max_in_flight
      AND s.expires_at <= now()
      AND (SELECT count(*) FROM slots live WHERE live.expires_at > now()) < s.max_in_flight
    ORDER BY s.expires_at
    LIMIT 1
)
UPDATE wharf_outbox_leases l
SET delivery_id = @delivery_id::uuid,
    expires_at = now() + make_interval(secs => @lease_seconds::float8)
FROM free, async_commit
WHERE l.endpoint_id = @endpoint_id::uuid AND l.slot = free.slot
RETURNING l.slot;

-- name: OutboxLeaseSlotsCreate :exec
INSERT INTO wharf_outbox_leases (endpoint_id, slot)
SELECT @endpoint_id::uuid, s.slot FROM generate_series(0, @last_slot::int) AS s(slot)
ON CONFLICT (endpoint_id, slot) DO NOTHING;

-- name: OutboxLeaseCount :one
-- The endpoint's cap (0: none), how many of its slots under the cap exist,
-- and how many leases are live (by the database's clock, as
-- OutboxLeaseAcquire): in every slot, and in slots at or above the cap
-- (taken before it was lowered). No row means the endpoint was deleted.
SELECT ep.max_in_flight,
       count(l.slot) FILTER (WHERE l.slot < ep.max_in_flight) AS slots,
       count(l.slot) FILTER (WHERE l.expires_at > now()) AS held,
       count(l.slot) FILTER (WHERE l.slot >= ep.max_in_flight AND l.expires_at > now()) AS held_above
FROM wharf_outbox_endpoints ep
LEFT JOIN wharf_outbox_leases l ON l.endpoint_id = ep.id
WHERE ep.id = @endpoint_id::uuid
GROUP BY ep.max_in_flight;

-- name: OutboxLeaseExtend :execrows
-- Extends the lease of the slot that delivery_id holds to lease_seconds
-- from now (the database's clock), if it is still live and under the
-- endpoint's cap: no row, it has expired or been taken since, or the cap
-- was lowered below it. Commits without waiting for its WAL flush, as
-- OutboxLeaseAcquire does.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE wharf_outbox_leases l
SET expires_at = now() + make_interval(secs => @lease_seconds::float8)
FROM async_commit
WHERE l.endpoint_id = @endpoint_id::uuid
  AND l.slot = @slot::int
  AND l.delivery_id = @delivery_id::uuid
  AND l.expires_at > now()
  AND l.slot < (SELECT ep.max_in_flight FROM wharf_outbox_endpoints ep WHERE ep.id = @endpoint_id::uuid);

-- name: OutboxLeaseRelease :exec
UPDATE wharf_outbox_leases
SET delivery_id = NULL, expires_at = '-infinity'
WHERE endpoint_id = @endpoint_id::uuid AND slot = @slot::int AND delivery_id = @delivery_id::uuid;

-- name: OutboxAttemptRecord :batchone
-- Records one attempt in one statement (the attempts of one endpoint that
-- finish together are pipelined in one transaction, sorted by lease slot,
-- then delivery: a transaction locks one endpoint row, and the endpoint's
-- slots in slot order, as OutboxLeaseAcquireCounted does; successes only
-- go through OutboxAttemptRecordSucceeded instead): the attempt row, the delivery's new
-- state, the release of the attempt's lease (slot -1 when it held none) and
-- the endpoint's health. Only the job of the delivery's current generation
-- records, and only while the delivery is pending or retrying: a job that a
-- replay superseded, or that runs after the delivery finished, changes
-- neither the delivery nor its attempt log (the endpoint's health and the
-- lease are still settled: the request was real). No row means that, or
-- that the delivery no longer exists. endpoint_version is the endpoint's
-- version as locked here, before this attempt's own health write: a batch
-- job that loaded another hands the rest of its deliveries over.
--
-- A failure disables the endpoint when gone (410) or when it has been
-- failing since before disable_before (NULL: never), decided once in
-- endpoint. A failure also opens the endpoint's circuit (circuit_threshold
-- 0: never) when it makes circuit_threshold consecutive failures of a
-- closed circuit, or when the circuit is half-open (the probe failed, or a
-- request sent before the circuit opened did): open for cooldown_seconds,
-- doubled per opening since the circuit was last closed, at most
-- max_cooldown_seconds, by the database's clock. A success closes it.
--
-- An attempt that is no verdict on the endpoint (verdict false: its
-- request was cut off by the client's stop) leaves its health alone.
--
-- A success skips the endpoint write while nothing would change but a
-- last_success_at newer than stale_before, so that busy endpoints do not
-- serialise on their row. endpoint locks the row it decides on (FOR NO
-- KEY UPDATE returns its latest committed version), so the decision and
-- the write see the same failure streak even when attempts of one endpoint
-- finish together.
--
-- Lock order: endpoint row, then delivery row, then lease row, as
-- EndpointDelete takes them (it deletes the endpoint, and its cascade then
-- the endpoint's deliveries and leases) and as every other statement that
-- locks more than one of them does. endpoint_lock therefore takes the
-- endpoint row first, in KEY SHARE mode: it waits only for a deletion, and
-- neither records of the same endpoint nor the health write (NO KEY UPDATE)
-- wait for it. current_delivery joins it, so the delivery row is locked
-- after it, and not at all once the endpoint is deleted. Locking the
-- delivery first, a record could hold the delivery while waiting for an
-- endpoint whose deletion waited for that delivery: a deadlock (40P01).
-- Postgres runs the health write (endpoint, NO KEY UPDATE) before the
-- lease's release: no statement locks a lease slot and then the endpoint
-- in that mode, and none may.
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
endpoint_lock AS (
    SELECT ep.id, ep.version
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
    FOR KEY SHARE
),
current_delivery AS (
    SELECT d.id, d.endpoint_id, d.event_id, d.attempts
    FROM wharf_outbox_deliveries d
    JOIN endpoint_lock ON endpoint_lock.id = d.endpoint_id
    WHERE d.id = @delivery_id::uuid
      AND d.generation = @generation::int
      -- "|| ''": see OutboxAttemptRecordSucceeded.
      AND d.status || '' IN ('pending', 'retrying')
    FOR UPDATE OF d
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
    FROM current_delivery d
),
lease AS (
    UPDATE wharf_outbox_leases
    SET delivery_id = NULL, expires_at = '-infinity'
    WHERE endpoint_id = @endpoint_id::uuid AND slot = @lease_slot::int AND delivery_id = @delivery_id::uuid
),
endpoint AS (
    SELECT ep.id,
           ep.enabled AND (@gone::boolean
               OR (NOT @succeeded::boolean
                   AND COALESCE(ep.failing_since, @now::timestamptz) <= sqlc.narg('disable_before')::timestamptz) IS TRUE)
               AS disable,
           CASE WHEN @gone::boolean THEN @gone_reason::text ELSE @failing_reason::text END AS reason,
           (NOT @succeeded::boolean
            AND @circuit_threshold::int > 0
            AND (ep.circuit_state = 'half_open'
                 OR (ep.circuit_state = 'closed' AND ep.consecutive_failures + 1 >= @circuit_threshold::int)))
               AS open_circuit,
           ep.circuit_state <> 'closed' AS was_open,
           now() + interval '1 second' * LEAST(
               power(2, LEAST(ep.circuit_openings, 30)) * @cooldown_seconds::float8,
               @max_cooldown_seconds::float8) AS open_until
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
      AND @verdict::boolean
      AND (NOT @succeeded::boolean
           OR ep.consecutive_failures > 0
           OR ep.circuit_state <> 'closed'
           OR ep.last_success_at IS NULL
           OR ep.last_success_at < @stale_before::timestamptz)
    FOR NO KEY UPDATE
),
health AS (
    UPDATE wharf_outbox_endpoints ep
    SET consecutive_failures = CASE WHEN @succeeded::boolean THEN 0 ELSE ep.consecutive_failures + 1 END,
        failing_since = CASE WHEN @succeeded::boolean THEN NULL ELSE COALESCE(ep.failing_since, @now::timestamptz) END,
        last_success_at = CASE WHEN @succeeded::boolean THEN @now::timestamptz ELSE ep.last_success_at END,
        last_failure_at = CASE WHEN @succeeded::boolean THEN ep.last_failure_at ELSE @now::timestamptz END,
        enabled = ep.enabled AND NOT e.disable,
        disabled_reason = CASE WHEN e.disable THEN e.reason ELSE ep.disabled_reason END,
        disabled_at = CASE WHEN e.disable THEN @now::timestamptz ELSE ep.disabled_at END,
        circuit_state = CASE WHEN @succeeded::boolean THEN 'closed'
                             WHEN e.open_circuit THEN 'open'
                             ELSE ep.circuit_state END,
        circuit_opened_at = CASE WHEN @succeeded::boolean THEN NULL
                                 WHEN e.open_circuit THEN now()
                                 ELSE ep.circuit_opened_at END,
        circuit_open_until = CASE WHEN @succeeded::boolean THEN NULL
                                  WHEN e.open_circuit THEN e.open_until
                                  ELSE ep.circuit_open_until END,
        circuit_openings = CASE WHEN @succeeded::boolean THEN 0
                                WHEN e.open_circuit THEN ep.circuit_openings + 1
                                ELSE ep.circuit_openings END,
        circuit_probe_delivery_id = CASE WHEN @succeeded::boolean OR e.open_circuit THEN NULL
                                         ELSE ep.circuit_probe_delivery_id END,
        circuit_probe_expires_at = CASE WHEN @succeeded::boolean OR e.open_circuit THEN NULL
                                        ELSE ep.circuit_probe_expires_at END,
        version = ep.version + CASE WHEN e.disable OR e.open_circuit THEN 1 ELSE 0 END
    FROM endpoint e
    WHERE ep.id = e.id
    RETURNING e.disable, ep.disabled_reason, e.open_circuit, ep.circuit_openings,
              (e.was_open AND @succeeded::boolean) AS close_circuit
),
delivery AS (
    UPDATE wharf_outbox_deliveries d
    SET status = @delivery_status::text,
        attempts = d.attempts + 1,
        last_status_code = sqlc.narg('status_code')::int,
        last_error = @error::text,
        next_attempt_at = sqlc.narg('next_attempt_at')::timestamptz,
        succeeded_at = CASE WHEN @succeeded::boolean THEN @now::timestamptz ELSE d.succeeded_at END,
        throttled_until = NULL,
        updated_at = @now::timestamptz
    FROM current_delivery c
    WHERE d.id = c.id
    RETURNING d.attempts
)
SELECT delivery.attempts,
       COALESCE((SELECT h.disable FROM health h), false)::boolean AS disabled_now,
       COALESCE((SELECT h.disabled_reason FROM health h), '')::text AS disabled_reason,
       COALESCE((SELECT h.open_circuit FROM health h), false)::boolean AS circuit_opened,
       COALESCE((SELECT h.circuit_openings FROM health h), 0)::int AS circuit_openings,
       COALESCE((SELECT h.close_circuit FROM health h), false)::boolean AS circuit_closed,
       (SELECT el.version FROM endpoint_lock el)::bigint AS endpoint_version
FROM delivery, async_commit;

-- name: OutboxAttemptRecordSucceeded :many
-- OutboxAttemptRecord for successful attempts (2xx) of one endpoint, many
-- in one statement: the attempt rows, the deliveries' new state (each at
-- its attempt's own time, nows), the release of their leases and the
-- endpoint's health, written at most once (when it is not already healthy
-- and fresh), with the latest success's time (now). A row per attempt
-- recorded; an attempt without a row is no longer its delivery's to
-- record. An attempt that closes the circuit is reported by the first row
-- (OutboxAttemptRecord reports it on the attempt that closed it, or not at
-- all when that attempt was superseded). Rows are locked as
-- OutboxAttemptRecord locks them: the endpoint (KEY SHARE), the
-- deliveries, the endpoint (NO KEY UPDATE, when its health is written),
-- then the lease slots in slot order. It commits as OutboxAttemptRecord
-- does, and returns endpoint_version as it does.
WITH async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
),
input AS (
    SELECT (@delivery_ids::text[])[n]::uuid AS delivery_id,
           (@generations::int[])[n] AS generation,
           (@attempt_ids::text[])[n]::uuid AS attempt_id,
           (@attempted_ats::timestamptz[])[n] AS attempted_at,
           (@status_codes::int[])[n] AS status_code,
           (@response_bodies::bytea[])[n] AS response_body,
           (@response_truncated::boolean[])[n] AS response_truncated,
           (@durations_us::bigint[])[n] AS duration_us,
           (@lease_slots::int[])[n] AS lease_slot,
           (@nows::timestamptz[])[n] AS now
    FROM generate_subscripts(@delivery_ids::text[], 1) AS n
),
endpoint_lock AS (
    SELECT ep.id, ep.version
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
    FOR KEY SHARE
),
current_delivery AS MATERIALIZED (
    SELECT d.id, d.endpoint_id, d.event_id, d.attempts, i.attempt_id, i.attempted_at, i.status_code,
           i.response_body, i.response_truncated, i.duration_us, i.now
    FROM endpoint_lock
    JOIN wharf_outbox_deliveries d
      -- Not "=": the endpoint's index (endpoint_id, status) would then
      -- compete with the primary key, and on a backlog whose statistics
      -- lag (a burst of publishes) the planner took it, reading every
      -- unfinished delivery of the endpoint to record a few.
      ON d.endpoint_id IS NOT DISTINCT FROM endpoint_lock.id
    JOIN input i ON i.delivery_id = d.id AND i.generation = d.generation
    WHERE d.id = ANY((@delivery_ids::text[])::uuid[])
      -- Not "d.status IN": the status must be no index condition either,
      -- nor prove the predicate of the partial index of unfinished
      -- deliveries. On statistics that say almost none is unfinished
      -- (taken while all had succeeded, before an outage; or none taken
      -- yet, after a burst), the planner then read every unfinished
      -- delivery, through that index or this one by status alone, to
      -- record a batch of 64. Every statement that finds deliveries by id
      -- writes its status condition so.
      AND d.status || '' IN ('pending', 'retrying')
    ORDER BY i.lease_slot, d.id
    FOR UPDATE OF d
),
attempt AS (
    INSERT INTO wharf_outbox_attempts (
        id, attempted_at, delivery_id, endpoint_id, event_id, attempt, status,
        status_code, response_body, response_truncated, error, duration_us
    )
    SELECT c.attempt_id, c.attempted_at, c.id, c.endpoint_id, c.event_id, c.attempts + 1, 'succeeded',
           c.status_code, c.response_body, c.response_truncated, '', c.duration_us
    FROM current_delivery c
),
held_slots AS MATERIALIZED (
    SELECT l.slot
    FROM wharf_outbox_leases l
    JOIN input i ON l.slot = i.lease_slot AND l.delivery_id = i.delivery_id
    WHERE l.endpoint_id = @endpoint_id::uuid
    ORDER BY l.slot
    FOR UPDATE OF l
),
lease AS (
    UPDATE wharf_outbox_leases l
    SET delivery_id = NULL, expires_at = '-infinity'
    FROM held_slots h
    WHERE l.endpoint_id = @endpoint_id::uuid AND l.slot = h.slot
),
endpoint AS (
    SELECT ep.id, ep.circuit_state <> 'closed' AS was_open
    FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid
      AND EXISTS (SELECT 1 FROM input)
      AND (ep.consecutive_failures > 0
           OR ep.circuit_state <> 'closed'
           OR ep.last_success_at IS NULL
           OR ep.last_success_at < @stale_before::timestamptz)
    FOR NO KEY UPDATE
),
health AS (
    UPDATE wharf_outbox_endpoints ep
    SET consecutive_failures = 0,
        failing_since = NULL,
        last_success_at = @now::timestamptz,
        circuit_state = 'closed',
        circuit_opened_at = NULL,
        circuit_open_until = NULL,
        circuit_openings = 0,
        circuit_probe_delivery_id = NULL,
        circuit_probe_expires_at = NULL
    FROM endpoint e
    WHERE ep.id = e.id
    RETURNING e.was_open AS close_circuit
),
delivery AS (
    UPDATE wharf_outbox_deliveries d
    SET status = 'succeeded',
        attempts = d.attempts + 1,
        last_status_code = c.status_code,
        last_error = '',
        next_attempt_at = NULL,
        succeeded_at = c.now,
        throttled_until = NULL,
        updated_at = c.now
    FROM current_delivery c
    WHERE d.id = c.id
    RETURNING d.id, d.attempts
)
SELECT delivery.id::uuid AS delivery_id, delivery.attempts,
       (row_number() OVER (ORDER BY delivery.id) = 1
        AND COALESCE((SELECT h.close_circuit FROM health h), false))::boolean AS circuit_closed,
       (SELECT el.version FROM endpoint_lock el)::bigint AS endpoint_version
FROM delivery, async_commit;

-- name: OutboxDeliveryHandOver :many
-- Hands unfinished deliveries of a batch job (or Rescue's) over: each
-- still at the generation the job was inserted for moves to the next
-- generation, for the new jobs the caller inserts in the same
-- transaction; the batch job's later runs then leave them alone, as a
-- replay's. Returns the deliveries moved,
-- with their new generation, how many attempts they have had and when the
-- next is due.
UPDATE wharf_outbox_deliveries d
SET generation = d.generation + 1, updated_at = @now::timestamptz
FROM (SELECT unnest(@ids::text[])::uuid AS id, unnest(@generations::int[]) AS generation) i
WHERE d.id = i.id AND d.generation = i.generation
  -- "|| ''": see OutboxAttemptRecordSucceeded.
  AND d.status || '' IN ('pending', 'retrying')
RETURNING d.id, d.generation, d.attempts, d.next_attempt_at;

-- name: OutboxDeliveryMarkDead :one
-- Dead-letters an unfinished delivery of generation without an attempt (its
-- endpoint was disabled, its event is gone, its attempts ran out or its job
-- was cancelled), returning what Config.OnDead is told of it. A delivery a
-- replay took over, or that finished, is left alone: no row.
UPDATE wharf_outbox_deliveries
SET status = 'dead', last_error = @reason::text, next_attempt_at = NULL, updated_at = @now::timestamptz
WHERE id = @id::uuid AND generation = @generation::int
  -- "|| ''": see OutboxAttemptRecordSucceeded.
  AND status || '' IN ('pending', 'retrying')
RETURNING id, endpoint_id, event_id;

-- name: OutboxDeliveryGet :one
-- With its event's type ('' once retention dropped the event) and its
-- endpoint's tenant.
SELECT sqlc.embed(d),
       COALESCE((SELECT ev.type FROM wharf_outbox_events ev
                 WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id), '')::text AS event_type,
       ep.tenant
FROM wharf_outbox_deliveries d
JOIN wharf_outbox_endpoints ep ON ep.id = d.endpoint_id
WHERE d.id = @id::uuid;

-- name: OutboxDeliveryList :many
-- Newest first; filters are optional. The event type is the event's, read
-- through its primary key ('' once retention dropped the event); tenant
-- keeps the deliveries to that tenant's endpoints.
SELECT sqlc.embed(d),
       COALESCE((SELECT ev.type FROM wharf_outbox_events ev
                 WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id), '')::text AS event_type,
       ep.tenant
FROM wharf_outbox_deliveries d
JOIN wharf_outbox_endpoints ep ON ep.id = d.endpoint_id
WHERE (sqlc.narg('endpoint_id')::uuid IS NULL OR d.endpoint_id = sqlc.narg('endpoint_id')::uuid)
  AND (sqlc.narg('tenant')::text IS NULL OR ep.tenant = sqlc.narg('tenant')::text)
  AND (sqlc.narg('event_id')::uuid IS NULL OR d.event_id = sqlc.narg('event_id')::uuid)
  AND (sqlc.narg('status')::text IS NULL OR d.status = sqlc.narg('status')::text)
  AND (sqlc.narg('since')::timestamptz IS NULL OR d.event_created_at >= sqlc.narg('since')::timestamptz)
  AND (sqlc.narg('event_type')::text IS NULL
       OR EXISTS (SELECT 1 FROM wharf_outbox_events ev
                  WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id
                    AND ev.type = sqlc.narg('event_type')::text))
  AND (sqlc.narg('after_seq')::bigint IS NULL OR d.seq < sqlc.narg('after_seq')::bigint)
ORDER BY d.seq DESC
LIMIT @max_rows::int;

-- name: OutboxDeliveryRequeue :one
-- Moves a delivery of an enabled endpoint to pending in a new generation,
-- for replay, while its event's payload is still stored: a finished one, or
-- an unfinished one still at orphaned_generation (the caller found no live
-- job of that generation). Returns the new generation.
UPDATE wharf_outbox_deliveries d
SET status = 'pending', last_error = '', next_attempt_at = @now::timestamptz, updated_at = @now::timestamptz,
    generation = d.generation + 1, throttled_until = NULL
FROM wharf_outbox_endpoints ep
WHERE d.id = @id::uuid
  AND ep.id = d.endpoint_id
  AND ep.enabled
  -- "|| ''": see OutboxAttemptRecordSucceeded.
  AND (d.status || '' IN ('succeeded', 'dead')
       OR (d.status || '' IN ('pending', 'retrying') AND d.generation = sqlc.narg('orphaned_generation')::int))
  -- Not while retention drops the event's partition.
  AND NOT EXISTS (SELECT 1 FROM wharf_partition_drops p
                  WHERE p.parent = 'wharf_outbox_events' AND p.day = date_trunc('day', d.event_created_at, 'UTC'))
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL)
RETURNING d.generation;

-- name: OutboxDeliveryRequeueDead :many
-- Moves an endpoint's dead deliveries published at or after since back to
-- pending in a new generation, for replay; those whose event is gone or
-- scrubbed stay dead.
UPDATE wharf_outbox_deliveries d
SET status = 'pending', last_error = '', next_attempt_at = @now::timestamptz, updated_at = @now::timestamptz,
    generation = d.generation + 1, throttled_until = NULL
WHERE d.endpoint_id = @endpoint_id::uuid
  AND d.status = 'dead'
  AND d.created_at >= @since::timestamptz
  -- Not while retention drops the event's partition.
  AND NOT EXISTS (SELECT 1 FROM wharf_partition_drops p
                  WHERE p.parent = 'wharf_outbox_events' AND p.day = date_trunc('day', d.event_created_at, 'UTC'))
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL)
RETURNING d.id, d.generation, d.ordering_key, d.attempts;

-- name: OutboxAttemptList :many
SELECT * FROM wharf_outbox_attempts
WHERE delivery_id = @delivery_id::uuid
ORDER BY attempted_at, attempt;

-- name: OutboxEndpointsByURL :many
-- The endpoints of a tenant with a URL, oldest first: EndpointEnsure's
-- lookup (at most two are needed to tell one from several).
SELECT * FROM wharf_outbox_endpoints
WHERE tenant = @tenant AND url = @url
ORDER BY created_at, id
LIMIT 2;

-- name: OutboxEndpointRecover :many
-- Creates, for an enabled endpoint, a pending delivery of every stored
-- event it would have received (its tenant, a type its filter matches)
-- created at or after since and after the cursor (created_at, id), that it
-- has no delivery of yet: events published while it was disabled, or
-- before it existed. Up to batch_size events, oldest first; returns the
-- deliveries, whose last row is the next cursor. The endpoint row is
-- locked first (KEY SHARE: only its deletion waits), the lock order of
-- every statement that locks it and its deliveries. No row: nothing left,
-- or the endpoint is disabled or gone.
WITH ep AS (
    SELECT e.id, e.tenant, e.event_types, e.data_filter
    FROM wharf_outbox_endpoints e
    WHERE e.id = @endpoint_id::uuid AND e.enabled
    FOR KEY SHARE
),
missed AS (
    SELECT ev.id, ev.created_at, ev.ordering_key
    FROM wharf_outbox_events ev, ep
    WHERE ev.created_at >= @since::timestamptz
      AND (ev.created_at, ev.id) > (@after_created_at::timestamptz, @after_id::uuid)
      AND ev.scrubbed_at IS NULL
      AND ev.tenant = ep.tenant
      -- An event published to one endpoint goes to no other.
      AND (ev.target_endpoint_id IS NULL OR ev.target_endpoint_id = ep.id)
      -- Filters match as OutboxPublish's do.
      AND CASE WHEN starts_with(ev.type, 'wharf.')
          THEN EXISTS (
               SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
               WHERE f.pattern = ev.type
                  OR (starts_with(f.pattern, 'wharf.') AND right(f.pattern, 2) = '.*'
                      AND starts_with(ev.type, left(f.pattern, -1))))
          ELSE cardinality(ep.event_types) = 0
           OR EXISTS (
               SELECT 1 FROM unnest(ep.event_types) AS f(pattern)
               WHERE f.pattern = ev.type
                  OR f.pattern = '*'
                  OR (right(f.pattern, 2) = '.*' AND starts_with(ev.type, left(f.pattern, -1))))
          END
      AND (ep.data_filter IS NULL OR starts_with(ev.type, 'wharf.')
           OR CASE WHEN ev.filterable
                   THEN (convert_from(ev.payload, 'UTF8')::jsonb -> 'data') @> ep.data_filter
                   ELSE false END)
      AND NOT EXISTS (
          SELECT 1 FROM wharf_outbox_deliveries d
          WHERE d.event_id = ev.id AND d.endpoint_id = ep.id)
    ORDER BY ev.created_at, ev.id
    LIMIT @batch_size::int
)
INSERT INTO wharf_outbox_deliveries (
    id, event_id, event_created_at, endpoint_id, ordering_key, status, next_attempt_at, created_at, updated_at
)
SELECT gen_random_uuid(), missed.id, missed.created_at, @endpoint_id::uuid, missed.ordering_key, 'pending',
       @now::timestamptz, @now::timestamptz, @now::timestamptz
FROM missed
ORDER BY missed.created_at, missed.id
RETURNING wharf_outbox_deliveries.id, wharf_outbox_deliveries.event_id, wharf_outbox_deliveries.event_created_at,
          wharf_outbox_deliveries.ordering_key;

-- name: OutboxGaugeByEndpoint :many
-- The outbox's gauges per endpoint (every endpoint, 0 when it has none),
-- from the partial index of unfinished deliveries (never the delivered
-- ones): deliveries to attempt or retry, and dead ones; and whether the
-- endpoint's circuit is open or half-open.
SELECT ep.id AS endpoint_id,
       count(d.id) FILTER (WHERE d.status IN ('pending', 'retrying'))::bigint AS pending,
       count(d.id) FILTER (WHERE d.status = 'dead')::bigint AS dead,
       (ep.circuit_state <> 'closed')::boolean AS circuit_open
FROM wharf_outbox_endpoints ep
LEFT JOIN wharf_outbox_deliveries d ON d.endpoint_id = ep.id AND d.status <> 'succeeded'
GROUP BY ep.id;

-- name: OutboxGaugeEndpointsDisabled :one
SELECT count(*)::bigint FROM wharf_outbox_endpoints WHERE NOT enabled;

-- name: OutboxDeliveriesStranded :many
-- Up to max unfinished deliveries that no River job will attempt: left
-- unchanged since before, and not due after it (a retry's job waits for
-- its time), and held at their generation by no job that River may still
-- run. A job holds a delivery at a generation: a delivery job's args name
-- it (generation left out when 0), a batch job's list it among theirs.
-- Each comes with the cancelled or discarded job that held it (the latest;
-- its kind, state, runs and args), or none (job_id 0, state 'none': its
-- job was deleted, or completed without it). Candidates come from the
-- indexes of unfinished deliveries (never the succeeded ones); River's
-- jobs are read through its indexes by state, the live ones and the cancelled
-- and discarded ones (which River keeps a day or a week), and joined by
-- hash: a look-up per delivery in River's index of job args reads the
-- whole list of jobs with a delivery_id (tens of milliseconds each with
-- 200,000 jobs). Not locked: the caller settles each with a statement that
-- locks it and re-checks its generation and status, so that one given a
-- job since this statement's snapshot is left alone. Only those of @ids
-- when given: the caller asks again about the deliveries it found, once
-- their endpoints are locked, so that a job an operator retried (through
-- River, which changes no delivery) meanwhile is seen.
WITH candidates AS MATERIALIZED (
    SELECT d.id, d.endpoint_id, d.event_id, d.generation, d.attempts
    FROM wharf_outbox_endpoints ep
    JOIN wharf_outbox_deliveries d ON d.endpoint_id = ep.id
    WHERE d.status IN ('pending', 'retrying')
      AND d.updated_at < @before::timestamptz
      AND (d.next_attempt_at IS NULL OR d.next_attempt_at < @before::timestamptz)
      AND (sqlc.narg('ids')::text[] IS NULL OR d.id = ANY (sqlc.narg('ids')::text[]::uuid[]))
),
jobs AS MATERIALIZED (
    SELECT h.id, h.kind, h.state::text AS state, h.attempt, h.args
    FROM river_job h
    WHERE h.kind IN (@delivery_kind::text, @batch_kind::text)
      -- No cast: River's indexes are on its state enum.
      AND (h.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
           OR (h.state IN ('cancelled', 'discarded') AND h.finalized_at IS NOT NULL))
      AND EXISTS (SELECT 1 FROM candidates)
),
held AS MATERIALIZED (
    SELECT (j.args->>'delivery_id')::uuid AS delivery_id, COALESCE((j.args->>'generation')::int, 0) AS generation,
           j.id, j.kind, j.state, j.attempt, j.args
    FROM jobs j
    WHERE j.kind = @delivery_kind::text
    UNION ALL
    SELECT (r.ref->>'delivery_id')::uuid, COALESCE((r.ref->>'generation')::int, 0),
           j.id, j.kind, j.state, j.attempt, j.args
    FROM jobs j, jsonb_array_elements(j.args->'deliveries') AS r(ref)
    WHERE j.kind = @batch_kind::text
),
ended AS (
    SELECT DISTINCT ON (h.delivery_id, h.generation) h.*
    FROM held h
    WHERE h.state IN ('cancelled', 'discarded')
    ORDER BY h.delivery_id, h.generation, h.id DESC
)
SELECT c.id, c.endpoint_id, c.event_id, c.generation, c.attempts,
       COALESCE(e.id, 0)::bigint AS job_id,
       COALESCE(e.kind, '')::text AS job_kind,
       COALESCE(e.state, 'none')::text AS job_state,
       COALESCE(e.attempt, 0)::int AS job_attempt,
       COALESCE(e.args, '{}')::jsonb AS job_args
FROM candidates c
LEFT JOIN ended e ON e.delivery_id = c.id AND e.generation = c.generation
WHERE NOT EXISTS (
    SELECT 1 FROM held l
    WHERE l.delivery_id = c.id AND l.generation = c.generation
      AND l.state IN ('available', 'pending', 'retryable', 'running', 'scheduled'))
LIMIT @max::int;

-- name: OutboxEndpointsLockKeyShare :exec
-- Locks endpoints in KEY SHARE mode (only their deletion waits), in id
-- order, before statements that lock deliveries of several of them: the
-- lock order endpoint, then delivery, that EndpointDelete takes (it
-- deletes the endpoint, and its cascade then the deliveries). Locking two
-- deliveries first, a statement could hold one while waiting for the
-- other, which a deletion holds while waiting for the first: a deadlock.
SELECT ep.id FROM wharf_outbox_endpoints ep
WHERE ep.id = ANY((@ids::text[])::uuid[])
ORDER BY ep.id
FOR KEY SHARE;

-- name: OutboxPublishTo :many
-- Stores one event and a pending delivery of it to one endpoint, whatever
-- the endpoint's filter, when the endpoint is enabled and of the event's
-- tenant (no row otherwise): a test event, or an event meant for one
-- receiver. Columns as OutboxPublish's.
WITH target AS (
    SELECT ep.id FROM wharf_outbox_endpoints ep
    WHERE ep.id = @endpoint_id::uuid AND ep.enabled AND ep.tenant = @tenant::text
),
events AS (
    -- Stored only with its delivery: nothing when the endpoint is not one
    -- to send to.
    INSERT INTO wharf_outbox_events (id, created_at, type, payload, ordering_key, tenant, trace_context, target_endpoint_id,
                                     filterable)
    SELECT @id::uuid, @created_at::timestamptz, @type::text, @payload::bytea, @ordering_key::text, @tenant::text,
           @trace_context::text, target.id, @filterable::boolean
    FROM target
    RETURNING wharf_outbox_events.id, wharf_outbox_events.target_endpoint_id
),
stored AS (
    INSERT INTO wharf_outbox_deliveries (
        id, event_id, event_created_at, endpoint_id, ordering_key, status, next_attempt_at, created_at, updated_at
    )
    SELECT gen_random_uuid(), events.id, @created_at::timestamptz, ep.id, @ordering_key::text, 'pending',
           @first_attempt_at::timestamptz, @created_at::timestamptz, @created_at::timestamptz
    FROM events
    JOIN wharf_outbox_endpoints ep ON ep.id = events.target_endpoint_id
    RETURNING wharf_outbox_deliveries.id, wharf_outbox_deliveries.event_id,
              wharf_outbox_deliveries.endpoint_id, wharf_outbox_deliveries.ordering_key
)
SELECT stored.id, stored.event_id, stored.endpoint_id, stored.ordering_key,
       ep.max_in_flight, ep.rate_limit_per_second > 0 AS rate_limited
FROM stored
JOIN wharf_outbox_endpoints ep ON ep.id = stored.endpoint_id;

-- name: OutboxNoticeClaim :many
-- The oldest notices (see wharf_outbox_notices) up to max_rows, locked for
-- the transaction that publishes and deletes them; those another such
-- transaction holds are skipped.
SELECT id, tenant, type, (data || jsonb_build_object('at', created_at))::jsonb AS data FROM wharf_outbox_notices
ORDER BY id
LIMIT @max_rows::int
FOR UPDATE SKIP LOCKED;

-- name: OutboxNoticeDelete :exec
DELETE FROM wharf_outbox_notices WHERE id = ANY(@ids::bigint[]);

-- name: OutboxNoticeJobWaiting :one
-- Whether a notice job waits to run (not one running: it may have made
-- its last claim already).
SELECT EXISTS (
    SELECT 1 FROM river_job
    WHERE kind = 'wharf.outbox.notices' AND state IN ('available', 'pending', 'scheduled')
) AS waiting;

-- name: OutboxNoticeSubscribed :many
-- For each (tenant, type), whether an enabled endpoint of the tenant
-- subscribes to the operational type (its filter names it or a "wharf."
-- prefix of it, as OutboxPublish matches): notices nobody receives are
-- not stored as events.
SELECT input.n::int AS n, EXISTS (
    SELECT 1 FROM wharf_outbox_endpoints ep, unnest(ep.event_types) AS f(pattern)
    WHERE ep.enabled AND ep.tenant = input.tenant
      AND (f.pattern = input.type
           OR (starts_with(f.pattern, 'wharf.') AND right(f.pattern, 2) = '.*'
               AND starts_with(input.type, left(f.pattern, -1))))
) AS subscribed
FROM (SELECT generate_subscripts(@tenants::text[], 1) AS n,
             unnest(@tenants::text[]) AS tenant,
             unnest(@types::text[]) AS type) AS input
ORDER BY input.n;

-- name: RiverNotifyInsert :exec
-- River's insert notification, on its own (see delivery's wake), on its
-- channel as River names it: the schema, a dot and the topic.
SELECT pg_notify(concat(current_schema(), '.', @topic::text), @payload::text);

-- name: OutboxEventsForget :many
-- Erases the payloads of events on an erasure request (Outbox.ForgetEvent),
-- scrubbed already or not.
UPDATE wharf_outbox_events
SET payload = '', scrubbed_at = coalesce(scrubbed_at, @now::timestamptz)
WHERE id = ANY((@ids::text[])::uuid[])
RETURNING id;

-- name: OutboxTenantEventsForget :many
-- Erases the payloads of every event of a tenant on an erasure request
-- (Outbox.ForgetTenant), through the tenant index.
UPDATE wharf_outbox_events
SET payload = '', scrubbed_at = coalesce(scrubbed_at, @now::timestamptz)
WHERE tenant = @tenant::text AND tenant <> ''
RETURNING id;

-- name: OutboxDeliveriesOfEvents :many
-- The deliveries of events, with their endpoints, for an erasure.
SELECT d.id, d.endpoint_id, d.status FROM wharf_outbox_deliveries d
WHERE d.event_id = ANY((@event_ids::text[])::uuid[])
ORDER BY d.id;

-- name: OutboxAttemptsForget :execrows
-- Empties the response bodies and errors of the attempts of deliveries, on
-- an erasure request: an endpoint may echo the payload.
UPDATE wharf_outbox_attempts a
SET response_body = '', response_truncated = false, error = CASE WHEN a.error = '' THEN '' ELSE 'erased on request' END
WHERE a.delivery_id = ANY((@delivery_ids::text[])::uuid[])
  AND (a.response_body <> '' OR a.error <> '');

-- name: OutboxDeliveriesForgetUnfinished :many
-- Deletes the deliveries of an erasure that are still to send (pending or
-- retrying), so that no attempt sends what was erased; their jobs then
-- find nothing to send. The caller has locked their endpoints.
DELETE FROM wharf_outbox_deliveries d
WHERE d.id = ANY((@ids::text[])::uuid[]) AND d.status IN ('pending', 'retrying')
RETURNING d.id;

-- name: OutboxDeliveriesRedriveFind :many
-- One batch of the finished deliveries a redrive selects (see
-- Outbox.Redrive), in seq order after after_seq: of an enabled endpoint
-- (of tenant, or endpoint_id, when given), in status, whose last answer's
-- code lies within [min_code, max_code] when min_code is not 0, whose
-- event was published in [since, until) and is of a type the pattern
-- matches (exact, "prefix.*" or "*"), and whose payload is still stored.
SELECT d.id, d.seq, d.endpoint_id FROM wharf_outbox_deliveries d
JOIN wharf_outbox_endpoints ep ON ep.id = d.endpoint_id
WHERE d.status = @status::text
  AND ep.enabled
  AND (sqlc.narg('tenant')::text IS NULL OR ep.tenant = sqlc.narg('tenant')::text)
  AND (sqlc.narg('endpoint_id')::uuid IS NULL OR d.endpoint_id = sqlc.narg('endpoint_id')::uuid)
  AND (@min_code::int = 0 OR d.last_status_code BETWEEN @min_code::int AND @max_code::int)
  AND d.event_created_at >= @since::timestamptz AND d.event_created_at < @until::timestamptz
  AND d.seq > @after_seq::bigint
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL
                AND (@event_type::text = '*' OR ev.type = @event_type::text
                     OR (right(@event_type::text, 2) = '.*' AND starts_with(ev.type, left(@event_type::text, -1)))))
ORDER BY d.seq
LIMIT @batch_size::int;

-- name: OutboxDeliveriesRequeueMany :many
-- Moves deliveries back to pending in a new generation, for a redrive,
-- while each is still in status, its endpoint enabled and its event's
-- payload stored (a concurrent replay, erasure or retention may have got
-- there first), and returns them with their endpoints' shapes. Not while
-- retention drops an event's partition.
UPDATE wharf_outbox_deliveries d
SET status = 'pending', last_error = '', next_attempt_at = @now::timestamptz, updated_at = @now::timestamptz,
    generation = d.generation + 1, throttled_until = NULL
FROM wharf_outbox_endpoints ep
WHERE d.id = ANY((@ids::text[])::uuid[]) AND d.status = @status::text
  AND ep.id = d.endpoint_id AND ep.enabled
  AND NOT EXISTS (SELECT 1 FROM wharf_partition_drops p
                  WHERE p.parent = 'wharf_outbox_events' AND p.day = date_trunc('day', d.event_created_at, 'UTC'))
  AND EXISTS (SELECT 1 FROM wharf_outbox_events ev
              WHERE ev.created_at = d.event_created_at AND ev.id = d.event_id AND ev.scrubbed_at IS NULL)
RETURNING d.id, d.endpoint_id, d.generation, d.ordering_key, d.attempts, ep.max_in_flight, ep.rate_limit_per_second;
