DROP TABLE IF EXISTS wharf_outbox_leases;
DROP TABLE IF EXISTS wharf_outbox_attempts;
DROP TABLE IF EXISTS wharf_outbox_deliveries;
DROP TABLE IF EXISTS wharf_outbox_events;
DROP TABLE IF EXISTS wharf_outbox_endpoints;
