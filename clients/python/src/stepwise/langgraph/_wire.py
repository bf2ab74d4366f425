"""The request building and answer reading both LangGraph savers share (`Wire`): encoding
values with LangGraph's serializer, the flat-storage delta of list channels (append blobs, and
references to the pending writes a node's output was stored as), the per-thread list cache and
the mirror of new messages into the session. No I/O here: the savers send what it builds."""

from __future__ import annotations

import binascii
import hashlib
import json
import random
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)

from .._errors import StepwiseError

# The server takes at most this many blobs or writes in one request.
_MAX_PER_REQUEST = 1000
# The largest `limit` of one list page.
_MAX_PAGE = 1000
# Serialized values this long or longer are stored zlib-compressed (type "<serde type>+zlib",
# like EncryptedSerializer's "+aes"), when that saves at least a tenth.
_COMPRESS_FROM = 256
_ZLIB = "+zlib"


# --------------------------------------------------------------------------- encoding


def _b64(data: bytes | bytearray | None) -> str:
    return binascii.b2a_base64(data or b"", newline=False).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return binascii.a2b_base64(text) if text else b""


def _json_safe(value: Any) -> Any:
    """Metadata goes to the server as JSON: values JSON cannot hold become strings."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))


def _version_key(version: Any) -> str:
    return version if isinstance(version, str) else str(version)


def _cacheable(version: str) -> bool:
    """Versions from LangGraph's scheme ("counter.random") never repeat with another value, so a
    list remembered at one is what the server holds for it (an int version might not be)."""
    return "." in version


def _common_prefix(prev: Sequence[Any], new: Sequence[Any]) -> bool:
    """Whether `new` starts with every item of `prev` (the same objects, or equal ones)."""
    if len(new) < len(prev):
        return False
    for old, cur in zip(prev, new):
        if old is cur:
            continue
        try:
            if old == cur:
                continue
        except Exception:  # noqa: BLE001 - an odd __eq__ means "not the same"
            return False
        return False
    return True


@dataclass(frozen=True)
class _Value:
    """A non-list channel value as serialized (``None``: the channel had no value)."""

    typed: Mapping[str, Any] | None


# What the cache holds of one channel: a list's items (a tuple), or a `_Value`.
_Held = tuple[str, "tuple[Any, ...] | _Value"]


class _ListCache:
    """Per (thread, namespace), per channel: the version of the value this saver last wrote
    or read, and the value: a list's items (a shallow copy, the base of the next append and
    of reads "since" that version), any other value serialized (reads "since" that version
    are unchanged). Bounded by (thread, namespace) pairs, least recently used first out."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str], dict[str, _Held]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str]) -> _Held | None:
        with self._lock:
            channels = self._data.get(key[:2])
            if channels is None:
                return None
            self._data.move_to_end(key[:2])
            return channels.get(key[2])

    def held(self, thread_id: str, checkpoint_ns: str) -> dict[str, _Held]:
        """{channel: (version, value)} of what is held for one thread and namespace."""
        with self._lock:
            return dict(self._data.get((thread_id, checkpoint_ns)) or {})

    def set(self, key: tuple[str, str, str], version: str, value: "Sequence[Any] | _Value") -> None:
        if self.maxsize <= 0:
            return
        held = value if isinstance(value, _Value) else tuple(value)
        with self._lock:
            channels = self._data.setdefault(key[:2], {})
            channels[key[2]] = (version, held)
            self._data.move_to_end(key[:2])
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def drop_threads(self, thread_ids: Sequence[str] | None) -> None:
        with self._lock:
            _drop_threads(self._data, thread_ids)


def _drop_threads(data: OrderedDict[Any, Any], thread_ids: Sequence[str] | None) -> None:
    """Drops the entries of `data` (keyed by tuples that start with a thread id) of the
    threads named, or all of them for `None`."""
    if thread_ids is None:
        data.clear()
        return
    wanted = set(thread_ids)
    for key in [k for k in data if k[0] in wanted]:
        del data[key]


