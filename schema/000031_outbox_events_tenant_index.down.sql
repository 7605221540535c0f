DROP INDEX IF EXISTS wharf_outbox_events_tenant_idx;
