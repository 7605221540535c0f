-- The dashboard's overview without scanning a day of messages.
--
-- Messages received per source and hour, for closed hours: the jobs
-- package's rollup job counts each hour once it has ended (a received
-- count never changes afterwards), and the overview counts live only the
-- hours after wharf_rollups.until.
CREATE TABLE wharf_inbox_hourly (
    hour     timestamptz NOT NULL,
    source   text        NOT NULL,
    received bigint      NOT NULL,
    PRIMARY KEY (hour, source)
);

-- How far each rollup has counted: every hour before until is counted (an
-- hour without messages has no row).
CREATE TABLE wharf_rollups (
    name  text        PRIMARY KEY,
    until timestamptz NOT NULL
);

-- Keys that blocked a duplicate, by first receipt: the overview's
-- duplicates series and `wharf stats` read these only, from the index
-- alone.
CREATE INDEX wharf_inbox_keys_duplicated_idx ON wharf_inbox_keys (received_at) INCLUDE (source, event_id, duplicate_count)
    WHERE duplicate_count > 0;

-- Delivery listings are newest first by seq: a page reads its rows through
-- this index instead of sorting the table.
CREATE INDEX wharf_outbox_deliveries_seq_idx ON wharf_outbox_deliveries (seq);
