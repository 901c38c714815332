-- The plane's roles: one NOLOGIN group role per kind of process, with exactly the
-- privileges that process's statements need (docs/design.md, "Roles"). A login role
-- joins one of them (GRANT dataplane_worker TO worker_login); none of them owns an
-- object: the role that runs `dataplane migrate` owns the schema, and runtime
-- processes refuse to run as it or as a superuser (dataplane/queue/roles.py).
--
-- `dataplane migrate` applies this file after the migrations, every time (so it is
-- idempotent, and a release that adds a table adds its grants here). It creates the
-- group roles when the migrating role may (CREATEROLE); otherwise a DBA runs this file
-- once as a role that may, printed by `dataplane roles`. Privileges are revoked first
-- and granted again, so a grant removed here is removed from the database too.

DO $roles$
DECLARE
    r text;
    tables text := 'maestro_queues, surface_result_blobs, worker_runs, dataplane_elections,'
                   ' dataplane_migrations, maestro_flow, dataplane_audit, maestro_paused,'
                   ' dataplane_overview, maestro_workers';
    everyone text := 'dataplane_bff, dataplane_worker, dataplane_capcom, dataplane_scaler,'
                     ' dataplane_viewer, dataplane_operator';
BEGIN
    FOREACH r IN ARRAY ARRAY['dataplane_bff', 'dataplane_worker', 'dataplane_capcom',
                             'dataplane_scaler', 'dataplane_viewer', 'dataplane_operator'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            BEGIN  -- roles are the cluster's: another database's migrator may race us
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        END IF;
    END LOOP;

    -- Nothing for anyone but the owner, then each role's own.
    EXECUTE format('REVOKE ALL ON %s FROM PUBLIC, %s', tables, everyone);
    EXECUTE format('REVOKE ALL ON SEQUENCE worker_runs_id_seq FROM PUBLIC, %s', everyone);
    EXECUTE format('REVOKE ALL ON SEQUENCE dataplane_audit_id_seq FROM PUBLIC, %s', everyone);
    EXECUTE format('REVOKE ALL ON FUNCTION'
                   ' maestro_claim(text, text, integer, double precision, jsonb)'
                   ' FROM PUBLIC, %s', everyone);
    EXECUTE format('REVOKE ALL ON FUNCTION maestro_queue_depth(text) FROM PUBLIC, %s', everyone);
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %s', current_database(), everyone);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %s', current_schema(), everyone);

    -- BFF: enqueue and attach (insert, one more requester), withdraw (the last one
    -- cancels, and the row says the requesters did and whether it ran: never an
    -- operator's name, a lease or a claim), read a job, its blob and the schema's version.
    GRANT SELECT, INSERT ON maestro_queues TO dataplane_bff;
    GRANT UPDATE (requesters, requested_by, withdrawn, status, completed_at, cancelled_by,
                  cancelled_running) ON maestro_queues
        TO dataplane_bff;
    GRANT SELECT ON surface_result_blobs, dataplane_migrations TO dataplane_bff;

    -- Worker: claim (the function runs as its caller), renew, complete, fail, release;
    -- store blobs; maintenance (poison lapsed rows, delete old rows and expired blobs)
    -- and the election that picks its leader; the slots of bounded operations; the queue sampler's read; the growth
    -- watch's ANALYZE (MAINTAIN, Postgres 17+; before 17 a non-owner's ANALYZE is
    -- skipped with a warning, autovacuum does it). No INSERT into the queue (a worker
    -- cannot enqueue), no requester counts, nothing of worker_runs.
    GRANT SELECT, DELETE ON maestro_queues TO dataplane_worker;
    GRANT UPDATE (status, result, last_error, locked_by, lease_expires_at, available_at,
                  dequeue_count, claimed_at, completed_at, progress) ON maestro_queues
        TO dataplane_worker;
    -- A failed attempt's record (0023), appended by the fail statement (job_fail).
    GRANT UPDATE (errors) ON maestro_queues TO dataplane_worker;
    GRANT SELECT, INSERT, DELETE ON surface_result_blobs TO dataplane_worker;
    GRANT SELECT, INSERT, UPDATE ON dataplane_elections TO dataplane_worker;
    GRANT SELECT ON dataplane_migrations TO dataplane_worker;
    GRANT EXECUTE ON FUNCTION maestro_claim(text, text, integer, double precision, jsonb)
        TO dataplane_worker;
    -- Flow control: a claim with bounds locks its operations' rows (FOR UPDATE needs
    -- UPDATE) and creates them on first use.
    GRANT SELECT, INSERT, UPDATE ON maestro_flow TO dataplane_worker;
    -- Pause (issue 41): the claim reads whether its type is paused.
    GRANT SELECT ON maestro_paused TO dataplane_worker;
    -- Liveness (0024): a worker beats its own row and, rescuing a lapsed worker,
    -- deletes that worker's row; a graceful stop deletes its own.
    GRANT SELECT, INSERT, UPDATE, DELETE ON maestro_workers TO dataplane_worker;
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON maestro_queues, surface_result_blobs TO dataplane_worker';
    END IF;

    -- capcom: append job reports; read nothing back.
    GRANT INSERT ON worker_runs TO dataplane_capcom;
    GRANT USAGE ON SEQUENCE worker_runs_id_seq TO dataplane_capcom;
    GRANT SELECT ON dataplane_migrations TO dataplane_capcom;

    -- Scaler (KEDA): the depth of a queue type, through the SECURITY DEFINER function,
    -- and no table at all.
    GRANT EXECUTE ON FUNCTION maestro_queue_depth(text) TO dataplane_scaler;

    -- Wallboard: job reports, the depth, and the queue's bookkeeping columns; never an
    -- envelope, a result, an error text, an attempt's record (`errors`: messages and
    -- tracebacks) or a blob (tenants' data).
    GRANT SELECT ON worker_runs TO dataplane_viewer;
    GRANT SELECT (id, type, status, client, requesters, dequeue_count, max_dequeues,
                  available_at, lease_expires_at, created_at, claimed_at, completed_at)
        ON maestro_queues TO dataplane_viewer;
    GRANT EXECUTE ON FUNCTION maestro_queue_depth(text) TO dataplane_viewer;
    GRANT SELECT ON maestro_paused TO dataplane_viewer;
    -- The wallboard's cards (0021), which the console reads too: counts, times, ratios.
    GRANT SELECT ON dataplane_overview TO dataplane_viewer, dataplane_operator;
    -- The wallboard's Poison jobs panel (0022): operation, client, the error's last line.
    GRANT SELECT ON dataplane_poison_jobs TO dataplane_viewer, dataplane_operator;

    -- Operator (the console, and the CLI's operator commands): read jobs and reports,
    -- act on jobs and queue types, and record every action in the audit table, which it
    -- may append to and read but never change.
    GRANT SELECT ON maestro_queues, worker_runs, maestro_paused, dataplane_audit,
                    dataplane_migrations
        TO dataplane_operator;
    GRANT INSERT ON dataplane_audit TO dataplane_operator;
    -- Which workers are alive, and which notify secrets they open with (`dataplane
    -- invalidate` says who will believe a tag); never a write: only workers beat.
    GRANT SELECT ON maestro_workers TO dataplane_operator;
    -- Cancel a pending or running job (dataplane/operator/cancel.py): its lock (FOR
    -- UPDATE) and the columns its statement writes (who cancelled it, 0025), no other.
    GRANT UPDATE (status, completed_at, lease_expires_at, cancelled_by, cancelled_operator,
                  cancelled_running) ON maestro_queues
        TO dataplane_operator;
    -- A job's page shows its blobs' heads (size, type, expiry), never their bytes.
    GRANT SELECT (id, job_id, content_type, size, created_at, expires_at)
        ON surface_result_blobs TO dataplane_operator;
    GRANT USAGE ON SEQUENCE dataplane_audit_id_seq TO dataplane_operator;
    GRANT EXECUTE ON FUNCTION maestro_queue_depth(text) TO dataplane_operator;
    -- Bulk retry (poison or cancelled -> pending: the columns job_filter_retry resets,
    -- who cancelled it included, granted above; no other), discard
    -- (finished rows and their blobs: a blob's ids only, never its bytes), pause and
    -- resume (a row of maestro_paused; it may not rewrite who paused it or when).
    GRANT UPDATE (status, dequeue_count, available_at, locked_by, lease_expires_at,
                  completed_at, claimed_at, progress) ON maestro_queues TO dataplane_operator;
    GRANT DELETE ON maestro_queues TO dataplane_operator;
    GRANT DELETE ON surface_result_blobs TO dataplane_operator;
    GRANT INSERT (type, paused_by), DELETE ON maestro_paused TO dataplane_operator;
END
$roles$;
