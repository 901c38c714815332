-- Who cancelled a job, and whether it was running then (issue 55): a cancelled row says
-- so, and so does every answer of it (the stream's CANCELLED event, the poll's 200).
--
-- cancelled_by: 'requesters' (every requester withdrew: job_cancel, the BFF's DELETE)
-- or 'operator' (job_operator_cancel: the console, `dataplane jobs cancel`), with the
-- operator's name in cancelled_operator (the audit row's actor). cancelled_running: the
-- job was in_progress when it was cancelled (its worker's handler was stopped). When is
-- completed_at. NULL on every row that is not cancelled, and on a row an older release
-- cancelled (its answer then says when, not who).
--
-- The check is added NOT VALID: the new columns are NULL on every stored row, so
-- maestro_queues is not scanned under this migration's lock. The rows already cancelled
-- are named from what the queue kept: an operator's cancel has its audit row (0017), any
-- other was every requester's; a cancelled row still naming a worker (locked_by) was
-- running (an operator's cancel keeps the claim; a pending row names none).

ALTER TABLE maestro_queues
    ADD COLUMN IF NOT EXISTS cancelled_by text,
    ADD COLUMN IF NOT EXISTS cancelled_operator text,
    ADD COLUMN IF NOT EXISTS cancelled_running boolean;

ALTER TABLE maestro_queues ADD CONSTRAINT maestro_queues_cancelled_by_check
    CHECK (cancelled_by IS NULL AND cancelled_operator IS NULL
           OR cancelled_by = 'requesters' AND cancelled_operator IS NULL
           OR cancelled_by = 'operator' AND length(cancelled_operator) BETWEEN 1 AND 320)
    NOT VALID;

WITH named AS (
    SELECT c.id,
           (SELECT d.actor FROM dataplane_audit d
            WHERE d.action = 'cancel' AND d.target ->> 'jobId' = c.id::text
            ORDER BY d.id DESC
            LIMIT 1) AS actor
    FROM maestro_queues c
    WHERE c.status = 'cancelled' AND c.cancelled_by IS NULL
)
UPDATE maestro_queues q
SET cancelled_by = CASE WHEN n.actor IS NULL THEN 'requesters' ELSE 'operator' END,
    cancelled_operator = n.actor,
    cancelled_running = q.locked_by IS NOT NULL
FROM named n
WHERE q.id = n.id;

-- Whether this withdrawal is the last one (job_cancel): every requester the row names
-- has withdrawn once this one goes, or, a row that names none (enqueued without a
-- requester), no attachment is left. Of the row as the withdrawal's UPDATE locked it,
-- so the last of two concurrent withdrawals is the one that cancels.
CREATE OR REPLACE FUNCTION maestro_last_withdrawal(
    requested_by text[], withdrawn text[], requesters integer, requester text
) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT CASE
        WHEN requested_by IS NULL THEN requesters <= 1
        ELSE requested_by <@ array_append(withdrawn, requester)
    END $$;
