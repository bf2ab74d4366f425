#!/usr/bin/env bash
# Runs the OpenAI Agents SDK's own runner tests with StepwiseSession as their session store.
#
# Downloads the openai-agents source distribution from PyPI (pinned below; its tests are never
# committed here), installs the SDK at that version, this client and the SDK's test
# dependencies into the given virtualenv, and runs the SDK's test files that use its in-memory
# test session (tests/utils/simple_session.py: SimpleListSession, CountingSession,
# IdStrippingSession) twice:
#   1. as they are (the baseline: which tests pass with the in-memory session here);
#   2. with -p stepwise_sdk_plugin (sdk_plugin/ beside this script), which puts subclasses of
#      StepwiseSession in place of those classes, each instance a fresh Stepwise session on a
#      live `stepwise serve` (started by the plugin with stepwise.testing.local_server).
# Prints both pass counts and fails if any test that passes with the in-memory session fails
# with Stepwise. Takes about 3 minutes on 2 cores (baseline ~1 min, Stepwise ~2 min).
#
#   clients/python/ci/openai_agents_suite.sh /path/to/venv/bin/python
#   STEPWISE_PY_VENV=/path/to/venv clients/python/ci/openai_agents_suite.sh
#   STEPWISE_BIN=target/release/stepwise ...     the server binary (default target/debug/stepwise, built if missing)
#   SUITE_TIMEOUT=900 ...                        seconds per pytest run (default 900)
set -euo pipefail

version="0.24.0"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"

py="${1:-${STEPWISE_PY_VENV:-}}"
if [ -z "$py" ]; then
  echo "usage: $0 VENV_PYTHON (or set STEPWISE_PY_VENV to a virtualenv or its python)" >&2
  exit 2
fi
if [ -d "$py" ]; then py="$py/bin/python"; fi
[ -x "$py" ] || { echo "openai_agents_suite: $py is not an executable python" >&2; exit 2; }

bin="${STEPWISE_BIN:-$root/target/debug/stepwise}"
if [ ! -x "$bin" ]; then
  (cd "$root" && cargo build -p stepwise)
fi
export STEPWISE_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
timeout_s="${SUITE_TIMEOUT:-900}"

start=$SECONDS
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "openai_agents_suite: downloading the openai-agents $version sdist" >&2
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
  "openai-agents==$version" -d "$tmp/download"
tar -xzf "$tmp/download/openai_agents-$version.tar.gz" -C "$tmp"
src="$tmp/openai_agents-$version"
[ -f "$src/tests/utils/simple_session.py" ] || { echo "openai_agents_suite: no tests/utils/simple_session.py in the sdist" >&2; exit 1; }

# The SDK at that version, this client, and the test runner part of the SDK's dev group.
echo "openai_agents_suite: installing openai-agents==$version, stepwise-client and the SDK's test dependencies" >&2
"$py" -m pip install --quiet --disable-pip-version-check \
  "openai-agents==$version" -e "$root/clients/python" \
  "pytest>=9.0.3" pytest-asyncio "pytest-mock>=3.14.0" "inline-snapshot>=0.20.7"

mapfile -t files < <(cd "$src" && grep -rl --include='*.py' simple_session tests \
  | grep -v '^tests/utils/simple_session.py$' | sort)
echo "openai_agents_suite: ${#files[@]} test files use the in-memory session" >&2

run() { # name, extra pytest args...
  local name="$1"; shift
  (cd "$src" && \
    timeout "$timeout_s" "$py" -m pytest -q -p no:cacheprovider "$@" "${files[@]}" \
    --junitxml="$tmp/$name.xml" >"$tmp/$name.log" 2>&1) || true
  tail -n 1 "$tmp/$name.log" >&2
  [ -s "$tmp/$name.xml" ] || { echo "openai_agents_suite: the $name run wrote no report:" >&2; tail -n 40 "$tmp/$name.log" >&2; exit 1; }
}

t0=$SECONDS
echo "openai_agents_suite: baseline (the SDK's in-memory session)" >&2
run baseline
t1=$SECONDS
echo "openai_agents_suite: with StepwiseSession (stepwise serve: $STEPWISE_BIN)" >&2
PYTHONPATH="$here/sdk_plugin${PYTHONPATH:+:$PYTHONPATH}" run stepwise -p stepwise_sdk_plugin
t2=$SECONDS
grep -h "^stepwise: " "$tmp/stepwise.log" >&2 || true

"$py" - "$tmp/baseline.xml" "$tmp/stepwise.xml" "$((t1 - t0))" "$((t2 - t1))" "$((SECONDS - start))" <<'PY'
import sys
import xml.etree.ElementTree as ET

def outcomes(path):
    out = {}
    for case in ET.parse(path).iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
                break
            if child.tag == "skipped":
                state = "skipped"
        out[key] = state
    return out

baseline, stepwise = outcomes(sys.argv[1]), outcomes(sys.argv[2])
count = lambda runs, s: sum(1 for v in runs.values() if v == s)
passing = [k for k, v in baseline.items() if v == "passed"]
lost = [k for k in passing if stepwise.get(k) != "passed"]
t_base, t_step, total = sys.argv[3:6]
print(f"openai_agents_suite: in-memory session: {count(baseline, 'passed')} passed, "
      f"{count(baseline, 'failed')} failed, {count(baseline, 'skipped')} skipped ({t_base} s)")
print(f"openai_agents_suite: StepwiseSession:   {count(stepwise, 'passed')} passed, "
      f"{count(stepwise, 'failed')} failed, {count(stepwise, 'skipped')} skipped ({t_step} s)")
print(f"openai_agents_suite: {len(passing) - len(lost)} of the {len(passing)} tests that pass "
      f"with the in-memory session pass with StepwiseSession; {total} s in all")
for key in lost:
    print(f"  passes in memory, fails with Stepwise: {key}")
sys.exit(1 if lost else 0)
PY
