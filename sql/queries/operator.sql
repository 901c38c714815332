-- Operators' statements (dataplane/operator): the console and the CLI alike.

-- name: audit_insert
-- One action's row, in the action's transaction.
INSERT INTO dataplane_audit (actor, via, action, target, rows)
VALUES (%(actor)s, %(via)s, %(action)s, %(target)s::jsonb, %(rows)s)
RETURNING id;

-- name: audit_list
-- The newest actions first (keyset: ids below %(before)s when given).
SELECT id, at, actor, via, action, target, rows
FROM dataplane_audit
WHERE %(before)s::bigint IS NULL OR id < %(before)s::bigint
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_operator_lock
-- The job an operator acts on, locked until the action's transaction ends (its status
-- cannot change between reading it and acting on it).
SELECT id, type, status FROM maestro_queues WHERE id = %(id)s FOR UPDATE;

-- name: job_operator_cancel
-- An operator cancels a live job (pending or running): cancelled by 'operator', named
-- (`operator`: the audit row's actor), whether it was running, its completion time set,
-- its lease cleared; locked_by and dequeue_count stay, the claim its worker checks a
-- cancel notify against. In this statement, so both fire on commit: its streams hear of
-- it on the done channel (as of a withdrawal's cancel), and a running job's worker on
-- the type's cancel channel (`cancel_channel`; NULL for a pending job).
WITH c AS (
    UPDATE maestro_queues q
    SET status = 'cancelled', completed_at = now(), lease_expires_at = NULL,
        cancelled_by = 'operator', cancelled_operator = %(operator)s,
        cancelled_running = q.status = 'in_progress'
    WHERE q.id = %(id)s AND q.status IN ('pending', 'in_progress')
    RETURNING q.id, q.type
)
SELECT c.id
FROM c
CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(c.type), c.id::text)) AS d
LEFT JOIN LATERAL (
    SELECT pg_notify(%(cancel_channel)s::text, c.id::text)
    WHERE %(cancel_channel)s::text IS NOT NULL
) AS w ON true;

-- The filter of jobs.py's JobFilter is the same WHERE clause in each statement below:
-- a field left NULL matches everything; `statuses` narrows to what an action may touch
-- (every status for a count or a listing). Types match exactly: a type's dev tier is
-- another type, so no filter reaches a tier it does not name.

-- name: job_filter_count
-- How many rows a filter selects, counting no further than %(cap)s.
SELECT count(*) AS n
FROM (SELECT 1 FROM maestro_queues
      WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
        AND status = ANY (%(statuses)s::text[])
        AND (%(type)s::text IS NULL OR type = %(type)s::text)
        AND (%(client)s::text IS NULL OR client = %(client)s::text)
        AND (%(operation)s::text IS NULL OR payload ->> 'operation' = %(operation)s::text)
        AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
        AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
        AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
        AND (%(job_id)s::uuid IS NULL OR id = %(job_id)s::uuid)
      LIMIT %(cap)s) AS m;

-- name: job_filter_page
-- A page of a filter's rows, newest first by (created_at, id), after the keyset cursor
-- (created_at, id) < (%(before_at)s, %(before_id)s) when given (maestro_queues_listing).
SELECT id, type, status, dedupe_key, payload, result, last_error, locked_by,
       dequeue_count, max_dequeues, available_at, lease_expires_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running
