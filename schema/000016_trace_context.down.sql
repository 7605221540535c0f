ALTER TABLE wharf_outbox_events DROP COLUMN trace_context;
ALTER TABLE wharf_inbox_messages DROP COLUMN trace_context;
