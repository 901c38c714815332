-- The claim as a function, planned once per session.
--
-- As a prepared statement the claim (formerly the text of the job_claim query) was
-- planned again at every execution, about 2 ms of planning for about 2 ms of work:
-- its generic plan, costed with an unknown LIMIT (10 % of the table), claimed its
-- rows through a hash join over a sequential scan of the whole table, so Postgres'
-- plan cache always chose a custom plan instead. Here the limits are shaped so that
-- the generic plan is the right one at any table size: the FIFO candidates are read
-- and locked under a constant bound (1000, the largest batch a claim may ask for,
-- dataplane.queue.client.MAX_CLAIM_BATCH) with the caller's limit above it, and the
-- fair candidates and the rows the claim updates are found by id = ANY (an index
-- probe per id, never a join over the table). The function runs with
-- plan_cache_mode = force_generic_plan, so each session plans it once and keeps it
-- until the table's statistics change (an ANALYZE invalidates the plan). That first
-- plan is often made on an empty queue, where a sequential scan looks cheapest, and
-- kept while a backlog arrives: the function also runs with enable_seqscan = off, so
-- its plan reads the queue table through its indexes whatever its size then (every
-- access to it has an index). Before, the prepared statement had the same trap at
-- idle: a small table made its generic plan the cheaper one, and it was kept.
--
-- What the claim does, unchanged: claim up to p_limit claimable rows of one type
-- (pending rows past their backoff, in_progress rows whose lease lapsed). With one
-- client in the backlog that is plain FIFO; with several it is fair: each client's
-- rows oldest first, the clients in turn, and a client counted as already served for
-- every job of its still running (its n-th row ranks n + running), so one client's
-- burst cannot starve the others, batch after batch. A claimable row whose dequeue
-- budget is spent (its last attempt's lease lapsed) is not run again: it becomes
-- poison here, in the same statement, and its done channel hears of it; it is
-- returned too (poisoned true, its id, type, attempts and traceparent, the claim
-- columns NULL), so the claimer can trace, count and log it. Fair candidates are
-- read without locks, then locked with SKIP LOCKED and checked again. The claim
-- commits without waiting for its WAL flush (this transaction only): a claim lost in
-- a server crash just leaves the row claimable, the fenced completion of the lost
-- claim is refused, and any later synchronous commit (the completion) flushes the
-- claim's WAL first.
CREATE OR REPLACE FUNCTION maestro_claim(
    p_type text,
    p_worker_id text,
    p_limit integer,
    p_lease_seconds double precision
) RETURNS TABLE (
    id uuid,
    type text,
    dedupe_key text,
    payload jsonb,
    dequeue_count integer,
    max_dequeues integer,
    created_at timestamptz,
    ready_at timestamptz,
    claimed_at timestamptz,
    lease_expires_at timestamptz,
    poisoned boolean,
    traceparent text
)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $claim$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE clients(client) AS (
        (SELECT client FROM maestro_queues
         WHERE type = p_type AND status IN ('pending', 'in_progress')
           AND available_at <= now() AND (status = 'pending' OR lease_expires_at <= now())
         ORDER BY client LIMIT 1)
        UNION ALL
        SELECT (SELECT m.client FROM maestro_queues m
                WHERE m.type = p_type AND m.status IN ('pending', 'in_progress')
                  AND m.available_at <= now()
                  AND (m.status = 'pending' OR m.lease_expires_at <= now())
                  AND m.client > c.client
                ORDER BY m.client LIMIT 1)
        FROM clients c
        WHERE c.client IS NOT NULL
    ), fairness AS MATERIALIZED (
        SELECT count(*) > 1 AS needed FROM clients WHERE client IS NOT NULL
    ), turns AS MATERIALIZED (
        SELECT r.id
        FROM clients c
        CROSS JOIN LATERAL (
            SELECT count(*) AS running
            FROM maestro_queues b
            WHERE b.type = p_type AND b.client = c.client AND b.status = 'in_progress'
              AND b.available_at > now()
        ) AS busy
        CROSS JOIN LATERAL (
            SELECT m.id, m.available_at, row_number() OVER (ORDER BY m.available_at) AS turn
            FROM (SELECT id, available_at FROM maestro_queues
                  WHERE type = p_type AND client = c.client
                    AND status IN ('pending', 'in_progress') AND available_at <= now()
                    AND (status = 'pending' OR lease_expires_at <= now())
                  ORDER BY available_at
                  LIMIT p_limit) AS m
        ) AS r
        WHERE c.client IS NOT NULL
        ORDER BY busy.running + r.turn, r.available_at
        LIMIT p_limit
    ), async_commit AS MATERIALIZED (
        SELECT set_config('synchronous_commit', 'off', true) AS setting
    ), claimable AS MATERIALIZED (
        (SELECT fifo.id, fifo.spent, fifo.ready_at
         FROM (SELECT id, dequeue_count >= max_dequeues AS spent, available_at AS ready_at
               FROM maestro_queues
               WHERE type = p_type
                 AND status IN ('pending', 'in_progress')
                 AND available_at <= now()
                 AND (status = 'pending' OR lease_expires_at <= now())
                 AND NOT (SELECT needed FROM fairness)
               ORDER BY available_at
               LIMIT 1000
               FOR UPDATE SKIP LOCKED) AS fifo
         LIMIT p_limit)
        UNION ALL
        SELECT fair.id, fair.spent, fair.ready_at
        FROM (SELECT id, dequeue_count >= max_dequeues AS spent, available_at AS ready_at
              FROM maestro_queues
              WHERE id = ANY (ARRAY(SELECT id FROM turns))
                AND status IN ('pending', 'in_progress')
                AND available_at <= now()
                AND (status = 'pending' OR lease_expires_at <= now())
                AND (SELECT needed FROM fairness)
              FOR UPDATE SKIP LOCKED) AS fair
    ), poisoned AS (
        UPDATE maestro_queues q
        SET status = 'poison',
            completed_at = now(),
            lease_expires_at = NULL,
            last_error = coalesce(q.last_error || E'\n', '')
                || 'the lease of its last attempt lapsed (its worker died or lost the database)'
        WHERE q.id = ANY (ARRAY(SELECT k.id FROM claimable k WHERE k.spent))
        RETURNING q.id, q.type, q.dequeue_count, q.max_dequeues,
                  q.payload ->> 'traceparent' AS traceparent
    ), claimed AS (
        UPDATE maestro_queues q
        SET status = 'in_progress',
            locked_by = p_worker_id,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            available_at = now() + make_interval(secs => p_lease_seconds),
            dequeue_count = q.dequeue_count + 1,
            claimed_at = now()
        FROM async_commit
        WHERE q.id = ANY (ARRAY(SELECT k.id FROM claimable k WHERE NOT k.spent))
        RETURNING q.id, q.type, q.dedupe_key, q.payload, q.dequeue_count, q.max_dequeues,
                  q.created_at, q.claimed_at, q.lease_expires_at
    )
    SELECT c.id, c.type, c.dedupe_key, c.payload, c.dequeue_count, c.max_dequeues,
           c.created_at, k.ready_at, c.claimed_at, c.lease_expires_at,
           false AS poisoned, NULL::text AS traceparent
    FROM claimed c
    JOIN claimable k ON k.id = c.id
    UNION ALL
    SELECT p.id, p.type, NULL, NULL, p.dequeue_count, p.max_dequeues,
           NULL, NULL, NULL, NULL,
           true, p.traceparent
    FROM poisoned p
    CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(p.type), p.id::text)) AS n;
END
$claim$;
