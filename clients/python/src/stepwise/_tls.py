"""One TLS context for the clients of a process.

httpx builds a new `ssl.SSLContext` for each client it makes, loading the CA bundle each time
(about 50 ms here), so an app that opens a client per conversation or per request (a
`StepwiseSession` per chat, a saver per request) would pay that every time. The clients pass
this context instead: made as httpx makes its default one (certifi's bundle, or
``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set), once per such setting. A context is safe to
share between clients and threads.
"""

from __future__ import annotations

import os
import ssl
import threading

import httpx

__all__ = ["default_ssl_context"]

_lock = threading.Lock()
_contexts: dict[tuple[str | None, str | None], ssl.SSLContext] = {}


def default_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context for the current ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``,
    made once."""
    key = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = _contexts[key] = httpx.create_ssl_context()
        return context
