-- Statements of the demo client DB's builder (dataplane_lms/demo_db.py).

-- name: demo_db_seeded
-- Whether the demo data set is complete (the role file runs last).
SELECT 1 AS found FROM pg_roles WHERE rolname = 'dataplane_ro'
  AND EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'lms' AND tablename = 'invoice_lines')
  AND EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = 'dataplane_demo_seeded');

-- name: demo_db_mark_seeded
-- Record that every seed file ran.
CREATE TABLE IF NOT EXISTS public.dataplane_demo_seeded (seeded_at timestamptz NOT NULL DEFAULT now());

-- name: demo_role_password
-- Set the read-only role's password ({password} is a Literal).
ALTER ROLE dataplane_ro PASSWORD {password};
