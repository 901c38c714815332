-- Statements of the queue's tables (dataplane/queue/: the client, its readers, blobs).
-- Each one is a single
-- statement, so each commits atomically; a pg_notify inside one is delivered
-- only when that statement's transaction commits.

-- name: job_enqueue
-- Attach to the live job of this dedupe key (one more requester), or insert a new
-- one. The wake-up notify rides in the same statement, so it fires on commit. No
-- row: an identical job committed after this statement's snapshot; run it again.
WITH attached AS (
    UPDATE maestro_queues
    SET requesters = requesters + 1,
        requested_by = CASE  -- a requester named once; unknown ones end the list
            WHEN requested_by IS NULL OR %(requester)s::text IS NULL THEN NULL
            WHEN %(requester)s::text = ANY (requested_by) THEN requested_by
            ELSE array_append(requested_by, %(requester)s::text)
        END
    WHERE dedupe_key = %(dedupe_key)s AND status IN ('pending', 'in_progress')
    RETURNING id, status, payload ->> 'traceparent' AS traceparent
), ins AS (
    INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client, requested_by)
    SELECT %(type)s, %(dedupe_key)s, %(payload)s::jsonb, %(max_dequeues)s, %(client)s,
           CASE WHEN %(requester)s::text IS NOT NULL THEN ARRAY[%(requester)s::text] END
    WHERE NOT EXISTS (SELECT 1 FROM attached)
    ON CONFLICT (dedupe_key) WHERE status IN ('pending', 'in_progress') DO NOTHING
    RETURNING id, status
), wake AS (
    SELECT pg_notify(maestro_wake_channel(%(type)s), '') FROM ins
), relaxed AS MATERIALIZED (
    -- Attaching only counts one more requester: its commit need not wait for the WAL
    -- flush (a count lost in a crash only affects cancellation), so the row lock that
    -- identical requests queue on is held for microseconds. A new row stays durable.
    SELECT set_config('synchronous_commit', 'off', true) FROM attached LIMIT 1
)
SELECT ins.id, ins.status, false AS coalesced,
       %(payload)s::jsonb ->> 'traceparent' AS traceparent
FROM ins
WHERE (SELECT count(*) FROM wake) >= 0
UNION ALL
SELECT a.id, a.status, true, a.traceparent
FROM attached a
WHERE (SELECT count(*) FROM relaxed) >= 0;

-- name: job_insert_many
-- New jobs in one statement (enqueues that arrived together): a row per dedupe key,
-- unless a live job already has the key (those come back missing and take
-- job_enqueue, which attaches). Only new rows are touched, inserted in dedupe-key
-- order, so two of these never wait on each other's keys in a cycle. One wake-up
-- notify per queue type rides in the statement.
WITH v AS (
    SELECT *
    FROM unnest(%(types)s::text[], %(dedupe_keys)s::text[], %(payloads)b::text[],
                %(max_dequeues)s::int[], %(clients)s::text[], %(requesters)s::text[])
         AS v(type, dedupe_key, payload, max_dequeues, client, requester)
), ins AS (
    INSERT INTO maestro_queues (type, dedupe_key, payload, max_dequeues, client, requested_by)
    SELECT v.type, v.dedupe_key, v.payload::jsonb, v.max_dequeues, v.client,
           CASE WHEN v.requester IS NOT NULL THEN ARRAY[v.requester] END
    FROM v
    ORDER BY v.dedupe_key
    ON CONFLICT (dedupe_key) WHERE status IN ('pending', 'in_progress') DO NOTHING
    RETURNING id, type, dedupe_key, status, payload ->> 'traceparent' AS traceparent
), wake AS (
    SELECT pg_notify(maestro_wake_channel(t.type), '') FROM (SELECT DISTINCT type FROM ins) AS t
)
SELECT ins.id, ins.dedupe_key, ins.status, ins.traceparent
FROM ins
WHERE (SELECT count(*) FROM wake) >= 0;

