-- The dashboard's endpoint health without aggregating a day of delivery
-- attempts.
--
-- Delivery attempts per endpoint, outcome and hour, for closed hours: the
-- jobs package's rollup job counts each hour once it has ended (and its
-- slowest attempt has been recorded), moving wharf_rollups.until of
-- 'outbox_attempts_hourly', and the dashboard counts live only the hours
-- after it. outcome is the answer's status class ('2xx' to '5xx'), 'no
-- answer' (a timeout, a refused or broken connection) or 'other' (a status
-- outside 200 to 599).
--
-- No foreign key to wharf_outbox_endpoints, as wharf_outbox_attempts has
-- none: a deleted endpoint's attempts stay until retention drops their day,
-- and its hours here stay until the rollup prunes them (after 8 days), so
-- that the counts are the same from here or live; the overview labels such
-- an endpoint "(deleted)", the endpoints page lists only existing ones.
CREATE TABLE wharf_outbox_attempts_hourly (
    hour        timestamptz NOT NULL,
    endpoint_id uuid        NOT NULL,
    outcome     text        NOT NULL,
    attempts    bigint      NOT NULL,
    PRIMARY KEY (hour, endpoint_id, outcome),
    CONSTRAINT wharf_outbox_attempts_hourly_outcome
        CHECK (outcome IN ('2xx', '3xx', '4xx', '5xx', 'no answer', 'other'))
);
