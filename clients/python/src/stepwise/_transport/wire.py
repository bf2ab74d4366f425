"""HTTP/1.1 requests and answers for the lean keep-alive connections, without I/O.

Every lean connection (`sync` and `aio`) writes a request built here (`request_bytes`) and reads
the answer with `read_answer`, a generator that says what to read next and is sent those bytes;
each connection drives it with its own reads (blocking socket or asyncio stream).
``http.client`` spends about 150 µs of Python per request on header objects; this spends a
tenth of that. `request_flow` is one request with its retries, as a generator of what to do
next (send, revive an embedded server, sleep) that both kinds of connection drive.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any, Literal, NamedTuple, Union
from urllib.parse import quote, urlencode

from .._errors import StepwiseError, parse_answer
from .retry import RetryPolicy

__all__ = [
    "Answer",
    "Failed",
    "MAX_HEAD_BYTES",
    "Need",
    "REVIVE",
    "SEND",
    "fixed_head",
    "read_answer",
    "after_first_try",
    "extra_head",
    "request_bytes",
    "request_flow",
    "request_target",
]

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


def extra_head(headers: Mapping[str, str]) -> bytes:
    """Header lines for one request (a worker's lease), each ending in CRLF; `ValueError`
    for a name or value that would break the request (a line break, a character outside
    Latin-1)."""
    lines = []
    for key, value in headers.items():
        line = f"{key}: {value}"
        if any(c in line for c in "\r\n\x00"):
            raise ValueError(f"a header cannot hold a line break: {key!r}")
        lines.append(line + "\r\n")
    return "".join(lines).encode("latin-1")


def request_target(prefix: str, path: str, params: Mapping[str, Any] | None, quoted: bool) -> str:
    """The target of a request line: the server's path prefix and `path` (percent-encoded
    here unless `quoted` says it is already), and the query of `params`."""
    target = prefix + path if quoted else quote(prefix + path, safe="/:@!$&'()*+,;=-._~")
    if params:
        target += "?" + urlencode({k: str(v) for k, v in params.items()})
    return target


def request_bytes(method: str, target: str, head: bytes, json_body: Any = None) -> bytes:
    """One request: `target` is the quoted path and query, `head` from `fixed_head`; a JSON
    body when `json_body` is not ``None`` (NaN and infinities are refused, as httpx does), sent
    as it is when it is ``bytes`` (JSON its caller encoded)."""
    if any(c in target for c in " \r\n\t\x00"):
        raise ValueError(f"a request target cannot hold spaces or control characters: {target!r}")
    start = f"{method} {target} HTTP/1.1\r\n".encode("latin-1") + head
    if json_body is None:
        if method in ("POST", "PUT", "PATCH"):
            return start + b"Content-Length: 0\r\n\r\n"
        return start + b"\r\n"
    if isinstance(json_body, bytes):
        body = json_body
    else:
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


# --------------------------------------------------------------------------- one request


class Failed(NamedTuple):
    """An exchange that got no answer: the error, and whether the connection had served a
    request before (a kept-alive connection the server may have closed meanwhile)."""

    error: BaseException
    reused: bool


# What `request_flow` asks its driver to do: exchange the request on a connection (send back
# the `Answer`, or a `Failed`), start an embedded server again (send back whether one
# answers), or, for a float, sleep that many seconds.
SEND = "send"
REVIVE = "revive"
Op = Union[str, float]

# Errors that mean an embedded server is gone (nothing was sent).
_REFUSED = (ConnectionRefusedError, FileNotFoundError)


def request_flow(
    policy: RetryPolicy,
    method: str,
    path: str,
    server: str,
    *,
    idempotent: bool,
    revive: bool = False,
) -> Generator[Op, Any, Any]:
    """One request on lean connections, with the retries of `policy`; returns the parsed JSON
    answer (``None`` when empty) or raises the API's `StepwiseError` (``connection_error``
    when no answer came). `server` names the server in messages; `revive`: the driver can
    start an embedded server again.

    A kept-alive connection that fails is tried again at once on a new one (idempotent
    calls); a refused connection first revives the embedded server, once."""
    attempt = 0
    revived = False
    while True:
        result = yield SEND
        if type(result) is Failed:
            error = result.error
            if result.reused and idempotent:
                continue
            if not revived and revive and isinstance(error, _REFUSED):
                if (yield REVIVE):
                    revived = True
                    continue
            delay = policy.after_no_answer(idempotent=idempotent, attempt=attempt)
            if delay is None:
                name = type(error).__name__
                raise StepwiseError(
                    "connection_error",
                    f"no answer from {server} to {method} {path}: {error or name} ({name})",
                    method=method,
                    url=server + path,
                ) from error
        else:
            status, headers, content = result[0], result[1], result[2]
            delay = policy.after_answer(status, headers, idempotent=True, attempt=attempt) if idempotent else None
            if delay is None:
                return parse_answer(status, content, method=method, path=path, url=server + path)
        yield delay
        attempt += 1


def after_first_try(
    policy: RetryPolicy,
    answer: Answer | Failed,
    method: str,
    path: str,
    server: str,
    *,
    idempotent: bool,
    revive: bool = False,
) -> tuple[Generator[Op, Any, Any] | None, Any]:
    """What follows a request's first exchange: ``(None, the parsed answer)`` when it settles
    the request (the common case, without a generator), else ``(the request's flow, what it
    asks for next)``, to drive on; raises as `request_flow` does."""
    if type(answer) is not Failed and answer[0] not in policy.statuses:
        return None, parse_answer(answer[0], answer[2], method=method, path=path, url=server + path)
    flow = request_flow(policy, method, path, server, idempotent=idempotent, revive=revive)
    next(flow)
    try:
        return flow, flow.send(answer)
    except StopIteration as done:
        return None, done.value
