ALTER TABLE wharf_outbox_leases RESET (fillfactor);
CREATE INDEX IF NOT EXISTS wharf_outbox_leases_free_idx ON wharf_outbox_leases (endpoint_id, expires_at);
