-- The retention settings of the application's jobs maintainer, recorded by
-- its periodic jobs each time they run, so that the operator's tools
-- (wharf prune, wharf partitions, wharf serve) prune and report by the
-- application's settings rather than by defaults of their own. One row;
-- scrub_after 0 means bodies are never scrubbed.
CREATE TABLE wharf_retention_settings (
    singleton             boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    dedupe_window         interval    NOT NULL,
    inbox_retention       interval    NOT NULL,
    outbox_retention      interval    NOT NULL,
    attempt_retention     interval    NOT NULL,
    dead_letter_retention interval    NOT NULL,
    erased_key_retention  interval    NOT NULL,
    scrub_after           interval    NOT NULL,
    recorded_at           timestamptz NOT NULL
);
