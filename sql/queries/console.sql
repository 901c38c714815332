-- The operator console's reads (dataplane/console): the wallboard, the jobs list and a
-- job's page. Every statement is bounded (a LIMIT, or rows an index bounds) and served
-- by an index (migrations 0001, 0005, 0017, 0020).

-- name: console_live
-- Live rows per type (the claim index): pending, ready, in flight, the oldest ready.
SELECT type,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND available_at <= now()) AS ready,
       count(*) FILTER (WHERE status = 'in_progress') AS in_flight,
       extract(epoch FROM now() - min(created_at)
           FILTER (WHERE status = 'pending' AND available_at <= now()))::float8
           AS oldest_ready_s
FROM maestro_queues
WHERE status IN ('pending', 'in_progress')
GROUP BY type
ORDER BY type
LIMIT 1000;

-- name: console_poison
-- Poison rows per type (maestro_queues_poison), and when the newest was parked.
SELECT type, count(*) AS poison, max(completed_at) AS newest_poison
FROM maestro_queues
WHERE status = 'poison'
GROUP BY type
ORDER BY type
LIMIT 1000;

-- name: console_paused
-- The paused queue types, who paused them and when.
SELECT type, paused_at, paused_by
FROM maestro_paused
ORDER BY type
LIMIT 1000;

-- name: console_runs
-- Per type, over the newest %(sample)s job reports of the last hour (worker_runs_finished,
-- read backwards): answers in the last 5 minutes, queue wait and execution p50/p95,
-- cache hit ratio and coalesced share of answers; sample_since: the oldest report read.
WITH recent AS (
    SELECT type, outcome, queue_wait_ms, wall_ms, cache, coalesced, finished_at
    FROM worker_runs
    WHERE finished_at > now() - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT %(sample)s
)
SELECT type,
       count(*) AS runs,
       count(*) FILTER (WHERE outcome IN ('done', 'error')
                          AND finished_at > now() - interval '5 minutes') AS answers_5m,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY queue_wait_ms) AS wait_p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY queue_wait_ms) AS wait_p95_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY wall_ms) AS exec_p50_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY wall_ms) AS exec_p95_ms,
       (count(*) FILTER (WHERE cache = 'hit' AND outcome IN ('done', 'error')))::float8
           / nullif(count(*) FILTER (WHERE cache IN ('hit', 'miss')
                                       AND outcome IN ('done', 'error')), 0)
           AS cache_hit_ratio,
       (count(*) FILTER (WHERE coalesced AND outcome IN ('done', 'error')))::float8
           / nullif(count(*) FILTER (WHERE outcome IN ('done', 'error')), 0)
           AS coalesced_ratio,
       extract(epoch FROM now() - min(min(finished_at)) OVER ())::float8 AS sample_age_s,
       sum(count(*)) OVER () AS sample_rows
FROM recent
GROUP BY type
ORDER BY type;

-- name: console_type_known
-- Whether a queue type has live rows, poison rows, reports or a pause (each an index).
SELECT EXISTS (SELECT 1 FROM maestro_queues
               WHERE type = %(type)s AND status IN ('pending', 'in_progress'))
    OR EXISTS (SELECT 1 FROM maestro_queues WHERE type = %(type)s AND status = 'poison')
    OR EXISTS (SELECT 1 FROM worker_runs WHERE type = %(type)s)
    OR EXISTS (SELECT 1 FROM maestro_paused WHERE type = %(type)s) AS known;

-- name: console_jobs
-- The jobs list, newest first: every filter optional (NULL), keyset-paged after
-- (%(after_at)s, %(after_id)s) on maestro_queues_listing, at most %(limit)s rows.
SELECT id, type, status, client, payload->>'operation' AS operation,
       dequeue_count, max_dequeues, created_at, completed_at,
       left(last_error, 300) AS last_error
FROM maestro_queues
WHERE (%(type)s::text IS NULL OR type = %(type)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(client)s::text IS NULL OR client = %(client)s::text)
  AND (%(operation)s::text IS NULL OR payload->>'operation' = %(operation)s::text)
  AND (%(error)s::text IS NULL OR last_error ILIKE %(error)s::text)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR created_at < %(until)s::timestamptz)
  AND (%(after_at)s::timestamptz IS NULL
       OR (created_at, id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY created_at DESC, id DESC
LIMIT %(limit)s;

-- name: console_job
-- One job (its primary key): every column the job's page shows, the result's size.
SELECT id, type, status, client, payload, last_error, locked_by, dequeue_count,
       max_dequeues, requesters, coalesce(cardinality(requested_by), 0) AS requested_by,
       coalesce(cardinality(withdrawn), 0) AS withdrawn, lease_expires_at, available_at,
       created_at, claimed_at, completed_at, progress,
       octet_length(result::text) AS result_bytes,
       CASE WHEN jsonb_typeof(result) = 'object' THEN result->'blobRef' END AS blob_ref
FROM maestro_queues
WHERE id = %(id)s::uuid;

-- name: console_job_runs
-- A job's attempts as its workers reported them (worker_runs_job), oldest first.
SELECT finished_at, operation, outcome, wall_ms, cpu_ms, queue_wait_ms, cache, coalesced,
       dequeue_count, worker_id, trace_id
FROM worker_runs
WHERE job_id = %(id)s::uuid
ORDER BY finished_at
LIMIT 100;

-- name: console_job_blobs
-- A job's stored blobs, their heads only (surface_result_blobs_job), newest first.
SELECT id, content_type, size, created_at, expires_at
FROM surface_result_blobs
WHERE job_id = %(id)s::uuid
ORDER BY created_at DESC
LIMIT 5;
