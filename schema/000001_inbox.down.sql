DROP TABLE IF EXISTS wharf_inbox_messages;
DROP TABLE IF EXISTS wharf_inbox_keys;
