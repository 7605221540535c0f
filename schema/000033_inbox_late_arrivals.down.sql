ALTER TABLE wharf_inbox_messages
    DROP COLUMN IF EXISTS late_policy,
    DROP COLUMN IF EXISTS redelivery_of_processed_at,
    DROP COLUMN IF EXISTS redelivery_of;
DROP FUNCTION IF EXISTS wharf_inbox_past_message(text, text);
DROP TABLE IF EXISTS wharf_inbox_past_keys;
