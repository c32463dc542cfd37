#!/usr/bin/env bash
# The team stack's database (runs in the `postgres` service of infra/docker-compose.yml): Debian's
# PostgreSQL from the team image. On an empty volume it creates the cluster with the superuser
# `swe_rlvr` (password $POSTGRES_PASSWORD, scram-sha-256 over TCP) and the databases `prefect` and
# `mlflow`; then it runs the server in the foreground as the `postgres` user.
set -euo pipefail

: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD (the compose file passes it)}"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
DATA=${PGDATA:-/var/lib/postgresql/data}

as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }

mkdir -p "$DATA" /run/postgresql
chown postgres:postgres "$DATA" /run/postgresql
chmod 700 "$DATA"

if [ ! -s "$DATA/PG_VERSION" ]; then
  echo "[postgres] initialising $DATA (databases prefect, mlflow; superuser swe_rlvr)"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  as_postgres "$PGBIN/initdb" -D "$DATA" -U swe_rlvr --pwfile="$pwfile" -E UTF8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "listen_addresses = '*'" >>"$DATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$DATA/pg_hba.conf"
  as_postgres "$PGBIN/pg_ctl" -D "$DATA" -o "-c listen_addresses=''" -w start >/dev/null
  for db in prefect mlflow; do
    as_postgres "$PGBIN/psql" -q -U swe_rlvr -d postgres -c "CREATE DATABASE $db"
  done
  as_postgres "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$PGBIN/postgres" -D "$DATA"
