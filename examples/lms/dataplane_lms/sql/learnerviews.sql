-- Statements of the `learnerviews` surface (dataplane/surfaces/learnerviews.py),
-- run over the read-only client DB, scoped by client and branches. Timestamps
-- come out as ISO-8601 UTC text, numerics as float8, so rows are JSON-ready.

-- name: learnerviews_branch_summary
-- Course completion summary per branch in scope (optionally one branch, enrolled since a date).
WITH per_learner AS (   -- pre-aggregate per (branch, learner): avoids a big DISTINCT sort
    SELECT e.branch_id, e.user_id,
           count(*)                                           AS enrollments,
           count(*) FILTER (WHERE e.status = 'completed')     AS completed,
           count(*) FILTER (WHERE e.status = 'in_progress')   AS in_progress,
           count(*) FILTER (WHERE e.status = 'enrolled')      AS not_started,
           count(*) FILTER (WHERE e.status = 'failed')        AS failed,
           sum(e.score) FILTER (WHERE e.status = 'completed') AS completed_score_sum
    FROM lms.enrollments e
    WHERE e.client_id = %(client)s
      AND ('*' = ANY(%(branches)s::text[]) OR e.branch_id = ANY(%(branches)s::text[]))
      AND (%(branch)s::text IS NULL OR e.branch_id = %(branch)s::text)
      AND (%(since)s::timestamptz IS NULL OR e.enrolled_at >= %(since)s::timestamptz)
    GROUP BY e.branch_id, e.user_id
)
SELECT p.branch_id, b.name AS branch_name, b.region,
       sum(p.enrollments)::bigint AS enrollments,
       count(*)                   AS learners,
       sum(p.completed)::bigint   AS completed,
       sum(p.in_progress)::bigint AS in_progress,
       sum(p.not_started)::bigint AS not_started,
       sum(p.failed)::bigint      AS failed,
       round(100.0 * sum(p.completed) / sum(p.enrollments), 1)::float8 AS completion_pct,
       round(sum(p.completed_score_sum) / nullif(sum(p.completed), 0), 1)::float8
           AS avg_completed_score
FROM per_learner p
JOIN lms.branches b ON b.id = p.branch_id
GROUP BY p.branch_id, b.name, b.region
ORDER BY p.branch_id;

-- name: learnerviews_course_summary
-- Completion per course within scope (optionally one branch / category), least completed first.
SELECT c.id AS course_id, c.code, c.title, c.category,
       count(*)                                       AS enrollments,
       count(*) FILTER (WHERE e.status = 'completed') AS completed,
       round(100.0 * count(*) FILTER (WHERE e.status = 'completed') / count(*), 1)::float8
           AS completion_pct,
       round(avg(e.score) FILTER (WHERE e.status = 'completed'), 1)::float8 AS avg_completed_score
FROM lms.enrollments e
JOIN lms.courses c ON c.id = e.course_id
WHERE e.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR e.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR e.branch_id = %(branch)s::text)
  AND (%(category)s::text IS NULL OR c.category = %(category)s::text)
GROUP BY c.id
ORDER BY completion_pct ASC, c.id
LIMIT %(limit)s;

-- name: learnerviews_learner_get
-- The learner's identity, if the user is in scope (no row: not found in scope).
SELECT u.id, u.full_name, u.email, u.role, u.active, u.branch_id, b.name AS branch_name
FROM lms.users u
JOIN lms.branches b ON b.id = u.branch_id
WHERE u.id = %(user_id)s
  AND u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]));

-- name: learnerviews_enrollments_list
-- A learner's enrollments and progress in scope, newest first (optional status filter).
SELECT e.id AS enrollment_id, e.course_id, c.code, c.title, c.category,
       c.duration_minutes, e.status, e.progress_pct, e.score,
       to_char(e.enrolled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS enrolled_at,
       to_char(e.completed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS completed_at
FROM lms.enrollments e
JOIN lms.courses c ON c.id = e.course_id
WHERE e.user_id = %(user_id)s
  AND e.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR e.branch_id = ANY(%(branches)s::text[]))
  AND (%(status)s::text IS NULL OR e.status = %(status)s::text)
ORDER BY e.enrolled_at DESC, e.id DESC;
