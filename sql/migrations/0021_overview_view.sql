-- The wallboard's cards as one view both readers select from (issue #41): the console's
-- overview (sql/queries/console.sql, console_overview) and the Grafana wallboard's
-- panels that show the same numbers (dashboards/json/wallboard.json), so the two never
-- disagree. Measured with 1,000,000 rows in maestro_queues and in worker_runs by
-- bench/overview.py (docs/perf/console-overview.md).
--
-- One row per queue type that has live rows, poison rows, a pause or a job report in
-- the last hour. Each part is read from an index that bounds it:
--   live rows     status IN ('pending', 'in_progress'): maestro_queues_listing (0018)
--                 or the claim's partial indexes (0001, 0005), as the planner prefers
--   poison rows   maestro_queues_poison (0020): status = 'poison', index only
--   paused types  maestro_paused's primary key (0017)
--   job reports   per type (a skip scan finds the types), worker_runs_type_finished
--                 read backwards: each type's newest 2,000 of the last hour
--                 (reads.RUN_SAMPLE), so the statistics cost the same with a million
--                 reports as with 2,000 a type, and a busy type cannot crowd a quiet
--                 one out
-- answers_per_minute: done and error answers of the last 5 minutes of the type's
-- sample; a full sample younger than 5 minutes is rated over what it covers.
--
-- It runs as its owner (not security_invoker) and shows counts, times and ratios only
-- (no envelope, result or error text): the viewer role (Grafana) and the operator role
-- (the console) may select it, granted in sql/roles.sql.
--
-- Indexes: worker_runs (type, finished_at), for the per-type sample (worker_runs is
-- appended to by capcom only: one more entry per report, no cost to the queue).
-- maestro_queues_listing of 0020 (created_at, id) was never built:
-- 0018 had already created an index of that name on (status, created_at, id), and
-- CREATE INDEX IF NOT EXISTS is by name. The console's jobs list is answered from 0018's
-- index (console_jobs pages each status's slice and merges them), so enqueue and claim
-- pay no further index entry.

CREATE INDEX IF NOT EXISTS worker_runs_type_finished ON worker_runs (type, finished_at);

CREATE OR REPLACE VIEW dataplane_overview AS
WITH live AS (
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
), poison AS (
    SELECT type, count(*) AS poison, max(completed_at) AS newest_poison
    FROM maestro_queues
    WHERE status = 'poison'
    GROUP BY type
), run_types AS (
    -- The types worker_runs holds (retention bounds it), one index probe each: a skip
    -- scan of worker_runs_type_finished. A recursive CTE must lead its WITH; here it
    -- is a subquery's.
    SELECT type FROM (
        WITH RECURSIVE found(type) AS (
            (SELECT w.type FROM worker_runs w ORDER BY w.type LIMIT 1)
            UNION ALL
            SELECT (SELECT w.type FROM worker_runs w WHERE w.type > f.type
                    ORDER BY w.type LIMIT 1)
            FROM found f
            WHERE f.type IS NOT NULL
        )
        SELECT type FROM found WHERE type IS NOT NULL
    ) AS known
), recent AS (
    -- Each type's newest 2,000 reports of the last hour: a busy type cannot crowd a
    -- quiet one out of its own statistics.
    SELECT rt.type, s.outcome, s.queue_wait_ms, s.wall_ms, s.cache, s.coalesced,
           s.finished_at
    FROM run_types rt
    CROSS JOIN LATERAL (
        SELECT w.outcome, w.queue_wait_ms, w.wall_ms, w.cache, w.coalesced, w.finished_at
        FROM worker_runs w
        WHERE w.type = rt.type AND w.finished_at > now() - interval '1 hour'
        ORDER BY w.finished_at DESC
        LIMIT 2000
    ) AS s
), runs AS (
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
           extract(epoch FROM now() - min(finished_at))::float8 AS sample_age_s,
           count(*) AS sample_rows
    FROM recent
    GROUP BY type
), types AS (
    SELECT type FROM live
    UNION SELECT type FROM poison
    UNION SELECT type FROM maestro_paused
    UNION SELECT type FROM runs
)
SELECT t.type,
       CASE WHEN right(t.type, 4) = '-dev' THEN 'dev' ELSE 'live' END AS tier,
       coalesce(l.pending, 0) AS pending,
       coalesce(l.ready, 0) AS ready,
       coalesce(l.pending - l.ready, 0) AS backing_off,
       coalesce(l.in_flight, 0) AS in_flight,
       l.oldest_ready_s,
       coalesce(p.poison, 0) AS poison,
       p.newest_poison,
       m.paused_at IS NOT NULL AS paused,
       m.paused_at,
       m.paused_by,
       coalesce(r.runs, 0) AS runs,
       coalesce(r.answers_5m * 60.0 / CASE
           WHEN r.sample_rows >= 2000 THEN least(300.0, greatest(1.0, r.sample_age_s))
           ELSE 300.0 END, 0)::float8 AS answers_per_minute,
       r.wait_p50_ms,
       r.wait_p95_ms,
       r.exec_p50_ms,
       r.exec_p95_ms,
       r.cache_hit_ratio,
       r.coalesced_ratio
FROM types AS t
LEFT JOIN live AS l USING (type)
LEFT JOIN poison AS p USING (type)
LEFT JOIN maestro_paused AS m USING (type)
LEFT JOIN runs AS r USING (type);
