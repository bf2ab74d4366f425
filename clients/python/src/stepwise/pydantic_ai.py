"""pydantic-ai message histories kept in Stepwise: `StepwiseMessageHistory`.

    from stepwise.pydantic_ai import StepwiseMessageHistory

    history = StepwiseMessageHistory("conversation-9")
    result = agent.run_sync("hi", message_history=history.load())
    history.append(result.new_messages())

    # or saved as the run goes, every model request and response, without calling append:
    result = agent.run_sync("hi", message_history=history.load(), capabilities=[history.autosave()])

A conversation is a Stepwise session (found by name, created on first write) whose
conversation items (``/v1/sessions/{id}/items``) are the messages: each message is one
append-only step, stored as pydantic-ai's own `ModelMessagesTypeAdapter` dumps it (so a load
equals ``result.all_messages()``), with readable mirrors beside it: user prompts and text
answers as Stepwise messages, tool calls as the step's ``tool_calls``, tool results as its
``observations``. See ``docs/pydantic_ai.md``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from typing import Any, Awaitable, Iterable, Mapping, Sequence, TypeVar, cast

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stepwise.pydantic_ai needs pydantic-ai: pip install 'stepwise-client[pydantic-ai]' "
        "(pydantic-ai-slim==2.68.0)"
    ) from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError
from ._transport.aio import ItemsConnection, fast_path_for
from ._names import session_name_for

__all__ = ["StepwiseMessageHistory", "StepwiseAutosave", "stepwise_name"]

_T = TypeVar("_T")

# Metadata key holding the conversation id; item key holding the message.
METADATA_KEY = "pydantic_ai_conversation"
MESSAGE_KEY = "pydantic_ai"
_MAX_CONFLICTS = 20
_MAX_MIRROR_CHARS = 64 * 1024


def stepwise_name(conversation: str) -> str:
    """The Stepwise session name a conversation id maps to: the id itself when it is a valid
    Stepwise name, else ``pa-<readable part>-<16 hex digits of its SHA-256>``."""
    return session_name_for(conversation, "pa")


def _cut(text: str) -> str:
    return text[:_MAX_MIRROR_CHARS]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(c for c in content if isinstance(c, str))
    return ""


def _mirrors(dumped: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Readable items for one dumped message: user and assistant text, tool calls, tool results."""
    said: list[str] = []
    asked: list[str] = []
    tools: list[dict[str, Any]] = []
    for part in dumped.get("parts") or []:
        kind = part.get("part_kind")
        if kind == "user-prompt":
            text = _text_of(part.get("content"))
            if text.strip():
                asked.append(text)
        elif kind == "text":
            if str(part.get("content") or "").strip():
                said.append(str(part["content"]))
        elif kind == "tool-call":
            args = part.get("args")
            tools.append({
                "type": "function_call",
                "call_id": part.get("tool_call_id") or "",
                "name": part.get("tool_name") or "tool",
                "arguments": args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False),
            })
        elif kind in ("tool-return", "retry-prompt"):
            content = part.get("content")
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)
            tools.append({
                "type": "function_call_output",
                "call_id": part.get("tool_call_id") or "",
                "output": _cut(text),
            })
    out: list[dict[str, Any]] = []
    if asked:
        out.append({"type": "message", "role": "user", "content": _cut("\n\n".join(asked))})
    if said:
        out.append({"type": "message", "role": "assistant", "content": _cut("\n\n".join(said))})
    return out + tools


def _items_of(message: ModelMessage) -> list[dict[str, Any]]:
    """The items of one message (one step): the message itself, with the first readable mirror
    beside it, then an item for each further mirror (tool calls beyond the first, say)."""
    dumped = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    mirrors = _mirrors(dumped) or [{"type": "pydantic_ai_message"}]
    first = {**mirrors[0], MESSAGE_KEY: dumped}
    return [first, *({**m, "mirror": True} for m in mirrors[1:])]


