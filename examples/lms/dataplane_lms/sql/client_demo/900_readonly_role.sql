-- Read-only login role for the data-plane workers.
-- Idempotent: safe to run repeatedly (also after re-seeding).
-- Password 'dataplane_ro' is a placeholder; the Python side may
--   ALTER ROLE dataplane_ro PASSWORD '...'  afterwards.
-- End state: dataplane_ro can CONNECT to this database, USAGE on schema lms,
-- SELECT on lms tables -- nothing else (no DML, TRUNCATE, REFERENCES, TRIGGER,
-- no CREATE on any schema, no TEMP tables, no large objects).

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'dataplane_ro') THEN
        CREATE ROLE dataplane_ro LOGIN PASSWORD 'dataplane_ro';
    END IF;
END
$$;

ALTER ROLE dataplane_ro WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE dataplane_ro SET default_transaction_read_only = on;
-- the shared scope predicate ('*' = ANY(...) OR branch_id = ANY(...)) plans best with custom plans
ALTER ROLE dataplane_ro SET plan_cache_mode = force_custom_plan;

-- Lock down PUBLIC first (affects every non-owner role in this database).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA lms FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA lms FROM PUBLIC;
-- Postgres lets PUBLIC create, write and unlink large objects in every database (the
-- large-object functions); the worker refuses a credential that may call them.
REVOKE EXECUTE ON FUNCTION
    pg_catalog.lo_creat(integer), pg_catalog.lo_create(oid),
    pg_catalog.lo_from_bytea(oid, bytea), pg_catalog.lo_import(text),
    pg_catalog.lo_import(text, oid), pg_catalog.lo_export(oid, text),
    pg_catalog.lo_put(oid, bigint, bytea), pg_catalog.lowrite(integer, bytea),
    pg_catalog.lo_truncate(integer, integer), pg_catalog.lo_truncate64(integer, bigint),
    pg_catalog.lo_unlink(oid)
FROM PUBLIC;

DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM dataplane_ro', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO dataplane_ro', current_database());
END
$$;

-- Reset whatever dataplane_ro may have held before, then grant exactly SELECT.
REVOKE ALL ON SCHEMA public FROM dataplane_ro;
REVOKE ALL ON SCHEMA lms FROM dataplane_ro;
REVOKE ALL ON ALL TABLES IN SCHEMA lms FROM dataplane_ro;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA lms FROM dataplane_ro;

GRANT USAGE ON SCHEMA lms TO dataplane_ro;
GRANT SELECT ON ALL TABLES IN SCHEMA lms TO dataplane_ro;
-- tables created later in lms by the role running this file are readable too
ALTER DEFAULT PRIVILEGES IN SCHEMA lms GRANT SELECT ON TABLES TO dataplane_ro;
