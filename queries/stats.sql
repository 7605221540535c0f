-- Reads behind `wharf stats`, bounded by a time range (partitions outside
-- it are pruned).

-- name: StatsInboxByDay :many
-- Messages received per source and UTC day since a time, and where they
-- stand.
SELECT m.source,
       to_char(m.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       count(*)::bigint AS received,
       count(*) FILTER (WHERE m.status = 'processed')::bigint AS processed,
       count(*) FILTER (WHERE m.status = 'dead')::bigint AS dead
FROM wharf_inbox_messages m
WHERE m.received_at >= @since::timestamptz
GROUP BY 1, 2
ORDER BY 2, 1;

-- name: StatsDuplicatesByDay :many
-- Duplicate deliveries blocked per source and UTC day of the first
-- receipt, since a time.
SELECT k.source,
       to_char(k.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       COALESCE(sum(k.duplicate_count), 0)::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz
GROUP BY 1, 2;

-- name: StatsTopDuplicated :many
-- The most duplicated event ids first received since a time.
SELECT k.source, k.event_id, k.duplicate_count::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz AND k.duplicate_count > 0
ORDER BY k.duplicate_count DESC, k.source, k.event_id
LIMIT @max_rows::int;

-- name: StatsEndpointAttempts :many
-- Delivery attempts per endpoint since a time, and how many succeeded.
SELECT a.endpoint_id,
       count(*)::bigint AS attempts,
       count(*) FILTER (WHERE a.status = 'succeeded')::bigint AS succeeded
FROM wharf_outbox_attempts a
WHERE a.attempted_at >= @since::timestamptz
GROUP BY a.endpoint_id
ORDER BY a.endpoint_id;
