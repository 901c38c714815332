-- Fairness, backpressure and cancellation.
--
-- `client` (the envelope's client, written by the enqueue) lets the claim take
-- the oldest job of each client in turn and the enqueue count a client's share
-- of live rows; `requesters` counts the callers attached to a live row (the first
-- and every coalesced one), so one of them cancelling leaves the others' job be.
-- `cancelled` is a finished status: a pending job its last requester withdrew.

ALTER TABLE maestro_queues ADD COLUMN IF NOT EXISTS client text NOT NULL DEFAULT '';
ALTER TABLE maestro_queues ADD COLUMN IF NOT EXISTS requesters integer NOT NULL DEFAULT 1;

ALTER TABLE maestro_queues DROP CONSTRAINT IF EXISTS maestro_queues_status_check;
ALTER TABLE maestro_queues ADD CONSTRAINT maestro_queues_status_check
    CHECK (status IN ('pending', 'in_progress', 'done', 'poison', 'cancelled'));

-- The fair claim walks the claimable rows client by client, oldest first.
CREATE INDEX IF NOT EXISTS maestro_queues_fair
    ON maestro_queues (type, client, available_at)
    WHERE status IN ('pending', 'in_progress');

-- Retention and the wallboard read finished rows by completion time.
DROP INDEX IF EXISTS maestro_queues_finished;
CREATE INDEX IF NOT EXISTS maestro_queues_finished_at
    ON maestro_queues (status, completed_at)
    WHERE status IN ('done', 'poison', 'cancelled');
