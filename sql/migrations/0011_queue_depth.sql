-- The queue depth an autoscaler reads (KEDA's PostgreSQL scaler, deploy/kubernetes):
-- the rows of one queue type that want a worker now, i.e. the rows ready to claim
-- (pending past their backoff, or in_progress with a lapsed lease) plus the rows in
-- flight (in_progress under a live lease). A pending row still in its failure backoff
-- is not counted until its backoff ends; finished rows (done, poison, cancelled) never.
-- Divided by the rows one replica takes on, it is the replicas a type needs.
--
-- It reads the claim index (type, available_at WHERE live), so it costs the number of
-- live rows of that type. SECURITY DEFINER with the search_path of the migration: a
-- role that may run this function and nothing else (GRANT EXECUTE, no table privilege)
-- can scale the workers; EXECUTE is revoked from PUBLIC, so only the owner (the role
-- that migrates) and the roles granted it can count a queue.
CREATE OR REPLACE FUNCTION maestro_queue_depth(p_type text) RETURNS bigint
    LANGUAGE sql STABLE STRICT PARALLEL SAFE SECURITY DEFINER
    SET search_path FROM CURRENT
    AS $$
        SELECT count(*)
        FROM maestro_queues
        WHERE type = p_type
          AND status IN ('pending', 'in_progress')
          AND (status = 'in_progress' OR available_at <= now())
    $$;

REVOKE EXECUTE ON FUNCTION maestro_queue_depth(text) FROM PUBLIC;
