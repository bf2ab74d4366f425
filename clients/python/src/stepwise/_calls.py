"""The requests of the API before they are sent, and how answers are read.

A `Call` is one request (method, path, body, query, whether a retry is safe); a flow is a
generator of `Call`s and `Sleep`s. Both clients and the worker send them and read the answers
with `read_answer`; `EventStreamState` keeps an event stream's place across reconnects.
"""

from __future__ import annotations

import json as _json
import random
import uuid
from dataclasses import dataclass, replace
from typing import Any, Generator, Iterable, Mapping, Union
from urllib.parse import quote

import httpx

from ._errors import StepwiseError, error_from_answer
from ._transport.retry import retry_after_seconds
from ._sse import Event, SSEDecoder, to_event


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Call:
    """One HTTP request of the API, before it is sent."""

    method: str
    path: str
    json: Any = UNSET
    params: Mapping[str, str] | None = None
    idempotent: bool = False
    # "json": the parsed body; "none": nothing (204); "raw": parsed JSON or None.
    expect: str = "json"
    # Headers of this request alone (a recorder's ``Stepwise-Lease``).
    headers: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Sleep:
    """A pause inside a flow (the async client awaits it)."""

    seconds: float


Op = Union[Call, Sleep]
Flow = Generator[Op, Any, Any]


def seg(value: Any, name: str) -> str:
    """One path segment: an id as a non-empty string, percent-encoded."""
    if isinstance(value, uuid.UUID):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return quote(value, safe="")


def body(**fields: Any) -> dict[str, Any]:
    """A JSON body without the fields left at `None`."""
    return {key: value for key, value in fields.items() if value is not None}


def csv(value: str | Iterable[str] | None) -> str | None:
    """A query value that takes several items: a list is joined with commas."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(value)


def query(**params: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key] = str(value)
    return out


def looks_like_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return False
    return True


def read_answer(call: Call, response: httpx.Response) -> Any:
    """The parsed body of a 2xx answer; a `StepwiseError` for any other."""
    status = response.status_code
    if call.expect == "none" and 200 <= status < 300:
        return None  # the body, if any, is not needed
    content = response.content
    parsed: Any = None
    parse_failed = False
    if content:
        try:
            parsed = _json.loads(content)
        except ValueError:
            parse_failed = True
    if not 200 <= status < 300:
        raise error_from_answer(
            status,
            parsed,
            response.text if parse_failed else "",
            method=call.method,
            url=str(response.request.url) if _has_request(response) else call.path,
            reason=response.reason_phrase,
        )
    if parse_failed:
        raise StepwiseError(
            "invalid_response",
            f"the answer to {call.method} {call.path} is not JSON: {response.text[:200]!r}",
            status=status,
            method=call.method,
            url=call.path,
        )
    if call.expect == "json" and parsed is None:
        raise StepwiseError(
            "invalid_response",
            f"the answer to {call.method} {call.path} has no body",
            status=status,
            method=call.method,
            url=call.path,
        )
    return parsed


def _has_request(response: httpx.Response) -> bool:
    try:
        response.request
    except RuntimeError:
        return False
    return True


def connection_error(base_url: str, call: Call, exc: Exception, tries: int = 1) -> StepwiseError:
    """The error for a request that got no answer, saying what to check."""
    detail = str(exc) or type(exc).__name__
    where = f"{call.method} {call.path}"
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
        message = (
            f"cannot connect to {base_url} ({where}): {detail}; is the server running "
            "(`stepwise serve`) and the URL (STEPWISE_URL) right?"
        )
    elif isinstance(exc, httpx.TimeoutException):
        message = f"no answer from {base_url} to {where} in time ({type(exc).__name__}: {detail})"
    else:
        message = f"the connection to {base_url} failed during {where}: {detail} ({type(exc).__name__})"
    if tries > 1:
        message += f" [{tries} tries]"
    return StepwiseError(
        "connection_error", message, method=call.method, url=base_url.rstrip("/") + call.path
    )


def next_page(call: Call, answer: Any) -> tuple[list[Any], Call | None]:
    """The items of one page of a list, and the call for the next page (or `None`)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("items"), list):
        raise StepwiseError(
            "invalid_response", f"the answer to GET {call.path} is not a list page"
        )
    cursor = answer.get("next_cursor")
    if not cursor:
        return answer["items"], None
    params = dict(call.params or {})
    params["cursor"] = cursor
    return answer["items"], replace(call, params=params)


# --- events ---------------------------------------------------------------------------


class EventStreamState:
    """Where an event stream stands: the last event id seen, and when to reconnect.

    Both clients drive the connection; this decides what to send and what to keep.
    Every event with an id at or below the last one seen is dropped, so a replay after a
    reconnect never yields an event twice.
    """

    # Between reconnects after failures: exponential up to this, with jitter.
    max_delay = 5.0

    def __init__(self, session_id: str, after: int | str | None) -> None:
        self.path = f"/v1/sessions/{seg(session_id, 'session_id')}/events"
        if after is not None:
            try:
                after = int(after)
            except (TypeError, ValueError):
                raise ValueError(f"after must be an event id (an integer), got {after!r}") from None
            if after < 0:
                raise ValueError(f"after must be >= 0, got {after!r}")
        self.last_id: int | None = after
        self.failures = 0
        self.decoder = SSEDecoder()
        self.server_retry_ms: int | None = None

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_id is not None:
            headers["Last-Event-ID"] = str(self.last_id)
        return headers

    def connected(self) -> None:
        """A stream opened: parse from a clean state."""
        self.decoder = SSEDecoder()

    def feed(self, chunk: bytes) -> list[Event]:
        out: list[Event] = []
        for raw in self.decoder.feed(chunk):
            event = to_event(raw)
            if event.id is not None:
                if self.last_id is not None and event.id <= self.last_id:
                    continue
                self.last_id = event.id
            # A stream that delivers something is a healthy one: back off from zero next time.
            self.failures = 0
            out.append(event)
        if self.decoder.retry is not None:
            self.server_retry_ms = self.decoder.retry
        return out

    def answer_delay(self, call: Call, response: httpx.Response) -> float:
        """After a non-200 answer to the stream request: the wait, or raise."""
        status = response.status_code
        if status == 429 or status >= 500:
            after = retry_after_seconds(response.headers)
            self.failures += 1
            return after if after is not None else self.delay()
        raise_answer(call, response)
        raise AssertionError("unreachable")

    def delay(self) -> float:
        """The wait before the next reconnect."""
        if self.server_retry_ms is not None and self.failures <= 1:
            return self.server_retry_ms / 1000.0
        if self.failures <= 1:
            return 0.05
        base = min(self.max_delay, 0.1 * (2.0 ** (self.failures - 1)))
        return base * (0.5 + random.random() / 2)

    def ended(self) -> float:
        """The stream ended or broke: count it, and say how long to wait."""
        self.failures += 1
        return self.delay()


def raise_answer(call: Call, response: httpx.Response) -> None:
    read_answer(replace(call, expect="raw"), response)
    raise StepwiseError(
        "invalid_response",
        f"unexpected answer {response.status_code} to {call.method} {call.path}",
        status=response.status_code,
    )
