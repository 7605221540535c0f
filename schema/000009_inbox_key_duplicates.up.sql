-- Duplicates blocked per key, for `wharf stats` and the dashboard. A
-- duplicate delivery already updates its key row (the claim is an upsert
-- that counts payload mismatches), so counting it there costs no write.
ALTER TABLE wharf_inbox_keys
    ADD COLUMN duplicate_count   integer NOT NULL DEFAULT 0,
    ADD COLUMN last_duplicate_at timestamptz;