class StepwiseMessageHistory:
    """The message history of one pydantic-ai conversation, kept in Stepwise.

    Args:
        conversation: the conversation's id: any non-empty string (see `stepwise_name`);
            the same id always reaches the same history of the caller's tenant.
        client: a `Stepwise` or `AsyncStepwise` to use (left open by `close`). The sync
            methods need a sync client and the ``a``-methods an async one: from the one
            given, the other is made with the same URL, key, timeout and retries.
        base_url: the server when no client is given (default ``$STEPWISE_URL``, else
            ``http://127.0.0.1:7777``).
        api_key: its API key when no client is given (default ``$STEPWISE_API_KEY``).

    Nothing is sent before the first call.
    """

    def __init__(
        self,
        conversation: str,
        client: Stepwise | AsyncStepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        if not isinstance(conversation, str) or not conversation:
            raise ValueError(f"conversation must be a non-empty string, got {conversation!r}")
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give either client or base_url/api_key, not both")
        if client is not None and not isinstance(client, (AsyncStepwise, Stepwise)):
            raise TypeError(
                f"client must be a stepwise.Stepwise or AsyncStepwise, got {type(client).__name__}"
            )
        self.conversation = conversation
        self._name = stepwise_name(conversation)
        self._sync_given = client if isinstance(client, Stepwise) else None
        self._async_given = client if isinstance(client, AsyncStepwise) else None
        options: dict[str, Any] = {}
        if client is not None:
            base_url, api_key = client.base_url, client.api_key
            options = {"timeout": client.timeout, "max_retries": client.max_retries}
        self._base_url, self._api_key, self._options = base_url, api_key, options
        self._sync_own: Stepwise | None = None
        self._async_own: dict[asyncio.AbstractEventLoop, AsyncStepwise] = {}
        self._fast: dict[asyncio.AbstractEventLoop, ItemsConnection | None] = {}
        self._stepwise_id: str | None = None
        self._version: int | None = None

    def __repr__(self) -> str:
        return f"StepwiseMessageHistory({self.conversation!r}, name={self._name!r})"

    @property
    def stepwise_name(self) -> str:
        """The name of the Stepwise session holding this conversation."""
        return self._name

    # --- clients --------------------------------------------------------------------------------

    def _sync(self) -> Stepwise:
        if self._sync_given is not None:
            return self._sync_given
        if self._sync_own is None:
            self._sync_own = Stepwise(self._base_url, self._api_key, **self._options)
        return self._sync_own

    def _async(self) -> AsyncStepwise:
        if self._async_given is not None:
            return self._async_given
        loop = asyncio.get_running_loop()
        own = self._async_own.get(loop)
        if own is None:
            for old in [l for l in self._async_own if l.is_closed()]:
                del self._async_own[old]
                self._fast.pop(old, None)
            own = AsyncStepwise(self._base_url, self._api_key, **self._options)
            self._async_own[loop] = own
        return own

    def close(self) -> None:
        """Closes the sync client this history made (not a given one)."""
        if self._sync_own is not None:
            self._sync_own.close()
            self._sync_own = None

    async def aclose(self) -> None:
        """Closes the async connections of the running loop this history made."""
        loop = asyncio.get_running_loop()
        fast = self._fast.pop(loop, None)
        if fast is not None:
            await fast.close()
        own = self._async_own.pop(loop, None)
        if own is not None:
            await own.aclose()

    def __enter__(self) -> "StepwiseMessageHistory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # One flow for both: a generator of (method, path, json, params) calls answered by a driver.

    def _drive_sync(self, flow: Any) -> Any:
        client = self._sync()
        answer: Any = None
        try:
            while True:
                call = flow.send(answer)
                try:
                    answer = (True, client.request(call[0], call[1], json=call[2], params=call[3], idempotent=True))
                except StepwiseError as e:
                    answer = (False, e)
        except StopIteration as stop:
            return stop.value

    async def _drive_async(self, flow: Any) -> Any:
        client = self._async()
        loop = asyncio.get_running_loop()
        if self._async_given is None and loop not in self._fast:
            self._fast[loop] = fast_path_for(client)
        fast = self._fast.get(loop)
        answer: Any = None
        try:
            while True:
                call = flow.send(answer)
                try:
                    if fast is not None:
                        result = await fast.request(call[0], call[1], json_body=call[2], params=call[3], idempotent=True)
                    else:
                        result = await client.request(call[0], call[1], json=call[2], params=call[3], idempotent=True)
                    answer = (True, result)
                except StepwiseError as e:
                    answer = (False, e)
        except StopIteration as stop:
            return stop.value

    # --- the flows --------------------------------------------------------------------------------

    def _resolve(self, *, create: bool):  # generator
        if self._stepwise_id is not None:
            return self._stepwise_id
        ok, found = yield ("GET", "/v1/sessions", None, {"name": self._name})
        if not ok:
            raise found
        items = found.get("items") or []
        session = items[0] if items else None
        if session is None and not create:
            return None
        if session is None:
            body = {
                "name": self._name,
                "title": "".join(c if c.isprintable() else " " for c in self.conversation)[:500],
                "related_type": "pydantic-ai",
                "metadata": {METADATA_KEY: self.conversation},
            }
            ok, made = yield ("POST", "/v1/sessions", body, None)
            if ok:
                session = made
                self._version = 0
            elif made.code == "conflict":
                ok, again = yield ("GET", "/v1/sessions", None, {"name": self._name})
                if not ok:
                    raise again
                items = again.get("items") or []
                if not items:
                    raise StepwiseError(
                        "conflict",
                        f"the Stepwise session named {self._name!r} (conversation {self.conversation!r}) "
                        "is deleted; restore it or use another conversation id",
                        status=409,
                    ) from made
                session = items[0]
            else:
                raise made
        owner = (session.get("metadata") or {}).get(METADATA_KEY)
        if owner is not None and owner != self.conversation:
            raise StepwiseError(
                "conflict",
                f"the Stepwise session named {self._name!r} belongs to conversation {owner!r}, "
                f"not {self.conversation!r}",
                status=409,
            )
        self._stepwise_id = str(session["id"])
        return self._stepwise_id

    def _load(self, limit: int | None):  # generator
        if limit is not None and limit < 0:
            raise ValueError("limit must not be negative")
        sid = yield from self._resolve(create=False)
        if sid is None or limit == 0:
            return []
        # Items of one message are one step; mirrors beyond the first are items of their own,
        # so a limit reads more until it holds `limit` messages (or everything).
        size = limit
        while True:
            ok, answer = yield ("GET", f"/v1/sessions/{sid}/items", None, None if size is None else {"limit": size})
            if not ok:
                raise answer
            self._version = int(answer["version"])
            items = answer.get("items") or []
            dumped = [item[MESSAGE_KEY] for item in items if isinstance(item.get(MESSAGE_KEY), dict)]
            if size is None or len(dumped) >= limit or len(items) < size:  # type: ignore[operator]
                break
            size *= 2
        if limit is not None:
            dumped = dumped[-limit:]
        return ModelMessagesTypeAdapter.validate_python(dumped)

    def _append(self, messages: Sequence[ModelMessage]):  # generator
        sid = yield from self._resolve(create=True)
        for message in messages:
            body = {"items": _items_of(message), "op_id": uuid.uuid4().hex}
            for _ in range(_MAX_CONFLICTS):
                if self._version is None:
                    ok, answer = yield ("GET", f"/v1/sessions/{sid}/items", None, {"limit": 0})
                    if not ok:
                        raise answer
                    self._version = int(answer["version"])
                ok, answer = yield ("POST", f"/v1/sessions/{sid}/items", {**body, "version": self._version}, None)
                if ok:
                    self._version = int(answer["version"])
                    break
                if answer.status != 409:
                    raise answer
                self._version = None  # another writer came first: append after it
            else:
                raise StepwiseError(
                    "conflict",
                    f"other writers kept appending to conversation {self.conversation!r}; gave up",
                    status=409,
                )

    def _delete(self):  # generator
        sid = yield from self._resolve(create=False)
        if sid is None:
            return
        ok, answer = yield ("DELETE", f"/v1/sessions/{sid}/items", None, {"op_id": uuid.uuid4().hex})
        if not ok:
            raise answer
        self._version = int(answer["version"])

    # --- the API -----------------------------------------------------------------------------------

    def load(self, limit: int | None = None) -> list[ModelMessage]:
        """The conversation's messages, oldest first (the latest `limit` when given; none
        for a conversation never written)."""
        return cast(list[ModelMessage], self._drive_sync(self._load(limit)))

    async def aload(self, limit: int | None = None) -> list[ModelMessage]:
        """`load`, awaited."""
        return cast(list[ModelMessage], await self._drive_async(self._load(limit)))

    def append(self, messages: Iterable[ModelMessage]) -> None:
        """Appends messages (a run's ``result.new_messages()``), each as one step, in order.
        Each message is written once even when a request is sent again."""
        self._drive_sync(self._append(list(messages)))

    async def aappend(self, messages: Iterable[ModelMessage]) -> None:
        """`append`, awaited."""
        await _finish(self._drive_async(self._append(list(messages))))

    def delete(self) -> None:
        """Empties the history (a step that says so; the steps before it stay inspectable)."""
        self._drive_sync(self._delete())

    async def adelete(self) -> None:
        """`delete`, awaited."""
        await _finish(self._drive_async(self._delete()))

    def autosave(self) -> "StepwiseAutosave":
        """A pydantic-ai capability that appends a run's new messages to this history as the
        run goes: after every model request and response, at the end of the run, and when
        the run fails (what it had so far)."""
        return StepwiseAutosave(self)

    def run_sync(self, agent: Any, user_prompt: Any = None, **kwargs: Any) -> Any:
        """``agent.run_sync`` continuing this conversation: loads the history, runs with
        `autosave`, returns the result."""
        kwargs.setdefault("message_history", self.load())
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or []), self.autosave()]
        return agent.run_sync(user_prompt, **kwargs)

    async def run(self, agent: Any, user_prompt: Any = None, **kwargs: Any) -> Any:
        """``await agent.run`` continuing this conversation (see `run_sync`)."""
        kwargs.setdefault("message_history", await self.aload())
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or []), self.autosave()]
        return await agent.run(user_prompt, **kwargs)


