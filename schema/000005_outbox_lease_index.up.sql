-- Taking a concurrency slot looks for a free one (expires_at in the past)
-- among an endpoint's slots; in expiry order the first is free at once,
-- where slot order walked past every held slot first.
CREATE INDEX wharf_outbox_leases_free_idx ON wharf_outbox_leases (endpoint_id, expires_at);
