#!/usr/bin/env bash
# Makes sure `make run` and `make test` have a PostgreSQL they can use, and
# creates the database `ovstream` in it (the demo writes there; the tests only
# connect to it to create and drop databases ovs_<random> of their own).
#
#   bash .ci/postgres.sh          set up (idempotent; make run and make test call it)
#   bash .ci/postgres.sh stop     stop the private cluster, if one was started
#
# 1. DATABASE_URL set: it is used as it is (the database must exist).
# 2. Otherwise the machine's server on 127.0.0.1:5432 (started with
#    pg_ctlcluster when installed but down), as user postgres without a
#    password (`trust` for 127.0.0.1 in pg_hba.conf).
# 3. When that server asks for a password (a fresh Debian install: PostgreSQL
#    >= 14 uses scram-sha-256 for TCP) or there is none, it starts a PRIVATE
#    cluster instead: initdb into .ci/pg (as user postgres when run as root),
#    trust authentication, 127.0.0.1 on a free port; the machine's server is
#    not touched. It writes DATABASE_URL into .ci/local.env, which the
#    Makefile reads (a DATABASE_URL in the environment wins over it). It
#    allows 16 prepared transactions (max_prepared_transactions): the Flink
#    peer's exactly-once (XA) form prepares one per sink writer (2) per
#    checkpoint, one checkpoint at a time (integration/flinkpeer).
# OVSTREAM_PG_HOST, OVSTREAM_PG_PORT, OVSTREAM_PG_DIR, OVSTREAM_PG_ENV
# override the server address, the private cluster's folder and the env file
# (the tests use them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
host=${OVSTREAM_PG_HOST:-127.0.0.1}
port=${OVSTREAM_PG_PORT:-5432}
pgdir=${OVSTREAM_PG_DIR:-$repo/.ci/pg}
envfile=${OVSTREAM_PG_ENV:-$repo/.ci/local.env}
db=ovstream

# as runs a command as the private cluster's owner: root cannot run PostgreSQL.
as() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$d" ]; then echo "$d"; return; fi
  command -v initdb >/dev/null 2>&1 && dirname "$(command -v initdb)" && return
  echo "PostgreSQL is not installed. On Debian/Ubuntu: sudo apt-get install -y postgresql" >&2
  exit 1
}

# createdb_if_missing URL_OF_MAINTENANCE_DB: creates database $db there.
createdb_if_missing() {
  if [ "$(psql "$1" -Atc "SELECT 1 FROM pg_database WHERE datname = '$db'")" != 1 ]; then
    psql "$1" -qc "CREATE DATABASE $db"
    echo "created database $db"
  fi
}

if [ "${1:-}" = stop ]; then
  if [ -f "$pgdir/data/PG_VERSION" ]; then
    as "$(bindir)/pg_ctl" -D "$pgdir/data" -m fast -w stop >/dev/null 2>&1 || true
    echo "stopped the private PostgreSQL cluster in $pgdir"
  fi
  exit 0
fi

if [ -n "${DATABASE_URL:-}" ]; then
  if ! psql "$DATABASE_URL" -Atc "SELECT 1" >/dev/null; then
    echo "DATABASE_URL is set, but PostgreSQL refuses it (see above). Unset it to let $0 set one up." >&2
    exit 1
  fi
  exit 0
fi

# private starts (creating it the first time) the private cluster and writes
# the env file.
private() {
  local bin data log p
  bin=$(bindir)
  data=$pgdir/data
  log=$pgdir/log
  if [ ! -f "$data/PG_VERSION" ]; then
    mkdir -p "$pgdir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$pgdir"
      if ! runuser -u postgres -- test -w "$pgdir"; then
        echo "user postgres cannot write $pgdir (a parent folder is closed to it); set OVSTREAM_PG_DIR" >&2
        exit 1
      fi
    fi
    as "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 >/dev/null
    echo "initialized a private PostgreSQL cluster in $data (trust authentication, 127.0.0.1 only)"
  fi
  if ! as "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    p=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$p -c unix_socket_directories='$pgdir' -c max_connections=200 -c max_prepared_transactions=16" start >/dev/null
  fi
  p=$(sed -n 4p "$data/postmaster.pid")
  cat >"$envfile" <<EOF
# Written by .ci/postgres.sh: the private PostgreSQL cluster in $pgdir
# (stop it: bash .ci/postgres.sh stop). A DATABASE_URL in the environment wins.
: "\${DATABASE_URL:=postgres://postgres@127.0.0.1:$p/$db?sslmode=disable}"
export DATABASE_URL
EOF
  createdb_if_missing "postgres://postgres@127.0.0.1:$p/postgres?sslmode=disable"
  echo "private PostgreSQL on 127.0.0.1:$p; DATABASE_URL is in $envfile"
}

if ! command -v pg_isready >/dev/null 2>&1; then
  echo "PostgreSQL is not installed. On Debian/Ubuntu: sudo apt-get install -y postgresql" >&2
  exit 1
fi
if [ -f "$pgdir/data/PG_VERSION" ]; then # chosen before: keep using it
  private
  exit 0
fi
if ! pg_isready -q -h "$host" -p "$port" && [ "$host:$port" = 127.0.0.1:5432 ] &&
  command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "starting PostgreSQL $ver cluster 'main'"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 60); do
    pg_isready -q -h "$host" -p "$port" && break
    sleep 0.5
  done
fi
machine="postgres://postgres@$host:$port/postgres?sslmode=disable"
if pg_isready -q -h "$host" -p "$port"; then
  if psql "$machine" -Atc "SELECT 1" >/dev/null 2>&1 </dev/null; then
    rm -f "$envfile"
    createdb_if_missing "$machine"
    exit 0
  fi
  cat >&2 <<EOF
PostgreSQL on $host:$port asks user postgres for a password over TCP (a fresh
Debian install: scram-sha-256 in pg_hba.conf). Starting a private cluster
instead; the machine's server is left alone. To use the machine's server:
either set DATABASE_URL=postgres://USER:PASSWORD@$host:$port/$db (create the
database first: createdb $db), or add the line
  host all postgres 127.0.0.1/32 trust
before the other host lines of pg_hba.conf and reload PostgreSQL; then
remove $pgdir.
EOF
else
  echo "No PostgreSQL server answers on $host:$port: starting a private cluster." >&2
fi
private
