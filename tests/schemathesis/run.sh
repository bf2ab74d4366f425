#!/usr/bin/env bash
# Runs Schemathesis (property-based API testing, from PyPI) against GET /openapi.json of a
# live `stepwise serve`: a fresh SQLite file, a free loopback port, and an API key made with
# `stepwise keys create`, then again with an end user's token minted with that key. Every check runs (schemathesis.toml beside this script lists the few
# places where api.md differs from a check's default); any failure exits non-zero. Generation is
# deterministic (which keeps no example database), so two runs send the same requests. The last
# line gives the figures: test cases generated, failures, errors.
#   bash tests/schemathesis/run.sh              uses target/debug/stepwise (built if missing)
#   STEPWISE_BIN=path bash run.sh               uses that binary
#   MAX_EXAMPLES=N bash run.sh                  test cases per operation and phase (default 100: about 2.5 minutes)
#   USER_MAX_EXAMPLES=N bash run.sh             the same for the second pass, as an end user's token (default 25)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${STEPWISE_BIN:-$root/target/debug/stepwise}"
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build -p stepwise)
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
max_examples="${MAX_EXAMPLES:-100}"

if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi

# A virtualenv of its own, kept between runs (reinstalled when requirements.txt changes).
venv="${SCHEMATHESIS_VENV:-$root/target/schemathesis-venv}"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$venv/requirements.txt"; then
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "schemathesis: installing python3-venv" >&2
    rm -rf "$venv"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$venv/requirements.txt"
fi

tmp="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

port="$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
db="sqlite://$tmp/stepwise.db"
# No settings from the developer's environment or a stepwise.toml.
: >"$tmp/stepwise.toml"
export STEPWISE_CONFIG="$tmp/stepwise.toml"
unset STEPWISE_LLM_BASE_URL STEPWISE_LLM_MODEL STEPWISE_LLM_API_KEY STEPWISE_DATABASE_URL \
  STEPWISE_RELATED_TYPES STEPWISE_RATE_LIMIT_PER_SEC STEPWISE_RATE_LIMIT_BURST || true
key="$("$bin" keys create --database "$db" --tenant schemathesis --user fuzz --name schemathesis | tail -n 1)"
[ -n "$key" ] || { echo "schemathesis: keys create printed no key" >&2; exit 1; }

# The document lists `demo` and `tool-calling` as agent types: a model server is named (a closed
# port: executions of that agent fail, which is fine here) so both are served. The rate limit
# is off: Schemathesis sends as fast as it can, and 429 is declared but not what is tested.
STEPWISE_LOG=warn STEPWISE_DEMO_STEP_MS=1 STEPWISE_LLM_BASE_URL="http://127.0.0.1:9/v1" STEPWISE_LLM_MODEL=none \
  "$bin" serve --listen "127.0.0.1:$port" --database "$db" \
  --rate-limit-per-sec 0 >"$tmp/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$port"
"$venv/bin/python" - "$base/readyz" <<'PY' || { cat "$tmp/server.log" >&2; exit 1; }
import sys, time, urllib.request
deadline = time.time() + 60
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
            if r.status == 200:
                break
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit("schemathesis: the server was not ready within 60 s")
    time.sleep(0.1)
PY

# Two passes: the admin key (the whole tenant), then an end user's token minted with it
# (docs/security.md: its own sessions only, 403 for the admin's endpoints) — 0 5xx either way.
user_examples="${USER_MAX_EXAMPLES:-25}"
token="$(curl -sf -X POST "$base/v1/tokens" -H "Authorization: Bearer $key" -H 'content-type: application/json' \
  -d '{"user_id": "fuzz-user", "ttl_s": 7200}' | "$venv/bin/python" -c 'import sys, json; print(json.load(sys.stdin)["token"])')"
[ -n "$token" ] || { echo "schemathesis: POST /v1/tokens gave no token" >&2; exit 1; }

status=0
pass() { # label credential max-examples
  local label=$1 credential=$2 examples=$3 pass_status=0
  local report="${SCHEMATHESIS_REPORT_DIR:-$tmp/report}/$label"
  mkdir -p "$report"
  (cd "$tmp" && "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
    --header "Authorization: Bearer $credential" \
    --max-examples "$examples" \
    --generation-deterministic \
    --workers 1 \
    --request-timeout 10 \
    --report junit --report-dir "$report" \
    --no-color) 2>&1 | tee "$tmp/schemathesis-$label.log" || pass_status=$?
  # The figures for the note: test cases generated (each one request, stateful scenarios a few)
  # and failures, from Schemathesis's own summary.
  local generated failures errors
  generated="$(grep -Eo '[0-9]+ generated' "$tmp/schemathesis-$label.log" | tail -n 1 | grep -Eo '[0-9]+' || true)"
  failures="$(grep -Eo '[0-9]+ (unique )?failures?' "$tmp/schemathesis-$label.log" | tail -n 1 | grep -Eo '^[0-9]+' || echo 0)"
  errors="$(grep -Eo '[0-9]+ errors?' "$tmp/schemathesis-$label.log" | tail -n 1 | grep -Eo '^[0-9]+' || echo 0)"
  echo "schemathesis ($label): ${generated:-?} test cases generated, $failures failures, $errors errors, --max-examples $examples (exit $pass_status)"
  [ "$pass_status" -eq 0 ] || status=$pass_status
}
set -o pipefail
pass admin-key "$key" "$max_examples"
pass user-token "$token" "$user_examples"
if [ "$status" -ne 0 ]; then
  echo "schemathesis: failed; the end of the server's log:" >&2
  tail -n 50 "$tmp/server.log" >&2
fi
exit "$status"
