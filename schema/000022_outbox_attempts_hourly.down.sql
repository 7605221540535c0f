-- The watermark goes with the table: migrating up again starts the rollup
-- from nothing instead of trusting hours no longer counted.
DELETE FROM wharf_rollups WHERE name = 'outbox_attempts_hourly';
DROP TABLE IF EXISTS wharf_outbox_attempts_hourly;
