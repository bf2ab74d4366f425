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
  it. Saves of one session waiting together are sent as one (the latest state). A failed
  send is logged and retried with backoff until it succeeds or the store is closed;
  ``flush()`` waits for the queue, ``close()`` (and leaving ``with``, and the interpreter's
  exit) flushes.
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
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

try:
    from pydantic import BaseModel, ValidationError
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("stepwise.state needs pydantic 2: pip install 'pydantic>=2'") from exc

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import StepwiseError
from ._names import session_name_for

__all__ = ["StepwiseState", "state_session_name"]

logger = logging.getLogger("stepwise.state")

M = TypeVar("M", bound=BaseModel)

# Metadata of the Stepwise session (the key) and of the execution holding the snapshots.
METADATA_KEY = "stepwise_state_key"
EXECUTION_MARK = "stepwise_state"
SNAPSHOT_FORMAT = "stepwise.state/1"
STATUSES = ("active", "completed", "archived", "closed")
_MAX_TITLE_CHARS = 500
_MAX_BACKOFF = 5.0


def state_session_name(key: str) -> str:
    """The Stepwise session name a session key maps to (a valid name as it is, any other string
    ``st-<readable part>-<first 16 hex digits of its SHA-256>``)."""
    return session_name_for(key, "st")


def _check_key(session: str) -> str:
    if not isinstance(session, str) or not session.strip():
        raise ValueError(f"session must be a non-empty string, got {session!r}")
    return session


@dataclass
class _Pending:
    model: BaseModel
    payload: dict[str, Any]
    status: str | None
    seq: int


@dataclass
class _Where:
    session_id: str
    execution_id: str | None = None
    status: str | None = None


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
        cache_size: how many sessions' models the in-memory cache keeps (least recently
            used go first; 0 turns it off).
        close_timeout: how long `close()` (and the interpreter's exit) waits for unsent saves.
    """

    def __init__(
        self,
        model: type[M],
        client: Stepwise | AsyncStepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        status: Callable[[M], str | None] | None = None,
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
        self.model = model
        self.status = status
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
        with self._lock:
            if self._closed:
                raise RuntimeError("this StepwiseState is closed")
            self._seq += 1
            self._pending[key] = _Pending(ctx, payload, wanted, self._seq)
            self._cache_put(key, ctx)
            self._start()
            self._changed.notify_all()

    @contextmanager
    def saving(self, session: str, ctx: M) -> Iterator[M]:
        """Saves `ctx` when the block ends, whether it ends normally or by an exception (the
        exception goes on): the error path keeps the context too."""
        try:
            yield ctx
        finally:
            self.save(session, ctx)

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until every queued save is stored; ``False`` if some are still unsent after
        `timeout` seconds (``None``: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while self._pending or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left if left is None else min(left, 1.0))
            return True

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

    def _write(self, key: str, item: _Pending) -> None:
        where = self._where.get(key) or self._locate(key, create=True)[0]
        assert where is not None
        if where.execution_id is None:
            opened = self.client.open_execution(
                where.session_id,
                input={"stepwise_state": self._model_name, "key": key},
                metadata={EXECUTION_MARK: self._model_name},
            )
            where.execution_id = str(opened["id"])
        try:
            self.client.save_snapshot(where.execution_id, item.payload, agent_name=self._model_name)
        except StepwiseError as e:
            if e.code in ("not_found", "invalid_state", "conflict"):
                self._where.pop(key, None)  # gone or finished meanwhile: locate again next time
            raise
        # A snapshot does not count as activity for the retention cleaner: the PATCH (with the
        # status, or empty) marks the session as used now, so an active one is not abandoned.
        updated = self.client.update_session(where.session_id, status=item.status)
        if item.status is None and updated.get("status") == "abandoned":
            # The cleaner marked it idle, and it is in use again.
            updated = self.client.update_session(where.session_id, status="active")
        where.status = str(updated.get("status"))

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
        where = _Where(str(found["id"]), status=found.get("status"))
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

    def delete(self, session: str) -> bool:
        """Deletes the session in Stepwise (a soft delete: its status becomes ``deleted`` and
        the server removes it for good after its retention) and forgets it here. Saves of it
        still queued are dropped. ``False`` when there was none."""
        key = _check_key(session)
        with self._lock:
            self._pending.pop(key, None)
            self._cache.pop(key, None)
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
