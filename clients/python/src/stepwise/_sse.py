"""Server-sent events: a small incremental parser and the `Event` type.

The parser follows the WHATWG rules that matter for Stepwise: lines end with CRLF, LF or
CR; a line starting with ``:`` is a comment (keep-alive); ``field: value`` loses one space
after the colon; several ``data:`` lines join with newlines; an empty line dispatches the
event. ``id:`` and ``event:`` apply to the event being built; ``retry:`` sets the
reconnection delay.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

__all__ = ["Event", "SSEDecoder", "RawEvent"]


@dataclass(frozen=True)
class Event:
    """One event of a session's stream (``GET /v1/sessions/{id}/events``).

    ``id`` is the event's integer id (strictly increasing within the session), or ``None``
    for live-only events (``message.delta``) that are never stored or replayed. ``type`` is
    the event type (``message.created``, ``step.completed``, ...) and ``data`` the parsed
    JSON payload (``session_id``, ``message_id``, ``execution_id``, ``event_type``,
    ``content``, ``metadata``, ``timestamp``).
    """

    id: int | None
    type: str
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def session_id(self) -> str | None:
        """The session the event belongs to."""
        return self.data.get("session_id")

    @property
    def execution_id(self) -> str | None:
        """The execution the event is about, if any."""
        return self.data.get("execution_id")

    @property
    def message_id(self) -> str | None:
        """The message the event is about, if any."""
        return self.data.get("message_id")

    @property
    def content(self) -> str | None:
        """The event's text (for ``message.delta``: the streamed tokens)."""
        return self.data.get("content")

    @property
    def metadata(self) -> dict[str, Any]:
        """The event's metadata object (``{}`` when absent)."""
        value = self.data.get("metadata")
        return value if isinstance(value, dict) else {}

    @property
    def timestamp(self) -> str | None:
        """When the event happened (RFC 3339)."""
        return self.data.get("timestamp")


@dataclass(frozen=True)
class RawEvent:
    """An event as the wire carries it, before its data is read as JSON."""

    id: str | None
    type: str
    data: str


class SSEDecoder:
    """Turns chunks of bytes into `RawEvent`s, incrementally.

    Feed it with `feed(bytes)`; it returns the events completed by that chunk. `retry`
    holds the last ``retry:`` value in milliseconds, if any.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # text after the last line end
        self._skip_lf = False  # the previous chunk ended with CR: a leading LF belongs to it
        self._first = True  # a leading BOM is ignored
        self._data: list[str] = []
        self._type = ""
        self._id: str | None = None
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[RawEvent]:
        """Reads a chunk; returns the events it completed."""
        return self._feed_text(self._text.decode(chunk))

    def _feed_text(self, text: str) -> list[RawEvent]:
        if self._first and text:
            self._first = False
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf and text:
            self._skip_lf = False
            if text.startswith("\n"):
                text = text[1:]
        events: list[RawEvent] = []
        buffer = self._pending + text
        start = 0
        length = len(buffer)
        i = 0
        while i < length:
            ch = buffer[i]
            if ch == "\n" or ch == "\r":
                line = buffer[start:i]
                if ch == "\r":
                    if i + 1 < length:
                        if buffer[i + 1] == "\n":
                            i += 1
                    else:
                        self._skip_lf = True
                event = self._line(line)
                if event is not None:
                    events.append(event)
                start = i + 1
            i += 1
        self._pending = buffer[start:]
        return events

    def _line(self, line: str) -> RawEvent | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._type = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> RawEvent | None:
        data, event_type, event_id = self._data, self._type, self._id
        self._data, self._type, self._id = [], "", None
        if not data:
            return None
        return RawEvent(id=event_id, type=event_type or "message", data="\n".join(data))


def to_event(raw: RawEvent) -> Event:
    """Reads a raw event's id as an integer and its data as JSON."""
    event_id: int | None = None
    if raw.id:
        try:
            event_id = int(raw.id)
        except ValueError:
            event_id = None
    try:
        data = json.loads(raw.data)
    except ValueError:
        data = {"content": raw.data}
    if not isinstance(data, dict):
        data = {"content": data}
    event_type = raw.type
    if event_type == "message" and isinstance(data.get("event_type"), str):
        event_type = data["event_type"]
    return Event(id=event_id, type=event_type, data=data)


def parse_events(chunks: Iterable[bytes]) -> list[Event]:
    """Parses a whole stream at once (handy in tests)."""
    decoder = SSEDecoder()
    out: list[Event] = []
    for chunk in chunks:
        out.extend(to_event(raw) for raw in decoder.feed(chunk))
    return out
