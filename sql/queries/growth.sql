-- Statements of the growth watch (dataplane/maintenance/growth.py): a queue table that
-- outgrew its statistics is analyzed.

-- name: table_growth
-- The queue's tables as the planner last measured them (pg_class, set by the last
-- VACUUM or ANALYZE) and as they are now, in pages.
SELECT c.relname AS name, c.relpages AS planned_pages,
       (pg_relation_size(c.oid) / current_setting('block_size')::integer)::integer AS pages
FROM pg_class c
WHERE c.oid IN ('maestro_queues'::regclass, 'surface_result_blobs'::regclass);

-- name: analyze_lock_timeout
-- How long an ANALYZE of the growth watch waits for its table lock (this transaction
-- only): less than deadlock_timeout, so a running autovacuum, which updates the
-- statistics itself, is never cancelled for it.
SELECT set_config('lock_timeout', '500ms', true);

-- name: queue_analyze
-- New statistics for the queue table (every session's plans of it are made again).
ANALYZE maestro_queues;

-- name: blobs_analyze
-- New statistics for the blob table (every session's plans of it are made again).
ANALYZE surface_result_blobs;
