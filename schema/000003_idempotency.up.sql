-- Idempotency keys for the application's own mutating endpoints (package
-- idempotency). One row per (route, principal, key): a key is never global.
-- Not partitioned: a key must be found whatever day it was claimed, and keys
-- are pruned in batches by expires_at.

CREATE TABLE wharf_idempotency_keys (
    route            text        NOT NULL,
    principal        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    -- SHA-256 over method, request target and SHA-256 of the body.
    fingerprint      bytea       NOT NULL,
    status           text        NOT NULL,
    -- Identifies the current claim, so that a claimant that lost its claim
    -- (taken over after InProgressTimeout) cannot complete or release it.
    claim_id         uuid        NOT NULL,
    claimed_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    completed_at     timestamptz,
    response_status  integer,
    -- The replayed headers only, as {"Name": ["value", …]}.
    response_headers jsonb,
    -- NULL when the body was larger than the middleware stores.
    response_body    bytea,
    PRIMARY KEY (route, principal, idempotency_key),
    CONSTRAINT wharf_idempotency_keys_status CHECK (status IN ('in_progress', 'completed')),
    CONSTRAINT wharf_idempotency_keys_completed_has_response
        CHECK ((status = 'completed') = (response_status IS NOT NULL AND completed_at IS NOT NULL)),
    CONSTRAINT wharf_idempotency_keys_route_length CHECK (char_length(route) BETWEEN 1 AND 512),
    CONSTRAINT wharf_idempotency_keys_principal_length CHECK (char_length(principal) BETWEEN 1 AND 512),
    CONSTRAINT wharf_idempotency_keys_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT wharf_idempotency_keys_fingerprint_length CHECK (octet_length(fingerprint) = 32)
);

-- Pruning walks keys by expiry.
CREATE INDEX wharf_idempotency_keys_expires_at_idx ON wharf_idempotency_keys (expires_at);
