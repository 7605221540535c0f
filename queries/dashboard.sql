-- Reads behind the dashboard's overview and detail pages (package
-- dashboard), each bounded by a time range so that partitions outside it
-- are pruned.

-- name: DashboardInboxHourly :many
-- Messages received per source and hour since a time, and how many of
-- them are failing or dead now.
SELECT m.source,
       date_trunc('hour', m.received_at, 'UTC')::timestamptz AS hour,
       count(*)::bigint AS received,
       count(*) FILTER (WHERE m.status = 'failed')::bigint AS failed,
       count(*) FILTER (WHERE m.status = 'dead')::bigint AS dead
FROM wharf_inbox_messages m
WHERE m.received_at >= @since::timestamptz
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: DashboardDuplicatesHourly :many
-- Duplicate deliveries blocked per source and hour of the first receipt,
-- since a time.
SELECT k.source,
       date_trunc('hour', k.received_at, 'UTC')::timestamptz AS hour,
       sum(k.duplicate_count)::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz AND k.duplicate_count > 0
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: DashboardAttemptOutcomes :many
-- Delivery attempts per endpoint since a time, by outcome: the answer's
-- status class, or "no answer" (timeout, refused, connection error).
SELECT a.endpoint_id,
       CASE WHEN a.status_code IS NULL THEN 'no answer'
            ELSE (a.status_code / 100)::text || 'xx' END::text AS outcome,
       count(*)::bigint AS attempts
FROM wharf_outbox_attempts a
WHERE a.attempted_at >= @since::timestamptz
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: DashboardEventGet :one
-- An outbox event by its primary key (a delivery's event_id and
-- event_created_at: one partition).
SELECT ev.id, ev.created_at, ev.type, ev.payload, ev.ordering_key, ev.tenant, ev.scrubbed_at
FROM wharf_outbox_events ev
WHERE ev.created_at = @created_at::timestamptz AND ev.id = @id::uuid;

-- name: DashboardEndpointsByID :many
-- The URL and state of endpoints by id, for labels.
SELECT ep.id, ep.url, ep.enabled FROM wharf_outbox_endpoints ep WHERE ep.id = ANY(@ids::uuid[]);
