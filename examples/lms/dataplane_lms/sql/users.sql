-- Statements of the `users` surface (dataplane/surfaces/users.py), run over the
-- read-only client DB. Every one is scoped by client and branches; timestamps
-- come out as ISO-8601 UTC text, numerics as float8, so rows are JSON-ready.
-- `q` is a LIKE pattern fragment escaped by the caller (\ % _ taken literally).

-- name: users_list
-- One page of users in scope, by name, with optional search / role / branch filters.
SELECT u.id, u.full_name, u.email, u.role, u.active, u.branch_id,
       to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at
FROM lms.users u
WHERE u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR u.branch_id = %(branch)s::text)
  AND (%(q)s::text IS NULL
       OR u.full_name ILIKE '%%' || %(q)s::text || '%%'
       OR u.email     ILIKE '%%' || %(q)s::text || '%%')
  AND (%(role)s::text IS NULL OR u.role = %(role)s::text)
ORDER BY u.full_name, u.id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: users_count
-- How many users match the users_list filters (the pager's total).
SELECT count(*) AS total
FROM lms.users u
WHERE u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR u.branch_id = %(branch)s::text)
  AND (%(q)s::text IS NULL
       OR u.full_name ILIKE '%%' || %(q)s::text || '%%'
       OR u.email     ILIKE '%%' || %(q)s::text || '%%')
  AND (%(role)s::text IS NULL OR u.role = %(role)s::text);

-- name: users_get
-- One user in scope with branch and enrollment statistics (no row: not found in scope).
SELECT u.id, u.full_name, u.email, u.role, u.active,
       to_char(u.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created_at,
       u.client_id, u.branch_id, b.name AS branch_name, b.region,
       count(e.id)                                        AS enrollments,
       count(e.id) FILTER (WHERE e.status = 'completed')   AS completed,
       count(e.id) FILTER (WHERE e.status = 'in_progress') AS in_progress,
       count(e.id) FILTER (WHERE e.status = 'enrolled')    AS not_started,
       count(e.id) FILTER (WHERE e.status = 'failed')      AS failed,
       round(avg(e.score) FILTER (WHERE e.status = 'completed'), 1)::float8 AS avg_completed_score,
       to_char(max(e.enrolled_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
           AS last_enrolled_at
FROM lms.users u
JOIN lms.branches b ON b.id = u.branch_id
LEFT JOIN lms.enrollments e ON e.user_id = u.id
WHERE u.id = %(user_id)s
  AND u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
GROUP BY u.id, b.id;
