-- The operator console's reads (issue #41, dataplane/console; sql/queries/console.sql),
-- each bounded and answered from an index with a million rows in maestro_queues and in
-- worker_runs:
--
-- maestro_queues_listing: the jobs list, newest first, keyset-paged on (created_at, id)
--   (never OFFSET). created_at and id never change, so updates stay as they were; each
--   insert pays one more index entry.
-- maestro_queues_poison: the poison cards and the poison list by type. Only poison rows
--   are in it: rare, written once, deleted by retention.
-- worker_runs_job: a job's attempts on its page (worker_runs had no index by job).
CREATE INDEX IF NOT EXISTS maestro_queues_listing ON maestro_queues (created_at, id);
CREATE INDEX IF NOT EXISTS maestro_queues_poison
    ON maestro_queues (type, completed_at)
    WHERE status = 'poison';
CREATE INDEX IF NOT EXISTS worker_runs_job ON worker_runs (job_id);