@dataclass(frozen=True)
class _Written:
    """A pending write this saver stored whose value is a list: what an append can refer to."""

    task_id: str
    idx: int
    channel: str
    items: tuple[Any, ...]
    typed: Mapping[str, str]

    def reference(self) -> dict[str, Any]:
        """The append item that stands for this write: the server checks the digest against
        the bytes it stored."""
        digest = hashlib.sha256(_unb64(self.typed["data"])).hexdigest()
        return {"write": {"task_id": self.task_id, "idx": self.idx, "sha256": digest}}


class _WrittenLists:
    """The list-valued pending writes this saver stored, per (thread, namespace, checkpoint),
    for the next checkpoint's appends. Bounded, least recently written first out.

    LangGraph sends a task's writes and the next checkpoint concurrently; the put waits for
    writes of its parent that are on their way (`sending`), so it can refer to them. The sync
    saver's put of a loop checkpoint may even start before the thread that sends its parent's
    writes has begun: it waits a moment for that (`expect`), unless that thread's writes did
    not come last time (LangGraph's "exit" durability sends none)."""

    def __init__(self, maxsize: int = 256) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str, str], list[_Written]] = OrderedDict()
        self._sending: dict[tuple[str, str, str], int] = {}
        # Checkpoints whose writes were handed to this saver, and threads whose were not.
        self._begun: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._silent: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._cond = threading.Condition()

    def start(self, key: tuple[str, str, str]) -> None:
        with self._cond:
            self._sending[key] = self._sending.get(key, 0) + 1
            self._begun[key] = None
            self._begun.move_to_end(key)
            if len(self._begun) > self.maxsize:
                self._begun.popitem(last=False)
            self._silent.pop(key[:2], None)
            self._cond.notify_all()

    def finish(self, key: tuple[str, str, str], written: Sequence[_Written]) -> None:
        """The end of a `start`ed send: `written` is what was stored (empty when it failed)."""
        with self._cond:
            left = self._sending.get(key, 1) - 1
            if left > 0:
                self._sending[key] = left
            else:
                self._sending.pop(key, None)
            if written:
                self._data.setdefault(key, []).extend(written)
                self._data.move_to_end(key)
                while len(self._data) > self.maxsize:
                    self._data.popitem(last=False)
            self._cond.notify_all()

    def sending(self, key: tuple[str, str, str]) -> bool:
        with self._cond:
            return key in self._sending

    def of(self, key: tuple[str, str, str], channel: str, wait: float = 0.0, expect: float = 0.0) -> list[_Written]:
        """The writes of `key` on `channel`, after waiting up to `expect` seconds for them to
        be handed over (see the class) and up to `wait` seconds for those on their way."""
        with self._cond:
            if expect > 0 and key not in self._begun and key[:2] not in self._silent:
                if not self._cond.wait_for(lambda: key in self._begun, timeout=expect):
                    self._silent[key[:2]] = None
                    if len(self._silent) > self.maxsize:
                        self._silent.popitem(last=False)
            if wait > 0:
                self._cond.wait_for(lambda: key not in self._sending, timeout=wait)
            return [w for w in self._data.get(key) or () if w.channel == channel]

    def drop_threads(self, thread_ids: Sequence[str] | None) -> None:
        with self._cond:
            _drop_threads(self._data, thread_ids)
            _drop_threads(self._begun, thread_ids)
            _drop_threads(self._silent, thread_ids)


# --------------------------------------------------------------------------- mirror


def text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "\n".join(parts)
    return str(content)


_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
    "system": "system",
    "developer": "system",
}


def tool_call(tc: Any) -> dict[str, Any]:
    if not isinstance(tc, Mapping):
        return {"id": "", "name": str(tc), "arguments": {}}
    if "function" in tc and isinstance(tc["function"], Mapping):  # OpenAI shape
        fn = tc["function"]
        args: Any = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        return {"id": str(tc.get("id") or ""), "name": str(fn.get("name") or ""), "arguments": _json_safe(args)}
    return {
        "id": str(tc.get("id") or ""),
        "name": str(tc.get("name") or ""),
        "arguments": _json_safe(tc.get("args", tc.get("arguments", {}))),
    }


