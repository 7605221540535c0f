ALTER TABLE wharf_inbox_keys DROP COLUMN IF EXISTS ignored;
