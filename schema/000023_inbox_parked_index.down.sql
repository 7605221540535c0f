DROP INDEX IF EXISTS wharf_inbox_messages_parked_idx;
