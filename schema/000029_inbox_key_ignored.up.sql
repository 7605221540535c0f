-- A key claimed by an event of a type its source ignores (Source.AcceptTypes,
-- Source.IgnoreTypes): no message was stored for it, and a redelivery is
-- answered "ignored" again. A constant default: no table rewrite.
ALTER TABLE wharf_inbox_keys ADD COLUMN ignored boolean NOT NULL DEFAULT false;
