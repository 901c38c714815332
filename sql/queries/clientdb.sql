-- Statements about client databases: the read-only proof (dataplane/worker/readonly.py).

-- name: ro_write_privileges
-- Every way the credential could write, first hole first; no rows = read-only.
-- Roles: the login role (session_user: a role-level `role` setting or SET ROLE may have
-- changed current_user) and every role it is a member of, directly or not, with or
-- without INHERIT (so every role it may SET ROLE to), plus, transitively, the owners
-- of the SECURITY DEFINER functions those can execute. A hole of such a role: an
-- attribute (SUPERUSER, CREATEDB, CREATEROLE, REPLICATION, BYPASSRLS), a write-capable
-- predefined role, CREATE or TEMPORARY on the database, CREATE on a schema, a table
-- write privilege (INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, MAINTAIN on 17+), a
-- column INSERT/UPDATE grant, USAGE or UPDATE on a sequence (nextval), UPDATE on a
-- large object, EXECUTE on a function that creates, writes or unlinks large objects
-- (PUBLIC has it as Postgres ships), or owning anything in this database (an owner may
-- DROP or re-GRANT); and lo_compat_privileges on, which turns the large objects'
-- privilege checks off. Reported: the holes of
-- the roles it can be, and each SECURITY DEFINER function it can call (EXECUTE, and
-- USAGE on its schema) whose owner can write, directly or through further such functions
-- (owning functions does not count there: every such owner owns one).
WITH RECURSIVE
me AS (
    SELECT r.oid, r.rolname::text AS rolname
    FROM pg_roles r
    WHERE pg_has_role(session_user, r.oid, 'MEMBER')
),
reach(oid) AS (
    SELECT oid FROM me
    UNION
    SELECT p.proowner
    FROM reach JOIN pg_proc p ON p.prosecdef
    WHERE has_function_privilege(reach.oid, p.oid, 'EXECUTE')
      AND has_schema_privilege(reach.oid, p.pronamespace, 'USAGE')
),
role AS (
    SELECT r.oid, r.rolname::text AS rolname, r.rolsuper, r.rolcreatedb, r.rolcreaterole,
           r.rolreplication, r.rolbypassrls
    FROM pg_roles r JOIN reach USING (oid)
),
rel AS (
    SELECT c.oid, c.relkind, n.nspname::text || '.' || c.relname::text AS name
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
      AND c.oid <> 'pg_catalog.pg_settings'::regclass  -- UPDATE on it is SET, for everyone
      AND n.nspname NOT LIKE 'pg\_toast%'
      AND n.nspname NOT LIKE 'pg\_temp\_%'
),
hole(role_oid, rank, kind, name, owned_class) AS (
    SELECT oid, 1, 'attribute', 'SUPERUSER', NULL::oid FROM role WHERE rolsuper
    UNION ALL SELECT oid, 2, 'attribute', 'CREATEROLE', NULL FROM role WHERE rolcreaterole
    UNION ALL SELECT oid, 2, 'attribute', 'CREATEDB', NULL FROM role WHERE rolcreatedb
    UNION ALL SELECT oid, 2, 'attribute', 'REPLICATION', NULL FROM role WHERE rolreplication
    UNION ALL SELECT oid, 2, 'attribute', 'BYPASSRLS', NULL FROM role WHERE rolbypassrls
    UNION ALL
    SELECT role.oid, 3, 'predefined role', g.rolname::text, NULL
    FROM role JOIN pg_roles g ON g.rolname IN ('pg_write_all_data', 'pg_write_server_files',
        'pg_execute_server_program', 'pg_create_subscription', 'pg_maintain')
    WHERE pg_has_role(role.oid, g.oid, 'MEMBER')
    UNION ALL
    SELECT role.oid, 4, 'database ' || priv, current_database()::text, NULL
    FROM role CROSS JOIN (VALUES ('CREATE'), ('TEMPORARY')) AS p(priv)
    WHERE has_database_privilege(role.oid, current_database(), priv)
    UNION ALL
    SELECT role.oid, 4, 'owns', 'database ' || d.datname::text, NULL
    FROM role JOIN pg_database d ON d.datdba = role.oid AND d.datname = current_database()
    UNION ALL
    SELECT role.oid, 5, 'schema CREATE', n.nspname::text, NULL
    FROM role CROSS JOIN pg_namespace n
    WHERE n.nspname NOT LIKE 'pg\_toast%'
      AND n.nspname NOT LIKE 'pg\_temp\_%'
      AND has_schema_privilege(role.oid, n.oid, 'CREATE')
    UNION ALL
    SELECT role.oid, 6, 'owns', pg_describe_object(d.classid, d.objid, 0), d.classid
    FROM role JOIN pg_shdepend d ON d.refclassid = 'pg_authid'::regclass
        AND d.refobjid = role.oid AND d.deptype = 'o'
        AND d.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT role.oid, 7, 'table', rel.name, NULL
    FROM role CROSS JOIN rel
    WHERE rel.relkind <> 'S'
      AND (has_table_privilege(role.oid, rel.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER')
           OR CASE WHEN current_setting('server_version_num')::int >= 170000
                   THEN has_table_privilege(role.oid, rel.oid, 'MAINTAIN') ELSE false END)
    UNION ALL
    SELECT role.oid, 8, 'column', rel.name || '.' || a.attname::text, NULL
    FROM role CROSS JOIN rel JOIN pg_attribute a ON a.attrelid = rel.oid
    WHERE rel.relkind <> 'S' AND a.attnum > 0 AND NOT a.attisdropped
      AND NOT has_table_privilege(role.oid, rel.oid, 'INSERT, UPDATE')
      AND has_column_privilege(role.oid, rel.oid, a.attnum, 'INSERT, UPDATE')
    UNION ALL
    SELECT role.oid, 9, 'sequence', rel.name, NULL
    FROM role CROSS JOIN rel
    WHERE rel.relkind = 'S' AND has_sequence_privilege(role.oid, rel.oid, 'USAGE, UPDATE')
    UNION ALL
    SELECT role.oid, 4, 'setting', 'lo_compat_privileges on', NULL
    FROM role
    WHERE role.rolname = session_user AND current_setting('lo_compat_privileges')::bool
    UNION ALL
    SELECT role.oid, 9, 'large object UPDATE', l.oid::text, NULL
    FROM pg_largeobject_metadata l
    CROSS JOIN LATERAL aclexplode(l.lomacl) a
    JOIN role ON a.grantee = role.oid OR (a.grantee = 0 AND role.rolname = session_user)
    WHERE a.privilege_type = 'UPDATE'
    UNION ALL
    SELECT role.oid, 10, 'large-object function',
           'pg_catalog.' || p.proname::text
               || '(' || pg_get_function_identity_arguments(p.oid) || ')', NULL
    FROM role CROSS JOIN pg_proc p
    WHERE p.pronamespace = 'pg_catalog'::regnamespace
      AND p.proname IN ('lo_creat', 'lo_create', 'lo_from_bytea', 'lo_import', 'lo_export',
                        'lo_put', 'lowrite', 'lo_truncate', 'lo_truncate64', 'lo_unlink')
      AND has_function_privilege(role.oid, p.oid, 'EXECUTE')
),
writer(oid) AS (
    SELECT role_oid FROM hole WHERE owned_class IS DISTINCT FROM 'pg_proc'::regclass
    UNION
    SELECT r.oid
    FROM writer w
    JOIN pg_proc g ON g.prosecdef AND g.proowner = w.oid
    JOIN reach r ON has_function_privilege(r.oid, g.oid, 'EXECUTE')
        AND has_schema_privilege(r.oid, g.pronamespace, 'USAGE')
)
SELECT h.rank, h.kind, h.name,
       CASE WHEN m.rolname <> session_user THEN 'as role ' || m.rolname END AS detail
FROM hole h JOIN me m ON m.oid = h.role_oid
UNION ALL
SELECT 11, 'SECURITY DEFINER function',
       n.nspname::text || '.' || p.proname::text
           || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       'runs as ' || pg_get_userbyid(p.proowner)::text || ', who can write'
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.prosecdef
  AND p.proowner IN (SELECT oid FROM writer)
  AND EXISTS (SELECT 1 FROM me WHERE has_function_privilege(me.oid, p.oid, 'EXECUTE')
                                  AND has_schema_privilege(me.oid, p.pronamespace, 'USAGE'))
ORDER BY rank, detail NULLS FIRST, name;

-- name: ro_session_settings
-- The session settings the worker pins (%(names)s, as pg_settings spells them): each
-- one's value and where it came from, and the login role's own default for it
-- (ALTER ROLE ... [IN DATABASE ...] SET, which any role may set for itself), if any.
SELECT s.name, s.setting, s.source,
       (SELECT substr(c.item, strpos(c.item, '=') + 1)
        FROM pg_catalog.pg_db_role_setting d
        CROSS JOIN LATERAL unnest(d.setconfig) AS c(item)
        WHERE d.setrole = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)
          AND d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database
                                    WHERE datname = current_database()))
          AND lower(split_part(c.item, '=', 1)) = lower(s.name)
        ORDER BY d.setdatabase DESC
        LIMIT 1) AS role_value
FROM pg_catalog.pg_settings s
WHERE s.name = ANY(%(names)s::text[])
ORDER BY s.name;

-- name: ro_session_defaults
-- Every default the login role gives itself (ALTER ROLE ... [IN DATABASE ...] SET) or
-- the database gives every session (ALTER DATABASE ... SET): name, value and by whom.
SELECT lower(split_part(c.item, '=', 1)) AS name,
       substr(c.item, strpos(c.item, '=') + 1) AS value,
       CASE WHEN d.setrole = 0 THEN 'database' ELSE 'role' END AS scope
FROM pg_catalog.pg_db_role_setting d
CROSS JOIN LATERAL unnest(d.setconfig) AS c(item)
WHERE (d.setrole = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = session_user)
       AND d.setdatabase IN (0, (SELECT oid FROM pg_catalog.pg_database
                                 WHERE datname = current_database())))
   OR (d.setrole = 0
       AND d.setdatabase = (SELECT oid FROM pg_catalog.pg_database
                            WHERE datname = current_database()))
ORDER BY 1;
