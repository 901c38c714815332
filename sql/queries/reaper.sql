-- Statements of the reaper (dataplane/maintenance/retention.py). Deletes go in bounded
-- batches so no single statement holds many row locks on the hot table.

-- name: reap_done
-- Delete a batch of done (and cancelled) rows older than the retention.
DELETE FROM maestro_queues
WHERE id IN (
    SELECT id FROM maestro_queues
    WHERE status IN ('done', 'cancelled') AND completed_at < now() - make_interval(secs => %(retention_seconds)s)
    LIMIT %(batch)s
);

-- name: reap_poison
-- Delete a batch of poison rows older than the retention.
DELETE FROM maestro_queues
WHERE id IN (
    SELECT id FROM maestro_queues
    WHERE status = 'poison' AND completed_at < now() - make_interval(secs => %(retention_seconds)s)
    LIMIT %(batch)s
);

-- name: reap_lapsed_at_cutoff
-- Live rows that can never be claimed again (dequeue budget spent, lease lapsed
-- or backoff over) become poison, and their done channel hears of it. Each is
-- returned with its attempts and traceparent, so the pass can trace, count and log it.
WITH p AS (
    UPDATE maestro_queues q
    SET status = 'poison',
        completed_at = now(),
        lease_expires_at = NULL,
        last_error = coalesce(q.last_error || E'\n', '') || 'lease lapsed at the dequeue cutoff'
    WHERE q.id IN (
        SELECT id FROM maestro_queues
        WHERE status IN ('pending', 'in_progress')
          AND available_at <= now()
          AND (status = 'pending' OR lease_expires_at <= now())
          AND dequeue_count >= max_dequeues
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING q.id, q.type, q.dequeue_count, q.max_dequeues,
              q.payload ->> 'traceparent' AS traceparent
)
SELECT p.id, p.type, p.dequeue_count, p.max_dequeues, p.traceparent
FROM p
CROSS JOIN LATERAL (SELECT pg_notify(maestro_done_channel(p.type), p.id::text)) AS n;
