-- The operator console's reads (dataplane/console): the wallboard, the jobs list and a
-- job's page. Every statement is bounded (a LIMIT, or rows an index bounds) and served
-- by an index (migrations 0001, 0005, 0017, 0018, 0020, 0021); bench/overview.py times
-- them with 1,000,000 rows in maestro_queues and in worker_runs.

-- name: console_overview
-- The wallboard's cards, one row per queue type: the view dataplane_overview (0021),
-- which the Grafana wallboard's card panels select from too (one definition of every
-- number); what each part reads and which index bounds it: 0021's header.
SELECT type, tier, pending, ready, backing_off, in_flight, oldest_ready_s, poison,
       newest_poison, paused_at, paused_by, runs, answers_per_minute, wait_p50_ms, wait_p95_ms,
       exec_p50_ms, exec_p95_ms, cache_hit_ratio, coalesced_ratio
FROM dataplane_overview
ORDER BY type
LIMIT 1000;

-- name: console_type_known
-- Whether a queue type has live rows, poison rows, reports or a pause (each an index).
SELECT EXISTS (SELECT 1 FROM maestro_queues
               WHERE type = %(type)s AND status IN ('pending', 'in_progress'))
    OR EXISTS (SELECT 1 FROM maestro_queues WHERE type = %(type)s AND status = 'poison')
    OR EXISTS (SELECT 1 FROM worker_runs WHERE type = %(type)s)
    OR EXISTS (SELECT 1 FROM maestro_paused WHERE type = %(type)s) AS known;

-- name: console_jobs
-- The jobs list, newest first: every filter optional (NULL), keyset-paged after
-- (%(after_at)s, %(after_id)s), at most %(limit)s rows. Each status's slice is read
-- backwards on maestro_queues_listing (status, created_at, id; 0018) from the cursor,
-- at most %(limit)s rows of it, and the slices merged: a page reads at most 5 * limit
-- index entries whatever the filters, never the whole table (a status filter: one
-- slice). The cursor and the time range are row and range conditions on the index
-- (coalesce, not "IS NULL OR", so a generic plan keeps them as index bounds).
SELECT j.*
FROM unnest(ARRAY['pending', 'in_progress', 'done', 'poison', 'cancelled']) AS s(status)
CROSS JOIN LATERAL (
    SELECT id, type, status, client, payload->>'operation' AS operation,
           dequeue_count, max_dequeues, created_at, completed_at,
           left(last_error, 300) AS last_error
    FROM maestro_queues AS m
    WHERE m.status = s.status
      AND (m.created_at, m.id)
          < (coalesce(%(after_at)s::timestamptz, 'infinity'),
             coalesce(%(after_id)s::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'))
      AND m.created_at >= coalesce(%(since)s::timestamptz, '-infinity')
      AND m.created_at < coalesce(%(until)s::timestamptz, 'infinity')
      AND (%(type)s::text IS NULL OR m.type = %(type)s::text)
      AND (%(client)s::text IS NULL OR m.client = %(client)s::text)
      AND (%(operation)s::text IS NULL OR m.payload->>'operation' = %(operation)s::text)
      AND (%(error)s::text IS NULL OR m.last_error ILIKE %(error)s::text)
    ORDER BY m.created_at DESC, m.id DESC
    LIMIT %(limit)s
) AS j
WHERE %(status)s::text IS NULL OR s.status = %(status)s::text
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s;

-- name: console_slowest
-- The slowest job, enqueue to completion, of the newest %(sample)s done rows completed
-- since %(since)s (GET /jobs/slowest: the latency alerts' link to a trace). The
-- window is read backwards on maestro_queues_finished_at (status, completed_at; 0005)
-- from its newest entry, at most %(sample)s rows whatever the window holds, then the
-- type filter applied to those rows: a read costs the same with a million done rows
-- in the window as with the sample. A window holding more rows than the sample gives
-- the slowest of its newest part (the part a firing alert is about).
SELECT id, type, extract(epoch FROM completed_at - created_at)::float8 AS seconds
FROM (
    SELECT id, type, created_at, completed_at
    FROM maestro_queues
    WHERE status = 'done' AND completed_at >= %(since)s::timestamptz
    ORDER BY completed_at DESC
    LIMIT %(sample)s
) AS recent
WHERE %(type)s::text IS NULL OR type = %(type)s::text
ORDER BY completed_at - created_at DESC, completed_at DESC
LIMIT 1;

-- name: console_job
-- One job (its primary key): every column the job's page shows (who cancelled it too),
-- the result's size, its failed attempts' records (0023; merged with
-- job_attempt_reports, operator.sql).
SELECT id, type, status, client, payload, last_error, errors, locked_by, dequeue_count,
       max_dequeues, requesters, coalesce(cardinality(requested_by), 0) AS requested_by,
       coalesce(cardinality(withdrawn), 0) AS withdrawn, lease_expires_at, available_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running,
       octet_length(result::text) AS result_bytes,
       CASE WHEN jsonb_typeof(result) = 'object' THEN result->'blobRef' END AS blob_ref
FROM maestro_queues
WHERE id = %(id)s::uuid;

-- name: console_job_blobs
-- A job's stored blobs, their heads only (surface_result_blobs_job), newest first.
SELECT id, content_type, size, created_at, expires_at
FROM surface_result_blobs
WHERE job_id = %(id)s::uuid
ORDER BY created_at DESC
LIMIT 5;

-- name: console_role_member
-- Whether the console's login is a member of the operator group (checked at boot).
SELECT pg_has_role(current_user, 'dataplane_operator', 'MEMBER') AS member;
