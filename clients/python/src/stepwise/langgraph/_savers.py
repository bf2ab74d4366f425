"""`StepwiseSaver` and `AsyncStepwiseSaver` (see the package's docstring)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._async_client import AsyncStepwise
from .._client import Stepwise
from .._errors import StepwiseError
from ._wire import Wire, is_not_found, next_version
from .._transport.aio import LeanPool, for_running_loop
from .._transport.sync import FastHTTP

__all__ = ["StepwiseSaver", "AsyncStepwiseSaver"]

_PRUNE_STRATEGIES = ("keep_latest", "delete")
# How long a put waits for its parent's pending writes that are being sent (to refer to
# them rather than send their items again).
_WAIT_FOR_WRITES = 2.0
# How long the sync saver's put of a loop checkpoint waits for the thread that sends its
# parent's writes to begin (LangGraph hands both to its executor at once).
_EXPECT_WRITES = 0.02

# --------------------------------------------------------------------------- the savers


class StepwiseSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that stores threads in Stepwise (synchronous client).

    `client` is a `Stepwise` (closed by you); without one the saver opens its own from
    `base_url` / `api_key` (defaults: env ``STEPWISE_URL`` and ``STEPWISE_API_KEY``) and
    closes it in `close()`. `serde` is LangGraph's serializer (default ``JsonPlusSerializer``).
    `mirror_channels` are the list channels whose new messages are copied into the
    session's conversation (``()`` turns the mirror off). `cache_size` bounds how many
    (thread, namespace) pairs' list values are remembered for flat storage. With `compress`
    (the default), serialized values of 256 bytes or more are stored zlib-compressed (their
    type gets a ``+zlib`` suffix) when that makes them at least 10% smaller.
    """

    def __init__(
        self,
        client: Stepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        serde: SerializerProtocol | None = None,
        mirror_channels: Sequence[str] = ("messages",),
        cache_size: int = 4096,
        compress: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self._owns_client = client is None
        self.client = client if client is not None else Stepwise(base_url, api_key)
        self._wire = Wire(self, cache_size, mirror_channels, compress)
        self._fast = FastHTTP.for_client(self.client)

    def close(self) -> None:
        """Closes the client the saver opened itself (not one you passed), and its connections."""
        if self._fast is not None:
            self._fast.close()
        if self._owns_client:
            self.client.close()

    def _call(self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None) -> Any:
        """A get, put or put_writes call (each safe to repeat)."""
        if self._fast is not None:
            return self._fast.request(method, path, json_body=json, params=params)
        return self.client.request(method, path, json=json, params=params)

    def __enter__(self) -> "StepwiseSaver":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        path, params, held = self._wire.get_request(config)
        try:
            answer = self._call("GET", path, params=params)
        except StepwiseError as e:
            if is_not_found(e):
                return None
            raise
        return self._wire.tuple_from(answer, remember=get_checkpoint_id(config) is None, held=held)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        if config is not None and get_checkpoint_id(config):
            tup = self.get_tuple(config)
            if tup is not None and self._wire.matches(tup, filter, before):
                yield tup
            return
        path, params = self._wire.list_request(config, filter, before)
        remaining, cursor = limit, None
        while True:
            try:
                page = self._call("GET", path, params=self._wire.list_page_params(params, remaining, cursor))
            except StepwiseError as e:
                if is_not_found(e):  # no such thread
                    return
                raise
            for item in page.get("items") or []:
                yield self._wire.tuple_from(item)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        request = self._wire.put_request(
            config, checkpoint, metadata, new_versions, wait=_WAIT_FOR_WRITES, expect=_EXPECT_WRITES
        )
        while True:
            path, body, updates, result = request
            try:
                self._call("PUT", path, json=body)
                break
            except StepwiseError as e:
                fallback = self._wire.fallback(e, body, config, checkpoint, metadata, new_versions)
                if fallback is None:
                    raise
                request = fallback
        self._wire.commit(updates)
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self._wire.sending_writes(config, writes, task_id, task_path) as requests:
            for path, body in requests:
                self._call("PUT", path, json=body)

    def delete_thread(self, thread_id: str) -> None:
        self._wire.drop_threads([thread_id])
        try:
            self.client.request("DELETE", self._wire.thread_path(thread_id))
        except StepwiseError as e:
            if not is_not_found(e):
                raise

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        self._wire.drop_threads(None)
        self.client.request(
            "POST", "/v1/checkpoints/delete-for-runs", json={"run_ids": [str(r) for r in run_ids]}, idempotent=True
        )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            self.client.request(
                "POST",
                f"{self._wire.thread_path(source_thread_id)}/copy",
                json={"target_thread_id": target_thread_id},
            )
        except StepwiseError as e:
            if not is_not_found(e):
                raise

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in _PRUNE_STRATEGIES:
            raise ValueError(f"strategy must be one of {_PRUNE_STRATEGIES}, got {strategy!r}")
        if not thread_ids:
            return
        self._wire.drop_threads(list(thread_ids))
        self.client.request(
            "POST",
            "/v1/checkpoints/prune",
            json={"thread_ids": list(thread_ids), "strategy": strategy},
            idempotent=True,
        )

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    # -- async API: the sync calls in a worker thread

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


class AsyncStepwiseSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer that stores threads in Stepwise (asynchronous client).

    `client` is an `AsyncStepwise` (closed by you); without one the saver opens its own
    from `base_url` / `api_key` and closes it in `aclose()`. The async methods use it; the
    sync ones (``graph.get_state``, ``graph.invoke``) use a synchronous `Stepwise` client
    to the same server with the same key, opened on first use. Other arguments as for
    `StepwiseSaver`.
    """

    def __init__(
        self,
        client: AsyncStepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        serde: SerializerProtocol | None = None,
        mirror_channels: Sequence[str] = ("messages",),
        cache_size: int = 4096,
        compress: bool = True,
    ) -> None:
        super().__init__(serde=serde)
        self._owns_client = client is None
        self.client = client if client is not None else AsyncStepwise(base_url, api_key)
        self._wire = Wire(self, cache_size, mirror_channels, compress)
        self._sync: StepwiseSaver | None = None
        self._sync_lock = threading.Lock()
        # Lean connections per event loop (None: the server is reached through the client).
        self._fast: dict[asyncio.AbstractEventLoop, LeanPool | None] = {}

    async def aclose(self) -> None:
        """Closes the clients the saver opened itself, and its connections of the running loop."""
        if self._sync is not None:
            self._sync.close()
        fast = self._fast.pop(asyncio.get_running_loop(), None)
        if fast is not None:
            await fast.close()
        if self._owns_client:
            await self.client.aclose()

    async def _call(self, method: str, path: str, *, json: Any = None, params: Mapping[str, str] | None = None) -> Any:
        """A get, put or put_writes call (each safe to repeat): over lean keep-alive connections
        when the server is reached over plain HTTP, else through the client."""
        fast = for_running_loop(self._fast, lambda: LeanPool.for_client(self.client))
        if fast is not None:
            return await fast.request(method, path, json_body=json, params=params, idempotent=True, quoted=True)
        return await self.client.request(method, path, json=json, params=params)

    async def __aenter__(self) -> "AsyncStepwiseSaver":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _sync_saver(self) -> StepwiseSaver:
        with self._sync_lock:
            if self._sync is None:
                client = Stepwise(
                    self.client.base_url,
                    self.client.api_key,
                    timeout=self.client.timeout,
                    max_retries=self.client.max_retries,
                )
                saver = StepwiseSaver(client, serde=self.serde)
                saver._owns_client = True
                saver._wire = self._wire  # one flat-storage cache for both
                self._sync = saver
            return self._sync

    # -- async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        path, params, held = self._wire.get_request(config)
        try:
            answer = await self._call("GET", path, params=params)
        except StepwiseError as e:
            if is_not_found(e):
                return None
            raise
        return self._wire.tuple_from(answer, remember=get_checkpoint_id(config) is None, held=held)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return
        if config is not None and get_checkpoint_id(config):
            tup = await self.aget_tuple(config)
            if tup is not None and self._wire.matches(tup, filter, before):
                yield tup
            return
        path, params = self._wire.list_request(config, filter, before)
        remaining, cursor = limit, None
        while True:
            try:
                page = await self._call("GET", path, params=self._wire.list_page_params(params, remaining, cursor))
            except StepwiseError as e:
                if is_not_found(e):  # no such thread
                    return
                raise
            for item in page.get("items") or []:
                yield self._wire.tuple_from(item)
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            cursor = page.get("next_cursor")
            if not cursor:
                return

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        parent = self._wire.writes_key(config) if config["configurable"].get("checkpoint_id") else None
        deadline = time.monotonic() + _WAIT_FOR_WRITES
        while parent and self._wire.written.sending(parent) and time.monotonic() < deadline:
            await asyncio.sleep(0.0005)  # aput_writes of the parent runs on this loop
        request = self._wire.put_request(config, checkpoint, metadata, new_versions)
        while True:
            path, body, updates, result = request
            try:
                await self._call("PUT", path, json=body)
                break
            except StepwiseError as e:
                fallback = self._wire.fallback(e, body, config, checkpoint, metadata, new_versions)
                if fallback is None:
                    raise
                request = fallback
        self._wire.commit(updates)
        return result

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        with self._wire.sending_writes(config, writes, task_id, task_path) as requests:
            for path, body in requests:
                await self._call("PUT", path, json=body)

    async def adelete_thread(self, thread_id: str) -> None:
        self._wire.drop_threads([thread_id])
        try:
            await self.client.request("DELETE", self._wire.thread_path(thread_id))
        except StepwiseError as e:
            if not is_not_found(e):
                raise

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        if not run_ids:
            return
        self._wire.drop_threads(None)
        await self.client.request(
            "POST", "/v1/checkpoints/delete-for-runs", json={"run_ids": [str(r) for r in run_ids]}, idempotent=True
        )

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            await self.client.request(
                "POST",
                f"{self._wire.thread_path(source_thread_id)}/copy",
                json={"target_thread_id": target_thread_id},
            )
        except StepwiseError as e:
            if not is_not_found(e):
                raise

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in _PRUNE_STRATEGIES:
            raise ValueError(f"strategy must be one of {_PRUNE_STRATEGIES}, got {strategy!r}")
        if not thread_ids:
            return
        self._wire.drop_threads(list(thread_ids))
        await self.client.request(
            "POST",
            "/v1/checkpoints/prune",
            json={"thread_ids": list(thread_ids), "strategy": strategy},
            idempotent=True,
        )

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)

    # -- sync API: a synchronous client to the same server

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync_saver().get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._sync_saver().list(config, filter=filter, before=before, limit=limit)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync_saver().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync_saver().put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self._sync_saver().delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync_saver().delete_for_runs(run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._sync_saver().copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync_saver().prune(thread_ids, strategy=strategy)
