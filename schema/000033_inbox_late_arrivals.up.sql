-- Late arrivals: an event received again after its dedupe key was pruned.
--
-- wharf_inbox_past_keys keeps, for each key the prune deleted, which
-- message it named, until that message's day is past the inbox's
-- retention: a claim of the key anew finds the earlier message with one
-- probe of this table's primary key rather than of every partition of
-- the messages.
CREATE TABLE wharf_inbox_past_keys (
    source      text        NOT NULL,
    event_id    text        NOT NULL,
    message_id  uuid        NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (source, event_id)
);
CREATE INDEX wharf_inbox_past_keys_received_at_idx ON wharf_inbox_past_keys (received_at);

-- The earlier message of a key the claim statement just inserted, read
-- with a snapshot of its own: VOLATILE, so that it sees a past key that
-- the prune committed (with the key's deletion) while the claim waited,
-- which the claim statement's own snapshot, taken before, does not.
-- PL/pgSQL, whose plan is kept for the session: a SQL function's body is
-- planned again in every statement that calls it (0.1 ms a claim).
CREATE FUNCTION wharf_inbox_past_message(src text, eid text) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN (SELECT message_id FROM wharf_inbox_past_keys WHERE source = src AND event_id = eid);
END
$$;

-- A message received while an earlier message of its event was retained:
-- that one's id, when it was processed (NULL: it never was), and what its
-- source's Source.LateArrivals made of the new one ('process', 'skip' or
-- 'reconcile'). NULL columns, no default and no CHECK: neither a rewrite
-- nor a scan of every partition under the ALTER's exclusive lock.
ALTER TABLE wharf_inbox_messages
    ADD COLUMN redelivery_of uuid,
    ADD COLUMN redelivery_of_processed_at timestamptz,
    ADD COLUMN late_policy text;