-- name: job_attach
-- Attach to the live job of this dedupe key, if there is one (one more requester;
-- committed without waiting for the WAL flush, as in job_enqueue).
WITH relaxed AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
)
UPDATE maestro_queues
SET requesters = requesters + 1,
    requested_by = CASE  -- as in job_enqueue
        WHEN requested_by IS NULL OR %(requester)s::text IS NULL THEN NULL
        WHEN %(requester)s::text = ANY (requested_by) THEN requested_by
        ELSE array_append(requested_by, %(requester)s::text)
    END
FROM relaxed
WHERE dedupe_key = %(dedupe_key)s AND status IN ('pending', 'in_progress')
RETURNING id, status, true AS coalesced, payload ->> 'traceparent' AS traceparent;

-- name: job_live_counts
-- Live rows by type and client (the BFF's backpressure gauge, refreshed each second).
SELECT type, client, count(*) AS n
FROM maestro_queues
WHERE status IN ('pending', 'in_progress')
GROUP BY type, client;

-- name: job_claim
-- Claim up to `limit` claimable rows of one type, fairly across clients, and park as
-- poison the claimable rows whose dequeue budget is spent: `maestro_claim`
-- (migration 0008, where its SQL and what it does are written out), planned once per
-- session rather than at every claim. `bounds` (jsonb or NULL) are the flow bounds of
-- the worker's operations (migration 0015: it also reports the operations it deferred).
-- Its result columns are the ones its RETURNS TABLE lists.
SELECT * FROM maestro_claim(
    %(type)s, %(worker_id)s, %(limit)s, %(lease_seconds)s, %(bounds)s::jsonb
);

-- name: lease_renew
-- Extend the lease of every listed row this worker still holds (fenced).
UPDATE maestro_queues q
SET lease_expires_at = now() + make_interval(secs => %(lease_seconds)s),
    available_at = now() + make_interval(secs => %(lease_seconds)s)
FROM unnest(%(ids)s::uuid[], %(dequeue_counts)s::int[]) AS held(id, dequeue_count)
WHERE q.id = held.id
  AND q.locked_by = %(worker_id)s
  AND q.dequeue_count = held.dequeue_count
  AND q.status = 'in_progress'
RETURNING q.id;

-- name: job_complete
-- Finish held rows (fenced): result, completion time (the worker's: see
-- records.Completion.completed_at), optional blob, and the done notify, all in this
-- one statement. A row whose claim was lost is left untouched. The id, count, time,
-- result and note arrays travel in binary (%(x)b): a text array would escape every
-- quote of every result's JSON on the way out, and parse it again on the way in. The
-- done notify is the job id, followed by the answer's sealed note when the worker
-- sealed one (a small answer and a notify secret: queue/seal.py); else the id alone.
WITH v AS (
    SELECT *
    FROM unnest(%(ids)b::uuid[], %(dequeue_counts)b::int[], %(results)b::text[],
                %(completed_ats)b::timestamptz[], %(notes)b::text[],
                %(blob_types)s::text[], %(blob_data)s::bytea[])
         AS v(id, dequeue_count, result, completed_at, note, blob_type, blob_data)
), done AS (
    UPDATE maestro_queues q
    SET status = 'done',
        result = v.result::jsonb,
        completed_at = v.completed_at,
        lease_expires_at = NULL
    FROM v
    WHERE q.id = v.id
      AND q.locked_by = %(worker_id)s
      AND q.dequeue_count = v.dequeue_count
      AND q.status = 'in_progress'
    RETURNING q.id, q.type, coalesce(q.id::text || ' ' || v.note, q.id::text) AS note
), blobs AS (
    INSERT INTO surface_result_blobs (job_id, content_type, data, size, expires_at)
    SELECT v.id, v.blob_type, v.blob_data, octet_length(v.blob_data),
           now() + make_interval(secs => %(blob_ttl_seconds)s)
    FROM v JOIN done ON done.id = v.id
    WHERE v.blob_data IS NOT NULL
    RETURNING job_id
)
SELECT done.id
FROM done
CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(done.type), done.note)) AS n
WHERE (SELECT count(*) FROM blobs) >= 0;

