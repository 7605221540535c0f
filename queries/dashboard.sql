-- Reads behind the dashboard's overview and detail pages (package
-- dashboard), each bounded by a time range so that partitions outside it
-- are pruned.

-- name: DashboardInboxRolledHourly :many
-- Messages received per source and hour since a time, from the rollup of
-- ended hours (before wharf_rollups.until).
SELECT h.source, h.hour, h.received
FROM wharf_inbox_hourly h
JOIN wharf_rollups r ON r.name = 'inbox_hourly'
WHERE h.hour >= @since::timestamptz AND h.hour < r.until
ORDER BY h.hour, h.source;

-- name: DashboardInboxLiveHourly :many
-- Messages received per source and hour since a time, counted from the
-- messages after what the rollup covers: an hour or two when the rollup
-- job runs, the whole window when it does not.
SELECT m.source,
       date_trunc('hour', m.received_at, 'UTC')::timestamptz AS hour,
       count(*)::bigint AS received
FROM wharf_inbox_messages m
WHERE m.received_at >= GREATEST(@since::timestamptz,
          COALESCE((SELECT r.until FROM wharf_rollups r WHERE r.name = 'inbox_hourly'), @since::timestamptz))
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: DashboardInboxFailingHourly :many
-- Messages failing or dead now per source and hour of receipt since a
-- time, from the partial index of unfinished messages (never the
-- processed ones).
SELECT m.source,
       date_trunc('hour', m.received_at, 'UTC')::timestamptz AS hour,
       count(*) FILTER (WHERE m.status = 'failed')::bigint AS failed,
       count(*) FILTER (WHERE m.status = 'dead')::bigint AS dead
FROM wharf_inbox_messages m
WHERE m.status <> 'processed' AND m.status IN ('failed', 'dead') AND m.received_at >= @since::timestamptz
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: DashboardDuplicatesHourly :many
-- Duplicate deliveries blocked per source and hour of the first receipt,
-- since a time, from the partial index of keys that blocked one.
SELECT k.source,
       date_trunc('hour', k.received_at, 'UTC')::timestamptz AS hour,
       sum(k.duplicate_count)::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz AND k.duplicate_count > 0
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: DashboardAttemptOutcomes :many
-- Delivery attempts per endpoint since a time, by outcome: the answer's
-- status class ('2xx' to '5xx'), 'no answer' (timeout, refused, connection
-- error) or 'other'. Whole hours before the rollup's watermark
-- (wharf_rollups.until of 'outbox_attempts_hourly') come from the rollup;
-- the rest is counted from the attempts: the hours after the watermark (an
-- hour or two when the rollup job runs, the whole window when it does not)
-- and, when since is not on the hour, the part of its hour after it. One
-- statement reads the rollup and its watermark in one snapshot: a rollup
-- committing meanwhile cannot make an hour count twice or not at all.
WITH bounds AS (
    SELECT f.first_hour, GREATEST(f.first_hour, COALESCE(r.until, f.first_hour)) AS rolled_until
    FROM (SELECT date_trunc('hour', (@since::timestamptz) - interval '1 microsecond', 'UTC') + interval '1 hour' AS first_hour) f
    LEFT JOIN wharf_rollups r ON r.name = 'outbox_attempts_hourly'
),
live AS (
    SELECT a.endpoint_id, a.status_code FROM wharf_outbox_attempts a
    WHERE a.attempted_at >= @since::timestamptz AND a.attempted_at < (SELECT b.first_hour FROM bounds b)
    UNION ALL
    SELECT a.endpoint_id, a.status_code FROM wharf_outbox_attempts a
    WHERE a.attempted_at >= @since::timestamptz AND a.attempted_at >= (SELECT b.rolled_until FROM bounds b)
)
SELECT c.endpoint_id, c.outcome::text AS outcome, sum(c.attempts)::bigint AS attempts
FROM (
    SELECT h.endpoint_id, h.outcome, h.attempts
    FROM wharf_outbox_attempts_hourly h, bounds b
    WHERE h.hour >= b.first_hour AND h.hour < b.rolled_until
    UNION ALL
    SELECT l.endpoint_id,
           CASE WHEN l.status_code IS NULL THEN 'no answer'
                WHEN l.status_code BETWEEN 200 AND 599 THEN (l.status_code / 100)::text || 'xx'
                ELSE 'other' END,
           count(*)
    FROM live l
    GROUP BY 1, 2
) c
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: DashboardEventGet :one
-- An outbox event by its primary key (a delivery's event_id and
-- event_created_at: one partition).
SELECT ev.id, ev.created_at, ev.type, ev.payload, ev.ordering_key, ev.tenant, ev.scrubbed_at
FROM wharf_outbox_events ev
WHERE ev.created_at = @created_at::timestamptz AND ev.id = @id::uuid;

-- name: DashboardEndpointsByID :many
-- The URL, state and circuit of endpoints by id, for labels and for when
-- their deliveries may go (the dashboard's and the CLI's lists).
SELECT ep.id, ep.url, ep.enabled, ep.circuit_state, ep.circuit_open_until
FROM wharf_outbox_endpoints ep WHERE ep.id = ANY(@ids::uuid[]);

-- name: DashboardEventTypes :many
-- The types of events by id (a page of deliveries' events), reading only
-- the partitions of their times, first to last.
SELECT ev.id, ev.type
FROM wharf_outbox_events ev
WHERE ev.created_at >= @first::timestamptz AND ev.created_at <= @last::timestamptz
  AND ev.id = ANY(@ids::uuid[]);
