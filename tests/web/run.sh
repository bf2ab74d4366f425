#!/usr/bin/env bash
# Runs the web UI's browser tests: headless Debian Chromium driven by playwright-core, against a
# real `stepwise serve` on a free loopback port with a fresh SQLite file.
#   bash tests/web/run.sh            builds the binary with cargo
#   STEPWISE_BIN=path bash run.sh    uses that binary
#   STEPWISE_URL=http://... bash run.sh   tests an already running server (no build, no start)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

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

server_pid=""
tmp="$(mktemp -d)"
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if [ -f "$tmp/server.log" ]; then cp "$tmp/server.log" artifacts/server.log; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [ -z "${STEPWISE_URL:-}" ]; then
  bin="${STEPWISE_BIN:-}"
  if [ -z "$bin" ]; then
    (cd "$root" && cargo build -q -p stepwise)
    bin="$root/target/debug/stepwise"
  fi
  port="$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  env -u STEPWISE_LLM_BASE_URL -u STEPWISE_LLM_MODEL -u STEPWISE_LLM_API_KEY \
    STEPWISE_DEMO_STEP_MS=50 "$bin" serve --listen "127.0.0.1:$port" --database "sqlite://$tmp/stepwise.db" \
    >"$tmp/server.log" 2>&1 &
  server_pid=$!
  export STEPWISE_URL="http://127.0.0.1:$port"
  export STEPWISE_BIN_USED="$bin"
  export STEPWISE_TEST_TMP="$tmp"
  # Wait for /healthz, with a deadline.
  node -e '
    const url = process.env.STEPWISE_URL + "/healthz";
    const deadline = Date.now() + 60000;
    (async () => {
      for (;;) {
        try { const r = await fetch(url); if (r.ok) return; } catch (_) {}
        if (Date.now() > deadline) { console.error("server did not answer " + url + " within 60 s"); process.exit(1); }
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
  ' || { cat "$tmp/server.log" >&2; exit 1; }
fi

echo "web tests against $STEPWISE_URL" >&2
node --test --test-concurrency=1 --test-reporter=spec "$here"/tests/*.test.mjs
