-- Elections held in a row of dataplane_elections (dataplane/maintenance/elections.py).

-- name: election_take
-- Take or renew the election `name` for `seconds`: a row back when this holder holds
-- it now (it was free, lapsed, or already this holder's), none when another holds it.
-- A renewal never shortens the holder's term (a pass took a longer one: election_hold
-- gives it back).
INSERT INTO dataplane_elections AS e (name, holder, until)
VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(seconds)s))
ON CONFLICT (name) DO UPDATE
    SET holder = excluded.holder,
        until = CASE WHEN e.holder = excluded.holder AND e.until > now()
                     THEN greatest(e.until, excluded.until) ELSE excluded.until END,
        since = CASE WHEN e.holder = excluded.holder THEN e.since ELSE now() END
    WHERE e.until < now() OR e.holder = excluded.holder
RETURNING holder;

-- name: election_release
-- Step down from `name` if this holder holds it: the next taker need not wait.
UPDATE dataplane_elections SET until = now() - interval '1 microsecond'
WHERE name = %(name)s AND holder = %(holder)s;

-- name: election_hold
-- Set the holder's term to `seconds` from now, shorter or longer (a pass gives back the
-- term it took); no row when this holder does not hold it.
UPDATE dataplane_elections SET until = now() + make_interval(secs => %(seconds)s)
WHERE name = %(name)s AND holder = %(holder)s AND until > now()
RETURNING holder;
