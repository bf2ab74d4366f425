#!/usr/bin/env bash
# Runs the Python client's tests (clients/python/tests) against a real `stepwise serve`.
#
#   clients/python/ci/run.sh
#
# Makes a virtualenv at $STEPWISE_PY_VENV (default: target/py-venv), installs the client
# from this checkout with its extras (default "smolagents,openai-agents,langgraph,agent-framework,adk,pydantic-ai,state,test"; set
# STEPWISE_PY_EXTRAS to change) from PyPI, and runs pytest. The server binary is
# $STEPWISE_BIN (default: target/debug/stepwise, built with `cargo build -p stepwise`
# when missing). Exits non-zero when anything fails. Extra arguments go to pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="${STEPWISE_PY_VENV:-$repo/target/py-venv}"
extras="${STEPWISE_PY_EXTRAS:-smolagents,openai-agents,langgraph,agent-framework,adk,pydantic-ai,state,test}"
python="${PYTHON:-python3}"
export STEPWISE_BIN="${STEPWISE_BIN:-$repo/target/debug/stepwise}"

say() { printf '== %s\n' "$*" >&2; }

if ! command -v "$python" >/dev/null 2>&1; then
  echo "clients/python/ci/run.sh: $python not found (Python >= 3.10 is needed)" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "clients/python/ci/run.sh: $("$python" --version 2>&1) is too old (Python >= 3.10 is needed)" >&2
  exit 1
fi

# `python3 -m venv` needs Debian's python3-venv (ensurepip).
if [ ! -x "$venv/bin/python" ]; then
  probe="$(mktemp -d)"
  if ! "$python" -m venv "$probe/v" >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing python3-venv"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    else
      echo "clients/python/ci/run.sh: '$python -m venv' does not work; install python3-venv" >&2
      rm -rf "$probe"
      exit 1
    fi
  fi
  rm -rf "$probe"
  say "creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi

say "installing ./clients/python[$extras]"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "$repo/clients/python[$extras]"
# The same version number as before does not make pip reinstall: always take this checkout.
"$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$repo/clients/python"

if [ ! -x "$STEPWISE_BIN" ]; then
  if [ "$STEPWISE_BIN" = "$repo/target/debug/stepwise" ] && command -v cargo >/dev/null 2>&1; then
    say "building $STEPWISE_BIN"
    (cd "$repo" && cargo build -q -p stepwise)
  else
    echo "clients/python/ci/run.sh: no server binary at STEPWISE_BIN=$STEPWISE_BIN (cargo build -p stepwise)" >&2
    exit 1
  fi
fi

say "pytest clients/python/tests (server: $STEPWISE_BIN)"
cd "$repo"
"$venv/bin/python" -m pytest clients/python/tests -q "$@"
