-- One row per finished job, as received by the telemetry receiver
-- (capcom's /worker/job-finished). The wallboard reads it directly.

CREATE TABLE IF NOT EXISTS worker_runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid        NOT NULL,
    type          text        NOT NULL,
    operation     text        NOT NULL,
    outcome       text        NOT NULL
                  CHECK (outcome IN ('done', 'error', 'failed', 'poison', 'lost', 'released')),
    wall_ms       double precision NOT NULL CHECK (wall_ms >= 0),
    cpu_ms        double precision NOT NULL CHECK (cpu_ms >= 0),
    rss_bytes     bigint      NOT NULL CHECK (rss_bytes >= 0),
    queue_wait_ms double precision NOT NULL CHECK (queue_wait_ms >= 0),
    cache         text        NOT NULL CHECK (cache IN ('hit', 'miss', 'bypass')),
    coalesced     boolean     NOT NULL,
    dequeue_count integer     NOT NULL,
    worker_id     text        NOT NULL,
    finished_at   timestamptz NOT NULL
);

CREATE INDEX IF NOT EXISTS worker_runs_finished ON worker_runs (finished_at);
CREATE INDEX IF NOT EXISTS worker_runs_type_op ON worker_runs (type, operation, finished_at);
