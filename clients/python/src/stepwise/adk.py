"""Google ADK sessions kept in Stepwise: `StepwiseSessionService`, a `BaseSessionService`.

    from google.adk.runners import Runner
    from stepwise.adk import StepwiseSessionService

    runner = Runner(agent=agent, app_name="support", session_service=StepwiseSessionService())

How ADK's model maps onto Stepwise (the full story is in ``docs/adk.md``):

- An ADK session is a Stepwise session of the caller's tenant. ``related_type`` is
  ``adk:<app_name>`` and ``related_id`` is the ``user_id`` (so Stepwise's own session filters
  list one app's or one user's sessions); ``metadata.adk`` holds the exact
  ``app_name``, ``user_id``, ``session_id`` and creation time; the name is
  ``adk-<32 hex digits of SHA-256 of (app, user, session id)>`` (``-2``, ``-3``, ... for a
  session created again after a delete), which makes two concurrent creates of one id
  a single session.
- Events are the session's conversation items (``/v1/sessions/{id}/items``), one
  append-only step per event: its first item's ``adk_event`` is ``event.model_dump(
  mode="json", exclude_none=True)`` exactly as ADK's own database service stores it,
  timestamps included. The item's other keys make the event readable in Stepwise: user text
  becomes a user message, agent text an assistant message, function calls the step's
  ``tool_calls`` and function responses its ``observations`` (an event with several of them
  adds one item, marked ``mirror``, for each after the first; reads skip those).
- A write names the version (item count) the session was read at: a write from a stale
  session object is refused by the server (409) and raised as ADK's ``StaleSessionError``.
- ``num_recent_events`` is the server's ``?limit=N``; ``after_timestamp`` reads the tail in
  growing pages (16, 32, 64, ... events) until it reaches an older event, never more than
  twice what it returns (events are appended in time order, as in ADK's in-memory service).
- Session state: each delta lives in its event (stored with it); the session-scoped state
  is also saved as a snapshot (``POST /v1/executions/{id}/snapshots``) once it changed and
  the latest snapshot is `SNAPSHOT_EVERY` (16) events old, so reads fetch one document and
  fold the deltas of fewer than 16 events instead of every event. ``app:`` and ``user:`` state are
  documents of their own (Stepwise sessions ``adk-app-<hash>`` and ``adk-user-<hash>``,
  ``related_type`` ``adk-state``), written read-modify-write under the same version check,
  so concurrent writers never lose an update. ``temp:`` keys are never stored.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Optional

try:
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.platform import time as platform_time
    from google.adk.platform import uuid as platform_uuid
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
    from pydantic import BaseModel, ConfigDict, ValidationError
    from pydantic_core import to_json
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stepwise.adk needs Google ADK: pip install 'stepwise-client[adk]' (google-adk==2.13.0)"
    ) from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError, error_from_answer
from ._transport.aio import ItemsConnection, fast_path_for, for_running_loop
from ._transport.retry import LEAN_RETRY_STATUSES

__all__ = ["StepwiseSessionService", "session_name"]

logger = logging.getLogger(__name__)

# The message ADK's own services raise a stale write with (callers match on it).
STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
# metadata key of an ADK session's Stepwise session, and of a state document's.
METADATA_KEY = "adk"
STATE_METADATA_KEY = "adk_state"
# related_type of the app: and user: state documents.
STATE_RELATED_TYPE = "adk-state"
# metadata of the execution whose snapshots hold session-scoped state.
STATE_EXECUTION_MARKER = {"adk": "session_state"}
_STATUSES = "active,completed,error,abandoned,archived,closed,deleted"
_MAX_REF_CHARS = 256
_MAX_TITLE_CHARS = 500
_MAX_CONFLICTS = 20
_FIRST_PAGE = 16
_MAX_MIRROR_CHARS = 64 * 1024
# A session's state snapshot trails its latest state change by fewer events than this (a
# read folds at most that many events' deltas onto it).
SNAPSHOT_EVERY = 16
# Session objects whose event ids a service keeps between appends.
_HELD_SESSIONS = 256


def _digest(*parts: str) -> str:
    raw = json.dumps(list(parts), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


def session_name(app_name: str, user_id: str, session_id: str, generation: int = 0) -> str:
    """The Stepwise session name of an ADK session (generation 0: its first creation;
    ``n`` > 0: its ``n``-th creation again after a delete)."""
    base = f"adk-{_digest(app_name, user_id, session_id)}"
    return base if generation == 0 else f"{base}-{generation + 1}"


def _ref(text: str) -> str:
    """A `related_type`/`related_id` for `text`: itself when the server takes it as it is,
    else ``#`` and its SHA-256 (results are matched on ``metadata.adk`` anyway)."""
    if (
        0 < len(text) <= _MAX_REF_CHARS
        and not text.startswith("#")
        and not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)
    ):
        return text
    return "#" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _title(*parts: str) -> str:
    text = " / ".join("".join(c if c.isprintable() else " " for c in p) for p in parts)
    return text[:_MAX_TITLE_CHARS]


