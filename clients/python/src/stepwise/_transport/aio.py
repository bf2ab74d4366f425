"""Lean keep-alive HTTP/1.1 connections for asyncio: the adapters' hot calls.

`StepwiseSession` makes one small request per `add_items`; through httpx each costs about half
a millisecond of Python before the server sees it, more than the write itself. An
`ItemsConnection` sends the same requests over one plain asyncio connection (tens of
microseconds); a `LeanPool` keeps several, for callers whose requests overlap. They are used
only for ``http://`` servers reached directly (no proxy in the environment) by a client with
the default transport; anything else goes through `AsyncStepwise.request`.

They keep the client's behaviour: the same headers (API key, user agent), JSON bodies, the
API's error shape as `StepwiseError`, and the retries of the client's `RetryPolicy` for
idempotent calls (connection errors, 429 honouring ``Retry-After``, 502/503/504).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping, TypeVar

import httpx

from .._base import direct_target
from .endpoint import DirectTarget, shown
from .retry import LEAN_RETRY_STATUSES, RetryPolicy
from .wire import (
    MAX_HEAD_BYTES,
    REVIVE,
    SEND,
    Answer,
    Failed,
    after_first_try,
    fixed_head,
    read_answer,
    request_bytes,
    request_target,
)

__all__ = ["ItemsConnection", "LeanPool", "fast_path_for", "for_running_loop"]

# asyncio.timeout (Python 3.11+), or None where only wait_for exists.
_TIMEOUT = getattr(asyncio, "timeout", None)
# What a lean connection's failure can be (the server is gone, closed the connection, timed
# out, or answered what is not HTTP).
_FAILURES = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    asyncio.TimeoutError,
    asyncio.LimitOverrunError,
    ValueError,
)

_T = TypeVar("_T")


def for_running_loop(cache: dict[asyncio.AbstractEventLoop, _T], make: Callable[[], _T]) -> _T:
    """The running event loop's entry of `cache` (connections and clients belong to one loop),
    made on first use; entries of loops that are closed are dropped then."""
    loop = asyncio.get_running_loop()
    if loop not in cache:
        for old in [other for other in cache if other.is_closed()]:
            del cache[old]
        cache[loop] = make()
    return cache[loop]


def fast_path_for(client: Any) -> "ItemsConnection | None":
    """An `ItemsConnection` for this `AsyncStepwise` client's server, or ``None`` when the
    client must be used (https, a proxy, a custom transport)."""
    target = direct_target(client, httpx.AsyncHTTPTransport)
    return None if target is None else _connection(target)


def _connection(target: DirectTarget) -> "ItemsConnection":
    return ItemsConnection(
        target.host,
        target.port,
        target.prefix,
        target.headers,
        timeout=target.timeout,
        max_retries=target.max_retries,
        unix=target.socket,
        revive=target.revive,
    )


class ItemsConnection:
    """One keep-alive connection (per event loop: make one in each), one request at a time."""

    def __init__(
        self,
        host: str,
        port: int,
        prefix: str,
        headers: Mapping[str, str],
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        unix: str | None = None,
        revive: Callable[[], bool] | None = None,
    ) -> None:
        self._revive = revive
        self.host, self.port, self.prefix = host, port, prefix
        self.unix = unix
        self.timeout = timeout
        self.max_retries = max_retries
        self._shown = shown(host, port, prefix, unix)
        self._policy = RetryPolicy(max_retries, statuses=LEAN_RETRY_STATUSES)
        self._head = fixed_head(host, port, headers)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock: asyncio.Lock | None = None

    def url(self, path: str) -> str:
        return self._shown + path

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    def drop(self) -> None:
        """Closes the connection without waiting (the next request opens a new one)."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool = False,
        quoted: bool = False,
    ) -> Any:
        """Sends one request and returns the parsed JSON answer (``None`` when empty).
        `path` is quoted here unless `quoted` says it already is."""
        message = request_bytes(method, request_target(self.prefix, path, params, quoted), self._head, json_body)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            flow, op = after_first_try(
                self._policy,
                await self._attempt(message),
                method,
                path,
                self._shown,
                idempotent=idempotent,
                revive=self._revive is not None,
            )
            try:
                while flow is not None:
                    if op is SEND:
                        op = flow.send(await self._attempt(message))
                    elif op is REVIVE:
                        op = flow.send(self._revive is not None and await asyncio.to_thread(self._revive))
                    else:
                        await asyncio.sleep(op)
                        op = next(flow)
            except StopIteration as done:
                return done.value
            return op

    async def request_once(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None
    ) -> tuple[int, bytes] | None:
        """One try of a request without a body, not retried: the answer's status and body as
        they came, or ``None`` when no answer came (the connection is dropped)."""
        message = request_bytes(method, request_target(self.prefix, path, params, False), self._head)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            answer = await self._attempt(message)
        return None if type(answer) is Failed else (answer[0], answer[2])

    async def _attempt(self, message: bytes) -> Answer | Failed:
        writer = self._writer
        reused = writer is not None and not writer.is_closing()
        try:
            if _TIMEOUT is None:  # Python 3.10
                return await asyncio.wait_for(self._exchange(message), self.timeout)
            async with _TIMEOUT(self.timeout):  # no task of its own per request, unlike wait_for
                return await self._exchange(message)
        except asyncio.CancelledError:
            # The answer may still come: this connection cannot be reused.
            self.drop()
            raise
        except _FAILURES as exc:
            self.drop()
            return Failed(exc, reused)

    async def _exchange(self, message: bytes) -> Answer:
        if self._writer is None or self._reader is None or self._writer.is_closing():
            if self.unix is not None:
                self._reader, self._writer = await asyncio.open_unix_connection(
                    self.unix, limit=MAX_HEAD_BYTES
                )
            else:
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, limit=MAX_HEAD_BYTES
                )
        reader, writer = self._reader, self._writer
        writer.write(message)
        await writer.drain()
        reading = read_answer()
        kind, arg = next(reading)
        try:
            while True:
                if kind == "until":
                    data = await reader.readuntil(arg)
                elif kind == "exactly":
                    data = await reader.readexactly(arg)
                else:
                    data = await reader.read()
                kind, arg = reading.send(data)
        except StopIteration as done:
            answer: Answer = done.value
        if answer[3]:
            self.drop()
        return answer


class LeanPool:
    """Lean connections to one server for one event loop, for callers whose requests overlap
    (a LangGraph graph's tasks write while its checkpoints are put): each request in flight
    takes a connection of its own; up to `max_idle` are kept alive for the next ones."""

    def __init__(self, make: Callable[[], ItemsConnection], max_idle: int = 8) -> None:
        self._make = make
        self._idle: list[ItemsConnection] = []
        self.max_idle = max_idle

    @classmethod
    def for_client(cls, client: Any) -> "LeanPool | None":
        """A pool for this `AsyncStepwise` client's server, or ``None`` when the client must be
        used (as for `fast_path_for`)."""
        target = direct_target(client, httpx.AsyncHTTPTransport)
        if target is None:
            return None
        return cls(lambda: _connection(target))

    async def request(self, method: str, path: str, **options: Any) -> Any:
        """`ItemsConnection.request`, on an idle connection or a new one."""
        conn = self._idle.pop() if self._idle else self._make()
        try:
            return await conn.request(method, path, **options)
        finally:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)  # one that failed reconnects on its next use
            else:
                conn.drop()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
