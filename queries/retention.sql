-- name: RetentionInboxUnfinishedCount :one
-- Messages of one day that retention must keep: still to process, failing,
-- or dead more recently than the dead-letter cutoff.
SELECT count(*) FROM wharf_inbox_messages
WHERE received_at >= @day_start::timestamptz AND received_at < @day_end::timestamptz
  AND (status IN ('received', 'failed') OR (status = 'dead' AND updated_at > @dead_cutoff::timestamptz));

-- name: RetentionInboxOldestUnfinished :one
SELECT received_at FROM wharf_inbox_messages
WHERE status IN ('received', 'failed')
ORDER BY received_at
LIMIT 1;

-- name: RetentionInboxKeysDelete :one
-- Deletes one batch of dedupe keys older than the cutoff. A key whose
-- message can still run (to process, failing, or dead and so replayable
-- until its day is dropped) is kept: dropping it would let a redelivery in
-- as a new event while the first can still apply its effect. So is the
-- tombstone of an event erased after the erased cutoff.
-- Each deleted key of a stored message (not ignored, not erased, not a
-- skipped late arrival) moves to
-- wharf_inbox_past_keys, where a late arrival of its event finds that
-- message (see InboxKeyClaimMany). Returns the keys deleted.
WITH gone AS (
    DELETE FROM wharf_inbox_keys k
    WHERE (k.source, k.event_id) IN (
        SELECT c.source, c.event_id FROM wharf_inbox_keys c
        WHERE c.received_at < @cutoff::timestamptz
          AND (c.erased_at IS NULL OR c.erased_at < @erased_cutoff::timestamptz)
          -- A probe of the message's primary key per key: "|| ''" (the status
          -- no index condition, see InboxMessagesLockUnfinished) and OFFSET 0
          -- (no anti-join). On statistics that say almost no message is
          -- unfinished, the plan compared every key with every unfinished
          -- message.
          AND NOT EXISTS (
              SELECT 1 FROM wharf_inbox_messages m
              WHERE m.received_at = c.received_at AND m.id = c.message_id
                AND m.status || '' IN ('received', 'failed', 'dead')
              OFFSET 0)
        ORDER BY c.received_at
        LIMIT @batch_size::int
    )
      -- Again on the row itself: a key that a concurrent Forget made a
      -- tombstone is re-checked here once its lock is released.
      AND k.received_at < @cutoff::timestamptz
      AND (k.erased_at IS NULL OR k.erased_at < @erased_cutoff::timestamptz)
    RETURNING k.source, k.event_id, k.message_id, k.received_at, k.ignored, k.erased_at
), moved AS (
    INSERT INTO wharf_inbox_past_keys AS p (source, event_id, message_id, received_at)
    SELECT g.source, g.event_id, g.message_id, g.received_at FROM gone g
    WHERE NOT g.ignored AND g.erased_at IS NULL
      -- A skipped late arrival leaves the past key naming the message
      -- whose effect was applied. A probe of its primary key (OFFSET 0:
      -- no anti-join over every partition).
      AND NOT EXISTS (
          SELECT 1 FROM wharf_inbox_messages m
          WHERE m.received_at = g.received_at AND m.id = g.message_id AND m.late_policy = 'skip'
          OFFSET 0)
    ON CONFLICT (source, event_id) DO UPDATE
    SET message_id = excluded.message_id, received_at = excluded.received_at
    WHERE p.received_at < excluded.received_at
)
SELECT count(*) FROM gone;

-- name: RetentionInboxPastKeysDelete :execrows
-- Deletes one batch of past keys whose messages are past the inbox's
-- retention.
DELETE FROM wharf_inbox_past_keys
WHERE (source, event_id) IN (
    SELECT source, event_id FROM wharf_inbox_past_keys
    WHERE received_at < @cutoff::timestamptz
    ORDER BY received_at
    LIMIT @batch_size::int
);

-- name: RetentionInboxPastKeysExpiredCount :one
SELECT count(*) FROM wharf_inbox_past_keys WHERE received_at < @cutoff::timestamptz;