def _session_scope(state: Mapping[str, Any]) -> dict[str, Any]:
    """The session-scoped part of a merged state (no ``app:``, ``user:`` or ``temp:`` key)."""
    prefixes = (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)
    return {k: v for k, v in state.items() if not k.startswith(prefixes)}


def _merge(app: Mapping[str, Any], user: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(own))
    for key, value in app.items():
        merged[State.APP_PREFIX + key] = copy.deepcopy(value)
    for key, value in user.items():
        merged[State.USER_PREFIX + key] = copy.deepcopy(value)
    return merged


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_MIRROR_CHARS else text[:_MAX_MIRROR_CHARS]


def _dump_event(event: Event) -> dict[str, Any]:
    """The event as ADK's database service stores it (JSON-safe, no ``None`` fields)."""
    try:
        return event.model_dump(exclude_none=True, mode="json")
    except Exception:  # a state value JSON cannot hold (a callable, say): kept as its repr
        safe = event.model_copy(deep=True)
        if safe.actions and safe.actions.state_delta:
            safe.actions.state_delta = _session_util.make_json_safe_state(
                dict(safe.actions.state_delta)
            )
        return safe.model_dump(exclude_none=True, mode="json")


def _mirrors(event: Event) -> list[dict[str, Any]]:
    """The keys that make an event readable in Stepwise (see the module docstring): its text
    as a user or assistant message, then each function call and each function response."""
    parts = list(event.content.parts or []) if event.content is not None else []
    out: list[dict[str, Any]] = []
    texts = [p.text for p in parts if p.text and not p.thought]
    if texts:
        role = "user" if event.author == "user" else "assistant"
        out.append({"type": "message", "role": role, "content": _cut("\n".join(texts))})
    for part in parts:
        if part.function_call is not None:
            call = part.function_call
            out.append({
                "type": "function_call",
                "call_id": call.id or "",
                "name": call.name or "function",
                "arguments": json.dumps(call.args or {}, ensure_ascii=False, default=str),
            })
        elif part.function_response is not None:
            answer = part.function_response
            out.append({
                "type": "function_call_output",
                "call_id": answer.id or "",
                "output": _cut(json.dumps(answer.response or {}, ensure_ascii=False, default=str)),
            })
    return out


def _items_of(event: Event, state_version: Optional[int]) -> list[dict[str, Any]]:
    """The items of one event (one step): the event with its first readable mirror, then one
    item for each further mirror (marked ``mirror``: reads skip them)."""
    mirrors = _mirrors(event) or [{"type": "adk_event"}]
    first = {**mirrors[0], "adk_event": _dump_event(event), "state_version": state_version}
    return [first, *({**m, "mirror": True} for m in mirrors[1:])]


def _items_body(event: Event, state_version: Optional[int], version: int, op_id: str) -> bytes | dict[str, Any]:
    """The body of one event's items write: the JSON of `_items_of` encoded by pydantic's
    serializer (the event is the same JSON as its ``model_dump(mode="json")``, a fifth of the
    time of ``json.dumps``), or the body as a dict where that fails (the general path then
    reports what cannot be sent)."""
    try:
        mirrors = _mirrors(event) or [{"type": "adk_event"}]
        dumped = event.model_dump_json(exclude_none=True).encode()
        head = to_json({**mirrors[0], "state_version": state_version})
        items = [head[:-1] + b',"adk_event":' + dumped + b"}"]
        items.extend(to_json({**m, "mirror": True}) for m in mirrors[1:])
        return b'{"items":[%s],"version":%d,"op_id":%s}' % (b",".join(items), version, to_json(op_id))
    except Exception:
        return {"items": _items_of(event, state_version), "version": version, "op_id": op_id}


class _StoredItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    adk_event: Optional[Event] = None  # None: an item that only mirrors part of an event
    state_version: Optional[int] = None


class _Page(BaseModel):
    model_config = ConfigDict(extra="ignore")
    items: list[_StoredItem]
    version: int


@dataclass
class _Located:
    """Where an ADK session lives in Stepwise and the revision a session object holds."""

    stepwise_id: str
    version: int
    # The version of the latest event that changed session-scoped state (0: the state given
    # to create_session; None: no state yet).
    state_version: Optional[int]
    # The version whose state the latest snapshot holds, as far as this object knows (0 also
    # when there is none: a read folds from the first event; -1: unknown).
    snapshot_version: int = -1

    def marker(self) -> str:
        sv = "" if self.state_version is None else str(self.state_version)
        return f"stepwise:{self.stepwise_id}:{self.version}:{sv}:{self.snapshot_version}"

    @classmethod
    def parse(cls, marker: Optional[str]) -> Optional["_Located"]:
        if not marker or not marker.startswith("stepwise:"):
            return None
        try:
            _, sid, version, sv, *snap = marker.split(":", 4)
            return cls(sid, int(version), int(sv) if sv else None, int(snap[0]) if snap else -1)
        except ValueError:
            return None

    def snapshot_due(self, version: int) -> bool:
        """Whether the write that made `version` saves a snapshot: when the state changed
        since the last one and it is `SNAPSHOT_EVERY` events old (or its age is unknown)."""
        if self.state_version is None or self.state_version <= self.snapshot_version:
            return False
        return self.snapshot_version < 0 or version - self.snapshot_version >= SNAPSHOT_EVERY


