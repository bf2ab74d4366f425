"""Stepwise as the session store of the OpenAI Agents SDK (``openai-agents``).

```python
from agents import Agent, Runner
from stepwise.openai_agents import StepwiseSession

agent = Agent(name="Assistant", instructions="Reply very concisely.")
session = StepwiseSession("user-42")            # server: $STEPWISE_URL or http://127.0.0.1:7777
result = await Runner.run(agent, "Hi", session=session)
result = await Runner.run(agent, "What did I say?", session=session)   # sees turn 1
```

`StepwiseSession` implements the SDK's ``Session`` protocol (``get_items``, ``add_items``,
``pop_item``, ``clear_session``) over the conversation-items endpoints of the Stepwise API
(``/v1/sessions/{id}/items``):

* The SDK's session id names a Stepwise session of the caller's tenant: a valid Stepwise
  name (``[A-Za-z0-9._-]``, 1-64 characters, no ``..``, not reserved) is used as it is; any
  other string maps to a stable name ``oa-<readable part>-<16 hex of its SHA-256>``. The
  session is created on first use, with the original id in its metadata
  (``openai_agents_session_id``) and as its title. The same id always reaches the same
  session, from any process.
* The conversation is that session's history in Stepwise: every ``add_items`` call is one
  step (the items exactly as given, tool calls and their outputs readable as the step's
  ``tool_calls`` and ``observations``), user and assistant messages also appear as the
  session's messages, and all of it streams to the web UI. Steps are append-only: a
  ``pop_item`` or ``clear_session`` is a step of its own that says what it removed, so the
  history of what happened stays inspectable while ``get_items`` reflects it.
* Items come back equal (as JSON) to what was added, oldest first; no Stepwise id is added
  to them. ``get_items(limit)`` returns the latest ``limit`` items (``session_settings.limit``
  when not given; all when neither is set; none for ``limit <= 0``).
* Writes are atomic and safe to retry: each names the conversation's version (its step
  count, learned from the last answer) and an operation id, so a request sent again after
  a lost answer is not applied twice, and a write that raced another client's (409) reads
  the version again and is retried. A write goes through even if the awaiting task is
  cancelled meanwhile (the cancellation is raised once the outcome is known).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Mapping
from typing import Any, Callable, TypeVar, cast

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stepwise.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'stepwise-client[openai-agents]' (openai-agents==0.24.0)"
    ) from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError
from ._transport.aio import ItemsConnection, fast_path_for, for_running_loop
from ._names import session_name_for

__all__ = ["StepwiseSession", "stepwise_name"]

_T = TypeVar("_T")

# Stepwise session names (the server's rule): [A-Za-z0-9._-], 1-64, no "..", not reserved.
# Metadata key holding the SDK's session id.
METADATA_KEY = "openai_agents_session_id"
# Attempts of one write when other writers keep taking the next version.
_MAX_CONFLICTS = 20
_MAX_TITLE_CHARS = 500


def stepwise_name(session_id: str) -> str:
    """The Stepwise session name an SDK session id maps to.

    A valid Stepwise name is used as it is; any other string becomes
    ``oa-<readable part>-<first 16 hex digits of the SHA-256 of its UTF-8>`` (the readable
    part keeps up to 40 of its letters, digits, ``_`` and ``-``; other runs become ``-``).
    """
    return session_name_for(session_id, "oa")


def _title(session_id: str) -> str:
    text = "".join(c if c.isprintable() else " " for c in session_id).strip()
    return text[:_MAX_TITLE_CHARS] or session_id[:_MAX_TITLE_CHARS]


async def _finish(awaitable: Awaitable[_T]) -> _T:
    """Waits for a write's outcome even if the caller is cancelled meanwhile (then re-raises
    the cancellation), so the version this session keeps stays true."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved, so it is not reported as never retrieved
        raise cancelled
    return task.result()