-- name: RetentionInboxKeysExpiredCount :one
SELECT count(*) FROM wharf_inbox_keys c
WHERE c.received_at < @cutoff::timestamptz
  AND (c.erased_at IS NULL OR c.erased_at < @erased_cutoff::timestamptz)
  AND NOT EXISTS (
      SELECT 1 FROM wharf_inbox_messages m
      WHERE m.received_at = c.received_at AND m.id = c.message_id AND m.status IN ('received', 'failed', 'dead'));

-- name: RetentionIdempotencyExpiredCount :one
-- Keys IdempotencyKeyDeleteExpired would delete: expired by the database's
-- clock, as the middleware judges them.
SELECT count(*) FROM wharf_idempotency_keys WHERE expires_at <= now();

-- name: RetentionOutboxUnfinishedCount :one
-- Deliveries that need the events of one day: still to deliver or retry,
-- or dead more recently than the dead-letter cutoff (replayable).
SELECT count(*) FROM wharf_outbox_deliveries
WHERE event_created_at >= @day_start::timestamptz AND event_created_at < @day_end::timestamptz
  AND (status IN ('pending', 'retrying') OR (status = 'dead' AND updated_at > @dead_cutoff::timestamptz));

-- name: RetentionOutboxOldestUnfinished :one
SELECT event_created_at FROM wharf_outbox_deliveries
WHERE status IN ('pending', 'retrying')
ORDER BY event_created_at
LIMIT 1;

-- name: RetentionOutboxDeliveriesDelete :execrows
-- Deletes one batch of finished deliveries of expired events.
-- The status test is repeated on the outer statement, which rechecks it on
-- a row updated since the subquery read it.
DELETE FROM wharf_outbox_deliveries
WHERE id IN (
    SELECT d.id FROM wharf_outbox_deliveries d
    WHERE d.event_created_at < @cutoff::timestamptz
      AND (d.status = 'succeeded' OR (d.status = 'dead' AND d.updated_at <= @dead_cutoff::timestamptz))
    LIMIT @batch_size::int
)
  AND (status = 'succeeded' OR (status = 'dead' AND updated_at <= @dead_cutoff::timestamptz));

-- name: RetentionOutboxDeliveriesExpiredCount :one
SELECT count(*) FROM wharf_outbox_deliveries d
WHERE d.event_created_at < @cutoff::timestamptz
  AND (d.status = 'succeeded' OR (d.status = 'dead' AND d.updated_at <= @dead_cutoff::timestamptz));

-- name: RetentionInboxScrub :execrows
-- Empties the body and headers of one batch of processed messages received
-- before the cutoff, and the last error of an earlier failed attempt (it
-- may quote the payload). Failed and dead messages keep theirs: they may be
-- replayed.
UPDATE wharf_inbox_messages m
SET body = '', headers = '{}', scrubbed_at = @now::timestamptz,
    last_error = CASE WHEN m.last_error IS NULL THEN NULL ELSE 'erased by retention' END
WHERE (m.received_at, m.id) IN (
    SELECT s.received_at, s.id FROM wharf_inbox_messages s
    WHERE s.received_at < @cutoff::timestamptz AND s.status = 'processed' AND s.scrubbed_at IS NULL
    LIMIT @batch_size::int
);

-- name: RetentionInboxScrubCount :one
SELECT count(*) FROM wharf_inbox_messages
WHERE received_at < @cutoff::timestamptz AND status = 'processed' AND scrubbed_at IS NULL;

-- name: RetentionOutboxScrub :execrows
-- Empties the payload of one batch of events published before the cutoff
-- whose every delivery succeeded (a dead one may be replayed).
UPDATE wharf_outbox_events e
SET payload = '', scrubbed_at = @now::timestamptz
WHERE (e.created_at, e.id) IN (
    SELECT s.created_at, s.id FROM wharf_outbox_events s
    WHERE s.created_at < @cutoff::timestamptz AND s.scrubbed_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM wharf_outbox_deliveries d WHERE d.event_id = s.id AND d.status <> 'succeeded')
    LIMIT @batch_size::int
);