-- name: job_cancelled_held
-- Whether this claim was cancelled (by its requesters or an operator), and by whom: a
-- worker that heard a cancel notify checks it here before it cancels the job's
-- execution (the notify is a hint, anyone who may connect may send one): the row is
-- cancelled and still names this claim.
SELECT id, cancelled_by, cancelled_operator, cancelled_running, completed_at
FROM maestro_queues
WHERE id = %(id)s
  AND status = 'cancelled'
  AND locked_by = %(worker_id)s
  AND dequeue_count = %(dequeue_count)s;

-- name: job_progress
-- The latest progress of held rows (fenced, as job_complete: a row whose claim was
-- lost, or that finished meanwhile, is left untouched and notifies nothing), and its
-- notify on the type's progress channel: the job id, followed by the sealed note when
-- the worker holds a notify secret. Committed without waiting for its WAL flush: a
-- progress lost in a server crash is superseded by the next one, or the answer.
WITH async_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS setting
), v AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(dequeue_counts)s::int[], %(progress)s::text[],
                %(notes)s::text[])
         AS v(id, dequeue_count, progress, note)
), p AS (
    UPDATE maestro_queues q
    SET progress = v.progress::jsonb
    FROM v
    WHERE q.id = v.id
      AND q.locked_by = %(worker_id)s
      AND q.dequeue_count = v.dequeue_count
      AND q.status = 'in_progress'
      AND (SELECT setting FROM async_commit) IS NOT NULL
    RETURNING q.id, coalesce(q.id::text || ' ' || v.note, q.id::text) AS note
)
SELECT p.id FROM p CROSS JOIN LATERAL (SELECT pg_notify(%(channel)s, p.note)) AS n;

-- name: job_progress_many
-- The last progress of running jobs (the reply pump, for a progress notify that
-- carried no sealed note: the ids are of jobs its streams may already read).
SELECT id, progress FROM maestro_queues
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'in_progress' AND progress IS NOT NULL;

-- name: job_retry_waits
-- Which of several jobs wait out a failed attempt's backoff (the reply pump, for a retry
-- notify that carried no sealed note: the row confirms it; Retry.of checks the rest).
SELECT id, status, dequeue_count, max_dequeues, last_error, available_at
FROM maestro_queues
WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending' AND dequeue_count > 0
  AND last_error IS NOT NULL;

-- name: job_fail
-- An unexpected error (fenced): back to pending after the backoff, or to poison
-- at the cutoff, in which case the done channel hears of it at once. Back to pending,
-- the type's retry channel hears of it (the job id, then the sealed retry note when
-- the worker holds a notify secret: dataplane/queue/retries.py). The attempt's
-- record, when given, is appended to `errors` stamped with the time (`at`), and only
-- the newest `failures_kept` are kept (migration 0023).
WITH f AS (
    UPDATE maestro_queues q
    SET status = CASE WHEN q.dequeue_count >= q.max_dequeues THEN 'poison' ELSE 'pending' END,
        available_at = now() + make_interval(secs => %(backoff_seconds)s),
        last_error = %(error)s,
        errors = CASE WHEN %(failure)s::jsonb IS NULL THEN q.errors
                 ELSE jsonb_path_query_array(
                     coalesce(q.errors, '[]')
                         || jsonb_build_array(%(failure)s::jsonb || jsonb_build_object('at', now())),
                     '$[last - $kept + 1 to last]',
                     jsonb_build_object('kept', %(failures_kept)s::int))
                 END,
        locked_by = CASE WHEN q.dequeue_count >= q.max_dequeues THEN q.locked_by END,
        lease_expires_at = NULL,
        completed_at = CASE WHEN q.dequeue_count >= q.max_dequeues THEN now() END
    WHERE q.id = %(id)s
      AND q.locked_by = %(worker_id)s
      AND q.dequeue_count = %(dequeue_count)s
      AND q.status = 'in_progress'
    RETURNING q.id, q.type, q.status
)
SELECT f.id, f.status
FROM f
LEFT JOIN LATERAL (
    SELECT pg_notify(maestro_done_channel(f.type), f.id::text) WHERE f.status = 'poison'
) AS n ON true
LEFT JOIN LATERAL (
    SELECT pg_notify(%(retry_channel)s, coalesce(f.id::text || ' ' || %(retry_note)s::text,
                                                 f.id::text))
    WHERE f.status = 'pending'
) AS r ON true;

