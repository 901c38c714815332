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

-- name: session_lock_outsider
-- The role of a session holding the lock named `key` that is not the plane's: neither
-- this session's role nor a member of dataplane_worker (an advisory lock needs no
-- privilege, so any role that may connect can take one or wait in line for it).
SELECT a.usename AS outsider, a.pid
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = hashtext('dataplane.session_lock')::oid
  AND l.objid = hashtext(%(key)s)::oid
  AND l.objsubid = 2
  AND a.usesysid <> (SELECT oid FROM pg_roles WHERE rolname = current_user)
  AND NOT CASE
      WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dataplane_worker')
          THEN pg_has_role(a.usesysid, 'dataplane_worker', 'MEMBER')
      ELSE false
  END
LIMIT 1;

-- name: session_lock_workers
-- Of the locks named in `keys`, those a session of a member of dataplane_worker holds
-- or waits for (any session, without sql/roles.sql: a test database). pg_locks and
-- pg_stat_activity's pid and usesysid are readable by every role.
SELECT k.key
FROM unnest(%(keys)s::text[]) AS k(key)
WHERE EXISTS (
    SELECT 1
    FROM pg_locks AS l
    JOIN pg_stat_activity AS a ON a.pid = l.pid
    WHERE l.locktype = 'advisory'
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = hashtext('dataplane.session_lock')::oid
      AND l.objid = hashtext(k.key)::oid
      AND l.objsubid = 2
      AND CASE
          WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dataplane_worker')
              THEN pg_has_role(a.usesysid, 'dataplane_worker', 'MEMBER')
          ELSE true
      END
);
