-- Statements of the database layer itself (dataplane/db/): a connection's liveness,
-- LISTEN and NOTIFY, and the database's own existence and who may connect to it.

-- name: ping
-- Liveness check of a connection.
SELECT 1;

-- name: listen
-- Subscribe the dedicated listener connection to one channel ({channel} is an Identifier).
LISTEN {channel};

-- name: unlisten
-- Unsubscribe the dedicated listener connection from one channel ({channel} is an Identifier).
UNLISTEN {channel};

-- name: notify_send
-- A bare notification (e.g. cache invalidation broadcast).
SELECT pg_notify(%(channel)s, %(payload)s);

-- name: database_exists
-- Whether a database exists (run on an admin connection).
SELECT 1 AS found FROM pg_database WHERE datname = %(name)s;

-- name: database_create
-- Create a database ({name} is an Identifier).
CREATE DATABASE {name};

-- name: database_close_to_public
-- Close the current database to PUBLIC: only granted roles and superusers connect (run
-- by its owner).
DO $$ BEGIN
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', current_database());
END $$;

-- name: database_open_to_public
-- Whether every role may connect to this database (PUBLIC holds CONNECT, the default).
SELECT has_database_privilege('public', current_database(), 'CONNECT') AS open,
       current_database() AS name;
