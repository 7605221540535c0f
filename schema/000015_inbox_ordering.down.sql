DROP INDEX IF EXISTS wharf_inbox_messages_ordering_idx;
ALTER TABLE wharf_inbox_messages DROP COLUMN ordering_key;
