"""When a client may skip httpx for its hot calls, and where such calls go.

httpx costs about half a millisecond of Python per request, as much as the server's work for a
small write. The adapters' hot paths (`StepwiseSession`'s items calls, `StepwiseSaver`'s
get/put) therefore talk HTTP/1.1 over plain keep-alive connections, but only when nothing the
client was configured with would be bypassed: a plain ``http://`` server reached directly (no
proxy in the environment) through the client's default transport.
"""

from __future__ import annotations

import urllib.request
from typing import Any, Callable, NamedTuple
from urllib.parse import urlsplit

__all__ = ["DirectTarget", "direct_target"]


class DirectTarget(NamedTuple):
    """Where a direct connection goes and what it sends, taken from the client."""

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


def direct_target(client: Any, default_transport: type) -> DirectTarget | None:
    """The client's server as a `DirectTarget`, or ``None`` when the client must be used
    (https, a proxy, a transport other than `default_transport`)."""
    server = getattr(client, "_endpoint", None)
    parts = urlsplit(server.url if server is not None else client.base_url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    transport = getattr(getattr(client, "_http", None), "_transport", None)
    if type(transport) is not default_transport:
        return None
    unix = server.socket if server is not None else None
    if unix is not None:
        timeout = client.timeout.read if client.timeout.read is not None else 30.0
        local = getattr(client, "_local", None)
        return DirectTarget(
            parts.hostname,
            80,
            "",
            dict(getattr(client, "_headers", {})),
            float(timeout),
            client.max_retries,
            unix,
            None if local is None else local.revive,
        )
    proxies = urllib.request.getproxies()
    if (proxies.get("http") or proxies.get("all")) and not urllib.request.proxy_bypass(
        parts.hostname
    ):
        return None
    timeout = client.timeout.read if client.timeout.read is not None else 30.0
    return DirectTarget(
        parts.hostname,
        parts.port or 80,
        parts.path.rstrip("/"),
        dict(getattr(client, "_headers", {})),
        float(timeout),
        client.max_retries,
    )
