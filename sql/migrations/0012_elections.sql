-- Elections the plane holds in a row, not in an advisory lock. Advisory locks need no
-- privilege: any role that may connect could take 'dataplane.maintenance' and stop
-- maintenance everywhere. A row here is written only by roles granted it (never
-- PUBLIC): one row per election, held by `holder` until `until`; a holder renews
-- before it lapses, anyone takes it after (dataplane/queue/elections.py).
CREATE TABLE IF NOT EXISTS dataplane_elections (
    name text PRIMARY KEY,
    holder text NOT NULL,
    until timestamptz NOT NULL,
    since timestamptz NOT NULL DEFAULT now()
);

REVOKE ALL ON dataplane_elections FROM PUBLIC;
