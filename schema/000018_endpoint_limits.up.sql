-- Per-endpoint rate limit and circuit breaker.
--
-- rate_limit_per_second, rate_limit_burst: a token bucket shared by every
-- worker process: at most burst requests at once, refilled at
-- rate_limit_per_second. 0 and 0 mean no limit.
--
-- circuit_*: the endpoint's circuit breaker. After Config's threshold of
-- consecutive failed attempts the circuit opens: deliveries wait, without
-- using an attempt, until circuit_open_until; then one delivery at a time
-- (circuit_probe_delivery_id, until circuit_probe_expires_at) probes the
-- endpoint (half_open). Its success closes the circuit; its failure opens
-- it again for a cool-down that doubles with each of circuit_openings.
-- Circuit times are the database's clock, like concurrency leases.
ALTER TABLE wharf_outbox_endpoints
    ADD COLUMN rate_limit_per_second double precision NOT NULL DEFAULT 0,
    ADD COLUMN rate_limit_burst integer NOT NULL DEFAULT 0,
    ADD COLUMN circuit_state text NOT NULL DEFAULT 'closed',
    ADD COLUMN circuit_opened_at timestamptz,
    ADD COLUMN circuit_open_until timestamptz,
    ADD COLUMN circuit_openings integer NOT NULL DEFAULT 0,
    ADD COLUMN circuit_probe_delivery_id uuid,
    ADD COLUMN circuit_probe_expires_at timestamptz,
    ADD CONSTRAINT wharf_outbox_endpoints_rate_limit
        CHECK ((rate_limit_per_second = 0 AND rate_limit_burst = 0)
               OR (rate_limit_per_second > 0 AND rate_limit_per_second <= 1000000 AND rate_limit_burst >= 1)),
    ADD CONSTRAINT wharf_outbox_endpoints_circuit_state
        CHECK (circuit_state IN ('closed', 'open', 'half_open'));

-- The rate limit's state, one row per rate-limited endpoint (created on
-- first use), apart from the endpoint's row so that taking a token never
-- waits for (or blocks) the endpoint's health writes; its constant size
-- makes each take one small HOT update.
--
-- tat: the bucket as a GCRA "theoretical arrival time": a request conforms
-- at the earliest time t where tat - t <= (burst - 1) / rate, and pushes
-- tat on by 1 / rate.
-- queued_until: the end of the queue of deliveries waiting for tokens. A
-- delivery that must wait gets the turn max(queued_until, its token's due
-- time) and pushes queued_until on by 1 / rate, so that waiting
-- deliveries come back one token apart instead of all at once.
CREATE TABLE wharf_outbox_rate_buckets (
    endpoint_id  uuid        PRIMARY KEY REFERENCES wharf_outbox_endpoints (id) ON DELETE CASCADE,
    tat          timestamptz NOT NULL DEFAULT '-infinity',
    queued_until timestamptz NOT NULL DEFAULT '-infinity'
);

-- A delivery waiting for a rate limit token: when its turn comes (its job
-- is snoozed until then, and then goes before deliveries that have not
-- waited). NULL: not waiting.
ALTER TABLE wharf_outbox_deliveries ADD COLUMN throttled_until timestamptz;
