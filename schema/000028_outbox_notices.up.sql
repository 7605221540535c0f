-- Operational events for tenants: a change to an endpoint (disabled,
-- enabled, circuit opened or closed, secret rotated) or a delivery's death
-- leaves a notice in the transaction that makes it, whatever makes it (the
-- application, the portal, the dashboard, the CLI, or a delivery's
-- attempt). The outbox's notice job publishes each notice as an event of a
-- reserved type (wharf.endpoint.disabled, …) to the endpoints of the
-- endpoint's tenant subscribed to it, and deletes it in the same
-- transaction: each notice becomes one event, exactly once.
CREATE TABLE wharf_outbox_notices (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    tenant      text        NOT NULL,
    type        text        NOT NULL,
    data        jsonb       NOT NULL
);

CREATE FUNCTION wharf_outbox_endpoint_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    base jsonb := jsonb_build_object('endpoint_id', NEW.id);
BEGIN
    IF OLD.enabled AND NOT NEW.enabled THEN
        INSERT INTO wharf_outbox_notices (tenant, type, data)
        VALUES (NEW.tenant, 'wharf.endpoint.disabled', base || jsonb_build_object('reason', NEW.disabled_reason));
    ELSIF NEW.enabled AND NOT OLD.enabled THEN
        INSERT INTO wharf_outbox_notices (tenant, type, data) VALUES (NEW.tenant, 'wharf.endpoint.enabled', base);
    END IF;
    IF NEW.circuit_state = 'open' AND OLD.circuit_state <> 'open' THEN
        INSERT INTO wharf_outbox_notices (tenant, type, data)
        VALUES (NEW.tenant, 'wharf.endpoint.circuit_opened',
                base || jsonb_build_object('until', NEW.circuit_open_until, 'openings', NEW.circuit_openings));
    ELSIF NEW.circuit_state = 'closed' AND OLD.circuit_state <> 'closed' THEN
        INSERT INTO wharf_outbox_notices (tenant, type, data) VALUES (NEW.tenant, 'wharf.endpoint.circuit_closed', base);
    END IF;
    -- A rotation sets when the previous secret stops signing; re-encrypting
    -- the secrets under a new key changes neither that nor the secret.
    IF NEW.previous_secret_expires_at IS DISTINCT FROM OLD.previous_secret_expires_at
       AND NEW.secret IS DISTINCT FROM OLD.secret THEN
        INSERT INTO wharf_outbox_notices (tenant, type, data)
        VALUES (NEW.tenant, 'wharf.endpoint.secret_rotated',
                base || jsonb_build_object('previous_secret_until', NEW.previous_secret_expires_at));
    END IF;
    RETURN NULL;
END
$$;

-- The WHEN clause keeps the function off the hot path: a delivery's
-- attempt that changes none of these columns calls nothing.
CREATE TRIGGER wharf_outbox_endpoint_notice
AFTER UPDATE ON wharf_outbox_endpoints
FOR EACH ROW
WHEN (OLD.enabled IS DISTINCT FROM NEW.enabled
      OR OLD.circuit_state IS DISTINCT FROM NEW.circuit_state
      OR OLD.previous_secret_expires_at IS DISTINCT FROM NEW.previous_secret_expires_at)
EXECUTE FUNCTION wharf_outbox_endpoint_notice();

CREATE FUNCTION wharf_outbox_delivery_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    event_type text;
    endpoint_tenant text;
BEGIN
    SELECT ev.type INTO event_type FROM wharf_outbox_events ev
    WHERE ev.created_at = NEW.event_created_at AND ev.id = NEW.event_id;
    -- The death of an operational event's delivery is told to no one: an
    -- endpoint subscribed to wharf.delivery.dead that fails would
    -- otherwise feed itself.
    IF starts_with(COALESCE(event_type, ''), 'wharf.') THEN
        RETURN NULL;
    END IF;
    SELECT ep.tenant INTO endpoint_tenant FROM wharf_outbox_endpoints ep WHERE ep.id = NEW.endpoint_id;
    INSERT INTO wharf_outbox_notices (tenant, type, data)
    VALUES (COALESCE(endpoint_tenant, ''), 'wharf.delivery.dead', jsonb_build_object(
        'endpoint_id', NEW.endpoint_id, 'delivery_id', NEW.id, 'event_id', 'evt_' || NEW.event_id::text,
        'event_type', COALESCE(event_type, ''), 'attempts', NEW.attempts, 'reason', NEW.last_error));
    RETURN NULL;
END
$$;

CREATE TRIGGER wharf_outbox_delivery_notice
AFTER UPDATE ON wharf_outbox_deliveries
FOR EACH ROW
WHEN (NEW.status = 'dead' AND OLD.status IS DISTINCT FROM 'dead')
EXECUTE FUNCTION wharf_outbox_delivery_notice();
