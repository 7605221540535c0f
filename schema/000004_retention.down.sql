ALTER TABLE wharf_outbox_events DROP COLUMN IF EXISTS scrubbed_at;
ALTER TABLE wharf_inbox_messages DROP COLUMN IF EXISTS scrubbed_at;
