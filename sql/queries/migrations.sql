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

-- name: roles_state
-- The plane's group roles that do not exist yet, whether this role may create them,
-- and its name (dataplane/queue/roles.py).
SELECT coalesce(array_agg(n ORDER BY n)
                FILTER (WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = n)),
                '{}') AS missing,
       (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user)
           AS may_create,
       current_user AS me
FROM unnest(%(names)s::text[]) AS n;

-- name: runtime_role
-- This session's role: whether it is a superuser, or may act as the owner of the queue
-- table (a member of the owning role, or the owner itself).
SELECT current_user AS me, r.rolsuper AS superuser,
       coalesce(pg_has_role(current_user, c.relowner, 'USAGE'), false) AS owner
FROM pg_roles AS r
LEFT JOIN pg_class AS c ON c.oid = to_regclass('maestro_queues')
WHERE r.rolname = current_user;

-- name: role_login_create
-- A login role in one of the plane's groups ({login}, {group}: Identifiers; {password}:
-- a Literal), for `dataplane dev` and the tests' processes.
CREATE ROLE {login} LOGIN PASSWORD {password} IN ROLE {group};

-- name: role_login_alter
-- The same login role, existing already: a new password, still a member of its group.
ALTER ROLE {login} LOGIN PASSWORD {password};

-- name: role_login_grant
-- Make an existing login role a member of its group.
GRANT {group} TO {login};

-- name: role_exists
-- Whether a role of this name exists.
SELECT 1 AS found FROM pg_roles WHERE rolname = %(name)s;
