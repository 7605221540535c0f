-- Outbox: endpoints, delivery state and concurrency leases are not
-- partitioned (a delivery's state must outlive the day partitions of events
-- and attempts, and River job args point at it by id); events and delivery
-- attempts are partitioned by day and dropped a whole day at a time.

CREATE TABLE wharf_outbox_endpoints (
    id                         uuid        PRIMARY KEY,
    url                        text        NOT NULL,
    description                text        NOT NULL DEFAULT '',
    -- Empty means every event type; otherwise exact types, "prefix.*" or "*".
    event_types                text[]      NOT NULL DEFAULT '{}',
    -- '' is "no tenant": such an endpoint receives only events without one.
    tenant                     text        NOT NULL DEFAULT '',
    secret                     text        NOT NULL,
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    -- 0 means no cap.
    max_in_flight              integer     NOT NULL,
    timeout_ms                 integer     NOT NULL,
    ordered                    boolean     NOT NULL DEFAULT false,
    enabled                    boolean     NOT NULL DEFAULT true,
    disabled_reason            text        NOT NULL DEFAULT '',
    disabled_at                timestamptz,
    consecutive_failures       integer     NOT NULL DEFAULT 0,
    failing_since              timestamptz,
    last_success_at            timestamptz,
    last_failure_at            timestamptz,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL,
    CONSTRAINT wharf_outbox_endpoints_url_length CHECK (char_length(url) BETWEEN 1 AND 2048),
    CONSTRAINT wharf_outbox_endpoints_tenant_length CHECK (char_length(tenant) <= 256),
    CONSTRAINT wharf_outbox_endpoints_max_in_flight CHECK (max_in_flight >= 0),
    CONSTRAINT wharf_outbox_endpoints_timeout CHECK (timeout_ms > 0)
);

-- Publish looks up the enabled endpoints of a tenant.
CREATE INDEX wharf_outbox_endpoints_tenant_idx ON wharf_outbox_endpoints (tenant) WHERE enabled;

CREATE TABLE wharf_outbox_events (
    id           uuid        NOT NULL,
    created_at   timestamptz NOT NULL,
    type         text        NOT NULL,
    -- The exact body sent: the Standard Webhooks envelope {type, timestamp, data}.
    payload      bytea       NOT NULL,
    ordering_key text        NOT NULL DEFAULT '',
    tenant       text        NOT NULL DEFAULT '',
    PRIMARY KEY (created_at, id),
    CONSTRAINT wharf_outbox_events_type_length CHECK (char_length(type) BETWEEN 1 AND 256)
) PARTITION BY RANGE (created_at);

CREATE INDEX wharf_outbox_events_id_idx ON wharf_outbox_events (id);

CREATE TABLE wharf_outbox_deliveries (
    id               uuid        PRIMARY KEY,
    -- Publish order, for ordered endpoints.
    seq              bigint      NOT NULL GENERATED ALWAYS AS IDENTITY,
    event_id         uuid        NOT NULL,
    -- The event's partition key, so the payload is found without scanning
    -- every partition.
    event_created_at timestamptz NOT NULL,
    endpoint_id      uuid        NOT NULL REFERENCES wharf_outbox_endpoints (id) ON DELETE CASCADE,
    ordering_key     text        NOT NULL DEFAULT '',
    status           text        NOT NULL DEFAULT 'pending',
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text        NOT NULL DEFAULT '',
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    succeeded_at     timestamptz,
    CONSTRAINT wharf_outbox_deliveries_status CHECK (status IN ('pending', 'retrying', 'succeeded', 'dead'))
);

CREATE INDEX wharf_outbox_deliveries_endpoint_idx ON wharf_outbox_deliveries (endpoint_id, status, created_at);
CREATE INDEX wharf_outbox_deliveries_event_idx ON wharf_outbox_deliveries (event_id);
-- Retention must keep the event partitions these rows point at.
CREATE INDEX wharf_outbox_deliveries_unfinished_idx ON wharf_outbox_deliveries (event_created_at)
    WHERE status <> 'succeeded';
CREATE INDEX wharf_outbox_deliveries_ordering_idx ON wharf_outbox_deliveries (endpoint_id, ordering_key, seq)
    WHERE ordering_key <> '' AND status IN ('pending', 'retrying');

CREATE TABLE wharf_outbox_attempts (
    id                 uuid        NOT NULL,
    attempted_at       timestamptz NOT NULL,
    delivery_id        uuid        NOT NULL,
    endpoint_id        uuid        NOT NULL,
    event_id           uuid        NOT NULL,
    attempt            integer     NOT NULL,
    status             text        NOT NULL,
    status_code        integer,
    response_body      bytea       NOT NULL DEFAULT '',
    response_truncated boolean     NOT NULL DEFAULT false,
    error              text        NOT NULL DEFAULT '',
    duration_us        bigint      NOT NULL,
    PRIMARY KEY (attempted_at, id),
    CONSTRAINT wharf_outbox_attempts_status CHECK (status IN ('succeeded', 'failed'))
) PARTITION BY RANGE (attempted_at);

CREATE INDEX wharf_outbox_attempts_delivery_idx ON wharf_outbox_attempts (delivery_id, attempted_at);

-- Per-endpoint concurrency cap: an endpoint has one row per slot (created
-- on first use, slots 0 … max_in_flight-1), and a delivery holds a slot
-- while its request is in flight. Workers take a free slot with FOR UPDATE
-- SKIP LOCKED, so they never wait for one another, and two can never hold
-- one slot. A slot is free when its lease expired: a slot held by a crashed
-- worker frees itself.
CREATE TABLE wharf_outbox_leases (
    endpoint_id uuid        NOT NULL REFERENCES wharf_outbox_endpoints (id) ON DELETE CASCADE,
    slot        integer     NOT NULL,
    delivery_id uuid,
    expires_at  timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (endpoint_id, slot)
);
