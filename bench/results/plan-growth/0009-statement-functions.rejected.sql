-- The queue's per-request statements as functions planned with sequential scans off.
--
-- Each session keeps one plan per prepared statement: Postgres' plan cache switches
-- a statement to its generic plan after five custom ones, and keeps that plan until
-- the table is next analyzed. The plane's sessions start at idle, so those plans are
-- usually made while the queue is almost empty, where reading the whole table looks
-- cheapest. Kept through a burst, a plan made then read the whole table at every
-- enqueue (30 ms each at 100,000 rows, about ten scans), every renewal, completion
-- and reply read, until autovacuum's next ANALYZE (about a minute by default).
-- Migration 0008 fixed the claim this way; these are the others a request costs:
-- the enqueue, the batched insert, the attach, the lease renewal, the completion,
-- the failure, the release, the cancel, the row reads of the BFF and the reply
-- pump, and the blob reads. Each one is the statement it replaces (the one formerly
-- named the same in sql/queries/queue.sql), in a PL/pgSQL function run with
-- plan_cache_mode = force_generic_plan (planned once per session, at any size) and
-- enable_seqscan = off (every access to the queue's tables has an index). Where the
-- statement joined a list of ids to the table, the function also looks the ids up
-- with id = ANY (the list), so the plan probes the primary key instead of joining
-- over a scan of a whole index.
--
-- A set_config(..., true) inside a function lasts to the end of the transaction
-- (only the settings a function's own SET clause names are restored on its exit), so
-- the relaxed commit of an attach is unchanged.

CREATE OR REPLACE FUNCTION maestro_enqueue(
    p_type text,
    p_dedupe_key text,
    p_payload jsonb,
    p_max_dequeues integer,
    p_client text
) RETURNS TABLE (id uuid, status text, coalesced boolean, traceparent text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $enqueue$
#variable_conflict use_column
BEGIN
    -- Attach to the live job of this dedupe key (one more requester), or insert a
    -- new one; the wake-up notify fires on commit. No row: an identical job
    -- committed after this statement's snapshot (the caller runs it again).
    RETURN QUERY
    WITH attached AS (
        UPDATE maestro_queues q
        SET requesters = q.requesters + 1
        WHERE q.dedupe_key = p_dedupe_key AND q.status IN ('pending', 'in_progress')
        RETURNING q.id, q.status, q.payload ->> 'traceparent' AS traceparent
    ), ins AS (
        INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client)
        SELECT p_type, p_dedupe_key, p_payload, p_max_dequeues, p_client
        WHERE NOT EXISTS (SELECT 1 FROM attached)
        ON CONFLICT (dedupe_key) WHERE status IN ('pending', 'in_progress') DO NOTHING
        RETURNING maestro_queues.id, maestro_queues.status
    ), wake AS (
        SELECT pg_notify(maestro_wake_channel(p_type), '') FROM ins
    ), relaxed AS MATERIALIZED (
        -- Attaching only counts one more requester: its commit need not wait for the
        -- WAL flush (a count lost in a crash only affects cancellation), so the row
        -- lock that identical requests queue on is held for microseconds. A new row
        -- stays durable.
        SELECT set_config('synchronous_commit', 'off', true) FROM attached LIMIT 1
    )
    SELECT ins.id, ins.status, false, p_payload ->> 'traceparent'
    FROM ins
    WHERE (SELECT count(*) FROM wake) >= 0
    UNION ALL
    SELECT a.id, a.status, true, a.traceparent
    FROM attached a
    WHERE (SELECT count(*) FROM relaxed) >= 0;
END
$enqueue$;

CREATE OR REPLACE FUNCTION maestro_insert_many(
    p_types text[],
    p_dedupe_keys text[],
    p_payloads text[],
    p_max_dequeues integer[],
    p_clients text[]
) RETURNS TABLE (id uuid, dedupe_key text, status text, traceparent text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $insert_many$
#variable_conflict use_column
BEGIN
    -- New jobs (enqueues that arrived together), a row per dedupe key unless a live
    -- job has it (those come back missing), inserted in dedupe-key order; one wake
    -- notify per queue type.
    RETURN QUERY
    WITH v AS (
        SELECT *
        FROM unnest(p_types, p_dedupe_keys, p_payloads, p_max_dequeues, p_clients)
             AS v(type, dedupe_key, payload, max_dequeues, client)
    ), ins AS (
        INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client)
        SELECT v.type, v.dedupe_key, v.payload::jsonb, v.max_dequeues, v.client
        FROM v
        ORDER BY v.dedupe_key
        ON CONFLICT (dedupe_key) WHERE status IN ('pending', 'in_progress') DO NOTHING
        RETURNING maestro_queues.id, maestro_queues.type, maestro_queues.dedupe_key,
                  maestro_queues.status, maestro_queues.payload ->> 'traceparent' AS traceparent
    ), wake AS (
        SELECT pg_notify(maestro_wake_channel(t.type), '')
        FROM (SELECT DISTINCT ins.type FROM ins) AS t
    )
    SELECT ins.id, ins.dedupe_key, ins.status, ins.traceparent
    FROM ins
    WHERE (SELECT count(*) FROM wake) >= 0;
END
$insert_many$;

CREATE OR REPLACE FUNCTION maestro_attach(p_dedupe_key text)
RETURNS TABLE (id uuid, status text, coalesced boolean, traceparent text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $attach$
#variable_conflict use_column
BEGIN
    -- One more requester of the live job of this dedupe key, if there is one
    -- (committed without waiting for the WAL flush, as an attach in maestro_enqueue).
    RETURN QUERY
    WITH relaxed AS MATERIALIZED (
        SELECT set_config('synchronous_commit', 'off', true) AS setting
    )
    UPDATE maestro_queues q
    SET requesters = q.requesters + 1
    FROM relaxed
    WHERE q.dedupe_key = p_dedupe_key AND q.status IN ('pending', 'in_progress')
    RETURNING q.id, q.status, true, q.payload ->> 'traceparent';
END
$attach$;

CREATE OR REPLACE FUNCTION maestro_renew(
    p_ids uuid[],
    p_dequeue_counts integer[],
    p_worker_id text,
    p_lease_seconds double precision
) RETURNS TABLE (id uuid)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $renew$
#variable_conflict use_column
BEGIN
    -- Extend the lease of every listed row this worker still holds (fenced).
    RETURN QUERY
    UPDATE maestro_queues q
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_ids, p_dequeue_counts) AS held(id, dequeue_count)
    WHERE q.id = ANY (p_ids)
      AND q.id = held.id
      AND q.locked_by = p_worker_id
      AND q.dequeue_count = held.dequeue_count
      AND q.status = 'in_progress'
    RETURNING q.id;
END
$renew$;

CREATE OR REPLACE FUNCTION maestro_complete(
    p_ids uuid[],
    p_dequeue_counts integer[],
    p_results jsonb[],
    p_blob_types text[],
    p_blob_data bytea[],
    p_worker_id text,
    p_blob_ttl_seconds double precision
) RETURNS TABLE (id uuid)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $complete$
#variable_conflict use_column
BEGIN
    -- Finish held rows (fenced): result, optional blob and the done notify together.
    -- A row whose claim was lost is left untouched.
    RETURN QUERY
    WITH v AS (
        SELECT *
        FROM unnest(p_ids, p_dequeue_counts, p_results, p_blob_types, p_blob_data)
             AS v(id, dequeue_count, result, blob_type, blob_data)
    ), done AS (
        UPDATE maestro_queues q
        SET status = 'done',
            result = v.result,
            completed_at = now(),
            lease_expires_at = NULL
        FROM v
        WHERE q.id = ANY (p_ids)
          AND q.id = v.id
          AND q.locked_by = p_worker_id
          AND q.dequeue_count = v.dequeue_count
          AND q.status = 'in_progress'
        RETURNING q.id, q.type
    ), blobs AS (
        INSERT INTO surface_result_blobs (job_id, content_type, data, size, expires_at)
        SELECT v.id, v.blob_type, v.blob_data, octet_length(v.blob_data),
               now() + make_interval(secs => p_blob_ttl_seconds)
        FROM v JOIN done ON done.id = v.id
        WHERE v.blob_data IS NOT NULL
        RETURNING surface_result_blobs.job_id
    )
    SELECT done.id
    FROM done
    CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(done.type), done.id::text)) AS n
    WHERE (SELECT count(*) FROM blobs) >= 0;