-- name: RetentionAttemptResponsesScrub :execrows
-- Empties the responses of one batch of delivery attempts made before the
-- cutoff, whatever became of their event or delivery: an endpoint may echo
-- the payload, and attempts outlive both. Nothing replays a response.
UPDATE wharf_outbox_attempts a
SET response_body = ''
WHERE (a.attempted_at, a.id) IN (
    SELECT s.attempted_at, s.id FROM wharf_outbox_attempts s
    WHERE s.attempted_at < @cutoff::timestamptz AND s.response_body <> ''
    LIMIT @batch_size::int
);

-- name: RetentionAttemptResponsesScrubCount :one
SELECT count(*) FROM wharf_outbox_attempts
WHERE attempted_at < @cutoff::timestamptz AND response_body <> '';

-- name: RetentionOutboxScrubCount :one
SELECT count(*) FROM wharf_outbox_events s
WHERE s.created_at < @cutoff::timestamptz AND s.scrubbed_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM wharf_outbox_deliveries d WHERE d.event_id = s.id AND d.status <> 'succeeded');

-- name: RetentionSettingsRecord :exec
-- Records the retention settings the application's maintainer runs with
-- (durations in microseconds), replacing the previous record.
INSERT INTO wharf_retention_settings (singleton, dedupe_window, inbox_retention, outbox_retention, attempt_retention,
                                      dead_letter_retention, erased_key_retention, scrub_after, audit_retention, recorded_at)
VALUES (true, (@dedupe_window_us::bigint) * interval '1 microsecond', (@inbox_retention_us::bigint) * interval '1 microsecond',
        (@outbox_retention_us::bigint) * interval '1 microsecond', (@attempt_retention_us::bigint) * interval '1 microsecond',
        (@dead_letter_retention_us::bigint) * interval '1 microsecond', (@erased_key_retention_us::bigint) * interval '1 microsecond',
        (@scrub_after_us::bigint) * interval '1 microsecond', (@audit_retention_us::bigint) * interval '1 microsecond', now())
ON CONFLICT (singleton) DO UPDATE SET
    dedupe_window = EXCLUDED.dedupe_window, inbox_retention = EXCLUDED.inbox_retention,
    outbox_retention = EXCLUDED.outbox_retention, attempt_retention = EXCLUDED.attempt_retention,
    dead_letter_retention = EXCLUDED.dead_letter_retention, erased_key_retention = EXCLUDED.erased_key_retention,
    scrub_after = EXCLUDED.scrub_after, audit_retention = EXCLUDED.audit_retention, recorded_at = EXCLUDED.recorded_at;

-- name: RetentionSettingsGet :one
-- The recorded retention settings, durations in microseconds; no row when
-- none were recorded.
SELECT (extract(epoch FROM s.dedupe_window) * 1000000)::bigint AS dedupe_window_us,
       (extract(epoch FROM s.inbox_retention) * 1000000)::bigint AS inbox_retention_us,
       (extract(epoch FROM s.outbox_retention) * 1000000)::bigint AS outbox_retention_us,
       (extract(epoch FROM s.attempt_retention) * 1000000)::bigint AS attempt_retention_us,
       (extract(epoch FROM s.dead_letter_retention) * 1000000)::bigint AS dead_letter_retention_us,
       (extract(epoch FROM s.erased_key_retention) * 1000000)::bigint AS erased_key_retention_us,
       (extract(epoch FROM s.scrub_after) * 1000000)::bigint AS scrub_after_us,
       (extract(epoch FROM s.audit_retention) * 1000000)::bigint AS audit_retention_us,
       s.recorded_at
FROM wharf_retention_settings s;

-- name: RetentionAuditExpiredCount :one
SELECT count(*) FROM wharf_audit_log WHERE at < @cutoff::timestamptz;

-- name: RetentionAuditDelete :execrows
-- Deletes one batch of audit entries older than the cutoff, oldest first.
DELETE FROM wharf_audit_log
WHERE id IN (SELECT id FROM wharf_audit_log WHERE at < @cutoff::timestamptz ORDER BY at LIMIT @batch_size::int);
