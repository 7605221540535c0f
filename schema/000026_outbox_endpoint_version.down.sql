ALTER TABLE wharf_outbox_endpoints DROP COLUMN version;
