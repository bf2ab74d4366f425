"""A pytest plugin that runs the OpenAI Agents SDK's own tests with `StepwiseSession` in
place of their in-memory test session.

Loaded with ``-p stepwise_sdk_plugin`` (this directory on ``PYTHONPATH``) from the root of
the SDK's source distribution. At configure time it replaces ``SimpleListSession``,
``CountingSession`` and ``IdStrippingSession`` in ``tests.utils.simple_session`` by
subclasses of `StepwiseSession` that keep their constructor (``session_id="test",
history=None``) and what tests inspect (``saved_items``, ``pop_calls``, id stripping on
add, ``_ignore_ids_for_matching``). Every instance gets a fresh Stepwise session of its own
(named ``sdk-<uuid>``; ``session_id`` stays what the test gave), so tests do not share
history; ``saved_items`` reads the stored items back from the server.

The server: ``$STEPWISE_SDK_SUITE_URL`` (with ``$STEPWISE_API_KEY`` when it needs one) when
set, else a ``stepwise serve`` started here with `stepwise.testing.local_server`
(``$STEPWISE_BIN``) for the whole run.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any, cast

import pytest

from stepwise import Stepwise
from stepwise.openai_agents import METADATA_KEY, StepwiseSession
from stepwise.testing import LocalServer, local_server

_server_cm: Any = None
_server: LocalServer | None = None
_url: str = ""
_sync: Stepwise | None = None
# Test sessions created (each a Stepwise session of its own).
created_sessions = 0


def _client() -> Stepwise:
    assert _sync is not None, "the Stepwise SDK plugin is not configured"
    return _sync


class SimpleListSession(StepwiseSession):
    """`StepwiseSession` with the in-memory test session's constructor and inspection."""

    def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
        global created_sessions
        super().__init__(session_id, base_url=_url, api_key=os.environ.get("STEPWISE_API_KEY"))
        created_sessions += 1
        self._ignore_ids_for_matching = False
        # Created now, so `saved_items` works before any async call.
        created = _client().create_session(
            name=self.stepwise_name,
            title=session_id[:500] or "test",
            metadata={METADATA_KEY: session_id},
        )
        self._stepwise_id = str(created["id"])
        self._version = 0
        if history:
            answer = _client().request(
                "POST",
                self._path(),
                json={"items": list(history), "version": 0, "op_id": uuid.uuid4().hex},
                idempotent=True,
            )
            self._version = int(answer["version"])

    def _stepwise_name(self) -> str:
        return f"sdk-{uuid.uuid4().hex}"

    @property
    def saved_items(self) -> list[Any]:
        """The stored items, read from the server."""
        answer = _client().request("GET", self._path())
        return cast(list[Any], answer["items"])

    @property
    def _items(self) -> list[Any]:
        """The in-memory session's list, for tests that read it: the stored items."""
        return self.saved_items


class CountingSession(SimpleListSession):
    """Counts `pop_item` calls (rewind tests)."""

    def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
        super().__init__(session_id=session_id, history=history)
        self.pop_calls = 0

    async def pop_item(self) -> Any:
        self.pop_calls += 1
        return await super().pop_item()


class IdStrippingSession(CountingSession):
    """Strips item ids on add, like hosted stores that assign their own."""

    def __init__(self, session_id: str = "test", history: list[Any] | None = None) -> None:
        super().__init__(session_id=session_id, history=history)
        self._ignore_ids_for_matching = True

    async def add_items(self, items: list[Any]) -> None:
        sanitized: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                clean = dict(item)
                clean.pop("id", None)
                sanitized.append(clean)
            else:
                sanitized.append(item)
        await super().add_items(sanitized)


def pytest_configure(config: pytest.Config) -> None:
    global _server_cm, _server, _url, _sync
    _url = os.environ.get("STEPWISE_SDK_SUITE_URL", "")
    if not _url:
        _server_cm = local_server()
        _server = _server_cm.__enter__()
        _url = _server.url
    _sync = Stepwise(_url, os.environ.get("STEPWISE_API_KEY"))
    root = str(config.rootpath)
    if root not in sys.path:
        sys.path.insert(0, root)
    import tests.utils.simple_session as simple_session  # type: ignore[import-not-found]  # the sdist's

    simple_session.SimpleListSession = SimpleListSession
    simple_session.CountingSession = CountingSession
    simple_session.IdStrippingSession = IdStrippingSession
    config.addinivalue_line("markers", "stepwise: run with StepwiseSession")


def pytest_report_header(config: pytest.Config) -> str:
    return f"stepwise: the SDK's test sessions are StepwiseSession on {_url}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"stepwise: {created_sessions} test sessions were StepwiseSession (one Stepwise session each)"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    global _server_cm, _server, _sync
    if _sync is not None:
        _sync.close()
        _sync = None
    if _server_cm is not None:
        _server_cm.__exit__(None, None, None)
        _server_cm = None
        _server = None