-- name: job_release
-- Hand held rows back (graceful shutdown): pending, claimable at once, and the
-- claim that is being returned does not count toward the poison cutoff.
WITH r AS (
    UPDATE maestro_queues q
    SET status = 'pending',
        locked_by = NULL,
        lease_expires_at = NULL,
        available_at = now(),
        dequeue_count = q.dequeue_count - 1
    FROM unnest(%(ids)s::uuid[], %(dequeue_counts)s::int[]) AS held(id, dequeue_count)
    WHERE q.id = held.id
      AND q.locked_by = %(worker_id)s
      AND q.dequeue_count = held.dequeue_count
      AND q.status = 'in_progress'
    RETURNING q.id, q.type
)
SELECT r.id
FROM r
CROSS JOIN LATERAL (SELECT pg_notify(maestro_wake_channel(r.type), '')) AS n;

-- name: job_get
-- One job as the BFF and operators see it.
SELECT id, type, status, dedupe_key, payload, result, last_error, locked_by,
       dequeue_count, max_dequeues, available_at, lease_expires_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running
FROM maestro_queues
WHERE id = %(id)s;

-- name: job_get_finished_many
-- The finished ones among several jobs (the reply pump: live rows are not read at all).
SELECT id, type, status, dedupe_key, payload, result, last_error, locked_by,
       dequeue_count, max_dequeues, available_at, lease_expires_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running
FROM maestro_queues
WHERE id = ANY(%(ids)s::uuid[]) AND status IN ('done', 'poison', 'cancelled');

-- name: job_list
-- Operators' view: the newest jobs, optionally of one status and one type.
SELECT id, type, status, dedupe_key, payload, result, last_error, locked_by,
       dequeue_count, max_dequeues, available_at, lease_expires_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running
FROM maestro_queues
WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (%(type)s::text IS NULL OR type = %(type)s::text)
ORDER BY created_at DESC
LIMIT %(limit)s;

-- name: job_retry
-- Re-drive a poison job: pending again with a fresh dequeue budget, wake claimers.
WITH r AS (
    UPDATE maestro_queues
    SET status = 'pending', dequeue_count = 0, available_at = now(), locked_by = NULL,
        lease_expires_at = NULL, completed_at = NULL, claimed_at = NULL
    WHERE id = %(id)s AND status = 'poison'
    RETURNING id, type
)
SELECT r.id FROM r CROSS JOIN LATERAL (SELECT pg_notify(maestro_wake_channel(r.type), '')) AS n;

