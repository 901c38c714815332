-- Operators' actions (issue 41): pause honoured inside the claim and the depth, and the
-- keyset listing of jobs.
--
-- Pause: maestro_claim is 0015's function with one statement added first: a type with
-- a row in maestro_paused (0017) claims nothing: no row is claimed, none poisoned
-- (a lapsed lease stays lapsed until resume, then is claimed or poisoned as before),
-- nothing deferred. The probe is one primary-key lookup on a table of a few rows, so an
-- unpaused claim costs what it did. The body below is 0015's, character for character,
-- but for that IF. Enqueues and attaches do not read maestro_paused: they still work.
--
-- maestro_queue_depth (0011, 0013) answers 0 for a paused type: KEDA must not scale up
-- workers that would claim nothing. CREATE OR REPLACE resets a function's settings, so
-- its search_path is pinned again as 0013 does, and EXECUTE stays revoked from PUBLIC.
--
-- Listing: the console's and the CLI's job list pages newest first by
-- (created_at, id) under a status, keyset (never OFFSET): maestro_queues_listing
-- serves it (status first: every listing names one, poison by default). created_at
-- never changes, and status is already in the partial indexes' predicates, so the
-- index costs an insert and a status change one more entry, and makes no update that
-- was HOT a non-HOT one. Built in the migration's transaction (a short write lock on
-- a large table; CONCURRENTLY cannot run in a transaction).

CREATE INDEX IF NOT EXISTS maestro_queues_listing
    ON maestro_queues (status, created_at, id);

CREATE OR REPLACE FUNCTION maestro_queue_depth(p_type text) RETURNS bigint
    LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
    AS $$
        SELECT CASE WHEN EXISTS (SELECT 1 FROM maestro_paused p WHERE p.type = p_type)
                    THEN 0
                    ELSE (SELECT count(*)
                          FROM maestro_queues
                          WHERE type = p_type
                            AND status IN ('pending', 'in_progress')
                            AND (status = 'in_progress' OR available_at <= now()))
               END
    $$;

DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION maestro_queue_depth(text) SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;

