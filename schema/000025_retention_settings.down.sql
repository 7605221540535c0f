DROP TABLE IF EXISTS wharf_retention_settings;
