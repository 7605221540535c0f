-- name: AuditInsert :exec
INSERT INTO wharf_audit_log (id, at, actor_kind, actor, tenant, action, object_type, object_id, reason, details)
VALUES (@id::uuid, @at::timestamptz, @actor_kind::text, @actor::text, @tenant::text, @action::text,
        @object_type::text, @object_id::text, @reason::text, @details::jsonb);

-- name: AuditList :many
-- Newest first; tenant and object_id are optional; a page after a cursor
-- starts after (after_at, after_id).
SELECT * FROM wharf_audit_log
WHERE (sqlc.narg('tenant')::text IS NULL OR tenant = sqlc.narg('tenant')::text)
  AND (sqlc.narg('object_id')::text IS NULL OR object_id = sqlc.narg('object_id')::text)
  AND (sqlc.narg('after_at')::timestamptz IS NULL
       OR (at, id) < (sqlc.narg('after_at')::timestamptz, sqlc.narg('after_id')::uuid))
ORDER BY at DESC, id DESC
LIMIT @max_rows::int;

-- name: AuditForgetObjects :execrows
-- Empties the reasons and details of the audit entries about objects, on
-- an erasure request: who did what, and when, stays.
UPDATE wharf_audit_log
SET reason = '', details = '{}'
WHERE object_type = @object_type::text AND object_id = ANY(@object_ids::text[])
  AND (reason <> '' OR details <> '{}'::jsonb);

-- name: AuditForgetTenant :execrows
-- Empties the reasons and details of a tenant's audit entries, on an
-- erasure request, through the tenant index.
UPDATE wharf_audit_log
SET reason = '', details = '{}'
WHERE tenant = @tenant::text AND tenant <> ''
  AND (reason <> '' OR details <> '{}'::jsonb);
