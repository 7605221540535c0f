-- The rollups behind the dashboard's overview (jobs package, Rollup).

-- name: RollupInboxHours :exec
-- Counts the messages received per source and hour in [from, until), hours
-- that have ended, and moves the watermark to until, in one statement: a
-- concurrent run counts the same and writes the same.
WITH counted AS (
    INSERT INTO wharf_inbox_hourly (hour, source, received)
    SELECT date_trunc('hour', m.received_at, 'UTC'), m.source, count(*)
    FROM wharf_inbox_messages m
    WHERE m.received_at >= @from_hour::timestamptz AND m.received_at < @until_hour::timestamptz
    GROUP BY 1, 2
    ON CONFLICT (hour, source) DO UPDATE SET received = EXCLUDED.received
    RETURNING 1
)
INSERT INTO wharf_rollups (name, until)
VALUES ('inbox_hourly', @until_hour::timestamptz)
ON CONFLICT (name) DO UPDATE SET until = GREATEST(wharf_rollups.until, EXCLUDED.until);

-- name: RollupUntil :one
-- How far a rollup has counted; no row when it never ran.
SELECT until FROM wharf_rollups WHERE name = @name::text;

-- name: RollupInboxPrune :execrows
-- Drops the hours before a time.
DELETE FROM wharf_inbox_hourly WHERE hour < @before::timestamptz;

-- name: RollupOutboxAttemptHours :exec
-- Counts the delivery attempts per endpoint, outcome and hour in [from,
-- until), hours that have ended, and moves the watermark to until, in one
-- statement: a concurrent run counts the same and writes the same. Rows are
-- written in key order, so two runs lock them in the same order and never
-- deadlock. The outcome is DashboardAttemptOutcomes' and
-- StatsEndpointAttempts's.
WITH counted AS (
    INSERT INTO wharf_outbox_attempts_hourly (hour, endpoint_id, outcome, attempts)
    SELECT date_trunc('hour', a.attempted_at, 'UTC'), a.endpoint_id,
           CASE WHEN a.status_code IS NULL THEN 'no answer'
                WHEN a.status_code BETWEEN 200 AND 599 THEN (a.status_code / 100)::text || 'xx'
                ELSE 'other' END,
           count(*)
    FROM wharf_outbox_attempts a
    WHERE a.attempted_at >= @from_hour::timestamptz AND a.attempted_at < @until_hour::timestamptz
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (hour, endpoint_id, outcome) DO UPDATE SET attempts = EXCLUDED.attempts
    RETURNING 1
)
INSERT INTO wharf_rollups (name, until)
VALUES ('outbox_attempts_hourly', @until_hour::timestamptz)
ON CONFLICT (name) DO UPDATE SET until = GREATEST(wharf_rollups.until, EXCLUDED.until);

-- name: RollupOutboxAttemptPrune :execrows
-- Drops the hours before a time.
DELETE FROM wharf_outbox_attempts_hourly WHERE hour < @before::timestamptz;
