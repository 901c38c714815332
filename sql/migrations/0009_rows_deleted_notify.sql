-- A deletion of queue rows is heard: every statement that deletes rows of
-- maestro_queues (retention, an operator's DELETE) or truncates it notifies
-- `maestro_rows_deleted` on commit. A BFF's reply pump remembers the answers its
-- recent done notifies carried and answers a job's owner from that memory; on this
-- notify it forgets them, so a deleted row is never answered from memory. The
-- payload is empty: anyone who may connect may send it too, and all it can do is
-- make a pump read rows it would have answered from memory.

CREATE OR REPLACE FUNCTION maestro_rows_deleted_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone) THEN
        PERFORM pg_notify('maestro_rows_deleted', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION maestro_rows_truncated_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('maestro_rows_deleted', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS maestro_queues_rows_deleted ON maestro_queues;
CREATE TRIGGER maestro_queues_rows_deleted
    AFTER DELETE ON maestro_queues
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION maestro_rows_deleted_notify();

DROP TRIGGER IF EXISTS maestro_queues_truncated ON maestro_queues;
CREATE TRIGGER maestro_queues_truncated
    AFTER TRUNCATE ON maestro_queues
    FOR EACH STATEMENT EXECUTE FUNCTION maestro_rows_truncated_notify();
