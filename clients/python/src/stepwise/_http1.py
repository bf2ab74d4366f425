"""HTTP/1.1 requests and answers for the lean keep-alive connections, without I/O.

The hot paths (`StepwiseSaver`'s calls over `_sync_http`, `StepwiseSession`'s items calls over
`_items`) write a request built here and read the answer with `read_answer`, a generator that
says what to read next and is sent those bytes; each connection drives it with its own reads
(blocking socket or asyncio stream). ``http.client`` spends about 150 µs of Python per request
on header objects; this spends a tenth of that.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any, Literal

__all__ = ["Answer", "Need", "fixed_head", "read_answer", "request_bytes"]

# The most a connection reads before an answer's blank line.
MAX_HEAD_BYTES = 64 * 1024

# What `read_answer` asks for next: the bytes up to and including a delimiter, an exact
# count, or everything until the server closes the connection.
Need = tuple[Literal["until"], bytes] | tuple[Literal["exactly"], int] | tuple[Literal["eof"], None]
# status, headers (lower-case names), body, whether the connection must be closed after it
Answer = tuple[int, dict[str, str], bytes, bool]

_SKIPPED = {"host", "content-length", "content-type", "connection", "transfer-encoding"}


def fixed_head(host: str, port: int, headers: Mapping[str, str]) -> bytes:
    """The header lines every request of a connection carries (Host and the client's headers:
    API key, user agent), each ending in CRLF."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    lines = [f"Host: {name}" if port == 80 else f"Host: {name}:{port}"]
    for key, value in headers.items():
        if key.lower() not in _SKIPPED:
            lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def request_bytes(method: str, target: str, head: bytes, json_body: Any = None) -> bytes:
    """One request: `target` is the quoted path and query, `head` from `fixed_head`; a JSON
    body when `json_body` is not ``None`` (NaN and infinities are refused, as httpx does)."""
    if any(c in target for c in " \r\n\t\x00"):
        raise ValueError(f"a request target cannot hold spaces or control characters: {target!r}")
    start = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + head
    if json_body is None:
        if method in ("POST", "PUT", "PATCH"):
            return start + b"Content-Length: 0\r\n\r\n"
        return start + b"\r\n"
    body = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return start + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def read_answer() -> Generator[Need, bytes, Answer]:
    """Reads one answer: yields what it needs next, is sent those bytes, returns the `Answer`.
    Raises `ValueError` for what is not an HTTP/1.x answer."""
    raw = yield ("until", b"\r\n\r\n")
    lines = raw[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        key, colon, value = line.partition(":")
        if colon:
            headers[key.strip().lower()] = value.strip()
    close = headers.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0"
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks = []
        while True:
            size_line = yield ("until", b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (yield ("until", b"\r\n")) != b"\r\n":  # trailers, then the blank line
                    pass
                break
            chunk = yield ("exactly", size + 2)
            chunks.append(chunk[:-2])
        return status, headers, b"".join(chunks), close
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length < 0:
            raise ValueError(f"a negative Content-Length: {length}")
        body = (yield ("exactly", length)) if length else b""
        return status, headers, body, close
    if status in (204, 304) or 100 <= status < 200:
        return status, headers, b"", close
    body = yield ("eof", None)
    return status, headers, body, True