END
$complete$;

CREATE OR REPLACE FUNCTION maestro_fail(
    p_id uuid,
    p_worker_id text,
    p_dequeue_count integer,
    p_backoff_seconds double precision,
    p_error text
) RETURNS TABLE (id uuid, status text)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fail$
#variable_conflict use_column
BEGIN
    -- An unexpected error (fenced): back to pending after the backoff, or to poison
    -- at the cutoff, in which case the done channel hears of it at once.
    RETURN QUERY
    WITH f AS (
        UPDATE maestro_queues q
        SET status = CASE WHEN q.dequeue_count >= q.max_dequeues THEN 'poison' ELSE 'pending' END,
            available_at = now() + make_interval(secs => p_backoff_seconds),
            last_error = p_error,
            locked_by = CASE WHEN q.dequeue_count >= q.max_dequeues THEN q.locked_by END,
            lease_expires_at = NULL,
            completed_at = CASE WHEN q.dequeue_count >= q.max_dequeues THEN now() END
        WHERE q.id = p_id
          AND q.locked_by = p_worker_id
          AND q.dequeue_count = p_dequeue_count
          AND q.status = 'in_progress'
        RETURNING q.id, q.type, q.status
    )
    SELECT f.id, f.status
    FROM f
    LEFT JOIN LATERAL (
        SELECT pg_notify(maestro_done_channel(f.type), f.id::text) WHERE f.status = 'poison'
    ) AS n ON true;
