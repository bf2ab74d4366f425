#!/usr/bin/env bash
# Runs the front-end protocol tests: the AI SDK's and AG-UI's own client libraries (pinned npm
# packages: `ai`, `@ag-ui/client`) read the streams of real `stepwise serve` processes on free
# loopback ports with fresh SQLite files: one open with the demo agent, one with an API key, and
# one whose tool-calling agent talks to a fake OpenAI-compatible server (support/fake-llm.mjs).
#   bash tests/frontends/run.sh               builds the binary with cargo
#   STEPWISE_BIN=path bash run.sh             uses that binary
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -n "${STEPWISE_BIN:-}" ] && [ -e "$STEPWISE_BIN" ]; then
  STEPWISE_BIN="$(cd "$(dirname "$STEPWISE_BIN")" && pwd)/$(basename "$STEPWISE_BIN")"
fi

cd "$here"
if [ ! -f node_modules/ai/package.json ] || [ ! -f node_modules/@ag-ui/client/package.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
mkdir -p artifacts

pids=()
tmp="$(mktemp -d)"
cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  for log in "$tmp"/*.log; do
    if [ -f "$log" ]; then cp "$log" "artifacts/$(basename "$log")"; fi
  done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# Polls /healthz until it answers, with a deadline.
wait_healthy() {
  URL="$1" node -e '
    const url = process.env.URL + "/healthz";
    const deadline = Date.now() + 60000;
    (async () => {
      for (;;) {
        try { const r = await fetch(url); if (r.ok) return; } catch (_) {}
        if (Date.now() > deadline) { console.error("no answer from " + url + " within 60 s"); process.exit(1); }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
  '
}

# start_server NAME [VAR=VALUE...]: serves sqlite://$tmp/NAME.db on a free port with the demo
# agent (50 ms a step of `steps: N`), or the LLM the extra variables name; sets $server_url.
start_server() {
  local name="$1" port
  shift
  port="$(free_port)"
  env -u STEPWISE_LLM_BASE_URL -u STEPWISE_LLM_MODEL -u STEPWISE_LLM_API_KEY -u STEPWISE_CONFIG \
    STEPWISE_DEMO_STEP_MS=50 "$@" "$bin" serve --listen "127.0.0.1:$port" --database "sqlite://$tmp/$name.db" \
    >"$tmp/server-$name.log" 2>&1 &
  pids+=("$!")
  server_url="http://127.0.0.1:$port"
  wait_healthy "$server_url" || { cat "$tmp/server-$name.log" >&2; exit 1; }
}

bin="${STEPWISE_BIN:-$root/target/debug/stepwise}"
if [ -z "${STEPWISE_BIN:-}" ] || [ ! -x "$bin" ]; then
  (cd "$root" && cargo build -q -p stepwise)
  bin="$root/target/debug/stepwise"
fi
start_server open
export STEPWISE_URL="$server_url"
STEPWISE_AUTH_KEY="$("$bin" keys create --tenant fetest --user tester --name frontends --database "sqlite://$tmp/keyed.db" | tail -n 1)"
export STEPWISE_AUTH_KEY
start_server keyed
export STEPWISE_AUTH_URL="$server_url"
llm_port="$(free_port)"
node "$here/support/fake-llm.mjs" "$llm_port" >"$tmp/fake-llm.log" 2>&1 &
pids+=("$!")
wait_healthy "http://127.0.0.1:$llm_port" || { cat "$tmp/fake-llm.log" >&2; exit 1; }
start_server llm STEPWISE_LLM_BASE_URL="http://127.0.0.1:$llm_port/v1" STEPWISE_LLM_MODEL=fake STEPWISE_LLM_API_KEY=unused
export STEPWISE_LLM_SERVER_URL="$server_url"

echo "front-end protocol tests against $STEPWISE_URL" >&2
node --test --test-concurrency=1 --test-reporter=spec "$here"/tests/*.test.mjs
