"""A lean pool of keep-alive HTTP/1.1 connections for a sync client's hot calls (the LangGraph
saver's get, put and put_writes)."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import httpx

from ._client import Stepwise
from ._direct import direct_target
from ._errors import StepwiseError, parse_answer
from ._retry import RetryPolicy, retry_after_seconds

class _FastHTTP:
    """Keep-alive HTTP/1.1 connections (``http.client``) for the saver's hot calls (get, put,
    put_writes: all safe to repeat). Through httpx each call costs ~0.5 ms of Python before the
    server sees it, about as much as the server's work; this costs a tenth of that. Used only
    for a plain ``http://`` server reached directly with the client's default transport (see
    `for_client`); it sends the client's headers and raises the same `StepwiseError`s, and
    retries like the client does (connection errors, 429, 502-504, with backoff)."""

    _RETRY = frozenset({429, 502, 503, 504})

    def __init__(self, host: str, port: int, prefix: str, headers: Mapping[str, str], timeout: float, max_retries: int) -> None:
        self.host, self.port, self.prefix = host, port, prefix
        self.timeout, self.max_retries = timeout, max_retries
        self._policy = RetryPolicy(max_retries)
        self.headers = {k: v for k, v in headers.items() if k.lower() not in {"host", "content-length", "connection"}}
        self.headers["Content-Type"] = "application/json"
        self._idle: list[http.client.HTTPConnection] = []
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
        body = None if json_body is None else json.dumps(json_body, separators=(",", ":")).encode("utf-8")
        attempt = 0
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            fresh = conn is None
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.request(method, target, body=body, headers=self.headers)
                response = conn.getresponse()
                content = response.read()
                status = response.status
                retry_after = response.getheader("Retry-After")
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                # A kept-alive connection the server closed meanwhile (a restart, an idle
                # timeout) fails at once, and so will the other idle ones: drop them and try
                # again on a new connection at once; a new one failing backs off like the client.
                if not fresh:
                    self.close()
                    continue
                if attempt < max(self.max_retries, 1):
                    attempt += 1
                    time.sleep(self._backoff(attempt))
                    continue
                raise StepwiseError(
                    "connection_error",
                    f"no answer from http://{self.host}:{self.port}{self.prefix} to {method} {path}: {exc} ({type(exc).__name__})",
                    method=method,
                    url=f"http://{self.host}:{self.port}{target}",
                ) from exc
            if response.will_close:
                conn.close()
            else:
                with self._lock:
                    self._idle.append(conn)
            if status in self._RETRY and attempt < self.max_retries:
                attempt += 1
                wait = retry_after_seconds({"retry-after": retry_after or ""})
                time.sleep(self._backoff(attempt) if wait is None else min(wait, self._policy.max_retry_after))
                continue
            break
        return parse_answer(status, content, method=method, path=path, url=f"http://{self.host}:{self.port}{target}")

    def _backoff(self, attempt: int) -> float:
        return self._policy.backoff_delay(attempt - 1)
