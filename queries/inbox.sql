-- name: InboxKeyClaim :one
-- Claims (source, event_id) for a new message. On conflict the existing key
-- is returned instead (locked until the caller's transaction ends) and a
-- payload mismatch is counted. The caller compares message_id with the one it
-- proposed to learn whether it won the claim: a plain SELECT after
-- ON CONFLICT DO NOTHING would miss a row committed after the statement's
-- snapshot was taken.
INSERT INTO wharf_inbox_keys AS k (source, event_id, payload_hash, message_id, received_at, ignored)
VALUES (@source, @event_id, @payload_hash, @message_id, @received_at, @ignored)
ON CONFLICT (source, event_id) DO UPDATE
SET mismatch_count = k.mismatch_count + (k.payload_hash <> excluded.payload_hash)::int,
    last_mismatch_at = CASE WHEN k.payload_hash <> excluded.payload_hash
                            THEN excluded.received_at ELSE k.last_mismatch_at END,
    duplicate_count = k.duplicate_count + 1,
    last_duplicate_at = excluded.received_at
RETURNING k.message_id, k.received_at, k.payload_hash, k.ignored;

-- name: InboxMessageInsert :exec
INSERT INTO wharf_inbox_messages (
    id, received_at, source, event_id, event_type, headers, body, payload_hash,
    status, job_id, updated_at
) VALUES (
    @id, @received_at, @source, @event_id, @event_type, @headers, @body, @payload_hash,
    'received', @job_id, @received_at
);

-- name: InboxMessageGet :one
SELECT * FROM wharf_inbox_messages WHERE id = @id;

-- name: InboxMessageGetByIDForUpdate :one
SELECT * FROM wharf_inbox_messages WHERE id = @id FOR UPDATE;

-- name: InboxMessageGetForUpdate :one
SELECT * FROM wharf_inbox_messages
WHERE received_at = @received_at AND id = @id
FOR UPDATE;

-- name: InboxMessageMarkProcessed :exec
UPDATE wharf_inbox_messages
SET status = 'processed', attempts = attempts + 1, processed_at = @now::timestamptz, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = @id;

-- name: InboxMessageMarkFailed :execrows
-- Records a failed attempt; status is 'failed' while retries remain, 'dead'
-- after the last one. Only while the message is as the attempt read it:
-- unfinished, on the attempt's job (job_id) with the attempts it read. A
-- message skipped, erased, replayed or rescued since then (the record of a
-- job's failure comes after its transaction rolled back, and an operator
-- waiting for the row gets in between) is left as it is: no row.
UPDATE wharf_inbox_messages
SET status = @status::text, attempts = attempts + 1, last_error = @last_error::text, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = @id AND status IN ('received', 'failed')
  AND job_id = @job_id::bigint AND attempts = @attempts::int;

-- name: InboxMessageRequeue :one
-- Moves a message back to 'received' with a new job, for replay. The caller
-- holds the row lock and has checked that it may be replayed.
UPDATE wharf_inbox_messages
SET status = 'received', job_id = @job_id::bigint, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = @id
  -- "|| ''": see InboxMessagesLockUnfinished.
  AND status || '' <> 'processed'
RETURNING *;

-- name: InboxMessageList :many
-- Newest first; filters are optional. A page after a cursor holds the rows
-- before (after_received_at, after_id) in that order: a keyset, so deep
-- pages cost what the first does. since is never NULL ('-infinity' for no
-- bound), so that a generic plan still prunes partitions; omit_body leaves
-- headers and body out (a listing that shows neither).
SELECT id, received_at, source, event_id, event_type,
       (CASE WHEN @omit_body::boolean THEN '{}'::jsonb ELSE headers END)::jsonb AS headers,
       (CASE WHEN @omit_body::boolean THEN ''::bytea ELSE body END)::bytea AS body,
       payload_hash, status, attempts, last_error, job_id, processed_at, updated_at, scrubbed_at,
       ordering_key, trace_context, redelivery_of, redelivery_of_processed_at, late_policy
FROM wharf_inbox_messages
WHERE (sqlc.narg('source')::text IS NULL OR source = sqlc.narg('source')::text)
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status')::text)
  AND (sqlc.narg('event_type')::text IS NULL OR event_type = sqlc.narg('event_type')::text)
  AND received_at >= @since::timestamptz
  AND (sqlc.narg('after_received_at')::timestamptz IS NULL
       OR (received_at, id) < (sqlc.narg('after_received_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY received_at DESC, id DESC
LIMIT @max_rows::int;

-- name: InboxMessageListByEventID :many
-- InboxMessageList for one event id, looked up under each of sources (the
-- source asked for, or every one: InboxMessageSources), so that the
-- (source, event_id) index answers it, in a generic plan too; a bare
-- event_id would scan every partition.
SELECT id, received_at, source, event_id, event_type,
       (CASE WHEN @omit_body::boolean THEN '{}'::jsonb ELSE headers END)::jsonb AS headers,
       (CASE WHEN @omit_body::boolean THEN ''::bytea ELSE body END)::bytea AS body,
       payload_hash, status, attempts, last_error, job_id, processed_at, updated_at, scrubbed_at,
       ordering_key, trace_context, redelivery_of, redelivery_of_processed_at, late_policy
FROM wharf_inbox_messages
WHERE source = ANY(@sources::text[]) AND event_id = @event_id::text
  AND (sqlc.narg('status')::text IS NULL OR status = sqlc.narg('status')::text)
  AND (sqlc.narg('event_type')::text IS NULL OR event_type = sqlc.narg('event_type')::text)
  AND received_at >= @since::timestamptz
  AND (sqlc.narg('after_received_at')::timestamptz IS NULL
       OR (received_at, id) < (sqlc.narg('after_received_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY received_at DESC, id DESC
LIMIT @max_rows::int;

-- name: InboxMessageSources :many
-- The sources with stored messages, in order: a loose index scan (one
-- probe of the (source, event_id) index per source), not a scan of the
-- rows.
WITH RECURSIVE sources AS (
    (SELECT m.source FROM wharf_inbox_messages m ORDER BY m.source LIMIT 1)
    UNION ALL
    SELECT (SELECT m.source FROM wharf_inbox_messages m WHERE m.source > s.source ORDER BY m.source LIMIT 1)
    FROM sources s
    WHERE s.source IS NOT NULL
)
SELECT sources.source::text AS source FROM sources WHERE sources.source IS NOT NULL;

-- name: InboxMessageForget :many
-- Erases the body and headers of every stored delivery of an event, on an
-- erasure request. A message not yet processed can no longer be: it is
-- marked dead. The dedupe key stays, so a redelivery does not store the
-- erased data again.
-- The last error goes too: it may quote the payload.
UPDATE wharf_inbox_messages
SET body = '', headers = '{}', scrubbed_at = @now::timestamptz, updated_at = @now::timestamptz,
    status = CASE WHEN status IN ('received', 'failed') THEN 'dead' ELSE status END,
    last_error = CASE WHEN status IN ('received', 'failed') THEN 'erased on request before processing'
                      WHEN last_error IS NULL THEN NULL
                      ELSE 'erased on request' END
WHERE source = @source AND event_id = @event_id
RETURNING id, job_id, received_at, ordering_key;

-- name: InboxKeyTombstone :execrows
-- Makes an erased event's key a tombstone, kept for the erased-key
-- retention from now whatever the dedupe window: the key as it is, or, when
-- retention has pruned it, a key made again from the newest stored message.
-- Run first in Forget: locking the key makes a concurrent receive of the
-- event either wait for the erasure or commit before it, where Forget's
-- next statement sees and erases its message. No row: no message stored.
INSERT INTO wharf_inbox_keys AS k (source, event_id, payload_hash, message_id, received_at, erased_at)
SELECT m.source, m.event_id, m.payload_hash, m.id, m.received_at, @now::timestamptz
FROM wharf_inbox_messages m
WHERE m.source = @source AND m.event_id = @event_id
ORDER BY m.received_at DESC
LIMIT 1
ON CONFLICT (source, event_id) DO UPDATE SET erased_at = excluded.erased_at;

-- name: InboxKeyClaimMany :many
-- Claims many keys in one statement, the batch form of InboxKeyClaim: the
-- caller learns which claims it won by comparing each returned message_id
-- with the one it proposed. Rows are inserted in key order, so two batches
-- claiming overlapping keys take their row locks in the same order and
-- cannot deadlock. The keys must be distinct (ON CONFLICT DO UPDATE cannot
-- touch one row twice in a statement): the caller claims a key repeated
-- within its batch afterwards, through InboxKeyClaim. ignored[i] marks a
-- key whose event its source ignores: no message is stored for it.
--
-- A key claimed anew (its received_at this batch's) whose event was
-- received before, its key since pruned, returns that earlier message's
-- id as past_message_id: one probe of the past keys' primary key per new
-- key, in RETURNING (a join of the inserted rows, through a CTE, cost
-- twice as much), with a snapshot taken after the key's insert (see
-- wharf_inbox_past_message). The caller reads it for the claims it won
-- only.
INSERT INTO wharf_inbox_keys AS k (source, event_id, payload_hash, message_id, received_at, ignored)
SELECT c.source, c.event_id, c.payload_hash, c.message_id, @received_at::timestamptz, c.ignored
FROM (
    SELECT unnest(@sources::text[]) AS source,
           unnest(@event_ids::text[]) AS event_id,
           unnest(@payload_hashes::bytea[]) AS payload_hash,
           unnest(@message_ids::text[])::uuid AS message_id,
           unnest(@ignored::boolean[]) AS ignored
) c
ORDER BY c.source, c.event_id
ON CONFLICT (source, event_id) DO UPDATE
SET mismatch_count = k.mismatch_count + (k.payload_hash <> excluded.payload_hash)::int,
    last_mismatch_at = CASE WHEN k.payload_hash <> excluded.payload_hash
                            THEN excluded.received_at ELSE k.last_mismatch_at END,
    duplicate_count = k.duplicate_count + 1,
    last_duplicate_at = excluded.received_at
RETURNING k.source, k.event_id, k.message_id, k.received_at, k.payload_hash, k.ignored,
    (CASE WHEN k.received_at = @received_at::timestamptz
          THEN wharf_inbox_past_message(k.source, k.event_id) END)::uuid AS past_message_id;

-- name: InboxPastMessages :many
-- The earlier messages of a batch's late arrivals (their past keys), each
-- with when it was processed: NULL when it was not, or is gone. The
-- subquery runs per past key on its one partition.
SELECT p.source, p.event_id, p.message_id,
       (SELECT m.processed_at FROM wharf_inbox_messages m
        WHERE m.received_at = p.received_at AND m.id = p.message_id) AS processed_at
FROM wharf_inbox_past_keys p
JOIN (SELECT unnest(@sources::text[]) AS source, unnest(@event_ids::text[]) AS event_id) w
  ON p.source = w.source AND p.event_id = w.event_id;

-- name: InboxMessageInsertMany :exec
-- Stores the messages of one receive batch; they share received_at, so one
-- partition holds them all.
INSERT INTO wharf_inbox_messages (
    id, received_at, source, event_id, event_type, headers, body, payload_hash,
    status, job_id, updated_at, ordering_key, trace_context
)
SELECT unnest(@ids::text[])::uuid, @received_at::timestamptz, unnest(@sources::text[]),
       unnest(@event_ids::text[]), unnest(@event_types::text[]), unnest(@headers::jsonb[]),
       unnest(@bodies::bytea[]), unnest(@payload_hashes::bytea[]), 'received',
       unnest(@job_ids::bigint[]), @received_at::timestamptz, unnest(@ordering_keys::text[]),
       unnest(@trace_contexts::text[]);

-- name: InboxMessagesInsertLate :exec
-- Stores the late arrivals of one receive batch (see InboxKeyClaimMany):
-- messages whose events were received before their keys were pruned,
-- each with that earlier message, when it was processed ('' for never)
-- and its source's policy. A skipped one is stored processed, without a
-- job (job id 0).
INSERT INTO wharf_inbox_messages (
    id, received_at, source, event_id, event_type, headers, body, payload_hash,
    status, job_id, updated_at, ordering_key, trace_context, processed_at,
    redelivery_of, redelivery_of_processed_at, late_policy
)
SELECT l.id, @received_at::timestamptz, l.source, l.event_id, l.event_type, l.headers, l.body, l.payload_hash,
       CASE WHEN l.late_policy = 'skip' THEN 'processed' ELSE 'received' END,
       NULLIF(l.job_id, 0), @received_at::timestamptz, l.ordering_key, l.trace_context,
       CASE WHEN l.late_policy = 'skip' THEN @received_at::timestamptz END,
       l.redelivery_of, NULLIF(l.redelivery_of_processed_at, '')::timestamptz, l.late_policy
FROM (
    SELECT unnest(@ids::text[])::uuid AS id, unnest(@sources::text[]) AS source,
           unnest(@event_ids::text[]) AS event_id, unnest(@event_types::text[]) AS event_type,
           unnest(@headers::jsonb[]) AS headers, unnest(@bodies::bytea[]) AS body,
           unnest(@payload_hashes::bytea[]) AS payload_hash, unnest(@job_ids::bigint[]) AS job_id,
           unnest(@ordering_keys::text[]) AS ordering_key, unnest(@trace_contexts::text[]) AS trace_context,
           unnest(@redelivery_of::text[])::uuid AS redelivery_of,
           unnest(@redelivery_of_processed_at::text[]) AS redelivery_of_processed_at,
           unnest(@late_policies::text[]) AS late_policy
) l;

-- name: InboxMessagesGetForUpdate :many
-- Loads and locks the messages of one processing batch, in id order.
SELECT * FROM wharf_inbox_messages
WHERE received_at = @received_at AND id = ANY((@ids::text[])::uuid[])
ORDER BY id
FOR UPDATE;

-- name: InboxMessagesMarkProcessed :exec
-- Marks processed the messages of a batch whose handlers never touched the
-- database (the others are marked one by one, inside their savepoints).
UPDATE wharf_inbox_messages
SET status = 'processed', attempts = attempts + 1, processed_at = @now::timestamptz, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = ANY((@ids::text[])::uuid[]);

-- name: InboxMessagesAdopt :many
-- Takes on, for a message's own job about to commit, the messages of other
-- message jobs waiting in its queue (see process's adopt): their jobs,
-- River's next to fetch, never run and with no snooze or failure of a batch
-- in their args, locked as River's fetch locks them, so that no fetch takes
-- them while this transaction holds them; and their messages, locked too,
-- when each still waits for that job, unordered and never attempted. A job
-- locked here whose message is not returned is left as it was: it
-- becomes available again when the transaction ends.
WITH jobs AS MATERIALIZED (
    SELECT j.id, (j.args->>'message_id')::uuid AS message_id,
           (j.args->>'received_at')::timestamptz AS received_at
    FROM river_job j
    -- No cast of state: River's fetch index is on its enum.
    WHERE j.state = 'available' AND j.queue = @queue::text AND j.scheduled_at <= now()
      AND j.kind = @kind::text AND j.attempt = 0
      AND NOT (j.args ? 'not_before' OR j.args ? 'failed_in_batch')
      AND NOT j.id = ANY(@skip::bigint[])
      -- Checked before the lock too, so that a job left to run on its own
      -- (an ordered message's) is not held from River's fetch meanwhile.
      AND EXISTS (
          SELECT 1 FROM wharf_inbox_messages em
          WHERE em.received_at = (j.args->>'received_at')::timestamptz
            AND em.id = (j.args->>'message_id')::uuid
            AND em.job_id = j.id AND em.status = 'received' AND em.attempts = 0
            AND em.ordering_key = '' AND em.scrubbed_at IS NULL)
    ORDER BY j.priority, j.scheduled_at, j.id
    LIMIT @max::int
    FOR UPDATE SKIP LOCKED
)
-- A lookup per job (a join could plan a merge join that walks a partition's
-- index from its first row).
SELECT m.* FROM jobs
CROSS JOIN LATERAL (
    SELECT * FROM wharf_inbox_messages mm
    WHERE mm.received_at = jobs.received_at AND mm.id = jobs.message_id
      AND mm.job_id = jobs.id AND mm.status = 'received' AND mm.attempts = 0
      AND mm.ordering_key = '' AND mm.scrubbed_at IS NULL
    FOR UPDATE SKIP LOCKED
) m
ORDER BY m.id;

-- name: InboxMessagesAdoptedFinish :exec
-- Marks processed the adopted messages whose handlers never touched the
-- database (by receipt time and id: they were received apart), and
-- completes the jobs of the adopted messages the transaction settled, as
-- River's completion would have.
WITH marked AS (
    -- Joined, so that each row's partition is found at run time.
    UPDATE wharf_inbox_messages m
    SET status = 'processed', attempts = m.attempts + 1, processed_at = @now::timestamptz, updated_at = @now::timestamptz
    FROM (SELECT unnest(@received_ats::timestamptz[]) AS received_at, unnest(@ids::text[])::uuid AS id) AS v
    WHERE m.received_at = v.received_at AND m.id = v.id
)
UPDATE river_job
SET state = 'completed', attempt = attempt + 1, attempted_at = @now::timestamptz, finalized_at = @now::timestamptz
WHERE river_job.id = ANY(@job_ids::bigint[]) AND river_job.state = 'available';

-- name: InboxMessagesGet :many
-- The messages of a batch as they are, without locking them.
SELECT * FROM wharf_inbox_messages
WHERE received_at = @received_at AND id = ANY((@ids::text[])::uuid[]);

-- name: InboxMessagesSetJob :exec
-- Hands messages of a processing batch to jobs of their own (ids[i] to
-- job_ids[i]).
UPDATE wharf_inbox_messages AS m
SET job_id = j.job_id, updated_at = @now::timestamptz
FROM (SELECT unnest(@ids::text[])::uuid AS id, unnest(@job_ids::bigint[]) AS job_id) AS j
WHERE m.received_at = @received_at AND m.id = j.id;

-- name: InboxMessageEarlierUnfinishedLocked :one
-- The last message of the source with the same ordering key received
-- before (received_at, id) that is not finished (to process, or failing and
-- retrying), if any: the message that (received_at, id) must wait for,
-- its immediate predecessor (the one whose finish, or whose skip, comes
-- last and wakes it). It is locked FOR SHARE, which makes that message's processing (FOR UPDATE)
-- and status updates wait for this transaction, so that they see a message
-- this transaction parks; NOWAIT: a transaction processing or updating it
-- now fails this one at once (55P03) rather than holding a connection
-- while it runs.
SELECT m.id
FROM wharf_inbox_messages m
WHERE m.source = @source::text
  AND m.ordering_key = @ordering_key::text
  AND m.ordering_key <> ''
  AND m.status IN ('received', 'failed')
  AND m.received_at <= @received_at::timestamptz -- lets the plan skip later partitions
  AND (m.received_at, m.id) < (@received_at::timestamptz, @id::uuid)
ORDER BY m.received_at DESC, m.id DESC
LIMIT 1
FOR SHARE NOWAIT;

-- name: InboxMessagePark :exec
-- Parks a message that waits for an earlier one of its ordering key: no job
-- until that one finishes and gives it one (see InboxMessageNextWaiting).
UPDATE wharf_inbox_messages
SET job_id = NULL, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = @id AND status IN ('received', 'failed');

-- name: InboxMessageSkip :one
-- Dead-letters an unfinished message on an operator's word, so that the
-- later messages of its ordering key go on. The caller holds the row lock.
UPDATE wharf_inbox_messages
SET status = 'dead', last_error = @reason::text, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = @id AND status IN ('received', 'failed')
RETURNING *;

-- name: InboxMessagesParkedRuns :many
-- For each head (a parked message about to be woken), the unfinished
-- messages of its source and ordering key received with it (the same
-- received_at: one receive batch) from it on, in receipt order, at most
-- run_limit: its run, with each one's status and job. The caller wakes the
-- head with the parked messages that follow it unbroken, so that a key's
-- backlog goes on in batches rather than one message a job. Rows come by
-- head, in the order the heads were given.
WITH h AS (
    SELECT i AS n, (@ids::text[])[i]::uuid AS id, (@received_ats::timestamptz[])[i] AS received_at,
           (@sources::text[])[i] AS source, (@ordering_keys::text[])[i] AS ordering_key
    FROM generate_subscripts(@ids::text[], 1) AS i
)
SELECT h.id AS head_id, r.id, r.status, r.job_id
FROM h
CROSS JOIN LATERAL (
    SELECT m.id, m.status, m.job_id
    FROM wharf_inbox_messages m
    WHERE m.source = h.source
      AND m.ordering_key = h.ordering_key
      AND m.ordering_key <> ''
      AND m.status IN ('received', 'failed')
      AND m.received_at = h.received_at
      AND m.id >= h.id
    ORDER BY m.received_at, m.id
    LIMIT @run_limit::int
) r
ORDER BY h.n, r.id;

-- name: InboxMessageNextWaiting :one
-- The first unfinished message of the source with the same ordering key
-- received after (received_at, id): the one to wake when (received_at, id)
-- finishes.
SELECT m.id, m.received_at, m.job_id
FROM wharf_inbox_messages m
WHERE m.source = @source::text
  AND m.ordering_key = @ordering_key::text
  AND m.ordering_key <> ''
  AND m.status IN ('received', 'failed')
  AND m.received_at >= @received_at::timestamptz -- lets the plan skip earlier partitions
  AND (m.received_at, m.id) > (@received_at::timestamptz, @id::uuid)
ORDER BY m.received_at, m.id
LIMIT 1;

-- name: InboxMessagesHeldOutsideBatch :many
-- The messages of a processing batch (sharing received_at) that an earlier
-- unfinished message of their ordering key, outside the batch, holds, with
-- the last such message: the one whose finish (or skip) comes last and
-- wakes it, and whose lock its park takes. The batch worker tracks the
-- earlier messages inside the batch itself.
WITH b AS (
    SELECT (@ids::text[])[i]::uuid AS id, (@sources::text[])[i] AS source, (@ordering_keys::text[])[i] AS ordering_key
    FROM generate_subscripts(@ids::text[], 1) AS i
)
SELECT b.id, h.received_at AS blocker_received_at, h.id AS blocker_id
FROM b
CROSS JOIN LATERAL (
    SELECT m.received_at, m.id
    FROM wharf_inbox_messages m
    WHERE m.source = b.source
      AND m.ordering_key = b.ordering_key
      AND m.ordering_key <> ''
      AND m.status IN ('received', 'failed')
      AND m.received_at <= @received_at::timestamptz -- lets the plan skip later partitions
      AND (m.received_at, m.id) < (@received_at::timestamptz, b.id)
      -- An array, not the CTE: a subquery here would be costed per
      -- partition per message, far past jit_above_cost, and JIT-compiled
      -- (tens of milliseconds) on every call.
      AND NOT (m.received_at = @received_at::timestamptz AND m.id = ANY ((@ids::text[])::uuid[]))
    ORDER BY m.received_at DESC, m.id DESC
    LIMIT 1
) h
WHERE b.ordering_key <> '';

-- name: InboxMessagesLockUnfinished :many
-- Locks FOR SHARE those of the given messages that are still unfinished
-- and that no other transaction holds at this moment (SKIP LOCKED: it
-- never waits): a batch parks the messages that wait for them (see
-- InboxMessageEarlierUnfinishedLocked for why the lock).
-- "status || ''" (here and below): the status must be no index condition,
-- nor prove a partial index's predicate. On statistics that say almost no
-- message is unfinished (taken while all were processed, before an outage
-- of a handler; or none taken yet, a new day's partition under a burst),
-- the planner otherwise read every unfinished message through the index of
-- unfinished messages to find a few by key.
-- The arrays again, as "= ANY", lead the plan to the keys' indexes.
SELECT m.id
FROM wharf_inbox_messages m
WHERE (m.received_at, m.id) IN (
    SELECT (@received_ats::timestamptz[])[i], (@ids::text[])[i]::uuid
    FROM generate_subscripts(@ids::text[], 1) AS i)
  AND m.received_at = ANY(@received_ats::timestamptz[])
  AND m.id = ANY((@ids::text[])::uuid[])
  AND m.status || '' IN ('received', 'failed')
FOR SHARE SKIP LOCKED;

-- name: InboxMessagesAwaitUnlocked :exec
-- Waits until no other transaction holds the given messages (processing or
-- updating them), by locking them FOR SHARE: the caller takes it in a
-- savepoint, with a lock_timeout, and rolls the savepoint back, which
-- releases the locks.
-- The arrays again, as "= ANY", lead the plan to the keys' indexes: on a
-- partition never analyzed it scanned every message of every partition.
SELECT 1
FROM wharf_inbox_messages m
WHERE (m.received_at, m.id) IN (
    SELECT (@received_ats::timestamptz[])[i], (@ids::text[])[i]::uuid
    FROM generate_subscripts(@ids::text[], 1) AS i)
  AND m.received_at = ANY(@received_ats::timestamptz[])
  AND m.id = ANY((@ids::text[])::uuid[])
ORDER BY m.received_at, m.id
FOR SHARE;

-- name: InboxMessagesPark :exec
-- Parks messages of a batch (sharing received_at) that wait for earlier
-- ones of their ordering keys: no job until those finish and give them one.
UPDATE wharf_inbox_messages
SET job_id = NULL, updated_at = @now::timestamptz
WHERE received_at = @received_at AND id = ANY ((@ids::text[])::uuid[])
  -- "|| ''": see InboxMessagesLockUnfinished.
  AND status || '' IN ('received', 'failed');

-- name: InboxMessagesNextParked :many
-- For messages that just finished (sharing received_at), the next
-- unfinished message of each one's ordering key when it is parked (no
-- job): the messages to wake. When no message of their sources received
-- since then is parked (the common case), one probe of the parked index
-- answers, and the lookups per message do not run.
WITH f AS (
    SELECT (@ids::text[])[i]::uuid AS id, (@sources::text[])[i] AS source, (@ordering_keys::text[])[i] AS ordering_key
    FROM generate_subscripts(@ids::text[], 1) AS i
)
SELECT DISTINCT n.id, n.received_at, n.status, f.source::text AS source, f.ordering_key::text AS ordering_key
FROM f
CROSS JOIN LATERAL (
    SELECT m.id, m.received_at, m.job_id, m.status
    FROM wharf_inbox_messages m
    WHERE m.source = f.source
      AND m.ordering_key = f.ordering_key
      AND m.ordering_key <> ''
      AND m.status IN ('received', 'failed')
      AND m.received_at >= @received_at::timestamptz -- lets the plan skip earlier partitions
      AND (m.received_at, m.id) > (@received_at::timestamptz, f.id)
    ORDER BY m.received_at, m.id
    LIMIT 1
) n
WHERE n.job_id IS NULL
  AND EXISTS (
      SELECT 1
      FROM wharf_inbox_messages p
      WHERE p.source = ANY (@sources::text[])
        AND p.received_at >= @received_at::timestamptz
        AND p.job_id IS NULL
        AND p.ordering_key <> ''
        AND p.status IN ('received', 'failed'));

-- name: InboxGaugeBySource :many
-- The inbox's gauges per source, read from the partial index of unfinished
-- messages only (never the processed ones): dead messages now, and the
-- oldest message still to process or retrying (now when none is).
SELECT source,
       count(*) FILTER (WHERE status = 'dead')::bigint AS dead,
       COALESCE(min(received_at) FILTER (WHERE status IN ('received', 'failed')), now())::timestamptz AS oldest_unfinished
FROM wharf_inbox_messages
WHERE status <> 'processed'
GROUP BY source;

-- name: InboxMessagesStranded :many
-- Unfinished messages that nothing will run, last changed before @before,
-- with the state of their River job: '' when parked (no job) with no
-- earlier unfinished message of their ordering key to wake them; the job's
-- state when it is finished (completed, cancelled, discarded); 'gone' when
-- River no longer has it. Locked, skipping those another transaction holds.
-- The candidates come from the index of unfinished messages, never the
-- processed ones; only those of @ids when given.
-- A row another transaction changed after this statement began (a replay
-- that gave it a job) is re-checked once locked, but against the job row
-- (and earlier messages) the statement read before: none for a new job,
-- "gone". So the caller runs it again on the ids the first run locked (see
-- Rescue): the second run's snapshot is taken after those locks, and it
-- answers for the rows as they now are.
WITH candidates AS MATERIALIZED (
    SELECT c.received_at, c.id
    FROM wharf_inbox_messages c
    WHERE c.status IN ('received', 'failed')
      AND c.updated_at < @before::timestamptz
      AND (sqlc.narg('ids')::text[] IS NULL OR c.id = ANY (sqlc.narg('ids')::text[]::uuid[]))
)
SELECT sqlc.embed(m),
       (CASE WHEN m.job_id IS NULL THEN '' ELSE coalesce(j.state::text, 'gone') END)::text AS job_state
FROM candidates
JOIN wharf_inbox_messages m ON m.received_at = candidates.received_at AND m.id = candidates.id
LEFT JOIN river_job j ON j.id = m.job_id
WHERE m.status IN ('received', 'failed')
  AND CASE
      WHEN m.job_id IS NULL THEN NOT EXISTS (
          SELECT 1
          FROM wharf_inbox_messages e
          WHERE e.source = m.source
            AND e.ordering_key = m.ordering_key
            AND e.ordering_key <> ''
            AND e.status IN ('received', 'failed')
            AND e.received_at <= m.received_at
            AND (e.received_at, e.id) < (m.received_at, m.id))
      ELSE j.id IS NULL OR j.state::text NOT IN ('available', 'pending', 'retryable', 'running', 'scheduled')
      END
LIMIT @max
FOR UPDATE OF m SKIP LOCKED;

-- name: InboxMessagesGetForUpdateEach :many
-- InboxMessagesGetForUpdate for the messages of batch jobs merged into one
-- transaction (see process's merge), received apart: (received_ats[i],
-- ids[i]), given in id order, in which each lookup locks its row. A lookup
-- per message, so that each row's partition is found at run time.
SELECT m.* FROM (SELECT unnest(@received_ats::timestamptz[]) AS received_at, unnest(@ids::text[])::uuid AS id) AS k
CROSS JOIN LATERAL (
    SELECT * FROM wharf_inbox_messages mm
    WHERE mm.received_at = k.received_at AND mm.id = k.id
    FOR UPDATE
) m
ORDER BY m.id;

-- name: InboxMessagesMarkProcessedEach :exec
-- InboxMessagesMarkProcessed for messages received apart (received_ats[i],
-- ids[i]): those of batch jobs merged into one transaction. Joined, so
-- that each row's partition is found at run time.
UPDATE wharf_inbox_messages m
SET status = 'processed', attempts = m.attempts + 1, processed_at = @now::timestamptz, updated_at = @now::timestamptz
FROM (SELECT unnest(@received_ats::timestamptz[]) AS received_at, unnest(@ids::text[])::uuid AS id) AS v
WHERE m.received_at = v.received_at AND m.id = v.id;

-- name: InboxJobsCompleteRunning :exec
-- Completes the running jobs of batch jobs merged into one transaction
-- (see process's merge), as River's completion (JobCompleteTx) does, at
-- the database's time (River's job cleaner reads it, never Wharf's
-- clock); a job no longer running is left as it is.
UPDATE river_job
SET state = 'completed', finalized_at = now()
WHERE id = ANY(@ids::bigint[]) AND state = 'running';
