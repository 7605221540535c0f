DROP INDEX IF EXISTS wharf_outbox_leases_free_idx;