def mirror_message(message: Any) -> dict[str, Any] | None:
    """The Stepwise mirror of one LangChain message (or ``{"role", "content"}`` dict), or
    None for something that is not a message."""
    usage = None
    if isinstance(message, Mapping):
        role = _ROLES.get(str(message.get("role") or message.get("type") or ""))
        if role is None or "content" not in message:
            return None
        tool_calls = [tool_call(tc) for tc in message.get("tool_calls") or []]
        tool_call_id = message.get("tool_call_id")
        content = message.get("content")
    else:
        kind = getattr(message, "type", None)
        if not isinstance(kind, str) or not hasattr(message, "content"):
            return None
        role = _ROLES.get(kind)
        if role is None:
            return None
        tool_calls = [tool_call(tc) for tc in getattr(message, "tool_calls", None) or []]
        tool_call_id = getattr(message, "tool_call_id", None)
        content = message.content
        um = getattr(message, "usage_metadata", None)
        if um:
            usage = {"input": int(um.get("input_tokens", 0)), "output": int(um.get("output_tokens", 0))}
    return {
        "role": role,
        "content": text_of(content),
        "tool_calls": tool_calls if role == "assistant" else [],
        "tool_call_id": str(tool_call_id) if role == "tool" and tool_call_id is not None else None,
        "usage": usage,
    }


# --------------------------------------------------------------------------- the logic both savers share


# A put: (path, body, cache updates once stored, the config to return).
_PutRequest = tuple[str, dict[str, Any], list[tuple[tuple[str, str, str], str, "list[Any] | _Value"]], RunnableConfig]


