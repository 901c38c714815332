-- Worker liveness (issue 55): a dead worker's jobs back in seconds, not at its leases'
-- end (dataplane/worker/claims/liveness.py).
--
-- One row per worker process, named by the id its claims write into
-- maestro_queues.locked_by, with the time until which it counts as alive. Each worker
-- renews its own row every few seconds with one small statement (never one per job),
-- and the same statement rescues the claims of workers whose rows lapsed: their
-- in_progress rows get lease_expires_at = available_at = now() (claimable at once by
-- the unchanged claim, and no longer counted as running by a flow bound), their rows
-- are deleted, and each touched type's wake channel is notified. locked_by and
-- dequeue_count are left alone: the dead worker's late writes stay fenced out once the
-- row is claimed again. A claim whose worker has no row here (an older release, or a
-- worker that could not write it) keeps the lease as its only liveness, as before.
--
-- `type` is the worker's queue type: a rescue reads the lapsed worker's running rows
-- through the claim index (type, available_at), whose in_progress entries sit at their
-- lease expiry. `opens` holds the key ids of the notify secrets the worker opens
-- sealed notifies with (NULL: it holds none and believes plain invalidation tags):
-- `dataplane invalidate` reads it to say which live workers will believe what it
-- sends. A key id is the four bytes every sealed notify already carries in clear.
--
-- Only the plane's roles write it (sql/roles.sql): a role that may merely connect can
-- neither keep a dead worker's claims held nor make a live worker's claims look dead.
CREATE TABLE IF NOT EXISTS maestro_workers (
    worker_id   text        PRIMARY KEY,
    type        text        NOT NULL,
    opens       text[],
    started_at  timestamptz NOT NULL DEFAULT now(),
    beat_at     timestamptz NOT NULL DEFAULT now(),
    alive_until timestamptz NOT NULL
);

REVOKE ALL ON maestro_workers FROM PUBLIC;
