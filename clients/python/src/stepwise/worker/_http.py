"""The worker's HTTP calls: writes that carry the lease, and a claim long poll that can be cut
short when the worker stops."""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
import urllib.request
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import httpx

from .._calls import UNSET, Call, connection_error, read_answer
from .._endpoint import endpoint, open_socket
from .._errors import StepwiseError
from .._tls import default_ssl_context

__all__ = ["Api", "LEASE_HEADER", "is_transient", "is_lease_lost", "Backoff"]

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


class Backoff:
    """Exponential backoff with jitter between `first` and `cap` seconds."""

    def __init__(self, first: float = 0.5, cap: float = 10.0) -> None:
        self.first = first
        self.cap = cap
        self.failures = 0

    def next(self) -> float:
        delay = min(self.cap, self.first * (2.0**self.failures))
        self.failures += 1
        return delay * (0.75 + random.random() / 4)

    def reset(self) -> None:
        self.failures = 0


class _UnixHTTPConnection(http.client.HTTPConnection):
    """`http.client.HTTPConnection` over a server's Unix socket."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = open_socket("localhost", 0, self.path, self.timeout)


class _ClaimConnection:
    """One keep-alive HTTP/1.1 connection for claims (http.client), whose socket another
    thread can shut down to end a long poll at once."""

    def __init__(self, base_url: str, headers: Mapping[str, str]) -> None:
        server = endpoint(base_url)
        self.unix = server.socket
        parts = urlsplit(server.url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.url = server.base_url
        self.headers = {**headers, "Content-Type": "application/json", "Connection": "keep-alive"}
        self.lock = threading.Lock()
        self.conn: http.client.HTTPConnection | None = None
        self.aborted = False

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.unix is not None:
            return _UnixHTTPConnection(self.unix, timeout)
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=default_ssl_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def post(self, payload: Any, timeout: float) -> httpx.Response:
        data = json.dumps(payload).encode()
        for attempt in (0, 1):
            with self.lock:
                if self.aborted:
                    raise StepwiseError("connection_error", "the worker is stopping")
                reused = self.conn is not None
                if self.conn is None:
                    self.conn = self._connect(timeout)
                conn = self.conn
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            try:
                conn.request("POST", self.prefix + CLAIM_PATH, body=data, headers=self.headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop(conn)
                if self.aborted:
                    raise StepwiseError("connection_error", "the worker is stopping") from exc
                # A kept-alive connection the server closed meanwhile: once more on a new one.
                if reused and attempt == 0 and isinstance(
                    exc, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
                ):
                    continue
                raise connection_error(
                    self.url, Call("POST", CLAIM_PATH), _as_httpx_error(exc)
                ) from exc
            if response.getheader("connection", "").lower() == "close":
                self._drop(conn)
            return httpx.Response(
                response.status,
                content=body,
                headers=dict(response.getheaders()),
                request=httpx.Request("POST", self.url + CLAIM_PATH),
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            if self.conn is conn:
                self.conn = None
        try:
            conn.close()
        except OSError:  # pragma: no cover
            pass

    def abort(self) -> None:
        """Ends a claim in flight (its socket is shut down) and refuses later ones."""
        with self.lock:
            self.aborted = True
            conn = self.conn
        sock = getattr(conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self.lock:
            conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


def _as_httpx_error(exc: BaseException) -> Exception:
    """A transport failure of http.client in httpx's terms (for the error message)."""
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError, socket.gaierror)):
        return httpx.ConnectError(str(exc) or type(exc).__name__)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return httpx.ReadTimeout(str(exc) or "timed out")
    return httpx.ReadError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def _proxied(base_url: str) -> bool:
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    return bool(proxy) and not urllib.request.proxy_bypass(parts.hostname or "")


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
        self._claims: _ClaimConnection | None = None
        if transport is None and not _proxied(self.base_url):
            self._claims = _ClaimConnection(self.base_url, self.headers)
        self._claim_aborted = threading.Event()

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
        call = Call(method, path, json=body, expect="raw")
        headers = {LEASE_HEADER: lease} if lease is not None else None
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
    backoff = Backoff(0.2, 5.0)
    attempt = 0
    while True:
        try:
            return send()
        except StepwiseError as error:
            if not is_transient(error) or should_stop():
                raise
            delay = backoff.next()
            if time.monotonic() + delay > deadline:
                raise
            if on_retry is not None:
                on_retry(error, attempt)
            attempt += 1
            time.sleep(delay)
