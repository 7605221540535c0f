-- name: SessionBackendPID :one
-- The pid of the server process running this statement. Through a
-- connection pooler it differs from the pid the connection was given at
-- startup (the pooler's own), which is how Wharf tells a pooled connection
-- from a direct one.
SELECT pg_backend_pid();
