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
