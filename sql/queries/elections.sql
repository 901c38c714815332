-- Elections held in a row of dataplane_elections (dataplane/maintenance/elections.py).

-- name: election_take
-- Take or renew the election `name` for `seconds`: a row back when this holder holds
-- it now (it was free, lapsed, or already this holder's), none when another holds it.
INSERT INTO dataplane_elections AS e (name, holder, until)
VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (name) DO UPDATE
    SET holder = excluded.holder,
        until = excluded.until,
        since = CASE WHEN e.holder = excluded.holder THEN e.since ELSE now() END
    WHERE e.until < now() OR e.holder = excluded.holder
RETURNING holder;

-- name: election_release
-- Step down from `name` if this holder holds it: the next taker need not wait.
UPDATE dataplane_elections SET until = now() - interval '1 microsecond'
WHERE name = %(name)s AND holder = %(holder)s;
