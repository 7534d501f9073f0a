#!/usr/bin/env bash
# The fleet tests' services, on loopback, in a scratch folder: nats-server with JetStream and
# a throwaway PostgreSQL cluster (trust authentication on 127.0.0.1 only, fsync off: test data).
#
#   scripts/services.sh start DIR NATS_PORT PG_PORT   both; prints the URLs as shell exports
#   scripts/services.sh nats DIR NATS_PORT            (re)starts nats-server alone, same store
#   scripts/services.sh stop-nats DIR                 stops nats-server
#   scripts/services.sh pg DIR PG_PORT                restarts the PostgreSQL cluster it made
#   scripts/services.sh stop-pg DIR                   stops PostgreSQL
#   scripts/services.sh stop DIR                      stops both
#   scripts/services.sh pg-init DIR PG_PORT           a new PostgreSQL cluster alone
#
# GRADLESS_SERVICES_ADDR (default 127.0.0.1) is the address both listen on, and
# GRADLESS_SERVICES_TRUST a network (e.g. 10.77.0.0/16) PostgreSQL also trusts: the fault
# test runs them in network namespaces of their own (server/tests/faults.rs).
#
# PostgreSQL refuses to run as root: as root, the cluster belongs to Debian's `postgres` user.
set -euo pipefail
cmd=${1:?usage: services.sh start|nats|stop-nats|pg|stop-pg|stop DIR ...}
dir=${2:?the scratch folder}
addr=${GRADLESS_SERVICES_ADDR:-127.0.0.1}

pg_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] || { echo "error: PostgreSQL is not installed (scripts/setup.sh --fleet installs it)" >&2; exit 1; }
  echo "$d"
}

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_nats() {
  local port=$1
  mkdir -p "$dir/nats"
  nats-server -js -a "$addr" -p "$port" -sd "$dir/nats" -P "$dir/nats.pid" -l "$dir/nats.log" >/dev/null 2>&1 &
  for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$dir/nats.log" >&2; echo "error: nats-server did not start on port $port" >&2; exit 1
}

stop_nats() {
  [ -f "$dir/nats.pid" ] || return 0
  local pid; pid=$(cat "$dir/nats.pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/nats.pid"
}

start_pg() {
  local port=$1 bin; bin=$(pg_bin)
  # The scratch folder must be reachable by the postgres user.
  chmod 755 "$dir"
  mkdir -p "$dir/pg"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir/pg"
  as_pg "$bin/initdb" -D "$dir/pg/data" -U gradless --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  if [ -n "${GRADLESS_SERVICES_TRUST:-}" ]; then
    echo "host all all $GRADLESS_SERVICES_TRUST trust" >>"$dir/pg/data/pg_hba.conf"
  fi
  as_pg "$bin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -t 30 \
    -o "-p $port -k $dir/pg -c listen_addresses=$addr -c fsync=off -c max_connections=200" start >/dev/null
  as_pg "$bin/createdb" -h "$addr" -p "$port" -U gradless gradless
}

restart_pg() {
  local port=$1
  as_pg "$(pg_bin)/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -t 30 \
    -o "-p $port -k $dir/pg -c listen_addresses=$addr -c fsync=off -c max_connections=200" start >/dev/null
}

stop_pg() {
  [ -d "$dir/pg/data" ] || return 0
  as_pg "$(pg_bin)/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
}

case "$cmd" in
  start)
    start_nats "${3:?NATS port}"
    start_pg "${4:?PostgreSQL port}"
    echo "export GRADLESS_TEST_NATS=nats://127.0.0.1:$3"
    echo "export GRADLESS_TEST_DATABASE=postgres://gradless@127.0.0.1:$4/gradless"
    echo "export GRADLESS_TEST_SERVICES=$dir GRADLESS_TEST_NATS_PORT=$3 GRADLESS_TEST_PG_PORT=$4"
    ;;
  nats) start_nats "${3:?NATS port}" ;;
  stop-nats) stop_nats ;;
  pg-init) start_pg "${3:?PostgreSQL port}" ;;
  pg) restart_pg "${3:?PostgreSQL port}" ;;
  stop-pg) stop_pg ;;
  stop) stop_nats; stop_pg ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