class Wire:
    """Builds the HTTP requests of the checkpointer and reads their answers."""

    def __init__(
        self,
        saver: BaseCheckpointSaver[str],
        cache_size: int,
        mirror_channels: Sequence[str],
        compress: bool = True,
    ) -> None:
        self.saver = saver
        self.compress = compress
        self.cache = _ListCache(cache_size)
        self.written = _WrittenLists()
        self.mirror_channels = frozenset(mirror_channels)

    # -- values

    def dump(self, value: Any) -> dict[str, str]:
        type_, data = self.saver.serde.dumps_typed(value)
        if self.compress and data and len(data) >= _COMPRESS_FROM:
            packed = zlib.compress(data, 1)
            if len(packed) <= len(data) * 0.9:
                type_, data = type_ + _ZLIB, packed
        return {"type": type_, "data": _b64(data)}

    def load(self, typed: Mapping[str, Any]) -> Any:
        type_, data = typed["type"], _unb64(typed.get("data"))
        if type_.endswith(_ZLIB):
            type_, data = type_[: -len(_ZLIB)], zlib.decompress(data)
        return self.saver.serde.loads_typed((type_, data))

    # -- paths

    @staticmethod
    def thread_path(thread_id: str) -> str:
        if not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string, got {thread_id!r}")
        return f"/v1/threads/{quote(thread_id, safe='')}"

    # -- put

    def put_request(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        *,
        allow_append: bool = True,
        allow_refs: bool = True,
        wait: float = 0.0,
        expect: float = 0.0,
    ) -> _PutRequest:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        checkpoint_ns = conf.get("checkpoint_ns") or ""
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", None) or {}
        if all(isinstance(v, str) for v in checkpoint["channel_versions"].values()):
            # Sent beside it as JSON anyway (the server needs it); put back when read.
            del c["channel_versions"]
        blobs: list[dict[str, Any]] = []
        mirror: list[dict[str, Any]] = []
        cache_updates: list[tuple[tuple[str, str, str], str, list[Any] | _Value]] = []
        for channel, version in new_versions.items():
            vkey = _version_key(version)
            key = (thread_id, checkpoint_ns, channel)
            if channel not in values:
                blobs.append({"channel": channel, "version": vkey, "type": "empty", "data": ""})
                if _cacheable(vkey):
                    cache_updates.append((key, vkey, _Value(None)))
                continue
            value = values[channel]
            new_items: list[Any] | None = None
            if isinstance(value, list) and _cacheable(vkey):
                held = self.cache.get(key) if allow_append else None
                prev = (held[0], held[1]) if held is not None and not isinstance(held[1], _Value) else None
                if prev is not None and prev[0] != vkey and _common_prefix(prev[1], value):
                    base_version, prev_items = prev
                    new_items = value[len(prev_items):]
                    parent = conf.get("checkpoint_id")
                    # A loop checkpoint's new items come from its parent's tasks, whose
                    # writes are sent (or about to be) by put_writes.
                    written = (
                        self.written.of(
                            (thread_id, checkpoint_ns, str(parent)),
                            channel,
                            wait,
                            expect if metadata.get("source") == "loop" else 0.0,
                        )
                        if parent and allow_refs
                        else []
                    )
                    blobs.append(
                        {
                            "channel": channel,
                            "version": vkey,
                            "base_version": base_version,
                            "items": self._append_items(new_items, written),
                        }
                    )
                else:
                    blobs.append({"channel": channel, "version": vkey, **self.dump(value)})
                    new_items = value if prev is None else self._new_since(prev[1], value)
                cache_updates.append((key, vkey, list(value)))
            else:
                typed = self.dump(value)
                blobs.append({"channel": channel, "version": vkey, **typed})
                if _cacheable(vkey):
                    cache_updates.append((key, vkey, _Value(typed)))
            if channel in self.mirror_channels and new_items:
                mirror.extend(m for m in map(mirror_message, new_items) if m is not None)
        body: dict[str, Any] = {
            "checkpoint_ns": checkpoint_ns,
            "parent_checkpoint_id": conf.get("checkpoint_id"),
            "checkpoint": self.dump(c),
            "metadata": _json_safe(get_serializable_checkpoint_metadata(config, metadata)),
            "channel_versions": {k: _version_key(v) for k, v in checkpoint["channel_versions"].items()},
            "blobs": blobs,
        }
        if mirror:
            body["mirror"] = mirror
        path = f"{self.thread_path(thread_id)}/checkpoints/{quote(str(checkpoint['id']), safe='')}"
        result: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return path, body, cache_updates, result

    def _append_items(self, new_items: Sequence[Any], written: Sequence[_Written]) -> list[dict[str, Any]]:
        """The items of an append: a run of new items that is exactly the list a pending write
        holds (the same objects, serialized to the same bytes) goes as a reference to it."""
        out: list[dict[str, Any]] = []
        used: set[int] = set()
        i, n = 0, len(new_items)
        while i < n:
            for k, w in enumerate(written):
                size = len(w.items)
                if k in used or size > n - i or any(a is not b for a, b in zip(w.items, new_items[i : i + size])):
                    continue
                # Equal bytes, or the items changed since they were written (a reducer may
                # set ids on them): then they are sent as they are now.
                if self.dump(list(new_items[i : i + size])) == w.typed:
                    out.append(w.reference())
                    used.add(k)
                    i += size
                    break
            else:
                out.append(self.dump(new_items[i]))
                i += 1
        return out

    @staticmethod
    def _new_since(prev: Sequence[Any], value: list[Any]) -> list[Any]:
        """Items of `value` after the longest common prefix with `prev` (a fork, an edit)."""
        n = 0
        for old, cur in zip(prev, value):
            if old is cur:
                n += 1
                continue
            try:
                same = bool(old == cur)
            except Exception:  # noqa: BLE001
                same = False
            if not same:
                break
            n += 1
        return value[n:]

    def fallback(
        self,
        error: StepwiseError,
        body: Mapping[str, Any],
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> _PutRequest | None:
        """The put to send after `body` was refused: its appends without references to pending
        writes (one is gone, or holds other bytes), then its lists whole (a base version is
        gone, e.g. pruned elsewhere); `None` when there is nothing else to try."""
        if error.status not in (400, 404, 409, 422):
            return None
        appends = [b for b in body["blobs"] if "base_version" in b]
        if any("write" in item for b in appends for item in b["items"]):
            return self.put_request(config, checkpoint, metadata, new_versions, allow_refs=False)
        if appends:
            return self.put_request(config, checkpoint, metadata, new_versions, allow_append=False)
        return None

    def commit(self, updates: list[tuple[tuple[str, str, str], str, list[Any] | _Value]]) -> None:
        for key, version, value in updates:
            self.cache.set(key, version, value)

    @staticmethod
    def writes_key(config: RunnableConfig) -> tuple[str, str, str]:
        conf = config["configurable"]
        return (str(conf["thread_id"]), conf.get("checkpoint_ns") or "", str(conf["checkpoint_id"]))

    @contextmanager
    def sending_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Iterator[list[tuple[str, dict[str, Any]]]]:
        """The requests of a put_writes, to send inside the block. Once they are all sent,
        its list-valued writes are remembered: the next checkpoint's appends may refer to
        them instead of sending (and storing) their items again."""
        key = self.writes_key(config)
        self.written.start(key)
        stored = False
        lists: list[_Written] = []
        try:
            requests = self.writes_requests(config, writes, task_id, task_path)
            rows = [row for _, body in requests for row in body["writes"]]
            lists = [
                _Written(task_id, row["idx"], channel, tuple(value), {"type": row["type"], "data": row["data"]})
                for (channel, value), row in zip(writes, rows)
                if isinstance(value, list) and value and row["idx"] >= 0
            ]
            yield requests
            stored = True
        finally:
            self.written.finish(key, lists if stored else [])

    def drop_threads(self, thread_ids: Sequence[str] | None) -> None:
        self.cache.drop_threads(thread_ids)
        self.written.drop_threads(thread_ids)

    # -- put_writes

    def writes_requests(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> list[tuple[str, dict[str, Any]]]:
        conf = config["configurable"]
        path = (
            f"{self.thread_path(str(conf['thread_id']))}/checkpoints/"
            f"{quote(str(conf['checkpoint_id']), safe='')}/writes"
        )
        rows = [
            {"idx": WRITES_IDX_MAP.get(channel, idx), "channel": channel, **self.dump(value)}
            for idx, (channel, value) in enumerate(writes)
        ]
        base = {"checkpoint_ns": conf.get("checkpoint_ns") or "", "task_id": task_id, "task_path": task_path}
        return [
            (path, {**base, "writes": rows[i : i + _MAX_PER_REQUEST]})
            for i in range(0, len(rows), _MAX_PER_REQUEST)
        ]

    # -- reading

    def get_request(
        self, config: RunnableConfig
    ) -> tuple[str, dict[str, str], dict[str, _Held]]:
        conf = config["configurable"]
        thread_id = str(conf["thread_id"])
        checkpoint_ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = get_checkpoint_id(config)
        tail = quote(str(checkpoint_id), safe="") if checkpoint_id else "latest"
        params = {"checkpoint_ns": checkpoint_ns}
        # The lists this saver already holds: the server answers only what was appended since.
        held = self.cache.held(thread_id, checkpoint_ns)
        if held:
            params["have"] = json.dumps({ch: v for ch, (v, _) in held.items()}, separators=(",", ":"))
        return f"{self.thread_path(thread_id)}/checkpoints/{tail}", params, held

    def list_request(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
    ) -> tuple[str, dict[str, str]]:
        params: dict[str, str] = {}
        if config is None:
            path = "/v1/checkpoints"
        else:
            conf = config["configurable"]
            path = f"{self.thread_path(str(conf['thread_id']))}/checkpoints"
            ns = conf.get("checkpoint_ns")
            if ns is not None:
                params["checkpoint_ns"] = ns
        if before is not None and (before_id := get_checkpoint_id(before)):
            params["before"] = str(before_id)
        if filter:
            params["filter"] = json.dumps(_json_safe(filter), separators=(",", ":"))
        return path, params

    @staticmethod
    def list_page_params(params: dict[str, str], remaining: int | None, cursor: str | None) -> dict[str, str]:
        page = dict(params)
        if remaining is not None:
            page["limit"] = str(min(remaining, _MAX_PAGE))
        if cursor:
            page["cursor"] = cursor
        return page

    @staticmethod
    def matches(tup: CheckpointTuple, filter: dict[str, Any] | None, before: RunnableConfig | None) -> bool:
        if before is not None and (before_id := get_checkpoint_id(before)):
            if tup.checkpoint["id"] >= before_id:
                return False
        if filter:
            return all(tup.metadata.get(k) == v for k, v in filter.items())
        return True

    def tuple_from(
        self,
        answer: Mapping[str, Any],
        *,
        remember: bool = False,
        held: Mapping[str, _Held] | None = None,
    ) -> CheckpointTuple:
        thread_id = answer["thread_id"]
        checkpoint_ns = answer.get("checkpoint_ns") or ""
        checkpoint: Checkpoint = self.load(answer["checkpoint"])
        if "channel_versions" not in checkpoint:
            checkpoint["channel_versions"] = dict(answer.get("channel_versions") or {})
        values: dict[str, Any] = {}
        for blob in answer.get("blobs") or []:
            channel = blob["channel"]
            if "items" in blob:
                since = blob.get("since")
                if since is not None:
                    mine = (held or {}).get(channel)
                    if mine is None or mine[0] != since or (isinstance(mine[1], _Value) and blob["items"]):
                        raise StepwiseError(
                            "invalid_answer",
                            f"the server answered {channel!r} since version {since!r}, which this saver did not send",
                        )
                    if isinstance(mine[1], _Value):  # unchanged since the version held
                        if remember:
                            self.cache.set((thread_id, checkpoint_ns, channel), since, mine[1])
                        if mine[1].typed is not None:
                            values[channel] = self.load(mine[1].typed)
                        continue
                    value = list(mine[1])
                else:
                    base = blob.get("base")
                    value = list(self.load(base)) if base else []
                for item in blob["items"]:
                    if item.get("splice"):  # a pending write's list, stored once
                        value.extend(self.load(item))
                    else:
                        value.append(self.load(item))
            else:
                typed = {"type": blob["type"], "data": blob.get("data") or ""}
                version = _version_key(blob["version"])
                if blob.get("type") == "empty":
                    if remember and _cacheable(version):
                        self.cache.set((thread_id, checkpoint_ns, channel), version, _Value(None))
                    continue
                value = self.load(typed)
                if remember and not isinstance(value, list) and _cacheable(version):
                    self.cache.set((thread_id, checkpoint_ns, channel), version, _Value(typed))
            values[channel] = value
            if remember and isinstance(value, list) and _cacheable(_version_key(blob["version"])):
                self.cache.set((thread_id, checkpoint_ns, channel), _version_key(blob["version"]), value)
        rows = sorted(
            answer.get("pending_writes") or [],
            key=lambda w: writes_sort_key(w.get("task_path") or "", w["task_id"], w["idx"]),
        )
        parent = answer.get("parent_checkpoint_id")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": answer["checkpoint_id"],
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=cast(CheckpointMetadata, answer.get("metadata") or {}),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": checkpoint_ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[(w["task_id"], w["channel"], self.load(w)) for w in rows],
        )


# Digits of the counter of a new thread's versions (10^12 versions). Versions are compared
# as strings (by LangGraph and by the server), so all of one thread's have one width: a
# thread whose versions have another (32, as LangGraph's own savers and earlier clients of
# Stepwise write them) keeps it.
_VERSION_DIGITS = 12


def next_version(current: str | int | float | None) -> str:
    """LangGraph's string versions: a zero-padded counter, a dot, 48 random bits in hex (two
    forks of a thread never give one channel the same version). 25 characters, where
    LangGraph's own savers write 51: a version is stored with every value and checkpoint."""
    width = _VERSION_DIGITS
    if current is None:
        current_v = 0
    elif isinstance(current, (int, float)):
        current_v = int(current)
    else:
        head = current.split(".")[0]
        current_v = int(head)
        width = len(head)
    return f"{current_v + 1:0{width}}.{random.getrandbits(48):012x}"


def is_not_found(error: StepwiseError) -> bool:
    return error.status == 404