@dataclass
class _HeldIds:
    """The ids of a session object's events, kept between its appends so that finding a
    re-delivered event costs no scan of every event. Valid while the object holds the same
    events list, of the same length, ending with the same event."""

    session: "weakref.ref[Session]"
    events: int  # id() of the list
    count: int
    last: int  # id() of its last event
    ids: set[str]

    def fits(self, session: Session) -> bool:
        events = session.events
        return (
            self.session() is session
            and self.events == id(events)
            and self.count == len(events)
            and (not events or self.last == id(events[-1]))
        )


@dataclass
class _Tail:
    """The latest events of a session as read."""

    events: list[Event]
    state_versions: list[Optional[int]]
    version: int
    # Bytes of JSON the events came in (what the cache counts), and the items read.
    size: int = 0
    items: int = 0

    @property
    def first_version(self) -> int:
        return self.version - len(self.events) + 1


class _EventCache:
    """Decoded events of sessions read whole, shared by the services of this process: a read
    asks the server for the latest event and version and decodes only what is new. Bounded
    by the JSON bytes the events came in (least recently used sessions go first)."""

    def __init__(self, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], _Tail] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # services on event loops of several threads

    def get(self, key: tuple[str, str]) -> _Tail | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple[str, str], tail: _Tail) -> None:
        with self._lock:
            self._drop(key)
            if tail.size > self.max_bytes // 4:
                return
            self._entries[key] = tail
            self._bytes += tail.size
            while self._bytes > self.max_bytes and self._entries:
                _, old = self._entries.popitem(last=False)
                self._bytes -= old.size

    def drop(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.size


_EVENTS = _EventCache()


class _Wire:
    """The HTTP calls of one event loop: over one lean keep-alive connection when the server
    is plain ``http://`` reached directly, else through the `AsyncStepwise` client."""

    def __init__(self, client: AsyncStepwise) -> None:
        self.client = client
        self.fast: ItemsConnection | None = fast_path_for(client)

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool = True,
    ) -> Any:
        """`body`: JSON, or JSON already encoded (bytes)."""
        if self.fast is not None:
            return await self.fast.request(
                method, path, json_body=body, params=params, idempotent=idempotent
            )
        if isinstance(body, bytes):
            body = json.loads(body)
        return await self.client.request(
            method, path, json=body, params=params, idempotent=idempotent
        )

    async def raw(self, path: str, params: Mapping[str, Any] | None = None) -> bytes:
        """A GET's answer body as it came (JSON bytes), so it is decoded in one pass."""
        fast = self.fast
        if fast is None:
            return json.dumps(await self.client.request("GET", path, params=params)).encode()
        answer = await fast.request_once("GET", path, params=params)
        if answer is None or answer[0] in LEAN_RETRY_STATUSES:
            # A kept-alive connection the server closed, or a refusal for load: the general
            # path retries (with backoff) and reports a lasting failure as a StepwiseError.
            return json.dumps(
                await fast.request("GET", path, params=params, idempotent=True)
            ).encode()
        status, content = answer
        if not 200 <= status < 300:
            try:
                parsed = json.loads(content) if content else None
            except ValueError:
                parsed = None
            raise error_from_answer(status, parsed, "", method="GET", url=fast.url(path), reason="")
        return content

    async def close(self) -> None:
        if self.fast is not None:
            await self.fast.close()


