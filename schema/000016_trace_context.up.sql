-- The W3C trace context (traceparent) of the span that received a message
-- or published an event, stored only when that span was sampled, so that
-- processing and delivery spans link back to it.
ALTER TABLE wharf_inbox_messages ADD COLUMN trace_context text NOT NULL DEFAULT '';
ALTER TABLE wharf_outbox_events ADD COLUMN trace_context text NOT NULL DEFAULT '';
