-- Whether Postgres's jsonb can hold the event's payload, which an
-- endpoint's content filter (data_filter) tests: false for a payload with
-- a NUL character, a lone surrogate escape or bytes that are not UTF-8,
-- which JSON carries and jsonb refuses. No content filter takes such an
-- event; casting it failed the publish statement. A constant default: no
-- table rewrite.
ALTER TABLE wharf_outbox_events ADD COLUMN filterable boolean NOT NULL DEFAULT true;
