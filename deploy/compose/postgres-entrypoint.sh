#!/bin/sh
# The entry point of compose's local Postgres image (deploy/compose/Containerfile), with
# the official image's interface: on an empty $PGDATA, initdb with POSTGRES_USER (a
# superuser) and the password in POSTGRES_PASSWORD_FILE, scram-sha-256 for every
# connection, and the database POSTGRES_DB (and, given DATAPLANE_DB_PASSWORDS, the
# plane's logins: below); then `postgres` listening on all addresses (its socket in
# /tmp: the root filesystem may be read-only).
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "${1:-postgres}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  [ -s "${POSTGRES_PASSWORD_FILE:-}" ] || { echo "POSTGRES_PASSWORD_FILE must name a file" >&2; exit 1; }
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$POSTGRES_PASSWORD_FILE" \
    --auth-local=scram-sha-256 --auth-host=scram-sha-256 --encoding=UTF8 >/dev/null
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    echo "CREATE DATABASE \"$POSTGRES_DB\"" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  # Closed to PUBLIC: only superusers and the roles granted CONNECT may connect (any
  # role that can connect hears job ids on the done channels and may take advisory locks).
  echo "REVOKE CONNECT ON DATABASE \"$POSTGRES_DB\" FROM PUBLIC" |
    postgres --single -D "$PGDATA" postgres >/dev/null
  # The plane's logins (compose.yaml): with DATAPLANE_DB_PASSWORDS naming a directory of
  # <login>_db_password files, `dataplane` (migrations: owns the queue DB, may create
  # roles, no superuser) and one login per runtime process, each a member of its group
  # role only (sql/roles.sql, which `dataplane migrate` grants): the console's is
  # console_login, in dataplane_operator; Grafana's grafana_login, in dataplane_viewer.
  # Passwords are hex.
  if [ -n "${DATAPLANE_DB_PASSWORDS:-}" ]; then
    pw() { tr -cd '0-9a-f' <"$DATAPLANE_DB_PASSWORDS/$1_db_password"; }
    {
      echo "CREATE ROLE dataplane LOGIN CREATEDB CREATEROLE PASSWORD '$(pw admin)'"
      echo "ALTER DATABASE \"$POSTGRES_DB\" OWNER TO dataplane"
      for kind in bff worker capcom scaler viewer operator; do
        echo "CREATE ROLE dataplane_$kind NOLOGIN"
      done
      for kind in bff worker capcom; do
        echo "CREATE ROLE ${kind}_login LOGIN PASSWORD '$(pw "$kind")' IN ROLE dataplane_$kind"
      done
      echo "CREATE ROLE console_login LOGIN PASSWORD '$(pw console)' IN ROLE dataplane_operator"
      # Grafana's wallboard (the observability profile), when init-secrets wrote its password.
      if [ -s "$DATAPLANE_DB_PASSWORDS/grafana_db_password" ]; then
        echo "CREATE ROLE grafana_login LOGIN PASSWORD '$(pw grafana)' IN ROLE dataplane_viewer"
      fi
    } | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "postgres-entrypoint: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
if [ "${1:-postgres}" = postgres ]; then
  [ $# -gt 0 ] && shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' \
    -c unix_socket_directories=/tmp "$@"
fi
exec "$@"
