-- The test kit (dataplane.testing): what a test asserts on, and the read-only login
-- of a client DB built from a test's own SQL. Never run by a process of the plane.

-- name: kit_enqueued
-- The rows of some queue types, oldest first (one operation's, or every one's).
SELECT id, type, status, payload->>'operation' AS operation, payload->'params' AS params,
       requesters, dequeue_count, created_at
FROM maestro_queues
WHERE type = ANY(%(types)s)
  AND (%(operation)s::text IS NULL OR payload->>'operation' = %(operation)s)
ORDER BY created_at, id;

-- name: kit_executions
-- The finished attempts of some queue types as capcom records them, in order.
SELECT job_id, type, operation, outcome, cache, coalesced, dequeue_count, worker_id
FROM worker_runs
WHERE type = ANY(%(types)s)
  AND (%(operation)s::text IS NULL OR operation = %(operation)s)
ORDER BY id;

-- name: kit_client_role
-- The kit's read-only login (cluster-wide, created once): a password for tests only.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'dataplane_kit_ro') THEN
        CREATE ROLE dataplane_kit_ro LOGIN PASSWORD 'dataplane_kit_ro';
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- another session of the same server made it meanwhile
END
$$;

-- name: kit_client_lockdown
-- After a test's SQL ran in its client DB: the kit's login may read every table, and
-- nothing else (what dataplane.worker.readonly proves at a worker's boot).
DO $$
DECLARE
    s text;
BEGIN
    EXECUTE format('REVOKE CREATE, TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO dataplane_kit_ro', current_database());
    REVOKE EXECUTE ON FUNCTION
        pg_catalog.lo_creat(integer), pg_catalog.lo_create(oid),
        pg_catalog.lo_from_bytea(oid, bytea), pg_catalog.lo_import(text),
        pg_catalog.lo_import(text, oid), pg_catalog.lo_export(oid, text),
        pg_catalog.lo_put(oid, bigint, bytea), pg_catalog.lowrite(integer, bytea),
        pg_catalog.lo_truncate(integer, integer), pg_catalog.lo_truncate64(integer, bigint),
        pg_catalog.lo_unlink(oid)
    FROM PUBLIC;
    FOR s IN
        SELECT nspname FROM pg_catalog.pg_namespace
        WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
    LOOP
        EXECUTE format('REVOKE CREATE ON SCHEMA %I FROM PUBLIC', s);
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM PUBLIC', s);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM PUBLIC', s);
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO dataplane_kit_ro', s);
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO dataplane_kit_ro', s);
    END LOOP;
END
$$;
