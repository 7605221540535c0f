-- Retention: when a body was scrubbed (erased ahead of row retention, or on
-- request), the row keeps its metadata and says so.
ALTER TABLE wharf_inbox_messages ADD COLUMN scrubbed_at timestamptz;
ALTER TABLE wharf_outbox_events ADD COLUMN scrubbed_at timestamptz;
