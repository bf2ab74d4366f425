"""How long `Stepwise.local()` takes, from the call to the first answered call, on a new database.

    python bench/local_start.py                  # 20 starts, the binary Stepwise.local() finds
    STEPWISE_BIN=target/release/stepwise python bench/local_start.py --starts 20

Each start gets a new data directory (a new SQLite database), calls `Stepwise.local()`, then
`create_session()` (the first answered call: a write, synced), and closes the client (which stops
the server; not timed). Prints the p50, p90 and max in milliseconds, and the binary used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python" / "src"))

from stepwise import Stepwise  # noqa: E402
from stepwise.testing import find_binary  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--starts", type=int, default=20)
    p.add_argument("--database", choices=["sqlite", "files"], default="sqlite")
    a = p.parse_args()
    times = []
    for _ in range(a.starts):
        with tempfile.TemporaryDirectory(prefix="local-start-") as tmp:
            database = None if a.database == "sqlite" else f"files://{tmp}/sessions"
            t0 = time.perf_counter()
            client = Stepwise.local(database, data_dir=tmp)
            client.create_session(name="first")
            times.append((time.perf_counter() - t0) * 1e3)
            client.close()
    times.sort()
    print(json.dumps({
        "starts": a.starts,
        "database": a.database,
        "p50_ms": round(statistics.median(times), 1),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
        "max_ms": round(times[-1], 1),
        "binary": find_binary(),
    }, indent=2))


if __name__ == "__main__":
    main()
