#!/usr/bin/env bash
# Runs the web UI's browser tests: headless Debian Chromium driven by playwright-core, against
# real `stepwise serve` processes on free loopback ports with fresh SQLite files: one open (no
# API key), one that requires a key (for the auth prompt).
#   bash tests/web/run.sh                 builds the binary with cargo
#   STEPWISE_BIN=path bash run.sh         uses that binary
#   STEPWISE_URL=http://... bash run.sh   tests an already running open server (no build, no
#                                         start; the auth, token and examples' token tests are
#                                         skipped)
#   bash run.sh tests/web/tests/use-stream.test.mjs ...
#                                         runs only those test files (paths from where the script
#                                         was started, or from tests/web)
set -euo pipefail
started_in="$(pwd)"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# A relative STEPWISE_BIN means relative to where the script was started from.
if [ -n "${STEPWISE_BIN:-}" ] && [ -e "$STEPWISE_BIN" ]; then
  STEPWISE_BIN="$(cd "$(dirname "$STEPWISE_BIN")" && pwd)/$(basename "$STEPWISE_BIN")"
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "web tests: installing Debian's chromium" >&2
  if [ "$(id -u)" = 0 ]; then sudo_cmd=(); else sudo_cmd=(sudo); fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq chromium >/dev/null
fi

cd "$here"
if [ ! -f node_modules/playwright-core/package.json ]; then
  # playwright-core alone: it never downloads a browser.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error
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
# agent (or the LLM the extra variables name); sets $server_url.
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

if [ -z "${STEPWISE_URL:-}" ]; then
  bin="${STEPWISE_BIN:-$root/target/debug/stepwise}"
  if [ -z "${STEPWISE_BIN:-}" ] || [ ! -x "$bin" ]; then
    (cd "$root" && cargo build -q -p stepwise)
    bin="$root/target/debug/stepwise"
  fi
  # Tests that need a server of their own (the examples' cross-origin token mode) start it.
  export STEPWISE_BIN="$bin"
  start_server open
  export STEPWISE_URL="$server_url"
  # A server with an API key: keys are required as soon as one exists.
  STEPWISE_AUTH_KEY="$("$bin" keys create --tenant webtest --user tester --name web-ui --database "sqlite://$tmp/keyed.db" | tail -n 1)"
  export STEPWISE_AUTH_KEY
  start_server keyed
  export STEPWISE_AUTH_URL="$server_url"
  # The tool-calling agent over a fake OpenAI-compatible server, for streamed tokens.
  llm_port="$(free_port)"
  node "$here/support/fake-llm.mjs" "$llm_port" >"$tmp/fake-llm.log" 2>&1 &
  pids+=("$!")
  export FAKE_LLM_URL="http://127.0.0.1:$llm_port"
  wait_healthy "$FAKE_LLM_URL" || { cat "$tmp/fake-llm.log" >&2; exit 1; }
  start_server llm STEPWISE_LLM_BASE_URL="$FAKE_LLM_URL/v1" STEPWISE_LLM_MODEL=fake STEPWISE_LLM_API_KEY=unused
  export STEPWISE_LLM_SERVER_URL="$server_url"
fi

files=()
for file in "$@"; do
  if [[ "$file" = /* ]] && [ -f "$file" ]; then
    files+=("$file")
  elif [ -f "$started_in/$file" ]; then
    files+=("$started_in/$file")
  elif [ -f "$here/$file" ]; then
    files+=("$here/$file")
  else
    echo "web tests: no test file $file" >&2
    exit 2
  fi
done
if [ "${#files[@]}" = 0 ]; then files=("$here"/tests/*.test.mjs); fi

echo "web tests against $STEPWISE_URL" >&2
node --test --test-concurrency=1 --test-reporter=spec "${files[@]}"
