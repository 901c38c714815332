-- The wallboard's Poison jobs panel as a view the viewer role may read (issue #43):
-- Grafana's login is a member of dataplane_viewer, whose column grants on
-- maestro_queues leave out the envelope (`payload`: params, the caller's e-mail and
-- branches) and `last_error`. The panel needs the operation's name, the caller's
-- client and the last line of the error, nothing else of either: this view shows
-- exactly those, so the wallboard reads with the viewer's grants and no role needs
-- SELECT on the envelope to draw it.
--
-- It runs as its owner (not security_invoker), like dataplane_overview (0021). Rows:
-- status = 'poison' only, read from maestro_queues_poison (0020); the last line of
-- last_error, at most 500 characters (the console's job page shows the rest to an
-- operator).
CREATE OR REPLACE VIEW dataplane_poison_jobs AS
SELECT
    id,
    type,
    payload->>'operation' AS operation,
    payload->'auth'->>'client' AS client,
    dequeue_count,
    created_at,
    completed_at AS parked_at,
    left(regexp_replace(btrim(coalesce(last_error, ''), E' \n'), '^.*\n', ''), 500)
        AS last_error
FROM maestro_queues
WHERE status = 'poison';
