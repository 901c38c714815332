-- Flow control: an operation's running attempts bounded fleet-wide, and per client.
--
-- An operation may declare max_concurrency (at most N attempts of it running across
-- every worker of its queue type) and max_concurrency_per_client (at most M of one
-- client's). The bounds are enforced where claims are made: maestro_claim gains
-- p_bounds, a jsonb the worker builds from its surface's declarations,
-- {"<operation>": {"max": N | null, "per_client": M | null}, ...}. NULL or '{}' is
-- 0008's statement unchanged (the same plan, the same cost: an unbounded surface pays
-- for nothing here, not even an index, since none is added). The old four-argument
-- signature is dropped; p_bounds defaults to NULL, so a four-argument call (an older
-- worker during a rollout) still resolves to this function and claims unbounded.
--
-- Running is what the lease says: in_progress with lease_expires_at > now(). A worker
-- that dies holding slots frees them when its leases lapse (their rows are claimable
-- again, counted once re-claimed). Those rows are counted through the claim index
-- (type, available_at), whose in_progress entries sit at their lease expiry: the scan
-- over available_at > now() reads the type's running rows (and the pending rows in a
-- retry backoff), at most the fleet's concurrency plus its backoffs, and reads the
-- operation from the row's envelope (payload ->> 'operation'). No column or index is
-- added: an expression index on the operation would cost every enqueue and claim of
-- every surface one more index entry.
--
-- Concurrency: two claims must not both take the last slot. Each claim with bounds
-- first locks one row per bounded (type, operation) of maestro_flow, FOR UPDATE SKIP
-- LOCKED, then counts and claims in a later statement, so its snapshot sees every
-- claim committed before it got the lock (a transaction's row locks are released after
-- its commit is visible), and no other claim of that operation can commit meanwhile.
-- An operation whose row another claim holds is skipped for this claim: it has no
-- free slot now, its rows stay pending, reported as deferred. So claims never wait for
-- each other, a slot freed meanwhile is taken by the next claim, and SKIP LOCKED never
-- deadlocks. Rows, not advisory locks: an advisory lock needs no privilege, and a
-- role that merely connects could hold one and stop the operation everywhere; only the
-- worker may lock maestro_flow's rows. Claims must run in READ COMMITTED (the plane's
-- are single statements in autocommit): under REPEATABLE READ the count would be
-- made in the snapshot taken before the lock.
--
-- Candidates: the claimable rows of operations and clients with room, oldest first
-- per client and the clients in turn, as 0008's fair claim ranks them (a row's rank is
-- its turn in its client's rows plus that client's running jobs; with one client that
-- is FIFO). An operation without a free slot, and a client at its own bound for an
-- operation, are excluded in the scans themselves, so their rows never crowd out the
-- surface's other operations; the rows of an operation with k free slots are cut to
-- k in rank order (first to the client's own room, then to the operation's). Those are
-- read without locks, then locked by id with SKIP LOCKED and checked again, as 0008's
-- fair candidates are. A claimable row whose budget is spent is poisoned as in 0008.
-- Cost of a bounded claim: the rows of a closed operation ahead of the first eligible
-- ones are still read (filtered, never locked), so a large backlog of a saturated
-- operation slows that surface's claims in proportion (docs/known-issues.md).
--
-- What the claim returns besides claimed and poisoned rows: one row per operation
-- for which it left claimable rows pending because of a bound (deferred = the
-- operation's name, every other column NULL but poisoned false), which the worker
-- counts as dataplane.flow.deferred.

CREATE TABLE IF NOT EXISTS maestro_flow (
    type      text NOT NULL,
    operation text NOT NULL,
    PRIMARY KEY (type, operation)
);

DROP FUNCTION IF EXISTS maestro_claim(text, text, integer, double precision);

CREATE FUNCTION maestro_claim(
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
