"""`AsyncStepwise`: the asyncio client (httpx.AsyncClient)."""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Mapping

import httpx

from ._base import BaseClient
from ._calls import (
    UNSET,
    Call,
    EventStreamState,
    Flow,
    Sleep,
    connection_error,
    next_page,
    read_answer,
)
from ._sse import Event
from ._tls import default_ssl_context

__all__ = ["AsyncStepwise"]


class AsyncStepwise(
    BaseClient[
        Awaitable[dict[str, Any]],
        "Awaitable[dict[str, Any] | None]",
        Awaitable[None],
        Awaitable[Any],
        AsyncIterator[dict[str, Any]],
        AsyncIterator[Event],
    ]
):
    """The Stepwise API client for asyncio: the methods of `Stepwise`, awaited.

    Every method of `Stepwise` exists here with the same name and arguments; the ones
    returning a value return an awaitable of it, list methods and `events()` return async
    iterators (``async for``). Use it as an async context manager, or ``await aclose()``::

        async with AsyncStepwise("http://127.0.0.1:7777") as client:
            session = await client.session("support-42")
            async for message in client.list_messages(session["id"]):
                print(message["role"], message["content"])

    To stop an event stream early and release its connection at once, close it:
    ``async with contextlib.aclosing(client.events(sid)) as events: async for e in events: ...``.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        max_retries: int = 3,
        headers: Mapping[str, str] | None = None,
        backoff: float = 0.25,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            api_key,
            token=token,
            timeout=timeout,
            max_retries=max_retries,
            headers=headers,
            backoff=backoff,
        )
        self._http = httpx.AsyncClient(
            base_url=self._endpoint.url,
            headers=self._headers,
            timeout=self.timeout,
            transport=transport or self._endpoint.async_transport(),
            verify=default_ssl_context(),
        )
        self._transport_type = type(transport) if transport is not None else httpx.AsyncHTTPTransport

    async def aclose(self) -> None:
        """Closes the connections and stops renewing leases (and stops the embedded server
        this client started, see `local`). The client cannot be used afterwards."""
        self._leases.close()
        await self._http.aclose()
        if self._local is not None:
            await asyncio.to_thread(self._local.close)

    async def close(self) -> None:
        """The same as `aclose()`."""
        await self.aclose()

    async def __aenter__(self) -> "AsyncStepwise":
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- how calls run ----------------------------------------------------------------

    async def _send(self, call: Call) -> Any:
        attempt = 0
        revived = False
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=None if call.json is UNSET else call.json,
                    params=call.params,
                    headers=call.headers,
                )
            except httpx.TransportError as exc:
                # An embedded server whose owner went: start one and send the call again.
                if (
                    not revived
                    and self._local is not None
                    and isinstance(exc, httpx.ConnectError)
                    and await asyncio.to_thread(self._local.revive)
                ):
                    revived = True
                    continue
                delay = self._retry.after_error(exc, idempotent=call.idempotent, attempt=attempt)
                if delay is None:
                    raise connection_error(self.base_url, call, exc, attempt + 1) from exc
            else:
                delay = self._retry.after_answer(
                    response.status_code,
                    response.headers,
                    idempotent=call.idempotent,
                    attempt=attempt,
                )
                if delay is None:
                    return read_answer(call, response)
            await asyncio.sleep(delay)
            attempt += 1

    async def _drive(self, flow: Flow) -> Any:
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                op = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(op, Sleep):
                await asyncio.sleep(op.seconds)
                continue
            try:
                value = await self._send(op)
            except Exception as exc:  # handed to the flow, which may handle it
                error = exc

    def _run(self, flow: Flow | Call) -> Any:
        if isinstance(flow, Call):
            return self._send(flow)
        return self._drive(flow)

    async def _items(self, call: Call) -> AsyncIterator[dict[str, Any]]:
        next_call: Call | None = call
        while next_call is not None:
            items, next_call = next_page(next_call, await self._send(next_call))
            for item in items:
                yield item

    async def _event_stream(self, state: EventStreamState) -> AsyncIterator[Event]:
        call = Call("GET", state.path, idempotent=True)
        while True:
            try:
                async with self._http.stream(
                    "GET", state.path, headers=state.headers(), timeout=self._stream_timeout
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        delay = state.answer_delay(call, response)
                    else:
                        state.connected()
                        async for chunk in response.aiter_bytes():
                            for event in state.feed(chunk):
                                yield event
                        delay = state.ended()
            except httpx.TransportError as exc:
                if self._local is not None and isinstance(exc, httpx.ConnectError):
                    await asyncio.to_thread(self._local.revive)
                delay = state.ended()
            await asyncio.sleep(delay)
