ALTER TABLE wharf_outbox_endpoints DROP COLUMN IF EXISTS data_filter;
