"""A lean pool of keep-alive HTTP/1.1 connections for a sync client's hot calls (the LangGraph
saver's get, put and put_writes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Callable
from urllib.parse import urlencode

import httpx

from ._client import Stepwise
from ._direct import direct_target
from ._endpoint import UNIX_PREFIX, open_socket
from ._errors import StepwiseError, parse_answer
from ._http1 import MAX_HEAD_BYTES, Answer, fixed_head, read_answer, request_bytes
from ._retry import RetryPolicy, retry_after_seconds


class _Connection:
    """One keep-alive connection: a blocking socket and what was read past the last answer."""

    def __init__(self, host: str, port: int, timeout: float, unix: str | None = None) -> None:
        self.sock = open_socket(host, port, unix, timeout)
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


class _FastHTTP:
    """Keep-alive HTTP/1.1 connections for the saver's hot calls (get, put, put_writes: all
    safe to repeat). Through httpx each call costs ~0.5 ms of Python before the server sees it,
    about as much as the server's work, and through ``http.client`` ~0.15 ms; this costs a
    tenth of that (requests and answers as in `_http1`). Used only
    for a plain ``http://`` server reached directly with the client's default transport (see
    `for_client`); it sends the client's headers and raises the same `StepwiseError`s, and
    retries like the client does (connection errors, 429, 502-504, with backoff)."""

    _RETRY = frozenset({429, 502, 503, 504})

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
        self._shown = UNIX_PREFIX + unix if unix is not None else f"http://{host}:{port}{prefix}"
        self.timeout, self.max_retries = timeout, max_retries
        self._policy = RetryPolicy(max_retries)
        self._head = fixed_head(host, port, headers)
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def for_client(cls, client: Stepwise) -> "_FastHTTP | None":
        target = direct_target(client, httpx.HTTPTransport)
        if target is None:
            return None
        return cls(*target)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(self, method: str, path: str, *, json_body: Any = None, params: Mapping[str, str] | None = None) -> Any:
        target = self.prefix + path
        if params:
            target += "?" + urlencode(params)
        message = request_bytes(method, target, self._head, json_body)
        attempt = 0
        revived = False
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            fresh = conn is None
            try:
                if conn is None:
                    conn = _Connection(self.host, self.port, self.timeout, self.unix)
                status, headers, content, close = conn.exchange(message)
            except (OSError, EOFError, ValueError) as exc:
                if conn is not None:
                    conn.close()
                # A kept-alive connection the server closed meanwhile (a restart, an idle
                # timeout) fails at once, and so will the other idle ones: drop them and try
                # again on a new connection at once; a new one failing backs off like the client.
                if not fresh:
                    self.close()
                    continue
                # Nothing was sent: an embedded server whose owner went is started again.
                if (
                    not revived
                    and self._revive is not None
                    and isinstance(exc, (ConnectionRefusedError, FileNotFoundError))
                    and self._revive()
                ):
                    revived = True
                    continue
                if attempt < max(self.max_retries, 1):
                    attempt += 1
                    time.sleep(self._backoff(attempt))
                    continue
                raise StepwiseError(
                    "connection_error",
                    f"no answer from {self._shown} to {method} {path}: {exc} ({type(exc).__name__})",
                    method=method,
                    url=self._shown + path,
                ) from exc
            if close:
                conn.close()
            else:
                with self._lock:
                    self._idle.append(conn)
            if status in self._RETRY and attempt < self.max_retries:
                attempt += 1
                wait = retry_after_seconds(headers)
                time.sleep(self._backoff(attempt) if wait is None else min(wait, self._policy.max_retry_after))
                continue
            break
        return parse_answer(status, content, method=method, path=path, url=self._shown + path)

    def _backoff(self, attempt: int) -> float:
        return self._policy.backoff_delay(attempt - 1)
