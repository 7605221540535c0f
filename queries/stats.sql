-- Reads behind `wharf stats`, bounded by a time range (partitions outside
-- it are pruned).

-- name: StatsReceivedByDay :many
-- Messages received per source and UTC day in [from_at, until_at), counted
-- from the messages: the hours the rollup does not cover.
SELECT m.source,
       to_char(m.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       count(*)::bigint AS received
FROM wharf_inbox_messages m
WHERE m.received_at >= @from_at::timestamptz AND m.received_at < @until_at::timestamptz
GROUP BY 1, 2;

-- name: StatsRolledByDay :many
-- Messages received per source and UTC day in [from_at, until_at), from
-- the hourly rollup.
SELECT h.source,
       to_char(h.hour AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       sum(h.received)::bigint AS received
FROM wharf_inbox_hourly h
WHERE h.hour >= @from_at::timestamptz AND h.hour < @until_at::timestamptz
GROUP BY 1, 2;

-- name: StatsUnfinishedByDay :many
-- Messages not processed now (to process, failing or dead) per source and
-- UTC day of receipt since a time, from the partial index of unfinished
-- messages: processed is received minus these.
SELECT m.source,
       to_char(m.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       count(*)::bigint AS unfinished,
       count(*) FILTER (WHERE m.status = 'dead')::bigint AS dead
FROM wharf_inbox_messages m
WHERE m.status <> 'processed' AND m.received_at >= @since::timestamptz
GROUP BY 1, 2;

-- name: StatsDuplicatesByDay :many
-- Duplicate deliveries blocked per source and UTC day of the first
-- receipt, since a time, from the partial index of keys that blocked one.
SELECT k.source,
       to_char(k.received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')::text AS day,
       COALESCE(sum(k.duplicate_count), 0)::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz AND k.duplicate_count > 0
GROUP BY 1, 2;

-- name: StatsTopDuplicated :many
-- The most duplicated event ids first received since a time.
SELECT k.source, k.event_id, k.duplicate_count::bigint AS duplicates
FROM wharf_inbox_keys k
WHERE k.received_at >= @since::timestamptz AND k.duplicate_count > 0
ORDER BY k.duplicate_count DESC, k.source, k.event_id
LIMIT @max_rows::int;

-- name: StatsEndpointAttempts :many
-- Delivery attempts per endpoint in [from_at, until_at), and how many
-- were answered 2xx (an attempt succeeds exactly then), counted from the
-- attempts: the hours the rollup does not cover.
SELECT a.endpoint_id,
       count(*)::bigint AS attempts,
       count(*) FILTER (WHERE a.status_code BETWEEN 200 AND 299)::bigint AS succeeded
FROM wharf_outbox_attempts a
WHERE a.attempted_at >= @from_at::timestamptz AND a.attempted_at < @until_at::timestamptz
GROUP BY a.endpoint_id;

-- name: StatsRolledEndpointAttempts :many
-- Delivery attempts per endpoint in [from_at, until_at), and how many
-- were answered 2xx, from the hourly rollup.
SELECT h.endpoint_id,
       sum(h.attempts)::bigint AS attempts,
       COALESCE(sum(h.attempts) FILTER (WHERE h.outcome = '2xx'), 0)::bigint AS succeeded
FROM wharf_outbox_attempts_hourly h
WHERE h.hour >= @from_at::timestamptz AND h.hour < @until_at::timestamptz
GROUP BY h.endpoint_id;
