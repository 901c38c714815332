-- Worker liveness: a row per worker process in maestro_workers (migration 0024,
-- dataplane/worker/claims/liveness.py).

-- name: worker_beat
-- This worker is alive until `lapse_seconds` from now. With `rescue`, the same
-- statement takes over from workers whose rows lapsed: their rows are deleted (those
-- another beat is deleting right now are skipped, never waited for), their running
-- claims made claimable at once (lease and available_at set to now; locked_by and
-- dequeue_count kept, so their late writes stay fenced out once re-claimed), and the
-- wake channel of each touched type notified. One row back per worker rescued: its
-- id, type, how long it was unseen (seconds) and how many claims it held.
WITH beat AS (
    INSERT INTO maestro_workers AS w (worker_id, type, opens, alive_until)
    VALUES (%(worker_id)s, %(type)s, %(opens)s::text[],
            now() + make_interval(secs => %(lapse_seconds)s))
    ON CONFLICT (worker_id) DO UPDATE
        SET type = excluded.type,
            opens = excluded.opens,
            beat_at = now(),
            alive_until = excluded.alive_until
    RETURNING w.worker_id
), lapsed AS (
    DELETE FROM maestro_workers w
    WHERE w.worker_id IN (
        SELECT d.worker_id FROM maestro_workers d
        WHERE %(rescue)s AND d.alive_until < now() AND d.worker_id <> %(worker_id)s
        ORDER BY d.worker_id
        FOR UPDATE SKIP LOCKED
    )
    RETURNING w.worker_id, w.type, w.beat_at
), rescued AS (
    UPDATE maestro_queues q
    SET lease_expires_at = now(),
        available_at = now()
    FROM lapsed l
    WHERE q.type = l.type
      AND q.status IN ('pending', 'in_progress')  -- the claim index's predicate
      AND q.available_at > now()
      AND q.status = 'in_progress'
      AND q.locked_by = l.worker_id
    RETURNING q.type, q.locked_by
), wake AS (
    SELECT pg_notify(maestro_wake_channel(t.type), '')
    FROM (SELECT DISTINCT type FROM rescued) AS t
)
SELECT l.worker_id, l.type,
       extract(epoch FROM now() - l.beat_at)::float8 AS unseen_seconds,
       (SELECT count(*) FROM rescued r WHERE r.locked_by = l.worker_id)::integer AS jobs
FROM lapsed l
WHERE (SELECT count(*) FROM wake) >= 0
  AND (SELECT count(*) FROM beat) >= 0;

-- name: worker_leave
-- A worker that stopped gracefully removes its row, but only once it holds no running
-- claim (each was completed, failed or released): one left behind (a release that
-- failed) keeps the row, which lapses, and the claim is rescued. A row back when gone.
DELETE FROM maestro_workers w
WHERE w.worker_id = %(worker_id)s
  AND NOT EXISTS (
      SELECT FROM maestro_queues q
      WHERE q.type = w.type
        AND q.status IN ('pending', 'in_progress')
        AND q.available_at > now()
        AND q.status = 'in_progress'
        AND q.locked_by = w.worker_id
  )
RETURNING w.worker_id;
