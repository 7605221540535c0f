ALTER TABLE wharf_inbox_keys
    DROP COLUMN last_duplicate_at,
    DROP COLUMN duplicate_count;
