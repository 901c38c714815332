-- Each finished job's trace (32 lowercase hex digits, as the report carries it), so
-- the wallboard links a run to its trace. Null for reports sent without tracing.
ALTER TABLE worker_runs ADD COLUMN IF NOT EXISTS trace_id text
    CHECK (trace_id IS NULL OR trace_id ~ '^[0-9a-f]{32}$');
