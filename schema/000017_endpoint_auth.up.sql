-- Per-endpoint request headers and authentication.
--
-- headers: the custom headers sent with every delivery attempt, a JSON
-- object of canonical header names to arrays of values.
-- auth: how deliveries authenticate, beside the signature: '{}' for none,
-- else an object whose "kind" is bearer, basic or oauth2_client_credentials,
-- with its parameters. It holds credentials, like secret: the library
-- never returns it, logs it or quotes it in an error.
ALTER TABLE wharf_outbox_endpoints
    ADD COLUMN headers jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN auth jsonb NOT NULL DEFAULT '{}',
    ADD CONSTRAINT wharf_outbox_endpoints_headers_object CHECK (jsonb_typeof(headers) = 'object'),
    ADD CONSTRAINT wharf_outbox_endpoints_auth_kind
        CHECK (auth = '{}' OR auth->>'kind' IN ('bearer', 'basic', 'oauth2_client_credentials'));
