"""Fixtures: a real `stepwise serve` for the whole test run, and a client for it.

The binary is `$STEPWISE_BIN`, else this repository's `target/debug/stepwise` when built.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest

from stepwise import Stepwise
from stepwise.testing import LocalServer, local_server

REPO = Path(__file__).resolve().parents[3]

if not os.environ.get("STEPWISE_BIN"):
    built = REPO / "target" / "debug" / "stepwise"
    if built.is_file():
        os.environ["STEPWISE_BIN"] = str(built)

# The demo agent's `steps: N` rule sleeps this long per step; short keeps tests quick.
DEMO_ENV = {"STEPWISE_DEMO_STEP_MS": "20"}


@pytest.fixture(scope="session")
def server() -> Iterator[LocalServer]:
    """One server (temporary SQLite database) shared by the whole test run."""
    with local_server(env=DEMO_ENV) as running:
        yield running


@pytest.fixture
def client(server: LocalServer) -> Iterator[Stepwise]:
    """A fresh sync client for the shared server."""
    with Stepwise(server.url) as c:
        yield c
