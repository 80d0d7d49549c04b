#!/usr/bin/env bash
# Makes sure PostgreSQL answers on 127.0.0.1:5432 for `make run` and `make test`:
# starts a local cluster that is installed but down, and says what to install
# when there is none. Creates the database `test` the tests start from.
set -euo pipefail
host=127.0.0.1 port=5432

if ! command -v pg_isready >/dev/null 2>&1; then
  echo "PostgreSQL is not installed. On Debian/Ubuntu: sudo apt-get install -y postgresql" >&2
  exit 1
fi
if ! pg_isready -q -h "$host" -p "$port"; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
    echo "No PostgreSQL server answers on $host:$port and no local cluster is installed." >&2
    echo "Install one (Debian/Ubuntu: sudo apt-get install -y postgresql) or set DATABASE_URL." >&2
    exit 1
  fi
  ver=$(ls /etc/postgresql | sort -V | tail -n 1)
  echo "starting PostgreSQL $ver cluster 'main'"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 1 60); do
    pg_isready -q -h "$host" -p "$port" && break
    sleep 0.5
  done
  if ! pg_isready -q -h "$host" -p "$port"; then
    echo "PostgreSQL $ver did not come up on $host:$port; see /var/log/postgresql/postgresql-$ver-main.log" >&2
    exit 1
  fi
fi
if [ -z "${DATABASE_URL:-}" ]; then
  if ! psql -h "$host" -p "$port" -U postgres -d postgres -Atc "SELECT 1" >/dev/null 2>&1; then
    echo "PostgreSQL answers but user postgres cannot log in over TCP without a password." >&2
    echo "Either allow it (pg_hba.conf: 'host all postgres 127.0.0.1/32 trust') or set DATABASE_URL." >&2
    exit 1
  fi
  if [ "$(psql -h "$host" -p "$port" -U postgres -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'test'")" != 1 ]; then
    psql -h "$host" -p "$port" -U postgres -d postgres -qc "CREATE DATABASE test"
  fi
fi