FROM maestro_queues
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND status = ANY (%(statuses)s::text[])
  AND (%(type)s::text IS NULL OR type = %(type)s::text)
  AND (%(client)s::text IS NULL OR client = %(client)s::text)
  AND (%(operation)s::text IS NULL OR payload ->> 'operation' = %(operation)s::text)
  AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
  AND (%(job_id)s::uuid IS NULL OR id = %(job_id)s::uuid)
  AND (%(before_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(before_at)s::timestamptz, %(before_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: job_filter_retry
-- Re-drive a filter's finished rows (poison, cancelled): pending again with a fresh
-- dequeue budget (who cancelled it forgotten), oldest first up to %(limit)s, and wake each type's claimers once. A
-- row whose request has a live row again (same dedupe key) is left as it is: that row
-- answers it (and the live-key index allows one); of two finished rows of one request,
-- the newest is re-driven.
WITH picked AS (
    SELECT id, dedupe_key, created_at
    FROM maestro_queues
    WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
      AND status = ANY (%(statuses)s::text[])
      AND (%(type)s::text IS NULL OR type = %(type)s::text)
      AND (%(client)s::text IS NULL OR client = %(client)s::text)
      AND (%(operation)s::text IS NULL OR payload ->> 'operation' = %(operation)s::text)
      AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
      AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
      AND (%(job_id)s::uuid IS NULL OR id = %(job_id)s::uuid)
    ORDER BY created_at, id
    LIMIT %(limit)s
    FOR UPDATE
), one AS (
    SELECT DISTINCT ON (dedupe_key) id
    FROM picked
    ORDER BY dedupe_key, created_at DESC, id DESC
), redriven AS (
    UPDATE maestro_queues q
    SET status = 'pending', dequeue_count = 0, available_at = now(), locked_by = NULL,
        lease_expires_at = NULL, completed_at = NULL, claimed_at = NULL, progress = NULL,
        cancelled_by = NULL, cancelled_operator = NULL, cancelled_running = NULL
    FROM one
    WHERE q.id = one.id
      AND NOT EXISTS (SELECT 1 FROM maestro_queues l
                      WHERE l.dedupe_key = q.dedupe_key
                        AND l.status IN ('pending', 'in_progress'))
    RETURNING q.id, q.type
), woken AS (
    SELECT t.type
    FROM (SELECT DISTINCT type FROM redriven) AS t
    CROSS JOIN LATERAL (SELECT pg_notify(maestro_wake_channel(t.type), '')) AS n
)
SELECT (SELECT count(*) FROM redriven) AS n, (SELECT count(*) FROM woken) AS types;

-- name: job_filter_discard
-- Delete a filter's finished rows (poison, done, cancelled), oldest first up to
-- %(limit)s, and their blobs. 0009's trigger notifies maestro_rows_deleted, so no BFF
-- answers them from memory afterwards.
WITH picked AS (
    SELECT id
    FROM maestro_queues
    WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
      AND status = ANY (%(statuses)s::text[])
      AND (%(type)s::text IS NULL OR type = %(type)s::text)
      AND (%(client)s::text IS NULL OR client = %(client)s::text)
      AND (%(operation)s::text IS NULL OR payload ->> 'operation' = %(operation)s::text)
      AND (%(error)s::text IS NULL OR strpos(lower(last_error), lower(%(error)s::text)) > 0)
      AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
      AND (%(job_id)s::uuid IS NULL OR id = %(job_id)s::uuid)
    ORDER BY created_at, id
    LIMIT %(limit)s
    FOR UPDATE
), gone AS (
    DELETE FROM maestro_queues q USING picked p WHERE q.id = p.id RETURNING q.id
), blobs AS (
    DELETE FROM surface_result_blobs b
    WHERE b.job_id = ANY (ARRAY(SELECT p.id FROM picked p))
    RETURNING b.id
)
SELECT (SELECT count(*) FROM gone) AS n, (SELECT count(*) FROM blobs) AS blobs;

-- name: queue_pause
-- Pause a type (its claims take nothing); no row when it already was.
INSERT INTO maestro_paused (type, paused_by)
VALUES (%(type)s, %(by)s)
ON CONFLICT (type) DO NOTHING
RETURNING type;

-- name: queue_resume
-- Resume a type and wake its claimers; no row when it was not paused.
WITH resumed AS (
    DELETE FROM maestro_paused WHERE type = %(type)s RETURNING type
)
SELECT r.type
FROM resumed r
CROSS JOIN LATERAL (SELECT pg_notify(maestro_wake_channel(r.type), '')) AS n;

-- name: queue_paused_list
-- The paused types, by name.
SELECT type, paused_at, paused_by
FROM maestro_paused
ORDER BY type;

-- name: job_attempt_errors
-- A job's failed attempts' records (errors, 0023), with its status and claim count:
-- what a job's attempts are merged from (dataplane/operator/attempts.py).
SELECT status, dequeue_count, errors FROM maestro_queues WHERE id = %(id)s::uuid;

-- name: job_attempt_reports
-- A job's attempts as its workers reported them (worker_runs_job, 0020): the newest
-- `limit`, newest first.
SELECT finished_at, outcome, wall_ms, dequeue_count, worker_id, trace_id
FROM worker_runs
WHERE job_id = %(id)s::uuid
ORDER BY finished_at DESC
LIMIT %(limit)s;

-- name: worker_live
-- The workers alive now, by their liveness rows (maestro_workers, migration 0024):
-- their ids, types and the key ids they open sealed notifies with (`dataplane
-- invalidate`: who will believe a tag).
SELECT worker_id, type, opens
FROM maestro_workers
WHERE alive_until >= now()
ORDER BY type, worker_id;
