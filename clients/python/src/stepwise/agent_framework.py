"""Stepwise as the history and session store of Microsoft Agent Framework (``agent-framework-core``).

```python
from agent_framework import Agent
from stepwise.agent_framework import StepwiseHistoryProvider, StepwiseSessionStore

agent = Agent(chat_client, context_providers=[StepwiseHistoryProvider()])
session = agent.create_session(session_id="ticket-7")   # the same id in a new process: same history
await agent.run("Hi", session=session)

store = StepwiseSessionStore()                            # AgentSession.to_dict() kept in Stepwise
await store.set("ticket-7", session)
session = await store.get("ticket-7")                     # in any process
```

`StepwiseHistoryProvider` is a `HistoryProvider` of the framework (``get_messages`` and
``save_messages``) over the conversation-items endpoints of the Stepwise API
(``/v1/sessions/{id}/items``):

* An Agent Framework session id names a Stepwise session of the caller's tenant (a valid
  Stepwise name as it is, any other string ``af-<readable part>-<16 hex of its SHA-256>``).
  The Stepwise session's id is also kept in the session's provider state, so a restored
  `AgentSession` finds its history even where the provider is configured differently.
* Every ``save_messages`` call is one append-only step of that session, written at the
  conversation's version with an operation id derived from its content: a call sent again
  (after a lost answer, a retry of the caller, a second process) never stores a message
  twice. Messages already stored at the end of the history are not stored again (the
  framework's own rule for its built-in providers). With the agent's per-service-call
  persistence each model call is saved as it ends, so a crash loses at most the call in
  flight.
* Each message is one item holding the message exactly (``Message.to_dict()``); user and
  assistant text is also a Stepwise message, tool calls and their results the step's
  ``tool_calls`` and ``observations``, live in the web UI and on the event stream.
* A history that cannot be decoded (a message written by another framework version, a
  foreign item) never raises: the messages that decode come back, preceded by one
  ``system`` message holding the session's context summary (seed 004: the recent user
  requests, the tools used, the message count, an instruction to continue).

`StepwiseSessionStore` is the framework's (experimental) `SessionStore`: ``set`` saves
``AgentSession.to_dict()`` as a snapshot of the Stepwise session of the same name (checked
to be JSON first, with the framework's own rules), ``get`` returns the latest one as an
`AgentSession` (``None`` when absent or deleted), ``delete`` records a deletion (snapshots
are append-only, so earlier states stay inspectable).
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    from agent_framework import AgentSession, Content, Message
    from agent_framework._sessions import (
        HistoryProvider,
        SessionStore,
        get_message_identity,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stepwise.agent_framework needs Microsoft Agent Framework: "
        "pip install 'stepwise-client[agent-framework]' (agent-framework-core==1.23.0)"
    ) from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError
from ._transport.aio import ItemsConnection, fast_path_for, for_running_loop
from ._names import session_name_for

__all__ = [
    "StepwiseHistoryProvider",
    "StepwiseSessionStore",
    "context_summary_text",
    "stepwise_name",
]

logger = logging.getLogger("stepwise.agent_framework")

# Stepwise session names (the server's rule): [A-Za-z0-9._-], 1-64, no "..", not reserved.
# Metadata key of a Stepwise session holding the Agent Framework session id (or store key).
METADATA_KEY = "agent_framework_session_id"
# Item keys: the message exactly, and the marker of an item that only mirrors a tool part.
MESSAGE_KEY = "agent_framework"
MIRROR_KEY = "agent_framework_part"
# Marks an item whose message holds NaN or infinite floats, written as {"$stepwise_float": ...}.
FLOATS_KEY = "agent_framework_floats"
_FLOAT_TAG = "$stepwise_float"
# Keys of the provider's state in AgentSession.state[source_id].
STATE_SESSION_ID = "stepwise_session_id"
STATE_NAME = "stepwise_name"
STATE_MAX_MESSAGES = "max_messages"
# The store's execution and snapshot markers.
STORE_EXECUTION = "session_store"
SNAPSHOT_FORMAT = "agent_framework.AgentSession"
# Attempts of one write when other writers keep taking the next version.
_MAX_CONFLICTS = 20
# How many of the latest stored messages a provider remembers (to skip messages sent again).
_TAIL = 256
# How many sessions' whole decoded histories a provider keeps (a reload then costs one request).
_HISTORIES = 32
# How many sessions a provider remembers the Stepwise ids and tails of.
_MAX_KNOWN = 4096
_MAX_TITLE_CHARS = 500
_SUMMARY_REQUESTS = 5
_SUMMARY_REQUEST_CHARS = 200


def stepwise_name(session_id: str) -> str:
    """The Stepwise session name an Agent Framework session id (or store key) maps to.

    A valid Stepwise name is used as it is; any other string becomes
    ``af-<readable part>-<first 16 hex digits of the SHA-256 of its UTF-8>`` (the readable
    part keeps up to 40 of its letters, digits, ``_`` and ``-``).
    """
    return session_name_for(session_id, "af")


def _title(session_id: str) -> str:
    text = "".join(c if c.isprintable() else " " for c in session_id).strip()
    return text[:_MAX_TITLE_CHARS] or session_id[:_MAX_TITLE_CHARS]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def context_summary_text(user_requests: Sequence[str], tools_used: Sequence[str], message_count: int) -> str:
    """The context summary of seed 004 as text, worded as the server words it: the last five
    user requests (each cut to 200 characters), the tools used, the message count and an
    instruction to continue."""
    requests = [_cut(r, _SUMMARY_REQUEST_CHARS) for r in user_requests][-_SUMMARY_REQUESTS:]
    lines = ["Previous conversation summary (the full agent memory could not be restored)."]
    if requests:
        lines.append("Recent user requests:")
        lines.extend(f"{i}. {r}" for i, r in enumerate(requests, start=1))
    else:
        lines.append("The user has made no requests yet.")
    if tools_used:
        lines.append(f"Tools used: {', '.join(tools_used)}")
    lines.append(f"Messages in this session: {message_count}")
    lines.append("Continue the conversation from here, using this context.")
    return "\n".join(lines)


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(arguments, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(arguments)


def _result_text(content: Any) -> str:
    result = getattr(content, "result", None)
    if isinstance(result, str):
        return result
    if result is None:
        items = getattr(content, "items", None) or []
        return "\n".join(str(getattr(i, "text", "") or "") for i in items)
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def _tool_part(content: Any) -> dict[str, Any] | None:
    """The items-API shape of a tool call or result content (``None`` for other contents)."""
    kind = getattr(content, "type", None)
    if kind == "function_call":
        return {
            "type": "function_call",
            "call_id": str(getattr(content, "call_id", "") or ""),
            "name": str(getattr(content, "name", "") or ""),
            "arguments": _arguments_text(getattr(content, "arguments", None)),
        }
    if kind == "function_result":
        return {
            "type": "function_call_output",
            "call_id": str(getattr(content, "call_id", "") or ""),
            "output": _result_text(content),
        }
    return None


def encode_message(message: Message) -> list[dict[str, Any]]:
    """The items one message is stored as: the first holds the message exactly under
    ``"agent_framework"`` and reads as a user/assistant message or a tool call/result in
    Stepwise; further tool parts of the same message follow as mirror items."""
    payload = message.to_dict()
    parts = [p for p in (_tool_part(c) for c in message.contents or []) if p is not None]
    text = message.text or ""
    if text.strip() or not parts:
        head: dict[str, Any] = {"type": "message", "role": str(message.role), "content": text}
        rest = parts
    else:
        head, rest = dict(parts[0]), parts[1:]
    head[MESSAGE_KEY] = payload
    items = [head]
    for part in rest:
        part[MIRROR_KEY] = True
        items.append(part)
    return items


@dataclass
class _Decoded:
    messages: list[Message] = field(default_factory=list)
    lost: int = 0
    user_requests: list[str] = field(default_factory=list)
    tools_used: list[str] = field(default_factory=list)
    message_count: int = 0


def _tag_floats(item: dict[str, Any]) -> dict[str, Any]:
    """The item with every NaN or infinite float of its message written as
    ``{"$stepwise_float": "nan" | "inf" | "-inf"}`` (and the item marked so)."""

    def tag(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return {_FLOAT_TAG: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        if isinstance(value, dict):
            return {k: tag(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [tag(v) for v in value]
        return value

    tagged = tag(item)
    tagged[FLOATS_KEY] = True
    return tagged


def _untag_floats(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _FLOAT_TAG in value and value[_FLOAT_TAG] in ("nan", "inf", "-inf"):
            return float(value[_FLOAT_TAG])
        return {k: _untag_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_untag_floats(v) for v in value]
    return value


_MESSAGE_KEYS = frozenset({"type", "role", "contents", "author_name", "message_id", "additional_properties"})
_TEXT_KEYS = frozenset({"type", "text", "additional_properties"})


def _text_message(payload: Mapping[str, Any]) -> Message | None:
    """A message of text contents only, built directly (about twice as fast as
    ``Message.from_dict``, with the same result); ``None`` for any other shape."""
    if payload.get("type") != "message" or not _MESSAGE_KEYS.issuperset(payload):
        return None
    role, contents = payload.get("role"), payload.get("contents")
    if not isinstance(role, str) or not isinstance(contents, list):
        return None
    built = []
    for content in contents:
        if (
            not isinstance(content, dict)
            or content.get("type") != "text"
            or not isinstance(content.get("text"), str)
            or not _TEXT_KEYS.issuperset(content)
        ):
            return None
        properties = content.get("additional_properties")
        built.append(Content("text", text=content["text"], additional_properties=dict(properties or {})))
    properties = payload.get("additional_properties")
    return Message(
        role,
        built,
        author_name=payload.get("author_name"),
        message_id=payload.get("message_id"),
        additional_properties=dict(properties or {}),
    )


def decode_items(items: Sequence[Any]) -> _Decoded:
    """The messages of stored items, oldest first; what cannot be decoded is counted in
    ``lost`` (never raised). Plain ``{"role", "content"}`` items of other writers are read as
    text messages."""
    # Building thousands of objects triggers the cyclic GC's full passes, which cost more than
    # the decoding itself on a large heap; nothing here makes cycles, so it waits until the end.
    paused = len(items) > 64 and gc.isenabled()
    if paused:
        gc.disable()
    try:
        return _decode(items)
    finally:
        if paused:
            gc.enable()


def _decode(items: Sequence[Any]) -> _Decoded:
    out = _Decoded()
    for item in items:
        if not isinstance(item, Mapping):
            out.lost += 1
            continue
        kind = item.get("type")
        if isinstance(kind, str) and kind.endswith("_call") and isinstance(item.get("name"), str):
            if item["name"] not in out.tools_used:
                out.tools_used.append(item["name"])
        if item.get(MIRROR_KEY):
            continue
        out.message_count += 1
        role, content = item.get("role"), item.get("content")
        if role == "user" and isinstance(content, str) and content.strip():
            out.user_requests.append(content)
        payload = item.get(MESSAGE_KEY)
        if item.get(FLOATS_KEY):
            payload = _untag_floats(payload)
        try:
            if isinstance(payload, Mapping):
                message = _text_message(payload) or Message.from_dict(dict(payload))
                if not isinstance(message, Message) or not isinstance(message.role, str):
                    raise ValueError("not a message")
            elif isinstance(role, str) and isinstance(content, str) and kind in (None, "message"):
                message = Message(role=role, contents=[content] if content else [])
            else:
                raise ValueError("not an Agent Framework message")
        except Exception as exc:  # noqa: BLE001 - any decoding failure: summary, never an error
            logger.warning("a stored message could not be decoded (%s: %s); skipped", type(exc).__name__, exc)
            out.lost += 1
            continue
        out.messages.append(message)
    return out


def _content_op_id(items: Sequence[Mapping[str, Any]]) -> str:
    """The operation id of a write: the same items always give the same id."""
    text = json.dumps(items, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "af-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _new_messages(tail: Sequence[tuple[str, ...]], count: int, incoming: Sequence[tuple[str, ...]],
                  tail_roles: Sequence[str]) -> int:
    """How many of `incoming` (identities) are already at the end of the stored history
    (its last `tail` identities of `count` in all): the framework's `filter_new_messages`
    rule, on identities. Returns the index of the first new message."""
    if count == 0:
        return 0
    if len(tail) == count and len(incoming) >= count:
        for i in range(len(incoming) - count + 1):
            if list(incoming[i : i + count]) == list(tail):
                if i == 0 and count == 1 and tail_roles[-1] == "user" and tail[-1][0] != "id":
                    break
                return i + count
    for overlap in range(min(len(tail), len(incoming)), 0, -1):
        if list(tail[-overlap:]) != list(incoming[:overlap]):
            continue
        if overlap == 1 and tail_roles[-1] == "user" and tail[-1][0] != "id":
            continue
        return overlap
    return 0


@dataclass
class _Conversation:
    """What a provider knows of one Stepwise session's history."""

    stepwise_id: str
    version: int | None = None
    count: int | None = None  # stored messages (None: not read yet)
    tail: list[Message] = field(default_factory=list)
    tail_ids: list[tuple[str, ...]] | None = None
    # The whole decoded history as of `history_version` (None: not kept, or not all decodable).
    history: list[Message] | None = None
    history_version: int | None = None

    def remember(self, messages: Sequence[Message]) -> None:
        ids = self.identities()
        self.tail.extend(messages)
        ids.extend(tuple(get_message_identity(m)) for m in messages)
        self.count = (self.count or 0) + len(messages)
        if len(self.tail) > _TAIL:
            del self.tail[: len(self.tail) - _TAIL]
            del ids[: len(ids) - _TAIL]

    def identities(self) -> list[tuple[str, ...]]:
        if self.tail_ids is None:
            self.tail_ids = [tuple(get_message_identity(m)) for m in self.tail]
        return self.tail_ids


