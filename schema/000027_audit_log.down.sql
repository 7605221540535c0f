ALTER TABLE wharf_retention_settings DROP COLUMN IF EXISTS audit_retention;
ALTER TABLE wharf_outbox_events DROP COLUMN IF EXISTS target_endpoint_id;
DROP TABLE IF EXISTS wharf_audit_log;