async def _finish(awaitable: Awaitable[_T]) -> _T:
    """Waits for a write's outcome even if the caller is cancelled meanwhile (then re-raises
    the cancellation), so what was acknowledged and the known version stay true."""
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


@dataclasses.dataclass(init=False)
class StepwiseAutosave(AbstractCapability[Any]):
    """Saves a run's new messages into a `StepwiseMessageHistory` while the run goes.

    The messages before the run (its ``message_history``) are taken as already stored; the
    ones the run adds are appended after every model request and response, at the end of the
    run, and, when the run fails, as far as it got.
    """

    history: StepwiseMessageHistory
    _saved: int | None

    def __init__(self, history: StepwiseMessageHistory) -> None:
        self.history = history
        self._saved = None

    async def for_run(self, ctx: Any) -> "StepwiseAutosave":
        return StepwiseAutosave(self.history)  # each run counts its own messages

    async def before_run(self, ctx: Any) -> None:
        self._saved = len(ctx.messages)

    async def _save(self, messages: Sequence[ModelMessage]) -> None:
        saved = self._saved or 0
        if len(messages) > saved:
            await self.history.aappend(messages[saved:])
            self._saved = len(messages)

    async def after_node_run(self, ctx: Any, *, node: Any, result: Any) -> Any:
        await self._save(list(ctx.messages))
        return result

    async def after_run(self, ctx: Any, *, result: Any) -> Any:
        await self._save(result.all_messages())
        return result

    async def on_run_error(self, ctx: Any, *, error: BaseException) -> Any:
        await self._save(list(ctx.messages))
        raise error