class _Connections:
    """The `AsyncStepwise` (and the lean items connection) to use, per event loop."""

    def __init__(self, client: AsyncStepwise | Stepwise | None, base_url: str | None, api_key: str | None):
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give either client or base_url/api_key, not both")
        if client is not None and not isinstance(client, (AsyncStepwise, Stepwise)):
            raise TypeError(
                f"client must be a stepwise.AsyncStepwise or stepwise.Stepwise, got {type(client).__name__}"
            )
        self.given: AsyncStepwise | None = client if isinstance(client, AsyncStepwise) else None
        self.options: dict[str, Any] = {}
        if isinstance(client, Stepwise):
            base_url, api_key = client.base_url, client.api_key
            self.options = {"timeout": client.timeout, "max_retries": client.max_retries}
        self.base_url, self.api_key = base_url, api_key
        self.own: dict[asyncio.AbstractEventLoop, AsyncStepwise] = {}
        self.fast: dict[asyncio.AbstractEventLoop, ItemsConnection | None] = {}

    def client(self) -> AsyncStepwise:
        if self.given is not None:
            return self.given
        return for_running_loop(self.own, lambda: AsyncStepwise(self.base_url, self.api_key, **self.options))

    async def call(self, method: str, path: str, *, json_body: Any = None,
                   params: Mapping[str, Any] | None = None) -> Any:
        """One call that is safe to repeat: over the lean connection for plain http, else
        through the client."""
        client = self.client()
        fast = for_running_loop(self.fast, lambda: fast_path_for(client))
        if fast is not None:
            return await fast.request(method, path, json_body=json_body, params=params, idempotent=True)
        return await client.request(method, path, json=json_body, params=params, idempotent=True)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        fast = self.fast.pop(loop, None)
        if fast is not None:
            await fast.close()
        own = self.own.pop(loop, None)
        if own is not None:
            await own.aclose()


