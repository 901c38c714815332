-- The wake channel of a queue type: 'surface-x' -> 'surface-x_enqueued'. An enqueue
-- (and a release or retry) notifies it so an idle claimer wakes at once.
-- dataplane.queue.QueueType.wake_channel computes the same name; a test holds the
-- two together, as it does maestro_done_channel (0001).
CREATE OR REPLACE FUNCTION maestro_wake_channel(queue_type text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT queue_type || '_enqueued' $$;
