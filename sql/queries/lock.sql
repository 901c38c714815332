-- Session-level advisory locks on a dedicated connection (dataplane/db/lock.py). The
-- two-key form keeps them apart from the one-key locks of maintenance and migrations.

-- name: session_wait_untimed
-- A lock wait on this dedicated session waits as long as it takes: a statement or
-- lock timeout set for the role or in the URL must not cancel it.
SELECT set_config('statement_timeout', '0', false), set_config('lock_timeout', '0', false);

-- name: session_lock
-- Wait until this session holds the lock named `key` (granted to one waiter at a time).
SELECT pg_advisory_lock(hashtext('dataplane.session_lock'), hashtext(%(key)s));

-- name: session_unlock
-- Let go of the lock named `key` (the longest waiting session gets it).
SELECT pg_advisory_unlock(hashtext('dataplane.session_lock'), hashtext(%(key)s));
