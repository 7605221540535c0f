-- Prune coordination without session state, so that it works through a
-- transaction-mode pooler and never holds a lock across DETACH …
-- CONCURRENTLY: one prune at a time holds a lease row (others skip), and a
-- partition about to be detached is marked first, so that replays (which
-- check the mark) never revive a row that retention is dropping.
CREATE TABLE wharf_leases (
    name       text        PRIMARY KEY,
    holder     uuid        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE wharf_partition_drops (
    parent    text        NOT NULL,
    day       timestamptz NOT NULL,
    marked_at timestamptz NOT NULL,
    PRIMARY KEY (parent, day)
);
