-- Pin the search_path of every SECURITY DEFINER function to the schema it was
-- migrated into with pg_temp last (Postgres docs, "Writing SECURITY DEFINER Functions
-- Safely"). 0011's `SET search_path FROM CURRENT` copied the migrator's path
-- ("$user", public) with pg_temp implicitly first, so a caller's TEMP table named
-- maestro_queues shadowed the real one and the scaler read the caller's number.
-- maestro_queue_depth is the only SECURITY DEFINER function of the schema; a test
-- lists them all and checks each one's path.
DO $$
BEGIN
    EXECUTE format(
        'ALTER FUNCTION maestro_queue_depth(text) SET search_path = %I, pg_temp',
        current_schema()
    );
END
$$;
