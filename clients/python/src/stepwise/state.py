"""A Pydantic model per conversation, kept in Stepwise: saved after every message without
blocking, restored on reconnect, scoped to the API key's tenant, cleaned up by status.

```python
from pydantic import BaseModel
from stepwise.state import StepwiseState

class ConversationContext(BaseModel):
    session_id: str
    state: str = "idle"
    message_history: list[dict[str, str]] = []

store = StepwiseState(ConversationContext)          # STEPWISE_URL / STEPWISE_API_KEY
ctx = store.load("chat-42") or ConversationContext(session_id="chat-42")
ctx.message_history.append({"role": "user", "content": "Hello"})
store.save("chat-42", ctx)                          # returns at once; sent in the background
store.close()                                       # waits until everything is stored
```

How it is kept:

* A session key (any non-empty string) names a Stepwise session of the caller's tenant (the
  tenant of the API key: another key's tenant never sees it). A valid Stepwise name is used as
  it is, any other string maps to ``st-<readable part>-<16 hex of its SHA-256>``.
* Every save is a snapshot (the model as JSON, ``model_dump(mode="json")``) of an external
  execution of that session; the latest is the state. Snapshots are append-only: earlier
  states stay inspectable in the web UI and the API.
* ``save`` puts the model in the in-memory cache and queues it; a background thread sends
  it. Saves of one session waiting together are sent as one (the latest state). A send that
  fails for a while (server down, network, 408, 429, 5xx) is logged and retried with backoff
  until it succeeds or the store is closed; one the server refuses for good (any other 4xx:
  413 too large, 400/422 invalid, 401/403, ...) is dropped and reported: a `StateSaveError`
  in ``errors``, a log line, the ``on_error`` callback, and ``flush()`` answering ``False``.
  ``flush()`` waits for the queue, ``close()`` (and leaving ``with``, and the interpreter's
  exit) flushes.
* ``index=`` maps a model to a small dict of JSON scalars (seed 003's ``state``,
  ``skill_name``) kept in the Stepwise session's metadata, sent only when it changes;
  ``find(state="generating")`` lists the keys whose metadata match
  (``GET /v1/sessions?metadata.state=generating``).
* ``load`` answers from the cache first (the same object that was saved or loaded), else from
  the server, and caches it. A stored state that no longer validates as the model is logged
  and answers ``None`` (it stays stored).
* ``status=`` maps a model to the Stepwise session status (``"active"``, ``"completed"``,
  ``"archived"``, ``"closed"``, or ``None`` to leave it): the server's retention cleaner
  deletes ``completed`` sessions after 90 days and marks ``active`` ones idle for 30 days
  ``abandoned``, deleting those 30 days later (the numbers are server settings).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Generic, TypeVar, Union

try:
    from pydantic import BaseModel, ValidationError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stepwise.state needs pydantic 2: pip install 'pydantic>=2'") from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError
from ._names import session_name_for

__all__ = ["StateSaveError", "StepwiseState", "state_session_name"]

logger = logging.getLogger("stepwise.state")

M = TypeVar("M", bound=BaseModel)

# Metadata of the Stepwise session (the key) and of the execution holding the snapshots.
METADATA_KEY = "stepwise_state_key"
EXECUTION_MARK = "stepwise_state"
SNAPSHOT_FORMAT = "stepwise.state/1"
STATUSES = ("active", "completed", "archived", "closed")
_MAX_TITLE_CHARS = 500
_MAX_BACKOFF = 5.0
MAX_ERRORS = 100  # the `errors` a store keeps (the latest)
_MAX_RELOCATIONS = 3  # a save's tries to find its session/execution again before it is dropped
_MAX_METADATA_BYTES = 16 * 1024  # the server's limit on a session's metadata (JSON)
_MAX_ERROR_MESSAGE_CHARS = 500

#: A value `index=` may put in the metadata: a JSON scalar.
IndexValue = Union[str, int, float, bool, None]


def state_session_name(key: str) -> str:
    """The Stepwise session name a session key maps to (a valid name as it is, any other string
    ``st-<readable part>-<first 16 hex digits of its SHA-256>``)."""
    return session_name_for(key, "st")


def _check_key(session: str) -> str:
    if not isinstance(session, str) or not session.strip():
        raise ValueError(f"session must be a non-empty string, got {session!r}")
    return session


@dataclass(frozen=True)
class StateSaveError:
    """A save the server refused for good: it was dropped (not retried), the ones after it go on.

    Attributes:
        key: the session key of the save.
        status: the HTTP status of the refusal (413, 400, 422, 401, 403, 404, 409, ...).
        code: the API's error code (``payload_too_large``, ``invalid_request``, ...).
        message: the server's sentence (cut to 500 characters); never the state itself.
        at: when it was dropped (UTC).
    """

    key: str
    status: int | None
    code: str
    message: str
    at: datetime


@dataclass
class _Pending:
    model: BaseModel
    payload: dict[str, Any]
    status: str | None
    seq: int
    # `index=`'s dict for this save (``None``: no indexing, or its value was refused).
    index: dict[str, IndexValue] | None = None
    relocations: int = 0


@dataclass
class _Where:
    session_id: str
    execution_id: str | None = None
    status: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def _permanent(exc: BaseException, item: _Pending) -> bool:
    """Whether a failed send is refused for good (dropped) rather than worth retrying: a 4xx
    but 408 and 429; a 404/409/422 of a session or execution gone or finished meanwhile is
    found again (a new execution) a few times first."""
    if not isinstance(exc, StepwiseError) or exc.status is None:
        return False  # no answer (connection_error), or a bug of this module: retried
    if exc.status in (408, 429) or exc.status >= 500 or exc.status < 400:
        return False
    if exc.code == "lease_lost":
        return False
    if exc.code in ("not_found", "invalid_state", "conflict") and getattr(exc, "_state_relocate", False):
        return item.relocations > _MAX_RELOCATIONS
    return True


def _check_index(value: Any) -> dict[str, IndexValue]:
    """`index=`'s answer as a dict of str keys and JSON scalars, else `ValueError`/`TypeError`."""
    if not isinstance(value, Mapping):
        raise TypeError(f"index must return a dict, got {type(value).__name__}")
    out: dict[str, IndexValue] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k:
            raise TypeError(f"index keys must be non-empty strings, got {k!r}")
        if k == METADATA_KEY:
            raise ValueError(f"index key {METADATA_KEY!r} is this store's own")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise TypeError(f"index value of {k!r} must be a str, int, float, bool or None, got {type(v).__name__}")
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"index value of {k!r} is not a finite number")
        out[k] = v
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON (``True`` is not ``1``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _query_value(value: Any) -> str:
    """A metadata value as a query string value: strings as they are, others as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


class StepwiseState(Generic[M]):
    """One Pydantic model per session, kept in Stepwise (see the module's documentation).

    Args:
        model: the Pydantic model class stored (a `pydantic.BaseModel` subclass).
        client: a `Stepwise` (used as it is, from this store's threads; left open) or an
            `AsyncStepwise` (its URL, key, timeout and retries are used for a `Stepwise` of
            this store's own). Default: one from ``$STEPWISE_URL`` and ``$STEPWISE_API_KEY``.
        base_url, api_key: the server and key when no client is given.
        status: maps a model to the session's status (``"active"``, ``"completed"``,
            ``"archived"``, ``"closed"``) or ``None`` (leave it); applied after each save.
        index: maps a model to a small dict of str keys and JSON scalars (``str``, ``int``,
            ``float``, ``bool``, ``None``), e.g. ``{"state": ..., "skill_name": ...}``, kept in
            the Stepwise session's metadata (next to this store's own key) and sent only when
            it changed; `find` lists the keys by it. A value of another shape (or an exception)
            is logged and that save is not indexed; the save itself is stored.
        on_error: called with a `StateSaveError` for each save the server refused for good
            (from the background thread; what it raises is logged, never propagated).
        cache_size: how many sessions' models the in-memory cache keeps (least recently
            used go first; 0 turns it off).
        close_timeout: how long `close()` (and the interpreter's exit) waits for unsent saves.

    Attributes:
        errors: the latest `StateSaveError` records (at most 100, oldest first): the saves
            dropped because the server refused them for good.
        last_error: the last failure of the background thread (retried or dropped).
    """

    def __init__(
        self,
        model: type[M],
        client: Stepwise | AsyncStepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        status: Callable[[M], str | None] | None = None,
        index: Callable[[M], Mapping[str, IndexValue]] | None = None,
        on_error: Callable[[StateSaveError], Any] | None = None,
        cache_size: int = 1024,
        close_timeout: float = 30.0,
    ) -> None:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"model must be a pydantic.BaseModel subclass, got {model!r}")
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("give either client or base_url/api_key, not both")
        if client is not None and not isinstance(client, (Stepwise, AsyncStepwise)):
            raise TypeError(f"client must be a stepwise.Stepwise or AsyncStepwise, got {type(client).__name__}")
        if not isinstance(cache_size, int) or cache_size < 0:
            raise ValueError(f"cache_size must be an integer >= 0, got {cache_size!r}")
        if index is not None and not callable(index):
            raise TypeError(f"index must be a callable (model -> dict), got {type(index).__name__}")
        if on_error is not None and not callable(on_error):
            raise TypeError(f"on_error must be a callable, got {type(on_error).__name__}")
        self.model = model
        self.status = status
        self.index = index
        self.on_error = on_error
        self.cache_size = cache_size
        self.close_timeout = close_timeout
        self._owns_client = not isinstance(client, Stepwise)
        if isinstance(client, Stepwise):
            self.client = client
        elif isinstance(client, AsyncStepwise):
            self.client = Stepwise(client.base_url, client.api_key, timeout=client.timeout,
                                   max_retries=client.max_retries)
        else:
            self.client = Stepwise(base_url, api_key)
        self._model_name = f"{model.__module__}.{model.__qualname__}"
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._cache: OrderedDict[str, BaseModel] = OrderedDict()
        self._pending: dict[str, _Pending] = {}
        self._in_flight: dict[str, _Pending] = {}
        self._where: dict[str, _Where] = {}
        self._seq = 0
        self._closed = False
        self._failures = 0
        self.last_error: BaseException | None = None
        self.errors: list[StateSaveError] = []
        self._dropped = 0  # saves dropped so far
        self._dropped_seen = 0  # ... of which a `flush` already answered False for
        self._indexed: dict[str, dict[str, IndexValue]] = {}  # the index last sent, per key
        self._thread: threading.Thread | None = None
        self._exit_hook = _exit_hook(self)
        atexit.register(self._exit_hook)

    def __repr__(self) -> str:
        return f"StepwiseState({self.model.__name__}, url={self.client.base_url!r})"

    def __enter__(self) -> "StepwiseState[M]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the cache --------------------------------------------------------------------------

    def _cache_put(self, key: str, model: BaseModel) -> None:
        if self.cache_size == 0:
            return
        self._cache[key] = model
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def cached(self, session: str) -> M | None:
        """The model of `session` in the in-memory cache (or waiting to be sent), else ``None``;
        never asks the server."""
        key = _check_key(session)
        with self._lock:
            found = self._cache.get(key)
            if found is None:
                pending = self._pending.get(key) or self._in_flight.get(key)
                found = pending.model if pending is not None else None
            return found  # type: ignore[return-value]

    def forget(self, session: str | None = None) -> None:
        """Drops `session` (all sessions when ``None``) from the in-memory cache; the next
        `load` reads the server. Saves waiting to be sent are kept."""
        with self._lock:
            if session is None:
                self._cache.clear()
            else:
                self._cache.pop(_check_key(session), None)

    # --- saving -----------------------------------------------------------------------------

    def save(self, session: str, ctx: M, *, status: str | None = None) -> None:
        """Caches `ctx` and queues it to be stored as the state of `session`; returns at once.

        The model is serialised now (``model_dump(mode="json")``), so later changes to `ctx`
        need another save. `status` (else the store's ``status`` function) sets the Stepwise
        session's status after the write. Raises `ValueError`/`TypeError` for a bad session
        key, a model of another class, or a state that is not JSON; never for the network.
        """
        key = _check_key(session)
        if not isinstance(ctx, self.model):
            raise TypeError(f"ctx must be a {self.model.__name__}, got {type(ctx).__name__}")
        wanted = status if status is not None else (self.status(ctx) if self.status is not None else None)
        if wanted is not None and wanted not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, got {wanted!r}")
        value = ctx.model_dump(mode="json")
        json.dumps(value, allow_nan=False)  # a state that is not JSON fails here, not later
        payload = {"format": SNAPSHOT_FORMAT, "model": self._model_name, "key": key, "value": value}
        indexed = self._index_of(ctx) if self.index is not None else None
        with self._lock:
            if self._closed:
                raise RuntimeError("this StepwiseState is closed")
            self._seq += 1
            self._pending[key] = _Pending(ctx, payload, wanted, self._seq, indexed)
            self._cache_put(key, ctx)
            self._start()
            self._changed.notify_all()

    def _index_of(self, ctx: M) -> dict[str, IndexValue] | None:
        """`index(ctx)`, checked; ``None`` (logged, the save goes on) when it fails or is not a
        dict of str keys and JSON scalars."""
        assert self.index is not None
        try:
            return _check_index(self.index(ctx))
        except Exception as exc:  # noqa: BLE001 - the save goes on without indexing
            logger.warning("StepwiseState(%s): index= failed, this save is not indexed: %s: %s",
                           self.model.__name__, type(exc).__name__, exc)
            return None

    @contextmanager
    def saving(self, session: str, ctx: M) -> Iterator[M]:
        """Saves `ctx` when the block ends, whether it ends normally or by an exception (the
        exception goes on): the error path keeps the context too."""
        try:
            yield ctx
        finally:
            self.save(session, ctx)

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every queued save is stored or dropped; ``False`` if some are still
        unsent after `timeout` seconds (``None``: no limit), or when a save was dropped since
        the previous `flush` (refused by the server for good: see ``errors``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left if left is None else min(left, 1.0))
            clean = self._dropped == self._dropped_seen
            self._dropped_seen = self._dropped
            return clean

    async def aflush(self, timeout: float | None = None) -> bool:
        """`flush` for asyncio code (waits in a worker thread)."""
        return await asyncio.to_thread(self.flush, timeout)

    @property
    def unsent(self) -> list[str]:
        """The sessions whose latest save is not stored yet."""
        with self._lock:
            return sorted(set(self._pending) | set(self._in_flight))

    def close(self) -> bool:
        """Flushes (up to ``close_timeout`` seconds), stops the background thread and closes
        the store's own client. ``False`` (and an error logged naming them) when some saves
        could not be stored."""
        if self._closed:
            return not self.unsent
        stored = self.flush(self.close_timeout)
        with self._lock:
            self._closed = True
            self._changed.notify_all()
            left = sorted(set(self._pending) | set(self._in_flight))
        if self._thread is not None:
            self._thread.join(timeout=5)
        atexit.unregister(self._exit_hook)
        if left:
            logger.error("StepwiseState closed with unsent saves of %s (last error: %s)", left, self.last_error)
        if self._owns_client:
            self.client.close()
        return stored and not left

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="stepwise-state", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff = 0.0
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._changed.wait()
                if not self._pending:
                    return
                if self._closed and backoff:
                    return  # closing: no more retries of a failing server
                key, item = next(iter(self._pending.items()))
                del self._pending[key]
                self._in_flight[key] = item
            try:
                self._write(key, item)
            except Exception as exc:  # noqa: BLE001 - logged and retried, never raised to the caller
                if getattr(exc, "_state_relocate", False):
                    item.relocations += 1
                if _permanent(exc, item):
                    self._drop(key, item, exc)
                    backoff = 0.0
                    continue
                with self._lock:
                    self._failures += 1
                    self.last_error = exc
                    del self._in_flight[key]
                    if key not in self._pending:  # no newer save meanwhile: retry this one
                        self._pending[key] = item
                    backoff = min(_MAX_BACKOFF, (backoff * 2) or 0.05)
                    logger.warning("could not save the state of %r (retrying in %.2fs): %s", key, backoff, exc)
                    self._changed.notify_all()
                    self._changed.wait(backoff)
                continue
            backoff = 0.0
            with self._lock:
                del self._in_flight[key]
                self._changed.notify_all()

    def _drop(self, key: str, item: _Pending, exc: BaseException) -> None:
        """Drops a save the server refused for good and reports it (``errors``, the log,
        ``on_error``); a newer save of the key waiting meanwhile goes on."""
        assert isinstance(exc, StepwiseError)
        error = StateSaveError(
            key=key,
            status=exc.status,
            code=exc.code,
            message=str(exc.message)[:_MAX_ERROR_MESSAGE_CHARS],
            at=datetime.now(timezone.utc),
        )
        with self._lock:
            self._failures += 1
            self.last_error = exc
            self._dropped += 1
            self.errors.append(error)
            del self.errors[:-MAX_ERRORS]
        # The server's answer, never the state (it may be large or private).
        logger.error("the server refused the state of %r for good (%s %s: %s); this save is dropped, "
                     "later saves go on", key, error.status, error.code, error.message)
        if self.on_error is not None:
            try:
                self.on_error(error)
            except Exception as callback_error:  # noqa: BLE001 - never stops the sender
                logger.error("StepwiseState on_error callback raised %s: %s",
                             type(callback_error).__name__, callback_error,
                             exc_info=(type(callback_error), callback_error, callback_error.__traceback__))
        with self._lock:
            # Only now: a `flush` that answers False has had the error reported everywhere.
            del self._in_flight[key]
            self._changed.notify_all()

    def _write(self, key: str, item: _Pending) -> None:
        where = self._where.get(key) or self._locate(key, create=True)[0]
        assert where is not None
        try:
            if where.execution_id is None:
                opened = self.client.open_execution(
                    where.session_id,
                    input={"stepwise_state": self._model_name, "key": key},
                    metadata={EXECUTION_MARK: self._model_name},
                    # A state holder, not a run: held open across processes, never leased.
                    lease=False,
                )
                where.execution_id = str(opened["id"])
            # The new state replaces the earlier ones: one row per session, however many saves.
            self.client.save_snapshot(
                where.execution_id, item.payload, agent_name=self._model_name, replace=True
            )
        except StepwiseError as e:
            if e.code in ("not_found", "invalid_state", "conflict", "lease_lost"):
                self._where.pop(key, None)  # gone or finished meanwhile: locate again next time
                e._state_relocate = True  # type: ignore[attr-defined]
            raise
        # A snapshot does not count as activity for the retention cleaner: the PATCH (with the
        # status, or empty) marks the session as used now, so an active one is not abandoned.
        # It carries the metadata too when `index=` changed it.
        try:
            metadata = self._metadata_for(key, item, where)
            try:
                updated = self.client.update_session(where.session_id, status=item.status, metadata=metadata)
            except StepwiseError as e:
                if metadata is None or e.status != 400 or e.field != "metadata":
                    raise
                # The index does not fit the server's metadata limits: the state is stored,
                # only its index is not.
                logger.warning("the index of %r was refused (%s); this save is not indexed", key, e.message)
                metadata = None
                updated = self.client.update_session(where.session_id, status=item.status)
            # An abandoned session is active again: the server did it on the snapshot.
        except StepwiseError as e:
            if e.code == "not_found":
                self._where.pop(key, None)
                e._state_relocate = True  # type: ignore[attr-defined]
            raise
        where.status = str(updated.get("status"))
        if isinstance(updated.get("metadata"), dict):
            where.metadata = dict(updated["metadata"])
        if metadata is not None and item.index is not None:
            self._indexed[key] = item.index

    def _metadata_for(self, key: str, item: _Pending, where: _Where) -> dict[str, Any] | None:
        """The session's metadata with this save's index, or ``None`` when it is unchanged since
        the last one sent (or the save has no index). The session's metadata is read again
        first, so that keys others set meanwhile are kept; this store's key is always there,
        the keys the previous index had and this one has not are removed."""
        if item.index is None:
            return None
        previous = self._indexed.get(key)
        if previous is not None:
            if _same(previous, item.index):
                return None
        elif all(k in where.metadata and _same(where.metadata[k], v) for k, v in item.index.items()):
            self._indexed[key] = item.index  # already on the server (sent by an earlier process)
            return None
        current = self.client.get_session(where.session_id).get("metadata")
        where.metadata = dict(current) if isinstance(current, dict) else {}
        merged = {k: v for k, v in where.metadata.items() if previous is None or k not in previous}
        merged.update(item.index)
        merged[METADATA_KEY] = key
        if len(json.dumps(merged).encode()) > _MAX_METADATA_BYTES:
            logger.warning("the index of %r makes the session's metadata larger than %d bytes; "
                           "this save is not indexed", key, _MAX_METADATA_BYTES)
            return None
        return merged

    def _locate(self, key: str, *, create: bool) -> tuple[_Where | None, dict[str, Any] | None]:
        """Finds (or creates) the key's Stepwise session and its state execution; also
        answers the newest state execution that has a snapshot."""
        name = state_session_name(key)
        found = self.client.find_session(name)
        if found is None and create:
            try:
                found = self.client.create_session(
                    name=name,
                    title="".join(c if c.isprintable() else " " for c in key)[:_MAX_TITLE_CHARS],
                    metadata={METADATA_KEY: key},
                )
            except StepwiseError as e:
                if e.code != "conflict":
                    raise
                found = self.client.find_session(name)
                if found is None:
                    raise StepwiseError(
                        "conflict", f"the Stepwise session named {name!r} (key {key!r}) is deleted", status=409
                    ) from e
        if found is None:
            return None, None
        metadata = found.get("metadata")
        owner = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
        if owner is not None and owner != key:
            raise StepwiseError(
                "conflict", f"the Stepwise session named {name!r} belongs to key {owner!r}, not {key!r}", status=409
            )
        metadata = metadata if isinstance(metadata, dict) else {}
        where = _Where(str(found["id"]), status=found.get("status"), metadata=dict(metadata))
        stored = [
            e for e in self.client.list_executions(where.session_id)
            if isinstance(e.get("metadata"), dict) and e["metadata"].get(EXECUTION_MARK)
        ]
        # This model's own states; when there are none (the class was renamed or moved to
        # another module), the states any model stored under this key.
        executions = [e for e in stored if e["metadata"][EXECUTION_MARK] == self._model_name] or stored
        executions.sort(key=lambda e: (str(e.get("created_at") or ""), str(e["id"])), reverse=True)
        running = [
            e for e in executions
            if e.get("status") == "running" and e["metadata"][EXECUTION_MARK] == self._model_name
        ]
        where.execution_id = str(running[0]["id"]) if running else None
        self._where[key] = where
        return where, next((e for e in executions if e.get("last_snapshot_id")), None)

    # --- loading ----------------------------------------------------------------------------

    def load(self, session: str) -> M | None:
        """The model of `session`: from the cache (or a save not sent yet), else the latest
        stored state (then cached); ``None`` when none is stored or it no longer validates."""
        found = self.cached(session)
        if found is not None:
            return found
        key = _check_key(session)
        loaded = self._read(key)
        if loaded is not None:
            with self._lock:
                # A save made meanwhile is newer than what was read.
                newer = self._pending.get(key) or self._in_flight.get(key)
                if newer is not None:
                    return newer.model  # type: ignore[return-value]
                self._cache_put(key, loaded)
        return loaded

    async def aload(self, session: str) -> M | None:
        """`load` for asyncio code (the request runs in a worker thread)."""
        found = self.cached(session)
        if found is not None:
            return found
        return await asyncio.to_thread(self.load, session)

    def _read(self, key: str) -> M | None:
        where, latest = self._locate(key, create=False)
        if where is None or latest is None:
            return None
        snapshot = self.client.get_snapshot(str(latest["last_snapshot_id"]))
        state = snapshot.get("state")
        value = state.get("value") if isinstance(state, dict) else None
        try:
            if not isinstance(state, dict) or state.get("format") != SNAPSHOT_FORMAT:
                raise ValueError("not a StepwiseState snapshot")
            return self.model.model_validate(value)
        except (ValidationError, ValueError, TypeError) as exc:
            logger.warning("the stored state of %r is not a valid %s (%s); answering None",
                           key, self.model.__name__, exc)
            return None

    def keys(self, *, status: str | list[str] | None = None) -> list[str]:
        """The session keys this tenant has states of (any model), newest first: all but the
        deleted ones, or those of `status` (``"active"``, ``"completed"``, ``"abandoned"``,
        ``"deleted"``, ...)."""
        found = []
        for session in self.client.list_sessions(status=status):
            metadata = session.get("metadata")
            key = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
            if isinstance(key, str):
                found.append(key)
        return found

    def find(self, **metadata: IndexValue) -> list[str]:
        """The session keys (of any model) whose session metadata has each of these values
        (an exact match of top-level keys, as `index=` keeps them), newest first, deleted ones
        left out: ``store.find(state="generating")`` asks
        ``GET /v1/sessions?metadata.state=generating``. A value that is not a string is sent
        as JSON (``true``, ``3``, ``null``). Each answer is checked here too."""
        wanted = {k: _query_value(v) for k, v in _check_index(metadata).items()}
        found = []
        for session in self.client.list_sessions(metadata=wanted):
            meta = session.get("metadata")
            if not isinstance(meta, dict):
                continue
            key = meta.get(METADATA_KEY)
            if isinstance(key, str) and all(k in meta and _query_value(meta[k]) == v for k, v in wanted.items()):
                found.append(key)
        return found

    def delete(self, session: str) -> bool:
        """Deletes the session in Stepwise (a soft delete: its status becomes ``deleted`` and
        the server removes it for good after its retention) and forgets it here. Saves of it
        still queued are dropped. ``False`` when there was none."""
        key = _check_key(session)
        with self._lock:
            self._pending.pop(key, None)
            self._cache.pop(key, None)
            self._indexed.pop(key, None)
        where = self._where.pop(key, None) or self._locate(key, create=False)[0]
        self._where.pop(key, None)
        if where is None:
            return False
        self.client.delete_session(where.session_id)
        return True


def _exit_hook(store: StepwiseState[Any]) -> Callable[[], None]:
    """At the interpreter's exit: flush the store if it is still alive and open."""
    ref = weakref.ref(store)

    def hook() -> None:
        alive = ref()
        if alive is not None and not alive._closed:
            alive.close()

    return hook
