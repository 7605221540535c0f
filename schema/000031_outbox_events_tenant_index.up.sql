-- Finds a tenant's events for an erasure request (Outbox.ForgetTenant)
-- without reading every partition; events without a tenant are left out.
CREATE INDEX wharf_outbox_events_tenant_idx ON wharf_outbox_events (tenant) WHERE tenant <> '';
