-- Statements of the migration runner (dataplane/migrate.py).

-- name: migration_lock
-- Serialise concurrent migrators (session-level advisory lock).
SELECT pg_advisory_lock(hashtext('dataplane.migrate'));

-- name: migration_unlock
-- Release the migrators' advisory lock.
SELECT pg_advisory_unlock(hashtext('dataplane.migrate'));

-- name: migration_table
-- The record of applied migrations.
CREATE TABLE IF NOT EXISTS dataplane_migrations (
    version    text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: migration_applied
-- Every applied migration.
SELECT version, checksum FROM dataplane_migrations ORDER BY version;

-- name: migration_record
-- Record one applied migration.
INSERT INTO dataplane_migrations (version, checksum) VALUES (%(version)s, %(checksum)s);

-- name: database_open_to_public
-- Whether every role may connect to this database (PUBLIC holds CONNECT, the default).
SELECT has_database_privilege('public', current_database(), 'CONNECT') AS open,
       current_database() AS name;
