#!/usr/bin/env bash
# Throwaway PostgreSQL for docket's tests and benchmarks.
#
#   scripts/testdb.sh start   install PostgreSQL from Debian packages if missing
#                             (needs root), start a cluster on 127.0.0.1, print
#                             the URL as DOCKET_TEST_DATABASE_URL=...
#   scripts/testdb.sh stop    stop it
#   scripts/testdb.sh url     print the URL only
#
# Environment: DOCKET_TESTDB_DIR (default /tmp/docket-testdb),
# DOCKET_TESTDB_PORT (default 54329), DOCKET_TESTDB_DURABLE=1 keeps fsync on
# (benchmarks); tests default to fsync=off because they check logic, not disks.
set -euo pipefail

dir=${DOCKET_TESTDB_DIR:-/tmp/docket-testdb}
port=${DOCKET_TESTDB_PORT:-54329}
db=docket_test
url="postgres://postgres@127.0.0.1:${port}/${db}?sslmode=disable"

pgbin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  [ -n "$d" ] && [ -x "$d/pg_ctl" ] && echo "$d"
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

install() {
  if [ -n "$(pgbin)" ]; then return; fi
  if [ "$(id -u)" != 0 ]; then
    echo "testdb: PostgreSQL is not installed and we are not root to install it" >&2
    exit 1
  fi
  echo "testdb: installing PostgreSQL from Debian packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  # The package starts a cluster of its own; we use ours.
  service postgresql stop >/dev/null 2>&1 || true
}

start() {
  install
  local bin; bin=$(pgbin)
  if as_postgres "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
    echo "DOCKET_TEST_DATABASE_URL=$url"; return
  fi
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    rm -rf "$dir"; mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    as_postgres "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    local fsync=off
    [ "${DOCKET_TESTDB_DURABLE:-0}" = 1 ] && fsync=on
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 256MB
fsync = $fsync
full_page_writes = $fsync
CONF
  fi
  as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { tail -20 "$dir/server.log" >&2; exit 1; }
  as_postgres "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc \
    "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 \
    || as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres "$db"
  echo "DOCKET_TEST_DATABASE_URL=$url"
}

stop() {
  local bin; bin=$(pgbin) || exit 0
  as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  url) echo "$url" ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
