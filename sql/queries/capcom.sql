-- Statements of the telemetry receiver (dataplane/capcom/app.py). A POST carries one
-- report or a small batch; either way it is one INSERT, the batch passed as
-- parallel arrays (one element per report) and unnested.

-- name: worker_run_insert
-- Record finished jobs (one element per report in every array) in worker_runs.
INSERT INTO worker_runs (
    job_id, type, operation, outcome, wall_ms, cpu_ms, rss_bytes, queue_wait_ms,
    cache, coalesced, dequeue_count, worker_id, finished_at, trace_id
)
SELECT r.job_id, r.type, r.operation, r.outcome, r.wall_ms, r.cpu_ms, r.rss_bytes,
       r.queue_wait_ms, r.cache, r.coalesced, r.dequeue_count, r.worker_id,
       to_timestamp(r.finished_at), r.trace_id
FROM unnest(
    %(job_id)s::uuid[],
    %(type)s::text[],
    %(operation)s::text[],
    %(outcome)s::text[],
    %(wall_ms)s::float8[],
    %(cpu_ms)s::float8[],
    %(rss_bytes)s::int8[],
    %(queue_wait_ms)s::float8[],
    %(cache)s::text[],
    %(coalesced)s::bool[],
    %(dequeue_count)s::int4[],
    %(worker_id)s::text[],
    %(finished_at)s::float8[],
    %(trace_id)s::text[]
) AS r(job_id, type, operation, outcome, wall_ms, cpu_ms, rss_bytes, queue_wait_ms,
       cache, coalesced, dequeue_count, worker_id, finished_at, trace_id);
