#!/bin/sh
# The entry point of compose's local Postgres image (deploy/compose/Containerfile), with
# the official image's interface: on an empty $PGDATA, initdb with POSTGRES_USER (a
# superuser) and the password in POSTGRES_PASSWORD_FILE, scram-sha-256 for every
# connection, and the database POSTGRES_DB; then `postgres` listening on all addresses
# (its socket in /tmp: the root filesystem may be read-only).
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
  echo "postgres-entrypoint: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
if [ "${1:-postgres}" = postgres ]; then
  [ $# -gt 0 ] && shift
  exec postgres -D "$PGDATA" -c listen_addresses='*' \
    -c unix_socket_directories=/tmp "$@"
fi
exec "$@"
