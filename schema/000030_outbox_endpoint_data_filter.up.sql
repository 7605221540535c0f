-- An endpoint's content filter: a JSON object its events' data must
-- contain (jsonb @>) for the endpoint to get a delivery of them, beside
-- its type filter (event_types). NULL: every event its type filter takes.
ALTER TABLE wharf_outbox_endpoints ADD COLUMN data_filter jsonb
    CONSTRAINT wharf_outbox_endpoints_data_filter_object CHECK (jsonb_typeof(data_filter) = 'object');
