-- An endpoint's version counts the changes to how its deliveries are sent
-- and admitted: each EndpointUpdate, EndpointDisable, EndpointEnable and
-- EndpointRotateSecret, and each attempt that disables the endpoint or
-- opens its circuit. A batch job loads the endpoint once and then sends
-- one delivery after another; the statement that records each attempt
-- returns the version, and a batch that finds it changed hands the rest on
-- to a new job, which loads the endpoint afresh (URL, secrets, cap, rate
-- limit, enabling). A counter, not updated_at: equal or backward clocks
-- cannot hide a change from it.
ALTER TABLE wharf_outbox_endpoints ADD COLUMN version bigint NOT NULL DEFAULT 0;
