-- Inbox ordering: messages of a source that share an ordering key (a
-- resource id, say) are processed one at a time in receipt order. A message
-- waits while an earlier one of its key is unfinished; this index finds
-- that earlier one.
ALTER TABLE wharf_inbox_messages ADD COLUMN ordering_key text NOT NULL DEFAULT '';

CREATE INDEX wharf_inbox_messages_ordering_idx ON wharf_inbox_messages (source, ordering_key, received_at, id)
    WHERE ordering_key <> '' AND status IN ('received', 'failed');
