ALTER TABLE wharf_outbox_deliveries DROP COLUMN throttled_until;
DROP TABLE wharf_outbox_rate_buckets;
ALTER TABLE wharf_outbox_endpoints
    DROP CONSTRAINT wharf_outbox_endpoints_circuit_state,
    DROP CONSTRAINT wharf_outbox_endpoints_rate_limit,
    DROP COLUMN circuit_probe_expires_at,
    DROP COLUMN circuit_probe_delivery_id,
    DROP COLUMN circuit_openings,
    DROP COLUMN circuit_open_until,
    DROP COLUMN circuit_opened_at,
    DROP COLUMN circuit_state,
    DROP COLUMN rate_limit_burst,
    DROP COLUMN rate_limit_per_second;
