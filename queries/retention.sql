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

-- name: RetentionInboxKeysDelete :execrows
-- Deletes one batch of dedupe keys older than the cutoff. A key whose
-- message is still to process or failing is kept: dropping it would let a
-- redelivery in while the first delivery is unfinished.
DELETE FROM wharf_inbox_keys k
WHERE (k.source, k.event_id) IN (
    SELECT c.source, c.event_id FROM wharf_inbox_keys c
    WHERE c.received_at < @cutoff::timestamptz
      AND NOT EXISTS (
          SELECT 1 FROM wharf_inbox_messages m
          WHERE m.received_at = c.received_at AND m.id = c.message_id AND m.status IN ('received', 'failed'))
    ORDER BY c.received_at
    LIMIT @batch_size::int
);

-- name: RetentionInboxKeysExpiredCount :one
SELECT count(*) FROM wharf_inbox_keys c
WHERE c.received_at < @cutoff::timestamptz
  AND NOT EXISTS (
      SELECT 1 FROM wharf_inbox_messages m
      WHERE m.received_at = c.received_at AND m.id = c.message_id AND m.status IN ('received', 'failed'));

-- name: RetentionIdempotencyExpiredCount :one
SELECT count(*) FROM wharf_idempotency_keys WHERE expires_at <= @now::timestamptz;
