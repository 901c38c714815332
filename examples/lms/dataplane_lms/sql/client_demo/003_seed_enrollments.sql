-- Deterministic seed, part 2: enrollments (~126,000 rows).
-- Each user gets 6..15 distinct courses of their own client (step 37 is
-- coprime with every client's course count, so picks never collide).
-- client_id / branch_id are copied from the user (denormalised scope columns).
-- enrolled_at is between 2024-02-01 and 2025-11-02 (>= 60 days before the
-- 2026-01-01 anchor), so completed_at = enrolled_at + 1..60 days is always in the past.

INSERT INTO lms.enrollments
       (id, user_id, course_id, client_id, branch_id, status, progress_pct, score, enrolled_at, completed_at)
SELECT row_number() OVER (ORDER BY e.user_id, e.k),
       e.user_id,
       e.course_id,
       e.client_id,
       e.branch_id,
       e.status,
       CASE e.status WHEN 'enrolled'    THEN 0
                     WHEN 'in_progress' THEN 5 + mod(e.h_prog, 91)
                     ELSE 100 END,
       CASE e.status WHEN 'completed' THEN 60 + mod(e.h_prog, 41)
                     WHEN 'failed'    THEN 15 + mod(e.h_prog, 45)
                     END,
       e.enrolled_at,
       CASE WHEN e.status IN ('completed', 'failed')
            THEN e.enrolled_at + (1440 + mod(e.h_done, 59 * 1440)) * interval '1 minute'
            END
FROM (
    SELECT x.*,
           CASE WHEN x.age_minutes < 120 * 1440 THEN   -- recent: mostly still running
                     CASE WHEN x.p < 25 THEN 'enrolled' WHEN x.p < 70 THEN 'in_progress'
                          WHEN x.p < 93 THEN 'completed' ELSE 'failed' END
                ELSE
                     CASE WHEN x.p < 4  THEN 'enrolled' WHEN x.p < 16 THEN 'in_progress'
                          WHEN x.p < 88 THEN 'completed' ELSE 'failed' END
           END AS status,
           timestamptz '2026-01-01 00:00:00+00' - x.age_minutes * interval '1 minute' AS enrolled_at
    FROM (
        SELECT u.id AS user_id,
               k,
               cc.lo + mod(u.h_course + k * 37, cc.n) AS course_id,
               u.client_id,
               u.branch_id,
               60 * 1440 + mod(hashtext(u.id || ':' || k || ':enrolled')::bigint & 2147483647, 640 * 1440) AS age_minutes,
               mod(hashtext(u.id || ':' || k || ':status')::bigint & 2147483647, 100) AS p,
               hashtext(u.id || ':' || k || ':progress')::bigint & 2147483647 AS h_prog,
               hashtext(u.id || ':' || k || ':done')::bigint & 2147483647 AS h_done
        FROM (SELECT id, client_id, branch_id,
                     hashtext(id || ':courses')::bigint & 2147483647 AS h_course,
                     hashtext(id || ':n_enroll')::bigint & 2147483647 AS h_n
              FROM lms.users) u
        JOIN (SELECT client_id, min(id) AS lo, count(*) AS n
              FROM lms.courses GROUP BY client_id) cc USING (client_id)
        CROSS JOIN LATERAL generate_series(0, 14) AS k
        WHERE k < 6 + mod(u.h_n, 10)
    ) x
) e;