-- name: job_cancel
-- A requester withdraws from a live job (pending or running), once (`withdrawn` names
-- those who did: a second withdrawal changes nothing and answers 'withdrawn'). Where the
-- row names its requesters (`requested_by`), only one of them may withdraw
-- ('not_requester' for anyone else); a row that names none counts (`requesters`). The
-- last withdrawal (maestro_last_withdrawal, of the row as locked: of two at once, the
-- later cancels) cancels the job as an operator's cancel does: `cancelled` by
-- 'requesters', `completed_at`, `cancelled_running` when it was in_progress, locked_by
-- and dequeue_count kept (the claim its worker checks the cancel notify against), and,
-- in this statement so both fire on commit, the done notify (its streams end CANCELLED)
-- and, for a running job, `<job id>` on the type's cancel channel (its worker stops the
-- handler). `requesters` in the answer: those still waiting; `running`: the job runs
-- (or ran, when cancelled). A finished job is left alone and returns nothing.
WITH c AS (
    UPDATE maestro_queues q
    SET requesters = q.requesters - 1,
        withdrawn = array_append(q.withdrawn, %(requester)s::text),
        status = CASE
            WHEN maestro_last_withdrawal(q.requested_by, q.withdrawn, q.requesters,
                                         %(requester)s::text)
            THEN 'cancelled' ELSE q.status END,
        completed_at = CASE
            WHEN maestro_last_withdrawal(q.requested_by, q.withdrawn, q.requesters,
                                         %(requester)s::text)
            THEN now() ELSE q.completed_at END,
        cancelled_by = CASE
            WHEN maestro_last_withdrawal(q.requested_by, q.withdrawn, q.requesters,
                                         %(requester)s::text)
            THEN 'requesters' ELSE q.cancelled_by END,
        cancelled_running = CASE
            WHEN maestro_last_withdrawal(q.requested_by, q.withdrawn, q.requesters,
                                         %(requester)s::text)
            THEN q.status = 'in_progress' ELSE q.cancelled_running END
    WHERE q.id = %(id)s AND q.status IN ('pending', 'in_progress')
      AND NOT (%(requester)s::text = ANY (coalesce(q.withdrawn, '{}')))
      AND (q.requested_by IS NULL OR %(requester)s::text = ANY (q.requested_by))
    RETURNING q.id, q.type, q.status, q.completed_at,
              CASE WHEN q.status = 'cancelled' THEN q.cancelled_running
                   ELSE q.status = 'in_progress' END AS running,
              CASE
                  WHEN q.requested_by IS NULL THEN greatest(q.requesters, 0)
                  ELSE (SELECT count(*) FROM unnest(q.requested_by) AS r(who)
                        WHERE NOT r.who = ANY (q.withdrawn))
              END AS requesters
), still AS (
    SELECT q.id,
           CASE WHEN %(requester)s::text = ANY (coalesce(q.withdrawn, '{}'))
                THEN 'withdrawn' ELSE 'not_requester' END AS status,
           q.completed_at, q.status = 'in_progress' AS running,
           CASE
               WHEN q.requested_by IS NULL THEN q.requesters
               ELSE (SELECT count(*) FROM unnest(q.requested_by) AS r(who)
                     WHERE NOT r.who = ANY (coalesce(q.withdrawn, '{}')))
           END AS requesters
    FROM maestro_queues q
    WHERE q.id = %(id)s AND q.status IN ('pending', 'in_progress')
      AND (%(requester)s::text = ANY (coalesce(q.withdrawn, '{}'))
           OR (q.requested_by IS NOT NULL AND NOT %(requester)s::text = ANY (q.requested_by)))
)
SELECT c.id, c.status, c.completed_at, c.running, c.requesters
FROM c
LEFT JOIN LATERAL (
    SELECT pg_notify(maestro_done_channel(c.type), c.id::text) WHERE c.status = 'cancelled'
) AS d ON true
LEFT JOIN LATERAL (
    SELECT pg_notify(%(cancel_channel)s::text, c.id::text)
    WHERE c.status = 'cancelled' AND c.running
) AS w ON true
UNION ALL
SELECT still.id, still.status, still.completed_at, still.running, still.requesters FROM still;

-- name: job_get_owned
-- One job for its owner only (the BFF's poll, stream and blob reads): the type (which
-- carries the tier), client and scope key are matched in the statement, so another
-- tenant's id returns nothing — and costs what an unknown id costs — and its result
-- is never read.
SELECT id, type, status, dedupe_key, payload, result, last_error, locked_by,
       dequeue_count, max_dequeues, available_at, lease_expires_at,
       created_at, claimed_at, completed_at, progress,
       cancelled_by, cancelled_operator, cancelled_running
FROM maestro_queues
WHERE id = %(id)s
  AND type = %(type)s
  AND payload -> 'auth' ->> 'client' = %(client)s
  AND payload -> 'auth' ->> 'scopeKey' = %(scope_key)s;

-- name: blob_head
-- The newest unexpired blob of a job, without its bytes (read with blob_chunk).
SELECT id, job_id, content_type, size, created_at, expires_at
FROM surface_result_blobs
WHERE job_id = %(job_id)s AND expires_at > now()
ORDER BY created_at DESC
LIMIT 1;

-- name: blob_chunk
-- `length` bytes of one blob from byte `offset` (0-based); no row once it expired.
SELECT substring(data FROM %(offset)s::integer + 1 FOR %(length)s::integer) AS chunk
FROM surface_result_blobs
WHERE id = %(id)s AND expires_at > now();

-- name: reap_blobs
-- Delete a batch of expired blobs.
DELETE FROM surface_result_blobs
WHERE id IN (
    SELECT id FROM surface_result_blobs WHERE expires_at <= now() LIMIT %(batch)s
);
