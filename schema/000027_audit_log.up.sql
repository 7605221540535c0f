-- Who changed what, from the tenant API and portal, the dashboard, the CLI
-- or the application's own calls: one row per state-changing action
-- (endpoint create, update, disable, enable, rotate, delete, recover;
-- delivery and message replay; message skip and erasure), written in the
-- transaction of the action, so a rolled-back action leaves none.
CREATE TABLE wharf_audit_log (
    id          uuid        PRIMARY KEY,
    at          timestamptz NOT NULL,
    -- tenant (through the portal), operator (dashboard, CLI, or an
    -- identity the application set), or app (no identity given).
    actor_kind  text        NOT NULL,
    actor       text        NOT NULL,
    -- The tenant of the object acted on ('' for none).
    tenant      text        NOT NULL,
    action      text        NOT NULL,
    object_type text        NOT NULL,
    object_id   text        NOT NULL,
    reason      text        NOT NULL,
    details     jsonb       NOT NULL
);
-- The dashboard's list (newest first) and a tenant's.
CREATE INDEX wharf_audit_log_at ON wharf_audit_log (at DESC, id DESC);
CREATE INDEX wharf_audit_log_tenant_at ON wharf_audit_log (tenant, at DESC, id DESC);

-- An event published to one endpoint only (PublishToTx: a test event)
-- names it, so that recovering another endpoint never sends it there.
ALTER TABLE wharf_outbox_events ADD COLUMN target_endpoint_id uuid;

-- The jobs maintainer's AuditRetention, recorded with its other settings
-- for the operator's tools (a record from an older build reads as the
-- default, 365 days).
ALTER TABLE wharf_retention_settings ADD COLUMN audit_retention interval NOT NULL DEFAULT interval '365 days';
