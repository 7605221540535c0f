ALTER TABLE wharf_retention_settings DROP COLUMN IF EXISTS audit_retention;
DROP TABLE IF EXISTS wharf_audit_log;
