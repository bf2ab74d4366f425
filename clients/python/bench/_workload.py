"""The agent-step workload the framework benchmarks share (`bench_openai_agents.py`,
`bench_langgraph.py`): deterministic ~2 KB agent steps, percentiles, SQLite file sizes.

`make_step(session, n)` gives the same step for the same (session, n) in every run and
process (a fixed seed; string seeds hash with SHA-512), so every store under test is given
byte-identical content.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import random
import sqlite3
from pathlib import Path
from typing import Any

SEED = 20240611
_SYLLABLES = (
    "ka lo mi ter an so re qui dex on va lu pre cor ba ne ti st ar gen pol im ux fe".split()
)
_TOOLS = ("search_docs", "read_file", "run_shell", "http_get", "write_file", "grep_repo")


def _vocabulary() -> list[str]:
    rng = random.Random(SEED)
    words = {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(900)}
    return sorted(words)


_VOCAB = _vocabulary()


def _text(rng: random.Random, n_chars: int) -> str:
    """Word-like text of exactly `n_chars` characters."""
    words: list[str] = []
    total = 0
    while total < n_chars:
        word = rng.choice(_VOCAB)
        if rng.random() < 0.08:
            word = word.capitalize() + rng.choice(".,:;")
        words.append(word)
        total += len(word) + 1
    return " ".join(words)[:n_chars]


def make_step(session: str, n: int) -> dict[str, Any]:
    """Agent step `n` of `session`: a thought, a tool call, its observation and token counts,
    about 2 KB as JSON. Deterministic in (session, n)."""
    rng = random.Random(f"{SEED}:{session}:{n}")
    tool = rng.choice(_TOOLS)
    arguments = {
        "query": _text(rng, 150),
        "path": "/".join(rng.choice(_VOCAB) for _ in range(4)) + ".txt",
        "max_results": rng.randint(1, 50),
        "filters": {
            "lang": rng.choice(["en", "de", "fr"]),
            "since": f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
        },
        "note": _text(rng, 40),
    }
    prompt = 500 + 2 * n + rng.randint(0, 400)
    completion = rng.randint(40, 400)
    return {
        "step": n,
        "thought": _text(rng, 300),
        "tool_call": {"id": f"call_{session}_{n}", "name": tool, "arguments": arguments},
        "observation": _text(rng, 1400),
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
    }


def percentile(values: list[float], p: float) -> float:
    """The `p`-th percentile (0-100) of `values`, linearly interpolated."""
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ms(seconds: float) -> float:
    """Seconds as milliseconds, rounded for a report."""
    return round(seconds * 1e3, 3)


def sqlite_size(path: Path) -> dict[str, Any]:
    """The size of a SQLite database nobody has open, after folding its WAL back into the
    main file (``PRAGMA wal_checkpoint(TRUNCATE)``), with the bytes per table (indexes
    counted with their table) when SQLite has the ``dbstat`` table."""
    con = sqlite3.connect(str(path))
    try:
        if con.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        freelist = con.execute("PRAGMA freelist_count").fetchone()[0]
        try:
            rows = con.execute(
                "SELECT COALESCE(m.tbl_name, d.name), SUM(d.pgsize) FROM dbstat d "
                "LEFT JOIN sqlite_schema m ON m.name = d.name GROUP BY 1 ORDER BY 2 DESC"
            ).fetchall()
            tables: dict[str, int] | None = {str(name): int(size) for name, size in rows}
        except sqlite3.OperationalError:  # no dbstat in this SQLite
            tables = None
    finally:
        con.close()
    total = sum(
        Path(str(path) + suffix).stat().st_size
        for suffix in ("", "-wal", "-journal")
        if Path(str(path) + suffix).exists()
    )
    return {"bytes": total, "page_size": page_size, "freelist_pages": freelist, "tables": tables}


def versions(*packages: str) -> dict[str, str | None]:
    """Python's, SQLite's and the given packages' versions."""
    found: dict[str, str | None] = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def host() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform()}
