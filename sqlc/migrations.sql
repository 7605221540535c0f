-- What Wharf's queries read of golang-migrate's version table
-- (wharfmigrate.MigrationsTable), for sqlc's type checks only: golang-migrate
-- creates the real table when it first migrates. Not a migration.
CREATE TABLE wharf_schema_migrations (
    version bigint NOT NULL PRIMARY KEY,
    dirty boolean NOT NULL
);
