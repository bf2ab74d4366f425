#!/usr/bin/env bash
# Two `stepwise serve` nodes on one PostgreSQL database, checked end to end over loopback:
#   1. 20 executions submitted through node A and node B alternately all complete, each with
#      steps 1..N exactly once;
#   2. an SSE stream on node A sees, live and in order, the events of an execution node B runs;
#      an execution cancelled through the other node stops at its next step boundary;
#   3. kill -9 of the node running an execution: the other node takes it over after the lease
#      expires and finishes it, steps 1..N exactly once;
#   4. a worker process waiting in a claim on node A gets the message posted to node B for its
#      agent type (docs/workers.md), and its writes through node B complete it;
#   5. end users (docs/security.md): a token minted on one node works on the other, and a key
#      deleted on one node is refused on the other within 5 s.
# Then (with THROUGHPUT=1) executions per second, demo agent at 0 ms per step: one node vs two.
#
# Usage: crates/store-postgres/scripts/two_nodes.sh [path/to/stepwise]
# Env:   STEPWISE_TEST_POSTGRES_URL (admin URL, default postgres://postgres@127.0.0.1:5432/postgres)
set -euo pipefail
BIN=${1:-target/debug/stepwise}
ADMIN=${STEPWISE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}
NAME=stepwise_test_two_nodes_$$
DB="${ADMIN%/*}/$NAME"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql "$ADMIN" -qc "DROP DATABASE IF EXISTS $NAME WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
json() { python3 -c "import sys,json; d=json.load(sys.stdin); print($1)"; }
sql() { psql "$DB" -Atc "$1"; }

psql "$ADMIN" -qc "CREATE DATABASE $NAME"
start() { # port workers step_ms log
  STEPWISE_DEMO_STEP_MS=$3 "$BIN" serve --database "$DB" --listen "127.0.0.1:$1" --workers "$2" --lease-secs 2 >"$WORK/$4" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$1/readyz" >/dev/null && return 0; sleep 0.1; done
  fail "node on port $1 did not start: $(cat "$WORK/$4")"
}
wait_done() { # base url, execution ids...
  local base=$1; shift
  for _ in $(seq 1 600); do
    local left=0
    for e in "$@"; do
      st=$(curl -s "$base/v1/executions/$e" | json 'd["status"]')
      [ "$st" = completed ] || left=$((left + 1))
    done
    [ $left -eq 0 ] && return 0
    sleep 0.1
  done
  fail "$left executions did not complete"
}
check_steps() { # execution id
  local n
  n=$(sql "select count(*) = count(distinct step_number) and min(step_number) = 1 and max(step_number) = count(*) from steps where execution_id = '$1'")
  [ "$n" = t ] || fail "execution $1 does not have steps 1..N exactly once"
}

A=http://127.0.0.1:17801
B=http://127.0.0.1:17802
start 17801 1 20 a.log
start 17802 4 20 b.log

