"""Where a client's requests go: an ``http(s)://`` URL, or a server's Unix socket.

``unix:PATH`` names the socket of ``stepwise serve --listen unix:PATH`` (or of
`Stepwise.local`). Requests over it are plain HTTP/1.1 with ``Host: localhost``; every part of
the client (httpx, the lean connections of the adapters' hot paths, the worker's claims, the
lease heartbeats) connects to the socket instead of a TCP port.
"""

from __future__ import annotations

import socket
import ssl
import urllib.request
from typing import Callable, NamedTuple
from urllib.parse import urlsplit

import httpx

__all__ = ["DirectTarget", "Endpoint", "UNIX_PREFIX", "endpoint", "open_socket", "proxied", "shown"]

UNIX_PREFIX = "unix:"
# The URL httpx is given for a Unix socket: the host is only the Host header.
_SOCKET_URL = "http://localhost"


class Endpoint(NamedTuple):
    """A server as a client reaches it."""

    base_url: str
    """As given, normalised (``http://host:port/prefix`` or ``unix:PATH``): shown in messages."""
    url: str
    """The URL requests are made against (``http://localhost`` for a socket)."""
    socket: str | None
    """The Unix socket's path, or ``None`` over TCP."""

    def transport(self) -> httpx.HTTPTransport | None:
        """httpx's transport for a socket (``None``: httpx's default)."""
        return None if self.socket is None else httpx.HTTPTransport(uds=self.socket)

    def async_transport(self) -> httpx.AsyncHTTPTransport | None:
        return None if self.socket is None else httpx.AsyncHTTPTransport(uds=self.socket)


def endpoint(base_url: str) -> Endpoint:
    """Parses a base URL: ``http://...``, ``https://...`` or ``unix:PATH``; `ValueError` otherwise."""
    if base_url.startswith(UNIX_PREFIX):
        path = base_url[len(UNIX_PREFIX):]
        if not path:
            raise ValueError("a unix: base_url needs the socket's path, e.g. unix:/tmp/stepwise.sock")
        return Endpoint(UNIX_PREFIX + path, _SOCKET_URL, path)
    if "://" not in base_url:
        raise ValueError(
            f"base_url must start with http://, https:// or unix: (a server's socket), got {base_url!r}"
        )
    url = base_url.rstrip("/")
    return Endpoint(url, url, None)


def shown(host: str, port: int, prefix: str, unix: str | None) -> str:
    """A lean connection's server as messages name it: ``unix:PATH`` or ``http://host:port/prefix``."""
    return UNIX_PREFIX + unix if unix is not None else f"http://{host}:{port}{prefix}"


def proxied(url: str) -> bool:
    """Whether the environment sends requests to `url` through a proxy."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    return bool(proxy) and not urllib.request.proxy_bypass(parts.hostname or "")


def open_socket(
    host: str, port: int, unix: str | None, timeout: float, tls: ssl.SSLContext | None = None
) -> socket.socket:
    """A connected blocking socket to the server: its Unix socket when `unix` is given,
    otherwise TCP (with Nagle off), wrapped in TLS when `tls` is given."""
    if unix is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(unix)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
    return sock


class DirectTarget(NamedTuple):
    """Where a lean connection goes and what it sends, taken from a client (see
    `stepwise._base.direct_target`): only a plain ``http://`` server reached directly (no proxy
    in the environment) through the client's default transport, so that nothing the client
    was configured with is bypassed."""

    host: str
    port: int
    prefix: str
    headers: dict[str, str]
    timeout: float
    max_retries: int
    socket: str | None = None
    """The server's Unix socket (``unix:PATH`` clients), or ``None`` over TCP."""
    revive: Callable[[], bool] | None = None
    """For an embedded server (`Stepwise.local`): starts one again when a connection is
    refused (its owner went); ``True`` when one answers."""
