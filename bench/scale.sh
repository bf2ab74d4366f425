#!/bin/bash
# The scale figures of docs/operations.md ("Scale figures in one run") on this machine: the
# queue at depth on PostgreSQL and SQLite; HTTP intake beside one run sleeping in a long step,
# the same with the limit fixed open, and beside a run always working; step -> viewer fan-out
# with 1 and 1,000 viewers; executions completed during a burst by 1, 2 and 4 nodes on one
# PostgreSQL.
#
#   bash bench/scale.sh                       # target/release/stepwise, a throwaway PostgreSQL
#   SW=path/to/stepwise PG_URL=postgres://postgres@127.0.0.1:5432/postgres bash bench/scale.sh
#   QUICK=1 bash bench/scale.sh               # small sizes, to try the script (about 2 minutes)
#
# Environment:
#   SW      the stepwise binary (default target/release/stepwise)
#   PACK    a .tar.xz holding `stepwise` and PostgreSQL's usr/lib/postgresql/<v>/bin (with lib/
#           for their libraries): unpacked to /tmp/scale-pack and used for SW and PG_BIN
#   PG_URL  an existing PostgreSQL (a superuser's URL; `psql` on PATH); without it a throwaway
#           cluster is started from PG_BIN (default: the newest /usr/lib/postgresql/*/bin),
#           run as `nobody` when this runs as root
#   OUT     where the figures go (default /tmp/scale-out): one JSON file per measurement and
#           summary.txt; everything printed is also in OUT/log.txt
#   SECS    the burst's and each intake run's length in seconds (default 10, QUICK 3)
#   ONLY    a space-separated subset of: queue_pg queue_sqlite intake fanout nodes
#
# Each section has a timeout and the next one runs whatever happened. Compare figures within
# one run: the machine's own speed moves between runs more than most changes do.
set -u
OUT=${OUT:-/tmp/scale-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
T0=$SECONDS
say() { echo "[t+$((SECONDS - T0))s] $*"; }
QUICK=${QUICK:-}
SECS=${SECS:-$([[ -n $QUICK ]] && echo 3 || echo 10)}
DEEP=$([[ -n $QUICK ]] && echo 5000 || echo 100000)
DRAIN=$([[ -n $QUICK ]] && echo 3 || echo 8)
VIEWERS=$([[ -n $QUICK ]] && echo 200 || echo 1000)
ONLY=${ONLY:-queue_pg queue_sqlite intake fanout nodes}
wanted() { [[ " $ONLY " == *" $1 "* ]]; }

if [[ -n ${PACK:-} ]]; then
  rm -rf /tmp/scale-pack && mkdir -p /tmp/scale-pack && tar xJf "$PACK" -C /tmp/scale-pack || exit 1
  chmod 755 /tmp/scale-pack
  export LD_LIBRARY_PATH=/tmp/scale-pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  SW=/tmp/scale-pack/stepwise
  PG_BIN=$(ls -d /tmp/scale-pack/usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PG_SHARE=$(ls -d /tmp/scale-pack/usr/share/postgresql/* | sort -V | tail -n 1)
fi
SW=${SW:-target/release/stepwise}
"$SW" --version || { echo "no stepwise binary at $SW (build: cargo build --release -p stepwise)"; exit 1; }
say "$(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -r); quick=${QUICK:-no} secs=$SECS deep=$DEEP"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
# A number from a JSON file: jget FILE 'python expression over d'.
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null || echo "?"; }
wait_up() { for _ in $(seq 150); do curl -fs "$1/healthz" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
PORT=7800
serve() { # serve NAME ENV... -- ARGS...: starts a server on the next port; sets URL and PID
  local name=$1; shift
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  PORT=$((PORT + 1)); URL=http://127.0.0.1:$PORT
  env "${envs[@]}" "$SW" serve --listen 127.0.0.1:$PORT --rate-limit-per-sec 0 "$@" > "$OUT/serve_$name.log" 2>&1 &
  PID=$!
  wait_up "$URL" || say "server $name did not come up (see $OUT/serve_$name.log)"
}
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# --- PostgreSQL -------------------------------------------------------------------------------
PG_STARTED=
start_pg() {
  [[ -n ${PG_URL:-} ]] && return 0
  PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
  [[ -x $PG_BIN/initdb ]] || { say "no PostgreSQL: set PG_URL or PG_BIN"; return 1; }
  local data=/tmp/scale-pg sock=/tmp/scale-pgsock port=55432 run=()
  rm -rf $data $sock && mkdir -p $data $sock
  if [[ $(id -u) == 0 ]]; then
    chown nobody $data $sock
    run=(runuser -u nobody -- env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}")
  fi
  "${run[@]}" "$PG_BIN/initdb" ${PG_SHARE:+-L "$PG_SHARE"} -D $data -U postgres --auth=trust -E UTF8 --locale=C > "$OUT/initdb.log" 2>&1 \
    || { tail -n 5 "$OUT/initdb.log"; return 1; }
  local mem_gb; mem_gb=$(free -g | awk '/Mem:/{print $2}')
  printf "max_connections=600\nshared_buffers=%dGB\nunix_socket_directories='%s'\nlisten_addresses='127.0.0.1'\nport=%d\n" \
    $((mem_gb >= 32 ? 4 : 1)) $sock $port >> $data/postgresql.conf
  "${run[@]}" "$PG_BIN/pg_ctl" -D $data -l $sock/pg.log -w start > /dev/null || { tail -n 20 $sock/pg.log; return 1; }
  PG_STARTED="${run[*]} $PG_BIN/pg_ctl -D $data -w stop -m fast"
  PG_URL=postgres://postgres@127.0.0.1:$port/postgres
  export PATH=$PG_BIN:$PATH
}
psql_do() { psql "$PG_URL" -qAt "$@"; }
pg_db() { echo "${PG_URL%/*}/$1"; }

if wanted queue_pg || wanted nodes; then
  start_pg && say "PostgreSQL: $(psql_do -c 'show server_version')" || ONLY=$(echo "$ONLY" | sed 's/queue_pg//; s/nodes//')
fi

# --- the queue at depth -----------------------------------------------------------------------
queue_row() { # label file
  note "$(printf '%-14s' "$1") $(jget "$2" '"  ".join("depth %s: claim p99 %s ms, drain %s/s" % (r["depth"], r["claim"]["p99_ms"], r["drain"]["per_sec"]) for r in d["depths"])')"
  note "$(printf '%-14s' "$1") $(jget "$2" '"mixed: accepted %s/s, completed %s/s, completed / accepted %s" % tuple(d["mixed"][k] for k in ("accepted_per_sec", "completed_per_sec", "completed_to_accepted"))')"
}
if wanted queue_pg; then
  say "queue, PostgreSQL: depths 1000,$DEEP"
  timeout 400 "$SW" bench queue --database "$PG_URL" --depths 1000,$DEEP --drain-seconds $DRAIN \
    > "$OUT/queue_pg.json" 2> "$OUT/queue_pg.err"; say "rc $?"
  queue_row "queue pg" "$OUT/queue_pg.json"
fi
if wanted queue_sqlite; then
  say "queue, SQLite: depths 1000,$DEEP"
  D=$(mktemp -d)
  timeout 300 "$SW" bench queue --data-dir "$D" --depths 1000,$DEEP --drain-seconds $DRAIN \
    > "$OUT/queue_sqlite.json" 2> "$OUT/queue_sqlite.err"; say "rc $?"
  rm -rf "$D"
  queue_row "queue sqlite" "$OUT/queue_sqlite.json"
fi

# --- HTTP intake ------------------------------------------------------------------------------
# `bench http` posts "hello", which the demo agent answers at once; a node always runs at least
# one worker. Three servers, each with one worker:
# - sleeping: its one run sleeps in a long step ("steps: 1" with a 600 s step) and every
#   message of the bench queues behind it: no run works, so intake should not be held;
# - open: the same with the limit fixed open (--intake-concurrency 256), the reference;
# - answering: the worker answers the bench's messages as they come (a run always working):
#   intake is held whenever the cores or the writer are contended.
if wanted intake; then
  for kind in sleeping open answering; do
    D=$(mktemp -d)
    case $kind in
      sleeping) serve $kind STEPWISE_DEMO_STEP_MS=600000 -- --database "sqlite://$D/s.db" --workers 1 ;;
      open) serve $kind STEPWISE_DEMO_STEP_MS=600000 -- --database "sqlite://$D/s.db" --workers 1 --intake-concurrency 256 ;;
      answering) serve $kind STEPWISE_DEMO_STEP_MS=0 -- --database "sqlite://$D/s.db" --workers 1 ;;
    esac
    if [[ $kind != answering ]]; then
      curl -fs -X POST "$URL/v1/sessions" -H 'content-type: application/json' -d '{}' \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' > "$D/session" 2>/dev/null
      curl -fs -X POST "$URL/v1/sessions/$(cat "$D/session")/messages" -H 'content-type: application/json' \
        -d '{"content": "steps: 1"}' > /dev/null || say "the long run's message was refused"
      sleep 1
    fi
    for c in 64 256; do
      timeout $((SECS + 60)) "$SW" bench http --url "$URL" --clients $c --seconds $SECS > "$OUT/intake_${kind}_c$c.json" 2>/dev/null
      note "$(printf 'intake %-10s %3d clients: %s messages/s' $kind $c "$(jget "$OUT/intake_${kind}_c$c.json" 'd["messages"]["per_sec"]')")"
    done
    curl -fs "$URL/metrics" 2>/dev/null | grep -E '^stepwise_(intake_limit|intake_waited_total|executions_running) ' | sed "s/^/  $kind: /" | tee -a "$SUMMARY"
    stop $PID; rm -rf "$D"
  done
fi

# --- fan-out ----------------------------------------------------------------------------------
if wanted fanout; then
  D=$(mktemp -d)
  serve fanout STEPWISE_X=1 -- --database "sqlite://$D/s.db" --workers 0
  for v in 1 $VIEWERS; do
    memory=()
    ((v > 1)) && memory=(--server-pid $PID --idle-viewers $VIEWERS)
    timeout 120 "$SW" bench fanout --url "$URL" --viewers $v --steps 200 "${memory[@]}" \
      > "$OUT/fanout_v$v.json" 2> "$OUT/fanout_v$v.err"
    note "$(printf 'fanout %5d viewers: ' $v)$(jget "$OUT/fanout_v$v.json" '"p50 %s ms, p99 %s ms, max %s ms (%s of %s samples)" % tuple(d["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms", "samples", "expected_samples"))')"
  done
  stop $PID; rm -rf "$D"
fi

# --- nodes during a burst ---------------------------------------------------------------------
if wanted nodes; then
  for n in 1 2 4; do
    db=scale_nodes_$n
    psql_do -c "set client_min_messages = warning" -c "drop database if exists $db" -c "create database $db"
    url=$(pg_db $db)
    "$SW" migrate --database "$url" > /dev/null 2>&1
    pids=() gens=()
    for i in $(seq 1 $n); do
      serve node$n.$i STEPWISE_DEMO_STEP_MS=0 -- --database "$url" --workers 8
      pids+=($PID)
      urls[$i]=$URL
    done
    for i in $(seq 1 $n); do
      timeout $((SECS + 60)) "$SW" bench http --url "${urls[$i]}" --clients $((128 / n)) --seconds $SECS \
        > "$OUT/nodes${n}_gen$i.json" 2>/dev/null &
      gens+=($!)
    done
    sleep "$SECS.5"
    during=$(psql "$url" -qAt -c "select count(*) from executions where status = 'completed'")
    wait "${gens[@]}"
    accepted=$(python3 -c 'import json,sys; print(round(sum(json.load(open(f))["messages"]["per_sec"] for f in sys.argv[1:])))' "$OUT"/nodes${n}_gen*.json 2>/dev/null)
    t=$SECONDS
    while ((SECONDS - t < 30)); do
      left=$(psql "$url" -qAt -c "select count(*) from executions where status in ('pending', 'running')")
      [[ $left == 0 ]] && break
      sleep 1
    done
    total=$(psql "$url" -qAt -c "select count(*) from executions")
    note "$(printf 'nodes %d: accepted %s messages/s, completed during the %ss burst %s, then drained in %ss (%s of %s left)' $n "$accepted" $SECS "$during" $((SECONDS - t)) "$left" "$total")"
    for p in "${pids[@]}"; do stop "$p"; done
  done
fi

[[ -n $PG_STARTED ]] && $PG_STARTED > /dev/null
say "done; figures in $SUMMARY"
cat "$SUMMARY"
