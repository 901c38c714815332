-- Secondary indexes (created after the bulk load) + planner statistics.
-- PK / UNIQUE indexes already exist from 001_schema.sql.
-- Scope predicate used by every query:  client_id = %(client)s
--   AND ('*' = ANY(%(branches)s::text[]) OR branch_id = ANY(%(branches)s::text[]))

-- users: list by branch ordered by name (keyset/offset paging), and by client when branches = ['*']
CREATE INDEX IF NOT EXISTS users_client_branch_name_idx ON lms.users (client_id, branch_id, full_name, id);
CREATE INDEX IF NOT EXISTS users_client_name_idx        ON lms.users (client_id, full_name, id);

-- enrollments: per-learner drill-down, per-branch/course completion summaries, per-course lookups
CREATE INDEX IF NOT EXISTS enrollments_user_enrolled_idx       ON lms.enrollments (user_id, enrolled_at DESC);
CREATE INDEX IF NOT EXISTS enrollments_client_branch_course_idx ON lms.enrollments (client_id, branch_id, course_id)
    INCLUDE (status, score);
CREATE INDEX IF NOT EXISTS enrollments_course_idx              ON lms.enrollments (course_id);

-- skills graph
CREATE INDEX IF NOT EXISTS course_skills_skill_idx ON lms.course_skills (skill_id);
CREATE INDEX IF NOT EXISTS user_skills_skill_idx   ON lms.user_skills (skill_id);

-- accounting
CREATE INDEX IF NOT EXISTS invoices_client_branch_issued_idx ON lms.invoices (client_id, branch_id, issued_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS invoices_client_issued_idx        ON lms.invoices (client_id, issued_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS invoice_lines_invoice_idx         ON lms.invoice_lines (invoice_id);
CREATE INDEX IF NOT EXISTS invoice_lines_course_idx          ON lms.invoice_lines (course_id);

ANALYZE lms.clients;
ANALYZE lms.branches;
ANALYZE lms.users;
ANALYZE lms.courses;
ANALYZE lms.enrollments;
ANALYZE lms.skills;
ANALYZE lms.course_skills;
ANALYZE lms.user_skills;
ANALYZE lms.invoices;
ANALYZE lms.invoice_lines;