class StepwiseSession:
    """A conversation of the OpenAI Agents SDK kept in a Stepwise session.

    Args:
        session_id: the SDK's session id; any non-empty string (see `stepwise_name`).
        client: an `AsyncStepwise` to use (left open by `aclose`). A sync `Stepwise` is
            accepted too: its URL, key, timeout and retries are used for an `AsyncStepwise`
            of this session's own.
        base_url: the server when no client is given (default ``$STEPWISE_URL``, else
            ``http://127.0.0.1:7777``).
        api_key: its API key when no client is given (default ``$STEPWISE_API_KEY``).
        session_settings: the SDK's `SessionSettings` (or a dict of them); its ``limit`` is
            the default of `get_items`.

    Nothing is sent before the first call. Without a given client, the session keeps one
    `AsyncStepwise` per event loop it is used from; `aclose()` closes the one of the
    current loop.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncStepwise | Stepwise | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give either client or base_url/api_key, not both")
        if client is not None and not isinstance(client, (AsyncStepwise, Stepwise)):
            raise TypeError(
                f"client must be a stepwise.AsyncStepwise (or Stepwise), got {type(client).__name__}"
            )
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(cast(Any, session_settings))
            if session_settings is not None
            else SessionSettings()
        )
        self._given: AsyncStepwise | None = client if isinstance(client, AsyncStepwise) else None
        if isinstance(client, Stepwise):
            base_url, api_key = client.base_url, client.api_key
            self._client_options: dict[str, Any] = {
                "timeout": client.timeout,
                "max_retries": client.max_retries,
            }
        else:
            self._client_options = {}
        self._base_url = base_url
        self._api_key = api_key
        # AsyncStepwise clients of our own, one per event loop (an httpx.AsyncClient's
        # connections belong to the loop that opened them).
        self._own: dict[asyncio.AbstractEventLoop, AsyncStepwise] = {}
        # The lean connection for the items calls, per event loop (None: use the client).
        self._fast: dict[asyncio.AbstractEventLoop, ItemsConnection | None] = {}
        self._name = self._stepwise_name()
        # The Stepwise session's id once known, and the conversation's version (its step
        # count) as of this session's last answer.
        self._stepwise_id: str | None = None
        self._version: int | None = None

    def __repr__(self) -> str:
        return f"StepwiseSession({self.session_id!r}, name={self._name!r})"

    # --- what subclasses may change ---------------------------------------------------------

    def _stepwise_name(self) -> str:
        """The name of the Stepwise session this SDK session uses."""
        return stepwise_name(self.session_id)

    # --- plumbing ---------------------------------------------------------------------------

    @property
    def stepwise_name(self) -> str:
        """The Stepwise session name this session uses."""
        return self._name

    @property
    def client(self) -> AsyncStepwise:
        """The `AsyncStepwise` this session uses in the running event loop."""
        if self._given is not None:
            return self._given
        return for_running_loop(
            self._own, lambda: AsyncStepwise(self._base_url, self._api_key, **self._client_options)
        )

    async def aclose(self) -> None:
        """Closes this session's connections of the running loop (not a given client)."""
        loop = asyncio.get_running_loop()
        fast = self._fast.pop(loop, None)
        if fast is not None:
            await fast.close()
        own = self._own.pop(loop, None)
        if own is not None:
            await own.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """One items call (all of them are safe to retry): over the lean connection when
        the server is reached over plain HTTP, else through the client."""
        client = self.client
        fast = for_running_loop(self._fast, lambda: fast_path_for(client))
        if fast is not None:
            return await fast.request(method, path, json_body=json, params=params, idempotent=True)
        return await client.request(method, path, json=json, params=params, idempotent=True)

    async def stepwise_session_id(self) -> str:
        """The id of the Stepwise session (found by name, or created)."""
        if self._stepwise_id is None:
            await self._resolve()
        assert self._stepwise_id is not None
        return self._stepwise_id

    async def _resolve(self) -> None:
        client = self.client
        found = await client.find_session(self._name)
        if found is None:
            try:
                found = await client.create_session(
                    name=self._name,
                    title=_title(self.session_id),
                    metadata={METADATA_KEY: self.session_id},
                )
                self._version = 0
            except StepwiseError as e:
                if e.code != "conflict":
                    raise
                # Created by another client meanwhile (or deleted: names stay taken).
                found = await client.find_session(self._name)
                if found is None:
                    raise StepwiseError(
                        "conflict",
                        f"the Stepwise session named {self._name!r} (SDK session id "
                        f"{self.session_id!r}) is deleted; restore it or use another session id",
                        status=409,
                    ) from e
        metadata = found.get("metadata")
        owner = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
        if owner is not None and owner != self.session_id:
            raise StepwiseError(
                "conflict",
                f"the Stepwise session named {self._name!r} belongs to SDK session id "
                f"{owner!r}, not {self.session_id!r}",
                status=409,
            )
        self._stepwise_id = str(found["id"])

    def _path(self, suffix: str = "") -> str:
        assert self._stepwise_id is not None
        return f"/v1/sessions/{self._stepwise_id}/items{suffix}"

    async def _read(self, limit: int | None) -> list[TResponseInputItem]:
        if self._stepwise_id is None:
            await self._resolve()
        params = {"limit": limit} if limit is not None else None
        answer = await self._call("GET", self._path(), params=params)
        self._version = int(answer["version"])
        return cast(list[TResponseInputItem], answer["items"])

    async def _write(self, send: Callable[[int, str], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        """Runs one write at the known version (read first when unknown); on a conflict
        reads the version again and retries. Returns the answer."""
        if self._stepwise_id is None:
            await self._resolve()
        op_id = uuid.uuid4().hex
        for _ in range(_MAX_CONFLICTS):
            if self._version is None:
                await self._read(0)
            assert self._version is not None
            try:
                answer = await send(self._version, op_id)
            except StepwiseError as e:
                if e.code != "conflict" or e.status != 409:
                    raise
                self._version = None
                continue
            self._version = int(answer["version"])
            return answer
        raise StepwiseError(
            "conflict",
            f"other writers kept changing Stepwise session {self._name!r}; gave up after "
            f"{_MAX_CONFLICTS} attempts",
            status=409,
        )

    # --- the SDK's Session protocol ---------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest `limit` items (``session_settings.limit`` when not given; all when
        neither is set; none when ``<= 0``), oldest first."""
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None and effective <= 0:
            return []
        return await self._read(effective)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends `items` as one batch: all of them or none, never twice."""
        if not items:
            return
        batch = list(items)

        async def send(version: int, op_id: str) -> dict[str, Any]:
            return cast(
                dict[str, Any],
                await self._call(
                    "POST",
                    self._path(),
                    json={"items": batch, "version": version, "op_id": op_id},
                ),
            )

        await _finish(self._write(send))

    async def pop_item(self) -> TResponseInputItem | None:
        """Removes the latest item and returns it (``None`` when there is none)."""

        async def send(version: int, op_id: str) -> dict[str, Any]:
            return cast(
                dict[str, Any],
                await self._call(
                    "POST",
                    self._path("/pop"),
                    json={"version": version, "op_id": op_id},
                ),
            )

        answer = await _finish(self._write(send))
        return cast("TResponseInputItem | None", answer.get("item"))

    async def clear_session(self) -> None:
        """Removes every item (a step that says so; the history of steps stays)."""

        async def send(version: int, op_id: str) -> dict[str, Any]:
            return cast(
                dict[str, Any],
                await self._call(
                    "DELETE",
                    self._path(),
                    params={"version": version, "op_id": op_id},
                ),
            )

        await _finish(self._write(send))
