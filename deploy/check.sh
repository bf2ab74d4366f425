#!/usr/bin/env bash
# Checks deploy/: the Prometheus rules (promtool check rules, promtool test rules), the Grafana
# dashboard's queries (they parse), and that every metric name either uses is one a live server
# exports (deploy/check_metrics.py against GET /metrics after a little traffic).
#   STEPWISE_BIN=target/debug/stepwise bash deploy/check.sh
# Installs Debian's prometheus package for promtool when promtool is missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${STEPWISE_BIN:-target/debug/stepwise}"
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then
    "${sudo_cmd[@]}" apt-get update -qq
    apt_updated=1
  fi
  echo "deploy/check.sh: installing $*" >&2
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
command -v promtool >/dev/null || apt_install prometheus
command -v curl >/dev/null || apt_install curl
command -v python3 >/dev/null || apt_install python3

if [ ! -x "$bin" ]; then
  echo "deploy/check.sh: no server binary at $bin (set STEPWISE_BIN)" >&2
  exit 1
fi

tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "--- promtool check rules / test rules"
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

# A free loopback port: bind port 0, read it, close.
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
base="http://127.0.0.1:$port"
echo "--- a live server on $base (a retention pass runs at start)"
env -u STEPWISE_DATABASE_URL -u STEPWISE_CONFIG -u STEPWISE_LISTEN -u STEPWISE_METRICS_LISTEN \
  STEPWISE_DATA_DIR="$tmp" \
  "$bin" serve --database "sqlite://$tmp/stepwise.db" --listen "127.0.0.1:$port" >"$tmp/server.log" 2>&1 &
pid=$!
deadline=$((SECONDS + 30))
until curl -sf "$base/metrics" >/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    echo "deploy/check.sh: the server did not answer /metrics within 30 s; its log:" >&2
    cat "$tmp/server.log" >&2
    exit 1
  fi
  sleep 0.2
done

# Three messages to the demo agent, each waited for (?wait: 200 once its execution has ended),
# then a read of a session's messages (a load) so every histogram has series.
session=""
for i in 1 2 3; do
  answer="$(curl -sf -X POST -H 'content-type: application/json' \
    "$base/v1/messages?wait=30" -d '{"content":"steps: 3"}')"
  session="$(printf '%s' "$answer" | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["execution"]["status"] == "completed", d; print(d["session_id"])')"
done
curl -sf "$base/v1/sessions/$session/messages" >/dev/null
curl -sf "$base/metrics" >"$tmp/metrics.txt"
kill "$pid" && wait "$pid" 2>/dev/null || true
pid=""

echo "--- metric names in the rules and the dashboard against the live /metrics"
python3 deploy/check_metrics.py "$tmp/metrics.txt" deploy/prometheus/alerts.yml deploy/grafana/stepwise.json \
  --dashboard-rules "$tmp/dashboard_rules.yml"
echo "--- the dashboard's queries parse (promtool, as recording rules)"
promtool check rules "$tmp/dashboard_rules.yml"
echo "deploy checks passed"
