"""Blocking lean connections: `FastHTTP`, a keep-alive pool for the sync LangGraph saver's hot
calls, and `ClaimConnection`, the worker's claim long poll."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from .._base import direct_target
from .._calls import Call, connection_error
from .._errors import StepwiseError
from .._tls import default_ssl_context
from .endpoint import endpoint, open_socket, shown
from .retry import LEAN_RETRY_STATUSES, RetryPolicy
from .wire import (
    MAX_HEAD_BYTES,
    REVIVE,
    SEND,
    Answer,
    Failed,
    after_first_try,
    extra_head,
    fixed_head,
    read_answer,
    request_bytes,
    request_target,
)

__all__ = ["ClaimConnection", "Connection", "FastHTTP"]


class Connection:
    """One keep-alive connection: a blocking socket and what was read past the last answer."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        unix: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.sock = open_socket(host, port, unix, timeout, tls)
        self.timeout = timeout
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def exchange(self, message: bytes) -> Answer:
        """Sends one request and reads its answer."""
        self.sock.sendall(message)
        reading = read_answer()
        need = next(reading)
        try:
            while True:
                need = reading.send(self._read(*need))
        except StopIteration as done:
            return done.value

    def _read(self, kind: str, arg: Any) -> bytes:
        buffer = self.buffer
        if kind == "until":
            start = 0
            while (end := buffer.find(arg, start)) < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ValueError(f"no end of line within {MAX_HEAD_BYTES} bytes of an answer")
                start = max(len(buffer) - len(arg) + 1, 0)
                self._fill()
            end += len(arg)
        elif kind == "exactly":
            while len(buffer) < arg:
                self._fill()
            end = arg
        else:
            while self._fill(eof_ok=True):
                pass
            end = len(buffer)
        data = bytes(buffer[:end])
        del buffer[:end]
        return data

    def _fill(self, eof_ok: bool = False) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            if eof_ok:
                return False
            raise EOFError("the server closed the connection before the answer's end")
        self.buffer += chunk
        return True


# What a lean connection's failure can be (the server is gone, closed the connection, timed
# out, or answered what is not HTTP).
_FAILURES = (OSError, EOFError, ValueError)


class FastHTTP:
    """Keep-alive HTTP/1.1 connections for the sync saver's hot calls (get, put, put_writes:
    all safe to repeat). Through httpx each call costs ~0.5 ms of Python before the server sees
    it, about as much as the server's work, and through ``http.client`` ~0.15 ms; this costs a
    tenth of that (requests and answers as in `wire`). Used only for a plain ``http://``
    server reached directly with the client's default transport (see `for_client`); it sends
    the client's headers and raises the same `StepwiseError`s, and retries with the client's
    `RetryPolicy` (connection errors, 429, 502-504)."""

    def __init__(
        self,
        host: str,
        port: int,
        prefix: str,
        headers: Mapping[str, str],
        timeout: float,
        max_retries: int,
        unix: str | None = None,
        revive: Callable[[], bool] | None = None,
    ) -> None:
        self._revive = revive
        self.host, self.port, self.prefix, self.unix = host, port, prefix, unix
        self._shown = shown(host, port, prefix, unix)
        self.timeout, self.max_retries = timeout, max_retries
        self._policy = RetryPolicy(max_retries, statuses=LEAN_RETRY_STATUSES)
        self._head = fixed_head(host, port, headers)
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def for_client(cls, client: Any) -> "FastHTTP | None":
        """A pool for this `Stepwise` client's server, or ``None`` when the client must be
        used (https, a proxy, a custom transport)."""
        target = direct_target(client, httpx.HTTPTransport)
        if target is None:
            return None
        return cls(*target)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Sends one request (`path` quoted already) and returns the parsed JSON answer.
        `headers` are added to the client's (a worker's lease); `timeout` replaces the pool's
        for this request."""
        head = self._head if not headers else self._head + extra_head(headers)
        message = request_bytes(method, request_target(self.prefix, path, params, True), head, json_body)
        flow, op = after_first_try(
            self._policy,
            self._exchange(message, timeout),
            method,
            path,
            self._shown,
            idempotent=True,
            revive=self._revive is not None,
        )
        try:
            while flow is not None:
                if op is SEND:
                    op = flow.send(self._exchange(message, timeout))
                elif op is REVIVE:
                    op = flow.send(self._revive is not None and self._revive())
                else:
                    time.sleep(op)
                    op = next(flow)
        except StopIteration as done:
            return done.value
        return op

    def _exchange(self, message: bytes, timeout: float | None = None) -> Answer | Failed:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        wanted = self.timeout if timeout is None else timeout
        try:
            if conn is None:
                conn = Connection(self.host, self.port, wanted, self.unix)
            elif conn.timeout != wanted:
                conn.sock.settimeout(wanted)
                conn.timeout = wanted
            answer = conn.exchange(message)
        except _FAILURES as exc:
            if conn is not None:
                conn.close()
            # A kept-alive connection the server closed meanwhile (a restart, an idle
            # timeout) fails at once, and so will the other idle ones: drop them. An answer
            # that did not come in time is no such thing (not tried again at once).
            stale = reused and not isinstance(exc, TimeoutError)
            if stale:
                self.close()
            return Failed(exc, stale)
        if answer[3]:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return answer


class ClaimConnection:
    """One keep-alive connection for the worker's claims (POST `path`, a long poll), whose
    socket another thread can shut down to end a poll at once (`abort`)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], path: str) -> None:
        server = endpoint(base_url)
        self.unix = server.socket
        parts = urlsplit(server.url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.path = path
        self.target = parts.path.rstrip("/") + path
        self.url = server.base_url
        self.head = fixed_head(self.host, self.port, headers)
        self.lock = threading.Lock()
        self.conn: Connection | None = None
        self.aborted = False

    def post(self, payload: Any, timeout: float) -> httpx.Response:
        """Sends the claim and returns the server's answer, as httpx's `Response`."""
        message = request_bytes("POST", self.target, self.head, payload)
        for attempt in (0, 1):
            with self.lock:
                if self.aborted:
                    raise StepwiseError("connection_error", "the worker is stopping")
                conn = self.conn
            reused = conn is not None
            try:
                if conn is None:
                    tls = default_ssl_context() if self.https else None
                    conn = Connection(self.host, self.port, timeout, self.unix, tls)
                    with self.lock:
                        self.conn = conn
                if self.aborted:
                    raise ConnectionAbortedError("the worker is stopping")
                conn.sock.settimeout(timeout)
                status, headers, body, close = conn.exchange(message)
            except _FAILURES as exc:
                if conn is not None:
                    self._drop(conn)
                if self.aborted:
                    raise StepwiseError("connection_error", "the worker is stopping") from exc
                # A kept-alive connection the server closed meanwhile: once more on a new one.
                if reused and attempt == 0 and isinstance(exc, (EOFError, BrokenPipeError, ConnectionResetError)):
                    continue
                raise connection_error(self.url, Call("POST", self.path), _as_httpx_error(exc)) from exc
            if close:
                self._drop(conn)
            return httpx.Response(
                status,
                content=body,
                headers=headers,
                request=httpx.Request("POST", self.url + self.path),
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _drop(self, conn: Connection) -> None:
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
        if conn is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        with self.lock:
            conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()


def _as_httpx_error(exc: BaseException) -> Exception:
    """A failure of a lean connection in httpx's terms (for the error message)."""
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError, socket.gaierror)):
        return httpx.ConnectError(str(exc) or type(exc).__name__)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return httpx.ReadTimeout(str(exc) or "timed out")
    return httpx.ReadError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