# 1. 20 executions through A and B alternately.
EXECS=()
for i in $(seq 1 20); do
  if [ $((i % 2)) -eq 0 ]; then N=$A; else N=$B; fi
  EXECS+=("$(curl -s -X POST "$N/v1/messages" -H 'content-type: application/json' \
    -d "{\"content\": \"steps: 5\", \"session\": {\"title\": \"t$i\"}}" | json 'd["execution"]["id"]')")
done
wait_done "$A" "${EXECS[@]}"
for e in "${EXECS[@]}"; do check_steps "$e"; done
echo "ok: 20 executions through both nodes completed, steps 1..N exactly once"

# 2. SSE on A, execution on B (A's only worker is kept busy first).
BUSY=$(curl -s -X POST "$A/v1/messages" -H 'content-type: application/json' -d '{"content": "steps: 150", "session": {"title": "busy"}}' | json 'd["execution"]["id"]')
for _ in $(seq 1 100); do [ -n "$(sql "select lease_owner from executions where id = '$BUSY' and lease_owner is not null")" ] && break; sleep 0.1; done
S=$(curl -s -X POST "$A/v1/sessions" -H 'content-type: application/json' -d '{"title": "sse"}' | json 'd["id"]')
timeout 20 curl -sN "$A/v1/sessions/$S/events" >"$WORK/sse.txt" &
SSE=$!
sleep 0.5
E=$(curl -s -X POST "$B/v1/sessions/$S/messages" -H 'content-type: application/json' -d '{"content": "steps: 10"}' | json 'd["execution"]["id"]')
wait_done "$B" "$E"
for _ in $(seq 1 100); do grep -q "execution.completed" "$WORK/sse.txt" && break; sleep 0.1; done
kill $SSE 2>/dev/null || true
grep -q "execution.completed" "$WORK/sse.txt" || fail "A's SSE stream did not see the execution complete"
grep '^id:' "$WORK/sse.txt" | awk '{print $2}' | awk 'NR > 1 && $1 != prev + 1 {exit 1} {prev = $1}' || fail "A's SSE ids are not contiguous"
echo "ok: SSE on A saw the steps B ran, in order, no gap or repeat ($(grep -c '^id:' "$WORK/sse.txt") events)"

# 2b. Cancelled through the other node: the node running it stops at its next step boundary
#     (the store refuses its next step), not at its next heartbeat.
C=$(curl -s -X POST "$A/v1/messages" -H 'content-type: application/json' -d '{"content": "steps: 300", "session": {"title": "cancel"}}' | json 'd["execution"]["id"]')
for _ in $(seq 1 200); do [ "$(sql "select step_count >= 3 from executions where id = '$C'")" = t ] && break; sleep 0.05; done
RUNNER_PID=$(sql "select lease_owner from executions where id = '$C'" | cut -d- -f2)
if [ "$RUNNER_PID" = "${PIDS[0]}" ]; then ELSEWHERE=$B; else ELSEWHERE=$A; fi
curl -sf -X POST "$ELSEWHERE/v1/executions/$C/cancel" >/dev/null || fail "the cancel through the other node was refused"
sleep 1.5
LEAKED=$(sql "select count(*) from events where execution_id = '$C' and event_type = 'step.completed' and seq > (select max(seq) from events where execution_id = '$C' and event_type = 'execution.cancelled')")
[ "$LEAKED" -le 3 ] || fail "the node running a cancelled execution told $LEAKED more steps after the cancel"
echo "ok: cancelled through the other node, the running node stopped after $LEAKED more step(s)"

# 3. kill -9 of the node running an execution.
K=$(curl -s -X POST "$A/v1/messages" -H 'content-type: application/json' -d '{"content": "steps: 60", "session": {"title": "kill"}}' | json 'd["execution"]["id"]')
for _ in $(seq 1 200); do [ "$(sql "select step_count >= 5 from executions where id = '$K'")" = t ] && break; sleep 0.05; done
OWNER=$(sql "select lease_owner from executions where id = '$K'")
OWNER_PID=$(echo "$OWNER" | cut -d- -f2)
kill -9 "$OWNER_PID"
if [ "$OWNER_PID" = "${PIDS[0]}" ]; then OTHER=$B; else OTHER=$A; fi
wait_done "$OTHER" "$K"
check_steps "$K"
echo "ok: after kill -9 of the node running it, the other node finished it ($(sql "select attempts from executions where id = '$K'") attempts, steps 1..61 once)"

# 4. A worker's claim waiting on the surviving node gets a message posted to the other one.
WA=$OTHER
WB=$A
[ "$WA" = "$A" ] && WB=$B
if ! curl -sf "$WB/readyz" >/dev/null; then
  port=${WB##*:}
  start "$port" 1 20 w.log
fi
curl -s -X POST "$WA/v1/workers/claim" -H 'content-type: application/json' \
  -d '{"worker_id": "two-nodes", "agents": [{"type": "relay-worker"}], "slots": 1, "wait_s": 20}' >"$WORK/claim.json" &
CLAIM=$!
sleep 0.5
W=$(curl -s -X POST "$WB/v1/messages" -H 'content-type: application/json' \
  -d '{"content": "hello worker", "agent": {"type": "relay-worker", "wait": true}}' | json 'd["execution"]["id"]')
wait $CLAIM
[ "$(json 'd["items"][0]["execution"]["id"]' <"$WORK/claim.json")" = "$W" ] || fail "the worker's claim on one node did not get the message posted to the other: $(cat "$WORK/claim.json")"
LEASE=$(json 'd["items"][0]["lease"]' <"$WORK/claim.json")
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$WB/v1/executions/$W/steps" -H 'content-type: application/json' \
  -H "Stepwise-Lease: $LEASE" -d '{"model_output": "relayed"}')
[ "$code" = 201 ] || fail "a worker's step through the other node answered $code"
# Its last two steps ride with the completion: saved, told and completed in one commit.
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$WB/v1/executions/$W/complete" -H 'content-type: application/json' \
  -H "Stepwise-Lease: $LEASE" \
  -d '{"output": "done", "final_message": "done", "steps": [{"model_output": "second"}, {"model_output": "third"}]}')
[ "$code" = 200 ] || fail "a worker's complete through the other node answered $code"
wait_done "$WA" "$W"
check_steps "$W"
[ "$(sql "select step_count from executions where id = '$W'")" = 3 ] || fail "the worker's execution does not count its 3 steps"
[ "$(sql "select step_number from snapshots where execution_id = '$W' and is_final")" = 3 ] \
  || fail "the worker's execution has no final snapshot at step 3: $(sql "select step_number, is_final from snapshots where execution_id = '$W'")"
told=$(sql "select string_agg(event_type || coalesce(':' || (metadata::jsonb->>'step_number'), ''), ',' order by seq) from events \
  where execution_id = '$W' and (event_type in ('step.completed', 'execution.completed'))")
[ "$told" = "step.completed:1,step.completed:2,step.completed:3,execution.completed" ] \
  || fail "the worker's steps and completion were told out of order: $told"
echo "ok: a worker waiting on one node claimed a message posted to the other and finished it through that node (its last steps with the completion, told in order)"

# 5. Keys and tokens across the nodes (the signing key and the keys live in the database).
ADMIN_KEY=$("$BIN" keys create --database "$DB" --tenant two --user boss --role admin | tail -n 1)
ADMIN_KEY_ID=$("$BIN" keys list --database "$DB" --json | json '[k["id"] for k in d["items"] if k["user_id"] == "boss"][0]')
auth() { echo "Authorization: Bearer $1"; }
TOKEN=$(curl -s -X POST "$WA/v1/tokens" -H "$(auth "$ADMIN_KEY")" -H 'content-type: application/json' \
  -d '{"user_id": "alice", "ttl_s": 600}' | json 'd["token"]')
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$WB/v1/sessions" -H "$(auth "$TOKEN")" -H 'content-type: application/json' -d '{}')
[ "$code" = 201 ] || fail "a token minted on one node answered $code on the other"
MADE=$(curl -s -X POST "$WA/v1/keys" -H "$(auth "$ADMIN_KEY")" -H 'content-type: application/json' -d '{"user_id": "bob", "role": "user"}')
BOB_KEY=$(json 'd["key"]' <<<"$MADE")
BOB_KEY_ID=$(json 'd["id"]' <<<"$MADE")
code=$(curl -s -o /dev/null -w '%{http_code}' "$WB/v1/sessions" -H "$(auth "$BOB_KEY")")
[ "$code" = 200 ] || fail "a key made on one node answered $code on the other"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$WA/v1/keys/$BOB_KEY_ID" -H "$(auth "$ADMIN_KEY")")
[ "$code" = 204 ] || fail "deleting a key answered $code"
t0=$(date +%s.%N)
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$WB/v1/sessions" -H "$(auth "$BOB_KEY")")" = 401 ]; do
  python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $t0 < 15 else 1)" || fail "a key deleted on one node still works on the other after 15 s"
  sleep 0.1