END
$fail$;

CREATE OR REPLACE FUNCTION maestro_release(
    p_ids uuid[],
    p_dequeue_counts integer[],
    p_worker_id text
) RETURNS TABLE (id uuid)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $release$
#variable_conflict use_column
BEGIN
    -- Hand held rows back (graceful shutdown): pending, claimable at once, and the
    -- claim being returned does not count toward the poison cutoff.
    RETURN QUERY
    WITH r AS (
        UPDATE maestro_queues q
        SET status = 'pending',
            locked_by = NULL,
            lease_expires_at = NULL,
            available_at = now(),
            dequeue_count = q.dequeue_count - 1
        FROM unnest(p_ids, p_dequeue_counts) AS held(id, dequeue_count)
        WHERE q.id = ANY (p_ids)
          AND q.id = held.id
          AND q.locked_by = p_worker_id
          AND q.dequeue_count = held.dequeue_count
          AND q.status = 'in_progress'
        RETURNING q.id, q.type
    )
    SELECT r.id
    FROM r
    CROSS JOIN LATERAL (SELECT pg_notify(maestro_wake_channel(r.type), '')) AS n;
END
$release$;

CREATE OR REPLACE FUNCTION maestro_cancel(p_id uuid)
RETURNS TABLE (id uuid, status text, requesters integer)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $cancel$
#variable_conflict use_column
BEGIN
    -- One requester withdraws from a pending job; the last one cancels it (its
    -- streams hear of it on the done channel). Running or finished rows: untouched.
    RETURN QUERY
    WITH c AS (
        UPDATE maestro_queues q
        SET requesters = q.requesters - 1,
            status = CASE WHEN q.requesters <= 1 THEN 'cancelled' ELSE q.status END,
            completed_at = CASE WHEN q.requesters <= 1 THEN now() END
        WHERE q.id = p_id AND q.status = 'pending'
        RETURNING q.id, q.type, q.status, q.requesters
    )
    SELECT c.id, c.status, c.requesters
    FROM c
    LEFT JOIN LATERAL (
        SELECT pg_notify(maestro_done_channel(c.type), c.id::text) WHERE c.status = 'cancelled'
    ) AS n ON true;
END
$cancel$;

-- The row reads return whole rows; each statement names the columns it reads.
CREATE OR REPLACE FUNCTION maestro_get(p_id uuid)
RETURNS SETOF maestro_queues
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $get$
BEGIN
    RETURN QUERY SELECT q.* FROM maestro_queues q WHERE q.id = p_id;
END
$get$;

CREATE OR REPLACE FUNCTION maestro_get_finished_many(p_ids uuid[])
RETURNS SETOF maestro_queues
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $get_finished_many$
BEGIN
    -- The finished ones among several jobs (live rows are not returned).
    RETURN QUERY
    SELECT q.* FROM maestro_queues q
    WHERE q.id = ANY (p_ids) AND q.status IN ('done', 'poison', 'cancelled');
END
$get_finished_many$;

CREATE OR REPLACE FUNCTION maestro_get_owned(
    p_id uuid,
    p_type text,
    p_client text,
    p_scope_key text
) RETURNS SETOF maestro_queues
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $get_owned$
BEGIN
    -- One job for its owner only: another tenant's id returns nothing.
    RETURN QUERY
    SELECT q.* FROM maestro_queues q
    WHERE q.id = p_id
      AND q.type = p_type
      AND q.payload -> 'auth' ->> 'client' = p_client
      AND q.payload -> 'auth' ->> 'scopeKey' = p_scope_key;
END
$get_owned$;

CREATE OR REPLACE FUNCTION maestro_blob_head(p_job_id uuid)
RETURNS TABLE (
    id uuid,
    job_id uuid,
    content_type text,
    size bigint,
    created_at timestamptz,
    expires_at timestamptz
)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $blob_head$
#variable_conflict use_column
BEGIN
    -- The newest unexpired blob of a job, without its bytes.
    RETURN QUERY
    SELECT b.id, b.job_id, b.content_type, b.size, b.created_at, b.expires_at
    FROM surface_result_blobs b
    WHERE b.job_id = p_job_id AND b.expires_at > now()
    ORDER BY b.created_at DESC
    LIMIT 1;
END
$blob_head$;

CREATE OR REPLACE FUNCTION maestro_blob_chunk(p_id uuid, p_offset integer, p_length integer)
RETURNS TABLE (chunk bytea)
LANGUAGE plpgsql
STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $blob_chunk$
BEGIN
    -- p_length bytes of one blob from byte p_offset (0-based); no row once expired.
    RETURN QUERY
    SELECT substring(b.data FROM p_offset + 1 FOR p_length)
    FROM surface_result_blobs b
    WHERE b.id = p_id AND b.expires_at > now();
END
$blob_chunk$;