REVOKE EXECUTE ON FUNCTION maestro_queue_depth(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION maestro_claim(
    p_type text,
    p_worker_id text,
    p_limit integer,
    p_lease_seconds double precision,
    p_bounds jsonb DEFAULT NULL
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
    traceparent text,
    deferred text
)
LANGUAGE plpgsql
VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $claim$
#variable_conflict use_column
DECLARE
    v_ops text[];
    v_counted text[];
BEGIN
    IF EXISTS (SELECT 1 FROM maestro_paused p WHERE p.type = p_type) THEN
        RETURN;  -- paused (issue 41): its rows stay pending, nothing is claimed
    END IF;
    IF p_bounds IS NULL OR p_bounds = '{}'::jsonb THEN
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
               false AS poisoned, NULL::text AS traceparent, NULL::text AS deferred
        FROM claimed c
        JOIN claimable k ON k.id = c.id
        UNION ALL
        SELECT p.id, p.type, NULL, NULL, p.dequeue_count, p.max_dequeues,
               NULL, NULL, NULL, NULL,
               true, p.traceparent, NULL::text
        FROM poisoned p
        CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(p.type), p.id::text)) AS n;
        RETURN;
    END IF;

    -- The slots of each bounded operation are counted by one claim at a time.
    v_ops := ARRAY(SELECT jsonb_object_keys(p_bounds) ORDER BY 1);
    INSERT INTO maestro_flow (type, operation)
    SELECT p_type, o FROM unnest(v_ops) AS o
    ON CONFLICT DO NOTHING;
    v_counted := ARRAY(SELECT f.operation FROM maestro_flow f
                       WHERE f.type = p_type AND f.operation = ANY (v_ops)
                       ORDER BY f.operation
                       FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    WITH RECURSIVE bounds AS MATERIALIZED (
        SELECT b.key AS op, (b.value ->> 'max')::integer AS max_total,
               (b.value ->> 'per_client')::integer AS max_client,
               b.key = ANY (v_counted) AS counted
        FROM jsonb_each(p_bounds) AS b
    ), running AS MATERIALIZED (
        SELECT r.payload ->> 'operation' AS op, r.client, count(*)::integer AS n
        FROM maestro_queues r
        WHERE r.type = p_type AND r.status IN ('pending', 'in_progress')
          AND r.available_at > now()
          AND r.status = 'in_progress' AND r.lease_expires_at > now()
          AND r.payload ->> 'operation' = ANY (v_counted)
        GROUP BY 1, 2
    ), room AS MATERIALIZED (
        SELECT b.op, b.max_client, b.counted,
               CASE WHEN NOT b.counted THEN 0
                    ELSE b.max_total - coalesce((SELECT sum(r.n) FROM running r
                                                 WHERE r.op = b.op), 0)
               END AS free
        FROM bounds b
    ), closed AS MATERIALIZED (
        -- No row of these may be claimed now: an operation without a free slot (or
        -- whose slots another claim is counting), a client at its bound for one.
        SELECT m.op, NULL::text AS client FROM room m WHERE m.free <= 0
        UNION ALL
        SELECT r.op, r.client FROM running r JOIN room m ON m.op = r.op
        WHERE r.n >= m.max_client
    ), clients(client) AS (
        (SELECT m.client FROM maestro_queues m
         WHERE m.type = p_type AND m.status IN ('pending', 'in_progress')
           AND m.available_at <= now()
           AND (m.status = 'pending' OR m.lease_expires_at <= now())
           AND NOT EXISTS (SELECT FROM closed x WHERE x.op = m.payload ->> 'operation'
                           AND (x.client IS NULL OR x.client = m.client))
         ORDER BY m.client LIMIT 1)
        UNION ALL
        SELECT (SELECT m.client FROM maestro_queues m
                WHERE m.type = p_type AND m.status IN ('pending', 'in_progress')
                  AND m.available_at <= now()
                  AND (m.status = 'pending' OR m.lease_expires_at <= now())
                  AND m.client > c.client
                  AND NOT EXISTS (SELECT FROM closed x WHERE x.op = m.payload ->> 'operation'
                                  AND (x.client IS NULL OR x.client = m.client))
                ORDER BY m.client LIMIT 1)
        FROM clients c
        WHERE c.client IS NOT NULL
    ), picks AS MATERIALIZED (
        SELECT r.id, r.op, c.client, r.available_at, busy.running + r.turn AS rank
        FROM clients c
        CROSS JOIN LATERAL (
            SELECT count(*) AS running
            FROM maestro_queues b
            WHERE b.type = p_type AND b.client = c.client AND b.status = 'in_progress'
              AND b.available_at > now()
        ) AS busy
        CROSS JOIN LATERAL (
            SELECT m.id, m.op, m.available_at,
                   row_number() OVER (ORDER BY m.available_at) AS turn
            FROM (SELECT q.id, q.payload ->> 'operation' AS op, q.available_at
                  FROM maestro_queues q
                  WHERE q.type = p_type AND q.client = c.client
                    AND q.status IN ('pending', 'in_progress') AND q.available_at <= now()
                    AND (q.status = 'pending' OR q.lease_expires_at <= now())
                    AND NOT EXISTS (SELECT FROM closed x
                                    WHERE x.op = q.payload ->> 'operation'
                                      AND (x.client IS NULL OR x.client = q.client))
                  ORDER BY q.available_at
                  LIMIT p_limit) AS m
        ) AS r
        WHERE c.client IS NOT NULL
    ), client_cut AS MATERIALIZED (
        -- A client's rows of a per-client bounded operation, cut to that client's room.
        SELECT p.*, m.max_client IS NULL
                    OR row_number() OVER (PARTITION BY p.op, p.client ORDER BY p.rank, p.available_at)
                       <= m.max_client - coalesce(u.n, 0) AS kept
        FROM picks p
        LEFT JOIN room m ON m.op = p.op
        LEFT JOIN running u ON u.op = p.op AND u.client = p.client
    ), op_cut AS MATERIALIZED (
        -- Then each bounded operation's rows, cut to its free slots, in rank order.
        SELECT k.id, k.op, k.rank, k.available_at,
               m.free IS NULL
               OR row_number() OVER (PARTITION BY k.op ORDER BY k.rank, k.available_at)
                  <= m.free AS kept
        FROM client_cut k
        LEFT JOIN room m ON m.op = k.op
        WHERE k.kept
    ), turns AS MATERIALIZED (
        SELECT o.id FROM op_cut o WHERE o.kept
        ORDER BY o.rank, o.available_at
        LIMIT p_limit
    ), deferrals AS MATERIALIZED (
        SELECT DISTINCT d.op FROM (
            SELECT k.op FROM client_cut k WHERE NOT k.kept
            UNION ALL
            SELECT o.op FROM op_cut o WHERE NOT o.kept
            UNION ALL
            SELECT x.op FROM closed x
            WHERE EXISTS (SELECT FROM maestro_queues m
                          WHERE m.type = p_type AND m.status IN ('pending', 'in_progress')
                            AND m.available_at <= now()
                            AND (m.status = 'pending' OR m.lease_expires_at <= now())
                            AND m.payload ->> 'operation' = x.op
                            AND (x.client IS NULL OR m.client = x.client))
        ) AS d
    ), async_commit AS MATERIALIZED (
        SELECT set_config('synchronous_commit', 'off', true) AS setting
    ), claimable AS MATERIALIZED (
        SELECT k.id, k.dequeue_count >= k.max_dequeues AS spent, k.available_at AS ready_at
        FROM maestro_queues k
        WHERE k.id = ANY (ARRAY(SELECT t.id FROM turns t))
          AND k.status IN ('pending', 'in_progress')
          AND k.available_at <= now()
          AND (k.status = 'pending' OR k.lease_expires_at <= now())
        FOR UPDATE SKIP LOCKED
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
           false AS poisoned, NULL::text AS traceparent, NULL::text AS deferred
    FROM claimed c
    JOIN claimable k ON k.id = c.id
    UNION ALL
    SELECT p.id, p.type, NULL, NULL, p.dequeue_count, p.max_dequeues,
           NULL, NULL, NULL, NULL,
           true, p.traceparent, NULL::text
    FROM poisoned p
    CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(p.type), p.id::text)) AS n
    UNION ALL
    SELECT NULL::uuid, p_type, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           false, NULL, d.op
    FROM deferrals d;
END
$claim$;
