-- What Wharf's queries read of River's schema, for sqlc's type checks only:
-- River's migrations (rivermigrate) create the real table, whose state is
-- an enum, river_job_state. Not a migration.
CREATE TYPE river_job_state AS ENUM (
    'available', 'cancelled', 'completed', 'discarded', 'pending', 'retryable', 'running', 'scheduled'
);

CREATE TABLE river_job (
    id bigserial PRIMARY KEY,
    state text NOT NULL,
    kind text NOT NULL,
    args jsonb NOT NULL,
    attempt smallint NOT NULL,
    attempted_at timestamptz,
    finalized_at timestamptz,
    max_attempts smallint NOT NULL,
    priority smallint NOT NULL,
    queue text NOT NULL,
    scheduled_at timestamptz NOT NULL
);