done
echo "ok: a token minted on one node works on the other; a key deleted on one node was refused on the other after $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
"$BIN" keys revoke --database "$DB" "$ADMIN_KEY_ID" >/dev/null

if [ "${THROUGHPUT:-0}" = 1 ]; then
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  run() { # label, node urls... : 200 executions submitted at once, round-robin over the nodes
    local label=$1; shift
    local urls=("$@") n=0 t0 t1 curls=()
    t0=$(date +%s.%N)
    for i in $(seq 1 200); do
      curl -s -o /dev/null -X POST "${urls[$((i % ${#urls[@]}))]}/v1/messages" -H 'content-type: application/json' \
        -d "{\"content\": \"steps: 5\", \"session\": {\"title\": \"$label-$i\"}}" &
      curls+=($!)
    done
    wait "${curls[@]}"
    for _ in $(seq 1 6000); do
      n=$(sql "select count(*) from executions e join sessions s on s.id = e.session_id where s.title like '$label-%' and e.status = 'completed'")
      [ "$n" -ge 200 ] && break; sleep 0.02
    done
    t1=$(date +%s.%N)
    echo "$label: 200 executions (5 steps each) in $(python3 -c "print(round($t1 - $t0, 2))") s = $(python3 -c "print(round(200 / ($t1 - $t0), 1))") executions/s"
  }
  start 17801 8 0 a2.log
  run one-node "$A"
  start 17802 8 0 b2.log
  run two-nodes "$A" "$B"
fi
