DROP TABLE IF EXISTS wharf_audit_log;