async def _find_or_create(
    client: AsyncStepwise, key: str, *, create: bool, title: str | None = None
) -> dict[str, Any] | None:
    """The Stepwise session of an Agent Framework id: by name, else created (when `create`),
    titled `title` (default: the id)."""
    name = stepwise_name(key)
    found = await client.find_session(name)
    if found is None and create:
        try:
            found = await client.create_session(
                name=name, title=title or _title(key), metadata={METADATA_KEY: key}
            )
        except StepwiseError as e:
            if e.code != "conflict":
                raise
            found = await client.find_session(name)
            if found is None:
                raise StepwiseError(
                    "conflict",
                    f"the Stepwise session named {name!r} (Agent Framework session {key!r}) is deleted; "
                    "restore it or use another session id",
                    status=409,
                ) from e
    if found is None:
        return None
    metadata = found.get("metadata")
    owner = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if owner is not None and owner != key:
        raise StepwiseError(
            "conflict",
            f"the Stepwise session named {name!r} belongs to Agent Framework session {owner!r}, not {key!r}",
            status=409,
        )
    return found


class StepwiseHistoryProvider(HistoryProvider):
    """An Agent Framework history provider that keeps each session's messages in Stepwise.

    Args:
        client: an `AsyncStepwise` (left open by `aclose`) or a `Stepwise` (its URL, key,
            timeout and retries are used for an `AsyncStepwise` of the provider's own).
            Default: one from ``$STEPWISE_URL`` and ``$STEPWISE_API_KEY``.
        base_url, api_key: the server and key when no client is given.
        source_id: the provider's id in the framework (the key of its state in
            ``AgentSession.state``).
        max_messages: load at most this many of the latest messages. Recorded in the
            session's state: a restored session keeps it unless the provider sets another.
        load_messages, store_inputs, store_context_messages, store_context_from,
        store_outputs: the framework's `HistoryProvider` settings.
        skip_excluded: leave out loaded messages whose ``additional_properties["_excluded"]``
            is true.
        description: the title of the Stepwise sessions this provider creates (what
            ``stepwise sessions list`` and the web UI's history show; default: the session id).

    Nothing is sent before the first call.
    """

    DEFAULT_SOURCE_ID = "stepwise"

    def __init__(
        self,
        *,
        client: AsyncStepwise | Stepwise | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        source_id: str = DEFAULT_SOURCE_ID,
        max_messages: int | None = None,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        skip_excluded: bool = False,
        description: str | None = None,
    ) -> None:
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        if max_messages is not None and (not isinstance(max_messages, int) or max_messages < 1):
            raise ValueError(f"max_messages must be a positive integer or None, got {max_messages!r}")
        self.max_messages = max_messages
        self.skip_excluded = skip_excluded
        if description is not None and (not isinstance(description, str) or not description.strip()):
            raise ValueError(f"description must be a non-empty string or None, got {description!r}")
        self.description = _title(description) if description is not None else None
        self._connections = _Connections(client, base_url, api_key)
        self._conversations: OrderedDict[str, _Conversation] = OrderedDict()
        # The sessions whose whole decoded history is kept, least recently used first.
        self._histories: OrderedDict[str, None] = OrderedDict()
        self._locks: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"StepwiseHistoryProvider(source_id={self.source_id!r})"

    @property
    def client(self) -> AsyncStepwise:
        """The `AsyncStepwise` this provider uses in the running event loop."""
        return self._connections.client()

    async def aclose(self) -> None:
        """Closes the provider's connections of the running loop (not a given client)."""
        await self._connections.aclose()

    # --- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _key(session_id: str | None) -> str:
        if session_id is None:
            return "default"
        if not isinstance(session_id, str) or not session_id:
            raise ValueError(f"session_id must be a non-empty string, got {session_id!r}")
        return session_id

    def _lock(self, key: str) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get((loop, key))
        if lock is None:
            if len(self._locks) >= _MAX_KNOWN:
                for old in [k for k, v in self._locks.items() if k[0].is_closed() or not v.locked()]:
                    del self._locks[old]
            lock = self._locks[(loop, key)] = asyncio.Lock()
        return lock

    def _remember(self, key: str, conversation: _Conversation) -> _Conversation:
        self._conversations[key] = conversation
        self._conversations.move_to_end(key)
        while len(self._conversations) > _MAX_KNOWN:
            old, _ = self._conversations.popitem(last=False)
            self._histories.pop(old, None)
        return conversation

    def _limit(self, state: Mapping[str, Any] | None) -> int | None:
        if self.max_messages is not None:
            return self.max_messages
        recorded = state.get(STATE_MAX_MESSAGES) if state is not None else None
        return recorded if isinstance(recorded, int) and recorded > 0 else None

    def _record(self, key: str, conversation: _Conversation, state: dict[str, Any] | None) -> None:
        """Writes the session's settings into its provider state (kept by `to_dict`)."""
        if state is None:
            return
        state[STATE_SESSION_ID] = conversation.stepwise_id
        state[STATE_NAME] = stepwise_name(key)
        if self.max_messages is not None:
            state[STATE_MAX_MESSAGES] = self.max_messages

    async def _conversation(self, key: str, state: Mapping[str, Any] | None, *, create: bool) -> _Conversation | None:
        known = self._conversations.get(key)
        recorded = state.get(STATE_SESSION_ID) if state is not None else None
        if known is not None and (recorded is None or recorded == known.stepwise_id):
            self._conversations.move_to_end(key)
            return known
        client = self.client
        if isinstance(recorded, str) and recorded:
            try:
                if (await client.get_session(recorded)).get("status") != "deleted":
                    return self._remember(key, _Conversation(recorded))
            except StepwiseError as e:
                if e.code != "not_found":
                    raise
            logger.warning("the Stepwise session %s recorded for %r is not found (or deleted); "
                           "looking it up by name", recorded, key)
        found = await _find_or_create(client, key, create=create, title=self.description)
        if found is None:
            return None
        return self._remember(key, _Conversation(str(found["id"])))

    def _path(self, conversation: _Conversation) -> str:
        return f"/v1/sessions/{conversation.stepwise_id}/items"

    async def _read_all(self, key: str, conversation: _Conversation) -> _Decoded:
        # The answer's JSON and its messages are thousands of objects: the cyclic GC waits
        # until they are built (see decode_items).
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            answer = await self._connections.call("GET", self._path(conversation))
            items = answer.get("items") if isinstance(answer, Mapping) else None
            decoded = decode_items(items if isinstance(items, list) else [])
        finally:
            if paused:
                gc.enable()
        conversation.version = int(answer["version"])
        conversation.count = len(decoded.messages)
        conversation.tail = decoded.messages[-_TAIL:]
        conversation.tail_ids = None
        if decoded.lost:
            conversation.history = None
        else:
            self._keep(key, conversation, decoded.messages)
        return decoded

    def _keep(self, key: str, conversation: _Conversation, history: list[Message]) -> None:
        """Keeps the decoded history of the session (for the `_HISTORIES` latest sessions)."""
        conversation.history = list(history)
        conversation.history_version = conversation.version
        self._histories[key] = None
        self._histories.move_to_end(key)
        while len(self._histories) > _HISTORIES:
            old, _ = self._histories.popitem(last=False)
            dropped = self._conversations.get(old)
            if dropped is not None:
                dropped.history = None

    async def _load(self, key: str, conversation: _Conversation) -> _Decoded:
        """The session's history: the kept one when the conversation's version is unchanged
        (one request for the version alone), else read and decoded whole."""
        if conversation.history is not None and conversation.history_version is not None:
            answer = await self._connections.call("GET", self._path(conversation), params={"limit": 0})
            if int(answer["version"]) == conversation.history_version:
                if key in self._histories:
                    self._histories.move_to_end(key)
                return _Decoded(messages=list(conversation.history))
        return await self._read_all(key, conversation)

    async def _summary(self, conversation: _Conversation, decoded: _Decoded) -> str:
        """The session's context summary: the server's when it has one, else one built the
        same way from what the items still tell."""
        try:
            memory = await self.client.get_memory(conversation.stepwise_id)
            summary = memory.get("summary") if isinstance(memory, Mapping) else None
            if isinstance(summary, Mapping) and isinstance(summary.get("text"), str) and summary["text"]:
                return str(summary["text"])
        except StepwiseError as e:
            logger.warning("could not read the context summary of %s: %s", conversation.stepwise_id, e)
        return context_summary_text(decoded.user_requests, decoded.tools_used, decoded.message_count)

    # --- the framework's HistoryProvider ----------------------------------------------------

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's stored messages, oldest first (the latest ``max_messages``).

        Messages that cannot be decoded never raise: the rest come back after a ``system``
        message holding the session's context summary."""
        key = self._key(session_id)
        async with self._lock(key):
            conversation = await self._conversation(key, state, create=False)
            if conversation is None:
                return []
            self._record(key, conversation, state)
            decoded = await self._load(key, conversation)
            messages = decoded.messages
            if self.skip_excluded:
                messages = [m for m in messages if not m.additional_properties.get("_excluded", False)]
            limit = self._limit(state)
            if limit is not None:
                messages = messages[-limit:]
            if decoded.lost:
                text = await self._summary(conversation, decoded)
                summary = Message(role="system", contents=[text], additional_properties={"stepwise_summary": True})
                messages = [summary, *messages]
            return messages

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Appends `messages` as one step: all or none, never twice (messages already at
        the end of the stored history are left out; a call sent again is recognised)."""
        if not messages:
            return
        key = self._key(session_id)
        async with self._lock(key):
            conversation = await self._conversation(key, state, create=True)
            assert conversation is not None
            self._record(key, conversation, state)
            if conversation.count is None:
                await self._read_all(key, conversation)
            incoming = [tuple(get_message_identity(m)) for m in messages]
            start = _new_messages(
                conversation.identities(), conversation.count or 0, incoming, [str(m.role) for m in conversation.tail]
            )
            new = list(messages[start:])
            if not new:
                return
            items = [item for m in new for item in encode_message(m)]
            try:
                wrote_at = await _finish(self._append(conversation, items))
            except ValueError as exc:
                if "JSON" not in str(exc):
                    raise
                # NaN or infinity somewhere (JSON has neither): stored tagged, restored on read.
                items = [_tag_floats(item) for item in items]
                wrote_at = await _finish(self._append(conversation, items))
            # What is stored, as stored (the framework may change the given messages later).
            new = decode_items(items).messages
            conversation.remember(new)
            if (
                conversation.history is not None
                and wrote_at is not None
                and conversation.history_version == wrote_at
                and conversation.version == wrote_at + 1
            ):
                self._keep(key, conversation, [*conversation.history, *new])
            else:
                conversation.history = None

    async def _append(self, conversation: _Conversation, items: list[dict[str, Any]]) -> int | None:
        """Writes `items` as one step; returns the version it was written after (``None`` when
        an earlier attempt of the same write is found stored)."""
        op_id = _content_op_id(items)
        path = self._path(conversation)
        for _ in range(_MAX_CONFLICTS):
            if conversation.version is None:
                answer = await self._connections.call("GET", path, params={"limit": len(items)})
                conversation.version = int(answer["version"])
                if answer.get("items") == items and conversation.version > 0:
                    return None  # an earlier attempt of this very write landed
            at: int = conversation.version
            body = {"items": items, "version": at, "op_id": op_id}
            try:
                answer = await self._connections.call("POST", path, json_body=body)
            except StepwiseError as e:
                if e.code != "conflict" or e.status != 409:
                    raise
                conversation.version = None
                continue
            conversation.version = int(answer["version"])
            return at
        raise StepwiseError(
            "conflict",
            f"other writers kept changing Stepwise session {conversation.stepwise_id}; gave up after "
            f"{_MAX_CONFLICTS} attempts",
            status=409,
        )

    async def stepwise_session_id(self, session_id: str | None, *, state: dict[str, Any] | None = None) -> str:
        """The id of the Stepwise session holding this session's history (created if missing)."""
        key = self._key(session_id)
        conversation = await self._conversation(key, state, create=True)
        assert conversation is not None
        return conversation.stepwise_id