class StepwiseSessionService(BaseSessionService):
    """ADK's session service on a Stepwise server.

    Args:
        client: an `AsyncStepwise` to use (left open by `close`). A sync `Stepwise` is
            accepted too: its URL, key, timeout and retries are used for an `AsyncStepwise`
            of this service's own.
        base_url: the server when no client is given (default ``$STEPWISE_URL``, else
            ``http://127.0.0.1:7777``).
        api_key: its API key when no client is given (default ``$STEPWISE_API_KEY``).
        cache_events: keep the decoded events of sessions read whole in this process, so a
            later read of a long session asks the server only for what is new (the version
            and the latest event are always checked with the server). The events a read
            returns are then shared with the cache: treat them as read-only, as with ADK's
            light-copy in-memory sessions.

    Nothing is sent before the first call. Without a given client the service keeps one
    `AsyncStepwise` per event loop it is used from; `close()` closes the current loop's.
    """

    def __init__(
        self,
        client: AsyncStepwise | Stepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        cache_events: bool = True,
    ) -> None:
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give either client or base_url/api_key, not both")
        if client is not None and not isinstance(client, (AsyncStepwise, Stepwise)):
            raise TypeError(
                f"client must be a stepwise.AsyncStepwise (or Stepwise), got {type(client).__name__}"
            )
        self._given: AsyncStepwise | None = client if isinstance(client, AsyncStepwise) else None
        self._options: dict[str, Any] = {}
        if isinstance(client, Stepwise):
            base_url, api_key = client.base_url, client.api_key
            self._options = {"timeout": client.timeout, "max_retries": client.max_retries}
        self._base_url = base_url
        self._api_key = api_key
        self._wires: dict[asyncio.AbstractEventLoop, _Wire] = {}
        # (app, user, session id) -> Stepwise session id, for sessions seen live.
        self._ids: dict[tuple[str, str, str], str] = {}
        # Stepwise session id -> id of its execution that holds state snapshots.
        self._state_executions: dict[str, str] = {}
        # app:/user: state documents: name -> Stepwise session id.
        self._doc_ids: dict[str, str] = {}
        # Stepwise sessions this service deleted (the server may accept a write to a session
        # deleted a moment ago from a process that wrote to it just before).
        self._deleted: set[str] = set()
        self._cache_events = cache_events
        # id() of a session object -> the ids of its events (see _HeldIds).
        self._held: OrderedDict[int, _HeldIds] = OrderedDict()

    def __repr__(self) -> str:
        return f"StepwiseSessionService(base_url={self._wire_url()!r})"

    def _wire_url(self) -> str | None:
        return self._given.base_url if self._given is not None else self._base_url

    # --- plumbing ------------------------------------------------------------------------------

    def _wire(self) -> _Wire:
        return for_running_loop(
            self._wires,
            lambda: _Wire(self._given or AsyncStepwise(self._base_url, self._api_key, **self._options)),
        )

    async def close(self) -> None:
        """Closes this service's connections of the running loop (not a given client)."""
        wire = self._wires.pop(asyncio.get_running_loop(), None)
        if wire is not None:
            await wire.close()
            if wire.client is not self._given:
                await wire.client.aclose()

    async def __aenter__(self) -> "StepwiseSessionService":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _find_by_name(self, name: str, *, any_status: bool = False) -> dict[str, Any] | None:
        params = {"name": name}
        if any_status:
            params["status"] = _STATUSES
        answer = await self._wire().call("GET", "/v1/sessions", params=params)
        items = answer.get("items") or []
        return items[0] if items else None

    @staticmethod
    def _owns(found: Mapping[str, Any], app_name: str, user_id: str, session_id: str) -> bool:
        meta = (found.get("metadata") or {}).get(METADATA_KEY)
        return (
            isinstance(meta, dict)
            and meta.get("app_name") == app_name
            and meta.get("user_id") == user_id
            and meta.get("session_id") == session_id
        )

    async def _find(self, app_name: str, user_id: str, session_id: str) -> dict[str, Any] | None:
        """The live Stepwise session of an ADK session, or None."""
        key = (app_name, user_id, session_id)
        known = self._ids.get(key)
        if known is not None:
            try:
                found = await self._wire().call("GET", f"/v1/sessions/{known}")
            except StepwiseError as e:
                if e.status != 404:
                    raise
                found = None
            if found is not None and found.get("status") != "deleted":
                return found
            self._ids.pop(key, None)
        generation = 0
        while True:
            found = await self._find_by_name(
                session_name(app_name, user_id, session_id, generation), any_status=True
            )
            if found is None:
                return None
            if found.get("status") != "deleted":
                if not self._owns(found, app_name, user_id, session_id):
                    return None
                self._ids[key] = str(found["id"])
                return found
            generation += 1

    # --- reading events ----------------------------------------------------------------------

    @staticmethod
    def _decode_page(raw: bytes) -> _Tail:
        try:
            page = _Page.model_validate_json(raw)
            kept = [i for i in page.items if i.adk_event is not None]
            return _Tail(
                [i.adk_event for i in kept if i.adk_event is not None],
                [i.state_version for i in kept],
                page.version,
                len(raw),
                len(page.items),
            )
        except ValidationError:
            # One record that cannot be decoded never hides the others.
            answer = json.loads(raw)
            items = answer.get("items") or []
            events: list[Event] = []
            versions: list[Optional[int]] = []
            for item in items:
                try:
                    stored = _StoredItem.model_validate(item)
                except ValidationError:
                    logger.warning("skipped a Stepwise item that is not an ADK event")
                    continue
                if stored.adk_event is not None:
                    events.append(stored.adk_event)
                    versions.append(stored.state_version)
            return _Tail(events, versions, int(answer["version"]), len(raw), len(items))

    async def _read_tail(self, stepwise_id: str, limit: Optional[int]) -> _Tail:
        """The latest `limit` events (all when None). An event with several calls or
        responses is several items, so a page short of events is read again, twice as long."""
        size = limit
        while True:
            params = {"limit": size} if size is not None else None
            raw = await self._wire().raw(f"/v1/sessions/{stepwise_id}/items", params)
            tail = self._decode_page(raw)
            if limit is None or len(tail.events) >= limit or size is None or tail.items < size:
                break
            size *= 2
        if limit is not None and len(tail.events) > limit:
            cut = len(tail.events) - limit
            tail = _Tail(tail.events[cut:], tail.state_versions[cut:], tail.version, tail.size, tail.items)
        return tail

    def _cache_key(self, stepwise_id: str) -> tuple[str, str]:
        return (str(self._wire().client.base_url), stepwise_id)

    async def _cached_whole(self, stepwise_id: str) -> _Tail | None:
        """Every event of the session from the cache brought up to date with the server, or
        None when the cache has no copy (or it no longer fits what the server has)."""
        if not self._cache_events:
            return None
        key = self._cache_key(stepwise_id)
        entry = _EVENTS.get(key)
        if entry is None:
            return None
        probe = await self._read_tail(stepwise_id, 1)
        held = len(entry.events)
        if probe.version == entry.version == held:
            if held == 0 or probe.events[-1].id == entry.events[-1].id:
                return entry
        elif probe.version > entry.version == held:
            # What is new, with the last event the cache holds to check they join up.
            new = await self._read_tail(stepwise_id, probe.version - held + (1 if held else 0))
            overlap = new.events[:1] if held else []
            if len(new.events) == new.version - held + len(overlap) and (
                not held or overlap[0].id == entry.events[-1].id
            ):
                skip = len(overlap)
                whole = _Tail(
                    entry.events + new.events[skip:],
                    entry.state_versions + new.state_versions[skip:],
                    new.version,
                    entry.size + new.size,
                )
                _EVENTS.put(key, whole)
                return whole
        _EVENTS.drop(key)
        return None

    def _remember(self, stepwise_id: str, tail: _Tail) -> None:
        if self._cache_events and len(tail.events) == tail.version:
            _EVENTS.put(self._cache_key(stepwise_id), tail)

    async def _read_events(self, stepwise_id: str, config: Optional[GetSessionConfig]) -> tuple[_Tail, list[Event]]:
        """The tail that was read (at least the latest event) and the events to return."""
        recent = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        whole = await self._cached_whole(stepwise_id)
        if whole is not None:
            events = whole.events if recent is None else (whole.events[-recent:] if recent else [])
            if after is not None:
                older = next(
                    (i for i in range(len(events) - 1, -1, -1) if events[i].timestamp < after), None
                )
                events = events if older is None else events[older + 1 :]
            return whole, list(events)
        if after is None:
            tail = await self._read_tail(stepwise_id, None if recent is None else max(recent, 1))
            self._remember(stepwise_id, tail)
            events = tail.events if recent is None else (tail.events[-recent:] if recent else [])
            return tail, list(events)
        size = _FIRST_PAGE if recent is None else max(min(recent, _FIRST_PAGE), 1)
        while True:
            tail = await self._read_tail(stepwise_id, size)
            candidates = tail.events if recent is None else (tail.events[-recent:] if recent else [])
            complete = len(tail.events) >= tail.version or (
                recent is not None and len(tail.events) >= recent
            )
            older = next(
                (i for i in range(len(candidates) - 1, -1, -1) if candidates[i].timestamp < after),
                None,
            )
            if older is not None:
                return tail, list(candidates[older + 1 :])
            if complete:
                self._remember(stepwise_id, tail)
                return tail, list(candidates)
            size *= 2
            if recent is not None:
                size = min(size, recent)

    # --- session-scoped state ------------------------------------------------------------------

    async def _session_state(self, found: Mapping[str, Any], tail: _Tail) -> tuple[dict[str, Any], int]:
        """The session-scoped state as of the tail's version: the latest snapshot, plus the
        deltas of the events after it (fewer than `SNAPSHOT_EVERY`, unless a writer stopped
        before saving its snapshot); and the version that snapshot holds (0: none)."""
        wanted = tail.state_versions[-1] if tail.events else (0 if found.get("last_snapshot_id") else None)
        if wanted is None:
            return {}, 0
        base: dict[str, Any] = {}
        base_version = -1  # fold from the first event
        snapshot_id = found.get("last_snapshot_id")
        if snapshot_id:
            snapshot = await self._wire().call("GET", f"/v1/snapshots/{snapshot_id}")
            document = snapshot.get("state") or {}
            if isinstance(document, dict) and "adk_session_state" in document:
                self._state_executions[str(found["id"])] = str(snapshot["execution_id"])
                base = dict(document.get("adk_session_state") or {})
                base_version = int(document.get("version", -1))
        if base_version >= wanted:
            return base, base_version
        # Fold the session deltas of the events after the snapshot.
        first_needed = max(base_version + 1, 1)
        if tail.events and tail.first_version <= first_needed:
            source = tail
        else:
            source = await self._read_tail(str(found["id"]), tail.version - first_needed + 1)
        for number, event in enumerate(source.events, start=source.first_version):
            if number < first_needed or number > tail.version:
                continue
            delta = event.actions.state_delta if event.actions else None
            if delta:
                base.update(_session_util.extract_state_delta(dict(delta))["session"])
        return base, max(base_version, 0)

    async def _state_execution(self, stepwise_id: str) -> str:
        known = self._state_executions.get(stepwise_id)
        if known is not None:
            return known
        executions = await self._wire().call("GET", f"/v1/sessions/{stepwise_id}/executions")
        items = executions.get("items", executions) if isinstance(executions, dict) else executions
        for execution in items or []:
            if (execution.get("metadata") or {}).get("adk") == "session_state" and execution.get(
                "status"
            ) in ("running", "pending", "paused"):
                self._state_executions[stepwise_id] = str(execution["id"])
                return str(execution["id"])
        opened = await self._wire().call(
            "POST",
            f"/v1/sessions/{stepwise_id}/executions",
            # A state holder across processes, not a run: never leased.
            body={"agent_type": "external", "input": None, "metadata": STATE_EXECUTION_MARKER, "lease": False},
            idempotent=False,
        )
        self._state_executions[stepwise_id] = str(opened["id"])
        return str(opened["id"])

    async def _save_session_state(self, stepwise_id: str, state: Mapping[str, Any], version: int) -> None:
        document = {"adk_session_state": _session_util.make_json_safe_state(dict(state)), "version": version}
        for attempt in range(2):
            execution_id = await self._state_execution(stepwise_id)
            try:
                await self._wire().call(
                    "POST", f"/v1/executions/{execution_id}/snapshots", body={"state": document}
                )
                return
            except StepwiseError as e:
                # The execution was cancelled or finished meanwhile: open another.
                if attempt == 1 or e.status not in (404, 409, 422):
                    raise
                self._state_executions.pop(stepwise_id, None)

    # --- app: and user: state --------------------------------------------------------------------

    @staticmethod
    def _doc_name(scope: str, app_name: str, user_id: str | None) -> str:
        if scope == "app":
            return f"adk-app-{_digest(app_name)}"
        return f"adk-user-{_digest(app_name, user_id or '')}"

    async def _doc_id(self, scope: str, app_name: str, user_id: str | None, *, create: bool) -> str | None:
        name = self._doc_name(scope, app_name, user_id)
        known = self._doc_ids.get(name)
        if known is not None:
            return known
        found = await self._find_by_name(name)
        if found is None and create:
            meta = {STATE_METADATA_KEY: {"scope": scope, "app_name": app_name, "user_id": user_id}}
            title = _title(f"ADK {scope} state", app_name, *([user_id] if user_id is not None else []))
            try:
                found = await self._wire().call(
                    "POST",
                    "/v1/sessions",
                    body={
                        "name": name,
                        "title": title,
                        "related_type": STATE_RELATED_TYPE,
                        "related_id": scope,
                        "metadata": meta,
                    },
                    idempotent=False,
                )
                # Archived: the retention cleaner never removes it (a document only read for
                # months is not idle data), and writes still go in.
                await self._wire().call("PATCH", f"/v1/sessions/{found['id']}", body={"status": "archived"})
            except StepwiseError as e:
                if e.code != "conflict":
                    raise
                found = await self._find_by_name(name)
                if found is None:
                    raise StepwiseError(
                        "conflict",
                        f"the Stepwise session {name!r} holding ADK {scope} state is deleted",
                        status=409,
                    ) from e
        if found is None:
            return None
        self._doc_ids[name] = str(found["id"])
        return str(found["id"])

    async def _read_doc(self, scope: str, app_name: str, user_id: str | None) -> tuple[str | None, int, dict[str, Any]]:
        doc_id = await self._doc_id(scope, app_name, user_id, create=False)
        if doc_id is None:
            return None, 0, {}
        answer = await self._wire().call("GET", f"/v1/sessions/{doc_id}/items", params={"limit": 1})
        items = answer.get("items") or []
        state = items[-1].get("state") if items else None
        return doc_id, int(answer["version"]), dict(state) if isinstance(state, dict) else {}

    async def _update_doc(self, scope: str, app_name: str, user_id: str | None, delta: Mapping[str, Any]) -> None:
        """Merges `delta` into an app:/user: document (read, merge, write at that version;
        again when another writer came first)."""
        doc_id = await self._doc_id(scope, app_name, user_id, create=True)
        assert doc_id is not None
        op_id = uuid.uuid4().hex
        for _ in range(_MAX_CONFLICTS):
            _, version, state = await self._read_doc(scope, app_name, user_id)
            state.update(delta)
            try:
                await self._wire().call(
                    "POST",
                    f"/v1/sessions/{doc_id}/items",
                    body={
                        "items": [{"type": f"adk_{scope}_state", "state": state, "delta": dict(delta)}],
                        "version": version,
                        "op_id": op_id,
                    },
                )
                return
            except StepwiseError as e:
                if e.status != 409:
                    raise
        raise StepwiseError(
            "conflict", f"other writers kept changing the ADK {scope} state; gave up", status=409
        )

    async def _scoped(self, app_name: str, user_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        _, _, app_state = await self._read_doc("app", app_name, None)
        _, _, user_state = await self._read_doc("user", app_name, user_id)
        return app_state, user_state

    # --- BaseSessionService ----------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: Optional[dict[str, Any]] = None,
        session_id: Optional[str] = None,
    ) -> Session:
        """Creates a session; `AlreadyExistsError` when this app and user have one of that
        id (two concurrent creates of one id: one of them wins, the other raises)."""
        session_id = session_id.strip() if session_id else None
        session_id = session_id or platform_uuid.new_uuid()
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        created = platform_time.get_time()
        nonce = uuid.uuid4().hex
        body = {
            "title": _title(app_name, user_id, session_id),
            "related_type": _ref(f"adk:{app_name}"),
            "related_id": _ref(user_id),
            "metadata": {
                METADATA_KEY: {
                    "app_name": app_name,
                    "user_id": user_id,
                    "session_id": session_id,
                    "created": created,
                    "nonce": nonce,
                }
            },
        }
        generation = 0
        while True:
            name = session_name(app_name, user_id, session_id, generation)
            try:
                made = await self._wire().call(
                    "POST", "/v1/sessions", body={**body, "name": name}, idempotent=False
                )
                break
            except StepwiseError as e:
                if e.code != "conflict":
                    raise
            found = await self._find_by_name(name, any_status=True)
            if found is None:
                continue  # gone meanwhile: try the name again
            if found.get("status") == "deleted":
                generation += 1
                continue
            meta = (found.get("metadata") or {}).get(METADATA_KEY) or {}
            if meta.get("nonce") == nonce:  # our own create, answered after a retry
                made = found
                break
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        stepwise_id = str(made["id"])
        self._ids[(app_name, user_id, session_id)] = stepwise_id
        state_version: Optional[int] = None
        if deltas["session"]:
            await self._save_session_state(stepwise_id, deltas["session"], 0)
            state_version = 0
        if deltas["app"]:
            await self._update_doc("app", app_name, None, deltas["app"])
        if deltas["user"]:
            await self._update_doc("user", app_name, user_id, deltas["user"])
        app_state, user_state = await self._scoped(app_name, user_id)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merge(app_state, user_state, deltas["session"]),
            last_update_time=created,
        )
        session._storage_update_marker = _Located(stepwise_id, 0, state_version, 0).marker()
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: Optional[GetSessionConfig] = None,
    ) -> Optional[Session]:
        """The session with its events (`config`: the latest `num_recent_events`, those at
        or after `after_timestamp`), or ``None``."""
        session_id = session_id.strip() if session_id else session_id
        found = await self._find(app_name, user_id, session_id)
        if found is None:
            return None
        stepwise_id = str(found["id"])
        tail, events = await self._read_events(stepwise_id, config)
        own, snapshot_version = await self._session_state(found, tail)
        app_state, user_state = await self._scoped(app_name, user_id)
        meta = (found.get("metadata") or {}).get(METADATA_KEY) or {}
        last = tail.events[-1].timestamp if tail.events else float(meta.get("created") or 0.0)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merge(app_state, user_state, own),
            events=events,
            last_update_time=last,
        )
        state_version = tail.state_versions[-1] if tail.events else (0 if found.get("last_snapshot_id") else None)
        session._storage_update_marker = _Located(
            stepwise_id, tail.version, state_version, snapshot_version
        ).marker()
        return session

    async def list_sessions(self, *, app_name: str, user_id: Optional[str] = None) -> ListSessionsResponse:
        """The app's sessions (of one user, or of all when `user_id` is ``None``), without
        events, with merged state, least recently updated first."""
        params: dict[str, Any] = {"related_type": _ref(f"adk:{app_name}"), "limit": 500}
        if user_id is not None:
            params["related_id"] = _ref(user_id)
        found: list[dict[str, Any]] = []
        while True:
            answer = await self._wire().call("GET", "/v1/sessions", params=params)
            for item in answer.get("items") or []:
                meta = (item.get("metadata") or {}).get(METADATA_KEY)
                if (
                    isinstance(meta, dict)
                    and meta.get("app_name") == app_name
                    and (user_id is None or meta.get("user_id") == user_id)
                ):
                    found.append(item)
            cursor = answer.get("next_cursor")
            if not cursor:
                break
            params["cursor"] = cursor
        _, _, app_state = await self._read_doc("app", app_name, None)
        user_states: dict[str, dict[str, Any]] = {}
        sessions = []
        for item in found:
            meta = item["metadata"][METADATA_KEY]
            uid = str(meta["user_id"])
            if uid not in user_states:
                user_states[uid] = (await self._read_doc("user", app_name, uid))[2]
            tail = await self._read_tail(str(item["id"]), 1)
            own, _ = await self._session_state(item, tail)
            last = tail.events[-1].timestamp if tail.events else float(meta.get("created") or 0.0)
            sessions.append(
                Session(
                    id=str(meta["session_id"]),
                    app_name=app_name,
                    user_id=uid,
                    state=_merge(app_state, user_states[uid], own),
                    last_update_time=last,
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Deletes the session (a Stepwise soft delete; its id can be used again)."""
        session_id = session_id.strip() if session_id else session_id
        found = await self._find(app_name, user_id, session_id)
        if found is None:
            return
        try:
            await self._wire().call("DELETE", f"/v1/sessions/{found['id']}")
        except StepwiseError as e:
            if e.status != 404:
                raise
        self._deleted.add(str(found["id"]))
        self._ids.pop((app_name, user_id, session_id), None)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state in this app, keys without the prefix."""
        return (await self._read_doc("user", app_name, user_id))[2]

    async def _locate(self, session: Session) -> _Located:
        """The revision of a session object that carries no marker of ours: current only
        when its events end where the stored ones end (as ADK's database service checks)."""
        found = await self._find(session.app_name, session.user_id, session.id)
        if found is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        tail = await self._read_tail(str(found["id"]), 1)
        stored_last = tail.events[-1].id if tail.events else None
        held_last = session.events[-1].id if session.events else None
        if stored_last != held_last:
            raise StaleSessionError(STALE_MESSAGE)
        sv = tail.state_versions[-1] if tail.events else (0 if found.get("last_snapshot_id") else None)
        return _Located(str(found["id"]), tail.version, sv)

    def _holds(self, session: Session, event: Event) -> bool:
        """Whether `session` holds `event` already (the same object or an equal copy)."""
        key = id(session)
        held = self._held.get(key)
        if held is None or not held.fits(session):
            events = session.events
            held = _HeldIds(
                weakref.ref(session),
                id(events),
                len(events),
                id(events[-1]) if events else 0,
                {e.id for e in events},
            )
            self._held[key] = held
            while len(self._held) > _HELD_SESSIONS:
                self._held.popitem(last=False)
        self._held.move_to_end(key)
        if event.id not in held.ids:
            return False
        return any(e == event for e in session.events if e.id == event.id)

    def _held_append(self, session: Session, event: Event) -> None:
        held = self._held.get(id(session))
        if held is not None and held.count == len(session.events) - 1 and session.events[-1] is event:
            held.count += 1
            held.last = id(event)
            held.ids.add(event.id)

    async def append_event(self, session: Session, event: Event) -> Event:
        """Stores `event` and applies its state delta by scope (``temp:`` keys only to
        `session`); `StaleSessionError` when `session` is older than what is stored."""
        if event.partial:
            return event
        # The same event delivered again: stored once.
        if self._holds(session, event):
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        located = _Located.parse(session._storage_update_marker) or await self._locate(session)
        if located.stepwise_id in self._deleted:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        deltas = _session_util.extract_json_safe_state_delta(
            dict(event.actions.state_delta) if event.actions and event.actions.state_delta else {}
        )
        number = located.version + 1
        state_version = number if deltas["session"] else located.state_version
        body = _items_body(event, state_version, located.version, uuid.uuid4().hex)
        try:
            answer = await self._wire().call("POST", f"/v1/sessions/{located.stepwise_id}/items", body=body)
        except StepwiseError as e:
            if e.status == 409:
                raise StaleSessionError(STALE_MESSAGE) from e
            if e.status == 404 or e.code == "invalid_state":
                raise SessionNotFoundError(f"Session {session.id} not found.") from e
            raise
        version = int(answer["version"])
        written = _Located(located.stepwise_id, version, state_version, located.snapshot_version)
        if written.snapshot_due(version):
            # The event holds its delta already: the snapshot only spares reads the folding.
            own = _session_scope(session.state)
            own.update(deltas["session"])
            await self._save_session_state(located.stepwise_id, own, version)
            written.snapshot_version = version
        if deltas["app"]:
            await self._update_doc("app", session.app_name, None, deltas["app"])
        if deltas["user"]:
            await self._update_doc("user", session.app_name, session.user_id, deltas["user"])
        session._storage_update_marker = written.marker()
        session.last_update_time = event.timestamp
        committed = self._commit_event_to_session(session, event)
        self._held_append(session, event)
        return committed
