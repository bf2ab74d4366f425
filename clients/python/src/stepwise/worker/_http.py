"""The worker's HTTP calls: writes that carry the lease, and a claim long poll that can be cut
short when the worker stops."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import httpx

from .._calls import UNSET, Call, connection_error, read_answer
from .._errors import StepwiseError
from .._tls import default_ssl_context
from .._transport.endpoint import endpoint, proxied
from .._transport.retry import RetryPolicy
from .._transport.sync import ClaimConnection, FastHTTP

__all__ = ["Api", "LEASE_HEADER", "is_transient", "is_lease_lost", "retrying", "worker_backoff"]

#: The header every write of a worker's execution carries.
LEASE_HEADER = "Stepwise-Lease"

CLAIM_PATH = "/v1/workers/claim"


def is_transient(error: BaseException) -> bool:
    """Whether another try may succeed: no answer at all, 5xx, 429 or 408."""
    if not isinstance(error, StepwiseError):
        return False
    return error.status is None or error.status >= 500 or error.status in (408, 429)


def is_lease_lost(error: BaseException) -> bool:
    """Whether the answer says this worker no longer holds the execution."""
    return isinstance(error, StepwiseError) and error.code == "lease_lost"


def worker_backoff(first: float, cap: float) -> RetryPolicy:
    """The worker's waits between tries: exponential from `first` up to `cap` seconds, the
    last quarter of each random (its `backoff_delay`; the worker counts the tries)."""
    return RetryPolicy(0, backoff=first, max_backoff=cap, jitter=0.25)


class Api:
    """The worker's view of the server: `call` for every request, `claim` for the long poll."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        server = endpoint(base_url)
        self.base_url = server.base_url
        self.headers = dict(headers)
        self.timeout = timeout
        self._http = httpx.Client(
            base_url=server.url,
            headers=self.headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport or server.transport(),
            verify=default_ssl_context(),
        )
        # The long poll goes over its own connection, which `abort_claim` can cut; through a
        # proxy or a custom transport it goes through httpx (a stop then waits for it).
        self._claims: ClaimConnection | None = None
        if transport is None and not proxied(self.base_url):
            self._claims = ClaimConnection(self.base_url, self.headers, CLAIM_PATH)
        self._claim_aborted = threading.Event()
        # Every other call goes over keep-alive connections of its own (one per run thread
        # at a time, kept between calls) when the server is plain http:// or a socket reached
        # directly: through httpx a call costs several times the Python (see `FastHTTP`).
        self._lean: FastHTTP | None = None
        parts = urlsplit(server.url)
        if transport is None and (server.socket is not None or (parts.scheme == "http" and not proxied(self.base_url))):
            self._lean = FastHTTP(
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                parts.path.rstrip("/"),
                self.headers,
                timeout,
                0,  # the worker retries by itself (`retrying`)
                server.socket,
            )

    def call(
        self,
        method: str,
        path: str,
        body: Any = UNSET,
        *,
        lease: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One request; the parsed JSON answer (``None`` when empty) or a `StepwiseError`."""
        headers = {LEASE_HEADER: lease} if lease is not None else None
        if self._lean is not None:
            return self._lean.request(
                method, path, json_body=None if body is UNSET else body, headers=headers, timeout=timeout
            )
        call = Call(method, path, json=body, expect="raw")
        try:
            response = self._http.request(
                method,
                path,
                json=None if body is UNSET else body,
                headers=headers,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
            )
        except httpx.TransportError as exc:
            raise connection_error(self.base_url, call, exc) from exc
        return read_answer(call, response)

    def claim(self, payload: Mapping[str, Any], wait_s: float) -> Any:
        """``POST /v1/workers/claim``; waits up to `wait_s` (plus some slack) for the answer."""
        timeout = float(wait_s) + 15.0
        if self._claims is None:
            if self._claim_aborted.is_set():
                raise StepwiseError("connection_error", "the worker is stopping")
            return self.call("POST", CLAIM_PATH, dict(payload), timeout=timeout)
        response = self._claims.post(dict(payload), timeout)
        return read_answer(Call("POST", CLAIM_PATH, expect="raw"), response)

    def abort_claim(self) -> None:
        """Ends the long poll in flight, if it can be cut, and refuses further claims."""
        self._claim_aborted.set()
        if self._claims is not None:
            self._claims.abort()

    def close(self) -> None:
        if self._claims is not None:
            self._claims.close()
        if self._lean is not None:
            self._lean.close()
        self._http.close()


def retrying(
    send: Callable[[], Any],
    *,
    give_up_after: float,
    should_stop: Callable[[], bool] = lambda: False,
    on_retry: Callable[[StepwiseError, int], None] | None = None,
) -> Any:
    """Calls `send` again, with backoff, while it fails transiently (no answer, 5xx, 429),
    for up to `give_up_after` seconds or until `should_stop()`; then the last error is raised."""
    deadline = time.monotonic() + give_up_after
    backoff = worker_backoff(0.2, 5.0)
    attempt = 0
    while True:
        try:
            return send()
        except StepwiseError as error:
            if not is_transient(error) or should_stop():
                raise
            delay = backoff.backoff_delay(attempt)
            if time.monotonic() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(error, attempt)
            attempt += 1
            time.sleep(delay)
