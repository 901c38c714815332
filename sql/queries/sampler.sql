-- Statements of the queue sampler (dataplane/maintenance/sampler.py): the worker that leads
-- the fleet's maintenance reads the queue's shape every few seconds for the depth gauges.

-- name: queue_depth_sample
-- Live rows by type and state, with the oldest claimable row's age since it became
-- claimable, poison rows by type, and the paused types (state 'paused', n = 1): two index
-- scans (maestro_queues_claim and maestro_queues_finished_at), never the done rows, and
-- the few rows of maestro_paused.
SELECT type,
       CASE
           WHEN status = 'pending' AND available_at <= now() THEN 'ready'
           WHEN status = 'pending' THEN 'backing_off'
           WHEN lease_expires_at <= now() THEN 'lease_lapsed'
           ELSE 'running'
       END AS state,
       count(*) AS n,
       coalesce(extract(epoch FROM now() - min(available_at)), 0)::float8 AS oldest_seconds
FROM maestro_queues
WHERE status IN ('pending', 'in_progress')
GROUP BY 1, 2
UNION ALL
SELECT type, 'poison', count(*), 0::float8
FROM maestro_queues
WHERE status = 'poison'
GROUP BY type
UNION ALL
SELECT type, 'paused', 1, 0::float8
FROM maestro_paused;
