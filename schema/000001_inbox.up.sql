-- Inbox: dedupe keys (not partitioned, so dedupe holds across days) and
-- messages (partitioned by day on received_at, dropped a day at a time).

CREATE TABLE wharf_inbox_keys (
    source           text        NOT NULL,
    event_id         text        NOT NULL,
    payload_hash     bytea       NOT NULL,
    message_id       uuid        NOT NULL,
    received_at      timestamptz NOT NULL,
    mismatch_count   integer     NOT NULL DEFAULT 0,
    last_mismatch_at timestamptz,
    PRIMARY KEY (source, event_id),
    CONSTRAINT wharf_inbox_keys_source_length CHECK (char_length(source) BETWEEN 1 AND 128),
    CONSTRAINT wharf_inbox_keys_event_id_length CHECK (char_length(event_id) BETWEEN 1 AND 512)
);

-- Pruning walks keys by age.
CREATE INDEX wharf_inbox_keys_received_at_idx ON wharf_inbox_keys (received_at);

CREATE TABLE wharf_inbox_messages (
    id           uuid        NOT NULL,
    received_at  timestamptz NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    event_type   text        NOT NULL DEFAULT '',
    headers      jsonb       NOT NULL DEFAULT '{}',
    body         bytea       NOT NULL,
    payload_hash bytea       NOT NULL,
    status       text        NOT NULL DEFAULT 'received',
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    job_id       bigint,
    processed_at timestamptz,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (received_at, id),
    CONSTRAINT wharf_inbox_messages_status CHECK (status IN ('received', 'processed', 'failed', 'dead'))
) PARTITION BY RANGE (received_at);

CREATE INDEX wharf_inbox_messages_id_idx ON wharf_inbox_messages (id);
CREATE INDEX wharf_inbox_messages_unfinished_idx ON wharf_inbox_messages (status, received_at)
    WHERE status <> 'processed';
CREATE INDEX wharf_inbox_messages_source_event_idx ON wharf_inbox_messages (source, event_id);
