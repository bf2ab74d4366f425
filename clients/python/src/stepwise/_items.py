"""A lean keep-alive HTTP/1.1 connection for the conversation-items calls.

`StepwiseSession` makes one small request per `add_items`; through httpx each costs about half
a millisecond of Python before the server sees it, more than the write itself. This sends the
same requests over one plain asyncio connection (tens of microseconds). It is used only for
``http://`` servers reached directly (no proxy in the environment) by a client with the
default transport; anything else goes through `AsyncStepwise.request`.

It keeps the client's behaviour: the same headers (API key, user agent), JSON bodies, the
API's error shape as `StepwiseError`, and retries of idempotent calls after connection errors,
429 (honouring ``Retry-After``) and 502/503/504, with exponential backoff.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping, TypeVar
from urllib.parse import quote, urlencode

import httpx

from ._async_client import AsyncStepwise
from ._direct import DirectTarget, direct_target
from ._errors import StepwiseError, parse_answer
from ._http1 import MAX_HEAD_BYTES, fixed_head, read_answer, request_bytes
from ._retry import RetryPolicy, retry_after_seconds

__all__ = ["ItemsConnection", "LeanPool", "fast_path_for", "for_running_loop"]

_RETRY_STATUSES = frozenset({429, 502, 503, 504})
# asyncio.timeout (Python 3.11+), or None where only wait_for exists.
_TIMEOUT = getattr(asyncio, "timeout", None)


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


def fast_path_for(client: AsyncStepwise) -> "ItemsConnection | None":
    """An `ItemsConnection` for this client's server, or ``None`` when the client must be used
    (https, a proxy, a custom transport)."""
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
        self._policy = RetryPolicy(max_retries)
        self._head = fixed_head(host, port, headers)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock: asyncio.Lock | None = None

    def url(self, path: str) -> str:
        if self.unix is not None:
            return f"unix:{self.unix}{path}"
        return f"http://{self.host}:{self.port}{self.prefix}{path}"

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, asyncio.CancelledError):
                pass

    def _drop(self) -> None:
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
        target = self.prefix + path if quoted else quote(self.prefix + path, safe="/:@!$&'()*+,;=-._~")
        if params:
            target += "?" + urlencode({k: str(v) for k, v in params.items()})
        message = request_bytes(method, target, self._head, json_body)
        if self._lock is None:
            self._lock = asyncio.Lock()
        attempt = 0
        revived = False
        async with self._lock:
            while True:
                try:
                    status, headers, content = await self._within_timeout(message)
                except asyncio.CancelledError:
                    # The answer may still come: this connection cannot be reused.
                    self._drop()
                    raise
                except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                        asyncio.LimitOverrunError, ValueError) as exc:
                    self._drop()
                    # Refused on connecting, nothing was sent: an embedded server whose owner
                    # went is started again.
                    if (
                        not revived
                        and self._revive is not None
                        and isinstance(exc, (ConnectionRefusedError, FileNotFoundError))
                        and await asyncio.to_thread(self._revive)
                    ):
                        revived = True
                        continue
                    # A kept-alive connection the server closed meanwhile fails at once: the
                    # first retry goes without a pause.
                    if idempotent and attempt < max(self.max_retries, 1):
                        attempt += 1
                        await asyncio.sleep(0 if attempt == 1 else self._backoff(attempt))
                        continue
                    raise StepwiseError(
                        "connection_error",
                        f"no answer from {self.url('')} to {method} {path}: "
                        f"{exc or type(exc).__name__} ({type(exc).__name__})",
                        method=method,
                        url=self.url(path),
                    ) from exc
                if status in _RETRY_STATUSES and idempotent and attempt < self.max_retries:
                    attempt += 1
                    await asyncio.sleep(self._retry_after(headers) or self._backoff(attempt))
                    continue
                break
        return parse_answer(status, content, method=method, path=path, url=self.url(path))

    async def _within_timeout(self, message: bytes) -> tuple[int, dict[str, str], bytes]:
        if _TIMEOUT is None:  # Python 3.10
            return await asyncio.wait_for(self._exchange(message), self.timeout)
        async with _TIMEOUT(self.timeout):  # no task of its own per request, unlike wait_for
            return await self._exchange(message)

    def _backoff(self, attempt: int) -> float:
        return self._policy.backoff_delay(attempt - 1)

    def _retry_after(self, headers: dict[str, str]) -> float | None:
        wait = retry_after_seconds(headers)
        return None if wait is None else min(wait, self._policy.max_retry_after)

    async def _exchange(self, message: bytes) -> tuple[int, dict[str, str], bytes]:
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
            status, headers, content, close = done.value
        if close:
            self._drop()
        return status, headers, content


class LeanPool:
    """Lean connections to one server for one event loop, for callers whose requests overlap
    (a LangGraph graph's tasks write while its checkpoints are put): each request in flight
    takes a connection of its own; up to `max_idle` are kept alive for the next ones."""

    def __init__(self, make: Callable[[], ItemsConnection], max_idle: int = 8) -> None:
        self._make = make
        self._idle: list[ItemsConnection] = []
        self.max_idle = max_idle

    @classmethod
    def for_client(cls, client: AsyncStepwise) -> "LeanPool | None":
        """A pool for this client's server, or ``None`` when the client must be used (as for
        `fast_path_for`)."""
        target = direct_target(client, httpx.AsyncHTTPTransport)
        if target is None:
            return None
        return cls(lambda: _connection(target))

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
        """As `ItemsConnection.request`, on an idle connection or a new one."""
        conn = self._idle.pop() if self._idle else self._make()
        try:
            return await conn.request(
                method, path, json_body=json_body, params=params, idempotent=idempotent, quoted=quoted
            )
        finally:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)  # one that failed reconnects on its next use
            else:
                conn._drop()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