async def _finish(awaitable: Any) -> Any:
    """Waits for a write's outcome even if the caller is cancelled meanwhile (then re-raises
    the cancellation), so what the provider knows of the history stays true."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()
        raise cancelled
    return task.result()


def _session_payload(session: AgentSession) -> dict[str, Any]:
    """``session.to_dict()``, checked to be JSON by the framework's own rules (a value that is
    not JSON raises `TypeError`, a non-finite float `ValueError`, naming where it is)."""
    try:
        from agent_framework._sessions import (
            _SessionStatePayload,  # the framework's durable-state check
        )
    except ImportError:  # pragma: no cover - a framework version without it
        _SessionStatePayload = None  # type: ignore[assignment,misc]  # noqa: N806
    payload = session.to_dict()
    if _SessionStatePayload is not None:
        payload["state"] = _SessionStatePayload(session.state).serialize()
    json.dumps(payload, allow_nan=False)
    return payload


def _restore_session(payload: Mapping[str, Any], key: str) -> AgentSession:
    """An `AgentSession` from a stored ``to_dict()``; state entries that cannot be restored are
    left out (logged), never raised."""
    try:
        return AgentSession.from_dict(dict(payload))
    except Exception as exc:  # noqa: BLE001
        logger.warning("the stored Agent Framework session %r could not be restored whole (%s: %s); "
                       "restoring what decodes", key, type(exc).__name__, exc)
    session_id = payload.get("session_id")
    service = payload.get("service_session_id")
    session = AgentSession(
        session_id=session_id if isinstance(session_id, str) and session_id else key,
        service_session_id=service if isinstance(service, (str, Mapping)) else None,
    )
    state = payload.get("state")
    if isinstance(state, Mapping):
        for name, value in state.items():
            try:
                session.state[str(name)] = AgentSession.from_dict(
                    {"session_id": "x", "state": {str(name): value}}
                ).state[str(name)]
            except Exception as exc:  # noqa: BLE001
                logger.warning("left out state %r of session %r: %s", name, key, exc)
    return session


class StepwiseSessionStore(SessionStore):
    """The framework's `SessionStore` kept in Stepwise: one Stepwise session per key.

    Args:
        client: an `AsyncStepwise` or `Stepwise` (default: from ``$STEPWISE_URL`` and
            ``$STEPWISE_API_KEY``).
        base_url, api_key: the server and key when no client is given.

    ``set`` saves ``session.to_dict()`` as a snapshot of an external execution of the
    session named after the key (``stepwise_name(key)``; the same session a
    `StepwiseHistoryProvider` keeps that id's history in); ``get`` restores the latest.
    """

    def __init__(
        self,
        *,
        client: AsyncStepwise | Stepwise | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        super().__init__()
        self._connections = _Connections(client, base_url, api_key)
        self._sessions_by_key: dict[str, str] = {}
        self._executions: dict[str, str] = {}

    @property
    def client(self) -> AsyncStepwise:
        """The `AsyncStepwise` this store uses in the running event loop."""
        return self._connections.client()

    async def aclose(self) -> None:
        """Closes the store's connections of the running loop (not a given client)."""
        await self._connections.aclose()

    async def _session_id(self, key: str, *, create: bool) -> str | None:
        known = self._sessions_by_key.get(key)
        if known is not None:
            return known
        found = await _find_or_create(self.client, key, create=create)
        if found is None:
            return None
        self._sessions_by_key[key] = str(found["id"])
        return self._sessions_by_key[key]

    async def _store_executions(self, stepwise_id: str) -> list[dict[str, Any]]:
        """The session's store executions, newest first."""
        found = []
        async for execution in self.client.list_executions(stepwise_id):
            metadata = execution.get("metadata")
            if isinstance(metadata, dict) and metadata.get("agent_framework") == STORE_EXECUTION:
                found.append(execution)
        found.sort(key=lambda e: (str(e.get("created_at") or ""), str(e["id"])), reverse=True)
        return found

    async def _save(self, key: str, state: dict[str, Any]) -> None:
        stepwise_id = await self._session_id(key, create=True)
        assert stepwise_id is not None
        client = self.client
        for attempt in range(2):
            execution_id = self._executions.get(stepwise_id)
            if execution_id is None:
                running = [e for e in await self._store_executions(stepwise_id) if e.get("status") == "running"]
                if running:
                    execution_id = str(running[0]["id"])
                else:
                    opened = await client.open_execution(
                        stepwise_id,
                        input={"agent_framework": STORE_EXECUTION, "key": key},
                        metadata={"agent_framework": STORE_EXECUTION},
                        lease=False,  # a state holder across processes, not a run
                    )
                    execution_id = str(opened["id"])
                self._executions[stepwise_id] = execution_id
            try:
                await client.save_snapshot(execution_id, state, agent_name="agent_framework.SessionStore")
                # A snapshot alone does not count as activity for the retention cleaner.
                await client.update_session(stepwise_id)
                return
            except StepwiseError as e:
                # The execution was finished by someone else: open another one, once.
                if attempt or e.code not in ("invalid_state", "conflict", "not_found"):
                    raise
                self._executions.pop(stepwise_id, None)

    async def _latest_state(self, key: str) -> Mapping[str, Any] | None:
        """The latest stored state of this key (``None``: none, or a deletion)."""
        stepwise_id = await self._session_id(key, create=False)
        if stepwise_id is None:
            return None
        executions = await self._store_executions(stepwise_id)
        latest = next((e for e in executions if e.get("last_snapshot_id")), None)
        if latest is None:
            return None
        snapshot = await self.client.get_snapshot(str(latest["last_snapshot_id"]))
        state = snapshot.get("state")
        if not isinstance(state, Mapping) or state.get("deleted"):
            return None
        return state

    async def get(self, session_id: str) -> AgentSession | None:
        """The latest stored session of this key, or ``None`` (never stored, or deleted)."""
        SessionStore.validate_session_id(session_id)
        state = await self._latest_state(session_id)
        if state is None:
            return None
        payload = state.get("session")
        if not isinstance(payload, Mapping):
            logger.warning("the stored state of session %r is not an Agent Framework session; ignored", session_id)
            return None
        return _restore_session(payload, session_id)

    async def set(self, session_id: str, session: AgentSession) -> None:
        """Stores ``session.to_dict()`` under this key (a new snapshot; the latest wins)."""
        SessionStore.validate_session_id(session_id)
        if not isinstance(session, AgentSession):
            raise TypeError(f"session must be an agent_framework.AgentSession, got {type(session).__name__}")
        payload = _session_payload(session)
        await self._save(session_id, {"format": SNAPSHOT_FORMAT, "key": session_id, "session": payload})

    async def delete(self, session_id: str) -> None:
        """Forgets the stored session of this key (`get` answers ``None``); its history and
        earlier snapshots stay in Stepwise."""
        SessionStore.validate_session_id(session_id)
        if await self._latest_state(session_id) is None:
            return  # never stored, or already deleted
        await self._save(session_id, {"format": SNAPSHOT_FORMAT, "key": session_id, "deleted": True})

