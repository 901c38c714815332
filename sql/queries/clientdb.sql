-- Statements about client databases (dataplane/clientdb.py).

-- name: ro_write_privileges
-- Everything the current role could write or create; no rows = read-only.
SELECT 'superuser' AS kind, current_user::text AS name
FROM pg_roles WHERE rolname = current_user AND rolsuper
UNION ALL
SELECT 'database', current_database()::text
WHERE has_database_privilege(current_database(), 'CREATE')
UNION ALL
SELECT 'schema', n.nspname::text
FROM pg_namespace n
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_toast%'
  AND n.nspname NOT LIKE 'pg\_temp\_%'
  AND has_schema_privilege(n.oid, 'CREATE')
UNION ALL
SELECT 'table', n.nspname || '.' || c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\_toast%'
  AND (has_table_privilege(c.oid, 'INSERT') OR has_table_privilege(c.oid, 'UPDATE')
       OR has_table_privilege(c.oid, 'DELETE') OR has_table_privilege(c.oid, 'TRUNCATE'))
ORDER BY 1, 2;

-- name: demo_db_exists
-- Whether a database exists (run on the admin connection).
SELECT 1 AS found FROM pg_database WHERE datname = %(name)s;

-- name: demo_db_create
-- Create a database ({name} is an Identifier).
CREATE DATABASE {name};

-- name: demo_db_seeded
-- Whether the demo data set is complete (the role file runs last).
SELECT 1 AS found FROM pg_roles WHERE rolname = 'dataplane_ro'
  AND EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'lms' AND tablename = 'invoice_lines')
  AND EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = 'dataplane_demo_seeded');

-- name: demo_db_mark_seeded
-- Record that every seed file ran.
CREATE TABLE IF NOT EXISTS public.dataplane_demo_seeded (seeded_at timestamptz NOT NULL DEFAULT now());

-- name: demo_role_password
-- Set the read-only role's password ({password} is a Literal).
ALTER ROLE dataplane_ro PASSWORD {password};
