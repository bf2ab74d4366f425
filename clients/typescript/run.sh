#!/usr/bin/env bash
# Builds @stepwise/client with tsc and tests it against real `stepwise serve` processes (the
# tests start their own, from STEPWISE_BIN): every endpoint, the generated types against the
# server's /openapi.json, the event stream across a restart, and the README's examples.
#   bash clients/typescript/run.sh             builds the binary with cargo
#   STEPWISE_BIN=path bash run.sh              uses that binary
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -n "${STEPWISE_BIN:-}" ] && [ -e "$STEPWISE_BIN" ]; then
  STEPWISE_BIN="$(cd "$(dirname "$STEPWISE_BIN")" && pwd)/$(basename "$STEPWISE_BIN")"
else
  (cd "$root" && cargo build -q -p stepwise)
  STEPWISE_BIN="$root/target/debug/stepwise"
fi
export STEPWISE_BIN

cd "$here"
if [ ! -x node_modules/.bin/tsc ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
node --test --test-concurrency=1 --test-reporter=spec test/*.test.mjs
