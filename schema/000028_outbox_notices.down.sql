DROP TRIGGER IF EXISTS wharf_outbox_delivery_notice ON wharf_outbox_deliveries;
DROP FUNCTION IF EXISTS wharf_outbox_delivery_notice();
DROP TRIGGER IF EXISTS wharf_outbox_endpoint_notice ON wharf_outbox_endpoints;
DROP FUNCTION IF EXISTS wharf_outbox_endpoint_notice();
DROP TABLE IF EXISTS wharf_outbox_notices;
