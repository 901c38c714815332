-- The queue table. One row per request; `status` moves
--   pending -> in_progress -> done | pending (retry) | poison.
-- `available_at` is the earliest moment the row may be claimed: for a pending
-- row the retry backoff, for an in_progress row its lease expiry (kept equal to
-- lease_expires_at), so one partial index serves the whole claim predicate.

CREATE TABLE IF NOT EXISTS maestro_queues (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    type             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CONSTRAINT maestro_queues_status_check
                     CHECK (status IN ('pending', 'in_progress', 'done', 'poison')),
    dedupe_key       text        NOT NULL,
    payload          jsonb       NOT NULL,
    result           jsonb,
    last_error       text,
    locked_by        text,
    lease_expires_at timestamptz,
    dequeue_count    integer     NOT NULL DEFAULT 0 CHECK (dequeue_count >= 0),
    max_dequeues     integer     NOT NULL DEFAULT 5 CHECK (max_dequeues > 0),
    available_at     timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    completed_at     timestamptz
) WITH (
    -- Rows are updated two or three times in their short life: leave room on
    -- each page for HOT updates, and vacuum the hot table early and often.
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05,
    autovacuum_vacuum_cost_delay = 0
);

-- Transport-level coalescing: one live row per dedupe key.
CREATE UNIQUE INDEX IF NOT EXISTS maestro_queues_dedupe_live
    ON maestro_queues (dedupe_key)
    WHERE status IN ('pending', 'in_progress');

-- The claim is an index range scan over live rows of one type, oldest first.
CREATE INDEX IF NOT EXISTS maestro_queues_claim
    ON maestro_queues (type, available_at)
    WHERE status IN ('pending', 'in_progress');

-- Retention and the wallboard read finished rows by completion time.
CREATE INDEX IF NOT EXISTS maestro_queues_finished
    ON maestro_queues (status, completed_at)
    WHERE status IN ('done', 'poison');

-- The done channel of a queue type: 'surface-x' -> 'surface_x_done',
-- 'surface-x-dev' -> 'surface_x_dev_done'. dataplane.queue.done_channel()
-- computes the same name; a test holds the two together.
CREATE OR REPLACE FUNCTION maestro_done_channel(queue_type text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT replace(queue_type, '-', '_') || '_done' $$;
