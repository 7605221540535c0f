DROP TABLE IF EXISTS wharf_idempotency_keys;
