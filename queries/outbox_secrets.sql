-- name: OutboxEndpointSecretsLock :many
-- A batch of ReencryptSecrets: the next endpoints after after_id, in id
-- order, with a signing secret or an auth credential not sealed under
-- current_prefix ("wharfenc:v1:<current key id>:"), locked until the
-- transaction that rewrites them commits.
--
-- FOR NO KEY UPDATE conflicts with every other write of these rows
-- (EndpointUpdate, EndpointRotateSecret, an attempt's health write,
-- another ReencryptSecrets), so none of them changes a secret between this
-- read and the rewrite only to be overwritten by it: a rotation waits, then
-- moves the rewritten secret to previous_secret. It does not conflict with
-- the KEY SHARE locks deliveries take first. A row another transaction
-- changed while this statement waited for it is checked again: one another
-- node re-encrypted meanwhile no longer matches and is skipped (LIMIT
-- counts only the rows locked), so concurrent runs rewrite each row once.
-- Rows are locked in id order, as every run locks them, so two runs cannot
-- deadlock.
SELECT id, secret, previous_secret, auth
FROM wharf_outbox_endpoints
WHERE id > @after_id::uuid
  AND (NOT starts_with(secret, @current_prefix::text)
       OR NOT starts_with(COALESCE(previous_secret, @current_prefix::text), @current_prefix::text)
       OR NOT starts_with(COALESCE(NULLIF(auth->>'token', ''), @current_prefix::text), @current_prefix::text)
       OR NOT starts_with(COALESCE(NULLIF(auth->>'password', ''), @current_prefix::text), @current_prefix::text)
       OR NOT starts_with(COALESCE(NULLIF(auth->>'client_secret', ''), @current_prefix::text), @current_prefix::text))
ORDER BY id
LIMIT @max_rows::int
FOR NO KEY UPDATE;

-- name: OutboxEndpointSecretsSet :exec
-- Rewrites the signing secrets and auth of endpoints that
-- OutboxEndpointSecretsLock locked in this transaction (previous_secrets
-- holds an empty string for NULL). updated_at stays: no setting of the
-- endpoint changed.
WITH input AS (
    SELECT (@ids::uuid[])[i] AS id,
           (@secrets::text[])[i] AS secret,
           NULLIF((@previous_secrets::text[])[i], '') AS previous_secret,
           (@auths::text[])[i]::jsonb AS auth
    FROM generate_subscripts(@ids::uuid[], 1) AS i
)
UPDATE wharf_outbox_endpoints ep
SET secret = input.secret,
    previous_secret = input.previous_secret,
    auth = input.auth
FROM input
WHERE ep.id = input.id;
