#!/usr/bin/env bash
# LangGraph's checkpointer conformance suite against stepwise.langgraph.AsyncStepwiseSaver,
# on a real `stepwise serve` with SQLite and with PostgreSQL.
#
#   clients/python/ci/langgraph_conformance.sh [VENV]
#
# VENV (default $STEPWISE_PY_VENV, else target/py-venv) must exist; this installs
# langgraph-checkpoint-conformance==0.0.2 into it from PyPI (and ./clients/python[langgraph]
# when stepwise.langgraph is not importable there). The server binary is $STEPWISE_BIN
# (default target/debug/stepwise). PostgreSQL: a fresh database
# stepwise_lg_conformance_<random> is created in the server at
# ${STEPWISE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres} and dropped
# afterwards. Exits non-zero unless every base capability and copy_thread,
# delete_for_runs and prune pass on both databases, none skipped. At most
# $STEPWISE_LG_CONFORMANCE_TIMEOUT seconds (default 900).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
venv="${1:-${STEPWISE_PY_VENV:-$repo/target/py-venv}}"
pg_url="${STEPWISE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
limit="${STEPWISE_LG_CONFORMANCE_TIMEOUT:-900}"
export STEPWISE_BIN="${STEPWISE_BIN:-$repo/target/debug/stepwise}"
py="$venv/bin/python"

say() { printf '== %s\n' "$*" >&2; }
die() { echo "langgraph_conformance.sh: $*" >&2; exit 1; }

[ -x "$py" ] || die "no virtualenv at $venv (make one, e.g. with clients/python/ci/run.sh, or pass its path)"
[ -x "$STEPWISE_BIN" ] || die "no server binary at STEPWISE_BIN=$STEPWISE_BIN (cargo build -p stepwise)"
command -v psql >/dev/null || die "psql not found (needed to create the PostgreSQL database)"

say "installing langgraph-checkpoint-conformance==0.0.2 into $venv"
"$py" -m pip install -q "langgraph-checkpoint-conformance==0.0.2"
if ! "$py" -c 'import stepwise.langgraph' 2>/dev/null; then
  say "installing ./clients/python[langgraph]"
  "$py" -m pip install -q "$repo/clients/python[langgraph]"
fi

db="stepwise_lg_conformance_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
db_url="$("$py" -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' "$pg_url" "$db")"
psql -q -v ON_ERROR_STOP=1 "$pg_url" -c "CREATE DATABASE $db" >/dev/null \
  || die "cannot create database $db at $pg_url (set STEPWISE_TEST_POSTGRES_URL)"
cleanup() { psql -q "$pg_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "running the suite on SQLite and on PostgreSQL ($db), at most ${limit}s"
cd "$repo"
timeout --kill-after=10 "$limit" "$py" -u clients/python/ci/langgraph_conformance.py \
  --database sqlite --database "postgres=$db_url"
