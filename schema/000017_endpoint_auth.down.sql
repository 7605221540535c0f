ALTER TABLE wharf_outbox_endpoints
    DROP COLUMN auth,
    DROP COLUMN headers;
