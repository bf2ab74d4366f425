"""`Stepwise`: the synchronous client (httpx.Client)."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any, Iterator, Mapping

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

__all__ = ["Stepwise"]


class Stepwise(
    BaseClient[
        dict[str, Any],
        "dict[str, Any] | None",
        None,
        Any,
        Iterator[dict[str, Any]],
        Iterator[Event],
    ]
):
    """The Stepwise API client (synchronous).

    `base_url` defaults to env ``STEPWISE_URL``, else ``http://127.0.0.1:7777``. The
    credential, sent as ``Authorization: Bearer ...``, is `api_key` or `token` (an end
    user's token from ``tokens.create``: the same on the wire; give one of them), else env
    ``STEPWISE_API_KEY``, else env ``STEPWISE_TOKEN``; ``api_key`` holds it. Methods
    return the API's JSON answers as dicts; list methods return iterators that follow
    ``next_cursor``; errors raise `StepwiseError`. Reads, and writes that are safe to
    repeat, are retried `max_retries` times on connection failures, 5xx and 429, with
    exponential backoff (`backoff` seconds first) and jitter, honouring ``Retry-After``.

    Use it as a context manager, or call `close()`::

        with Stepwise("http://127.0.0.1:7777") as client:
            session = client.session("support-42")
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
        transport: httpx.BaseTransport | None = None,
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
        self._http = httpx.Client(
            base_url=self._endpoint.url,
            headers=self._headers,
            timeout=self.timeout,
            transport=transport or self._endpoint.transport(),
            verify=default_ssl_context(),
        )
        self._transport_type = type(transport) if transport is not None else httpx.HTTPTransport

    def close(self) -> None:
        """Closes the connections and stops renewing leases (and stops the embedded server
        this client started, see `local`). The client cannot be used afterwards."""
        self._leases.close()
        self._http.close()
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> "Stepwise":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- how calls run ----------------------------------------------------------------

    def _send(self, call: Call) -> Any:
        attempt = 0
        revived = False
        while True:
            try:
                response = self._http.request(
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
                    and self._local.revive()
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
            time.sleep(delay)
            attempt += 1

    def _run(self, flow: Flow | Call) -> Any:
        if isinstance(flow, Call):
            return self._send(flow)
        value: Any = None
        error: BaseException | None = None
        while True:
            try:
                op = flow.throw(error) if error is not None else flow.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(op, Sleep):
                time.sleep(op.seconds)
                continue
            try:
                value = self._send(op)
            except Exception as exc:  # handed to the flow, which may handle it
                error = exc

    def _items(self, call: Call) -> Iterator[dict[str, Any]]:
        next_call: Call | None = call
        while next_call is not None:
            items, next_call = next_page(next_call, self._send(next_call))
            yield from items

    def _event_stream(self, state: EventStreamState) -> Iterator[Event]:
        call = Call("GET", state.path, idempotent=True)
        while True:
            try:
                with self._http.stream(
                    "GET", state.path, headers=state.headers(), timeout=self._stream_timeout
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        delay = state.answer_delay(call, response)
                    else:
                        state.connected()
                        for chunk in response.iter_bytes():
                            yield from state.feed(chunk)
                        delay = state.ended()
            except httpx.TransportError as exc:
                if self._local is not None and isinstance(exc, httpx.ConnectError):
                    self._local.revive()
                delay = state.ended()
            time.sleep(delay)
