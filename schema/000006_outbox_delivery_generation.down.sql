ALTER TABLE wharf_outbox_deliveries DROP COLUMN IF EXISTS generation;
