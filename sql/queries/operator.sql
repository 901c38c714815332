-- Operators' statements (dataplane/operator): the console and the CLI alike.

-- name: audit_insert
-- One action's row, in the action's transaction.
INSERT INTO dataplane_audit (actor, via, action, target, rows)
VALUES (%(actor)s, %(via)s, %(action)s, %(target)s::jsonb, %(rows)s)
RETURNING id;

-- name: audit_list
-- The newest actions first (keyset: ids below %(before)s when given).
SELECT id, at, actor, via, action, target, rows
FROM dataplane_audit
WHERE %(before)s::bigint IS NULL OR id < %(before)s::bigint
ORDER BY id DESC
LIMIT %(limit)s;

-- name: job_operator_lock
-- The job an operator acts on, locked until the action's transaction ends (its status
-- cannot change between reading it and acting on it).
SELECT id, type, status FROM maestro_queues WHERE id = %(id)s FOR UPDATE;

-- name: job_operator_cancel
-- An operator cancels a live job (pending or running): cancelled, its completion time
-- set, its lease cleared; locked_by and dequeue_count stay, the claim its worker checks
-- a cancel notify against. In this statement, so both fire on commit: its streams hear
-- of it on the done channel (as of a withdrawal's cancel), and a running job's worker
-- on the type's cancel channel (`cancel_channel`; NULL for a pending job).
WITH c AS (
    UPDATE maestro_queues q
    SET status = 'cancelled', completed_at = now(), lease_expires_at = NULL
    WHERE q.id = %(id)s AND q.status IN ('pending', 'in_progress')
    RETURNING q.id, q.type
)
SELECT c.id
FROM c
CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(c.type), c.id::text)) AS d
LEFT JOIN LATERAL (
    SELECT pg_notify(%(cancel_channel)s::text, c.id::text)
    WHERE %(cancel_channel)s::text IS NOT NULL
) AS w ON true;
