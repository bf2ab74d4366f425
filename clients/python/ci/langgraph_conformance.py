"""Runs LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance) against
`stepwise.langgraph.AsyncStepwiseSaver` on a real `stepwise serve` per database given.

    python clients/python/ci/langgraph_conformance.py --database sqlite --database postgres=postgres://...

`--database NAME=URL` (or just `sqlite`: a temporary SQLite file). The server binary is
$STEPWISE_BIN. Prints the suite's progress and report, then the tests passed / failed /
skipped per capability, and exits 1 unless every capability (the base ones and copy_thread,
delete_for_runs, prune) is implemented and passes on every database.
Used by clients/python/ci/langgraph_conformance.sh.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncGenerator
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from stepwise.langgraph import AsyncStepwiseSaver
from stepwise.testing import LocalServer, local_server

REQUIRED = sorted(c.value for c in ALL_CAPABILITIES)


def register(name: str, database: str | None) -> Any:
    server: dict[str, LocalServer] = {}

    async def lifespan() -> AsyncGenerator[None, None]:
        running = local_server(database=database)
        await asyncio.to_thread(running.__enter__)
        server["it"] = running
        print(f"  server {running.url} on {running.database.split('@')[-1]}", flush=True)
        try:
            yield
        finally:
            await asyncio.to_thread(running.close)

    @checkpointer_test(name=f"AsyncStepwiseSaver ({name})", lifespan=lifespan)
    async def saver() -> AsyncGenerator[AsyncStepwiseSaver, None]:
        async with AsyncStepwiseSaver(base_url=server["it"].url) as s:
            yield s

    return saver


async def run(databases: list[tuple[str, str | None]]) -> bool:
    ok = True
    summary = []
    for name, url in databases:
        print(f"== LangGraph checkpointer conformance: AsyncStepwiseSaver on {name}", flush=True)
        report = await validate(register(name, url), progress=ProgressCallbacks.default())
        report.print_report()
        for cap in REQUIRED:
            r = report.results.get(cap)
            if r is None or not r.detected or r.passed is not True or r.tests_skipped:
                ok = False
            if r is None:
                summary.append(f"{name:10s} {cap:16s} not run")
                continue
            for failure in r.failures:
                print(f"  FAILED {cap}: {failure}")
            state = "ok" if r.detected and r.passed else ("NOT IMPLEMENTED" if not r.detected else "FAILED")
            summary.append(
                f"{name:10s} {cap:16s} {r.tests_passed:3d} passed {r.tests_failed:3d} failed "
                f"{r.tests_skipped:3d} skipped  {state}"
            )
    print("== per capability")
    print("\n".join(summary))
    print("== result:", "every capability passes on every database" if ok else "FAILED")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database", action="append", required=True, help="sqlite, or NAME=URL")
    args = ap.parse_args()
    databases: list[tuple[str, str | None]] = []
    for spec in args.database:
        if spec == "sqlite":
            databases.append(("sqlite", None))
        else:
            name, _, url = spec.partition("=")
            if not url:
                ap.error(f"--database {spec!r}: expected NAME=URL")
            databases.append((name, url))
    return 0 if asyncio.run(run(databases)) else 1


if __name__ == "__main__":
    sys.exit(main())
