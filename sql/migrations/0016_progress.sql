-- A running job's last progress (dataplane/worker/progress.py): the JSON its handler
-- last reported (ctx.progress), with the attempt and sequence that order it, written
-- by the worker holding the claim (fenced like a completion) at most five times a
-- second per job. A stream that connects or reconnects late is sent it first; the
-- progress notify on <type>_progress carries it (sealed) to the streams waiting now.
-- NULL for a job that reported none. It stays on the row when the job finishes (the
-- answer supersedes it: nothing reads it then but an operator).

ALTER TABLE maestro_queues ADD COLUMN IF NOT EXISTS progress jsonb;
