DROP INDEX IF EXISTS wharf_outbox_deliveries_seq_idx;
DROP INDEX IF EXISTS wharf_inbox_keys_duplicated_idx;
DROP TABLE IF EXISTS wharf_rollups;
DROP TABLE IF EXISTS wharf_inbox_hourly;
