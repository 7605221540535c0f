ALTER TABLE wharf_outbox_events DROP COLUMN IF EXISTS filterable;
