-- Statements of the `skills` surface (dataplane/surfaces/skills.py), run over
-- the read-only client DB. user_skills has no scope columns: it is scoped
-- through lms.users. Timestamps come out as ISO-8601 UTC text, numerics as float8.

-- name: skills_coverage_branches_list
-- The branches skills_coverage_list answers for, in its order (one step of progress each).
SELECT DISTINCT u.branch_id
FROM lms.users u
WHERE u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
  AND (%(branch)s::text IS NULL OR u.branch_id = %(branch)s::text)
  AND u.active
ORDER BY u.branch_id;

-- name: skills_coverage_list
-- Per branch and skill: share of active users holding it, average level, proficient users.
WITH scoped_users AS (
    SELECT u.id, u.branch_id
    FROM lms.users u
    WHERE u.client_id = %(client)s
      AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
      AND (%(branch)s::text IS NULL OR u.branch_id = %(branch)s::text)
      AND u.active
), headcount AS (
    SELECT branch_id, count(*) AS users FROM scoped_users GROUP BY branch_id
)
SELECT su.branch_id, s.id AS skill_id, s.name AS skill, s.category,
       count(*)                                    AS users_with_skill,
       h.users                                     AS branch_users,
       round(100.0 * count(*) / h.users, 1)::float8 AS coverage_pct,
       round(avg(us.level), 2)::float8             AS avg_level,
       count(*) FILTER (WHERE us.level >= 4)       AS proficient_users
FROM scoped_users su
JOIN lms.user_skills us ON us.user_id = su.id
JOIN lms.skills s       ON s.id = us.skill_id
JOIN headcount h        ON h.branch_id = su.branch_id
WHERE (%(category)s::text IS NULL OR s.category = %(category)s::text)
GROUP BY su.branch_id, s.id, h.users
ORDER BY su.branch_id, s.category, s.name;

-- name: skills_profile_user_get
-- The user whose profile is asked for, if in scope (no row: not found in scope).
SELECT u.id, u.full_name, u.role, u.branch_id
FROM lms.users u
WHERE u.id = %(user_id)s
  AND u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]));

-- name: skills_profile_list
-- One user's assessed level per skill, with how many completed courses taught it.
SELECT s.id AS skill_id, s.name AS skill, s.category, us.level,
       to_char(us.assessed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS assessed_at,
       (SELECT count(*)
          FROM lms.enrollments e
          JOIN lms.course_skills cs ON cs.course_id = e.course_id
         WHERE e.user_id = u.id AND e.status = 'completed' AND cs.skill_id = s.id
       ) AS completed_courses_with_skill
FROM lms.users u
JOIN lms.user_skills us ON us.user_id = u.id
JOIN lms.skills s       ON s.id = us.skill_id
WHERE u.id = %(user_id)s
  AND u.client_id = %(client)s
  AND ('*' = ANY(%(branches)s::text[]) OR u.branch_id = ANY(%(branches)s::text[]))
ORDER BY s.category, s.name;
