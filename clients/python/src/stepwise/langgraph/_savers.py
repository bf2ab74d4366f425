"""`StepwiseSaver` and `AsyncStepwiseSaver` (see the package's docstring): each operation is
a flow of `_flows`, run with blocking calls by the one and awaited by the other."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._async_client import AsyncStepwise
from .._client import Stepwise
from .._transport.aio import LeanPool, for_running_loop
from .._transport.sync import FastHTTP
from . import _flows as flows
from ._flows import Flow, Hot, Op, Plain, advance
from ._wire import Wire, next_version

__all__ = ["StepwiseSaver", "AsyncStepwiseSaver"]

# What running one op of a flow gave: its answer, or the error to throw into the flow.
_Outcome = tuple[Any, "BaseException | None"]


class _Saver(BaseCheckpointSaver[str]):
    """What both savers hold: the client, whether it is theirs to close, and the `Wire`."""

    def __init__(
        self,
        client: Any,
        owns_client: bool,
        serde: SerializerProtocol | None,
        mirror_channels: Sequence[str],
        cache_size: int,
        compress: bool,
    ) -> None:
        super().__init__(serde=serde)
        self._owns_client = owns_client
        self.client = client
        self._wire = Wire(self, cache_size, mirror_channels, compress)

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        return next_version(current)


# --------------------------------------------------------------------------- the savers


class StepwiseSaver(_Saver):
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
        own = client is None
        client = Stepwise(base_url, api_key) if client is None else client
        super().__init__(client, own, serde, mirror_channels, cache_size, compress)
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

    # -- running flows

    def _perform(self, op: Op) -> _Outcome:
        try:
            if type(op) is Hot:
                return self._call(op.method, op.path, json=op.json, params=op.params), None
            if type(op) is Plain:
                return self.client.request(op.method, op.path, json=op.json, idempotent=op.idempotent), None
            time.sleep(op.seconds)
            return None, None
        except BaseException as exc:  # handed to the flow, which may handle it
            return None, exc

    def _drive(self, flow: Flow) -> Iterator[CheckpointTuple]:
        """Runs a flow: yields the tuples it reads and returns its result."""
        value, error = None, None
        try:
            while True:
                done, op = advance(flow, value, error)
                if done:
                    return op
                if type(op) is CheckpointTuple:
                    value, error = None, None
                    yield op
                else:
                    value, error = self._perform(op)
        finally:
            flow.close()

    def _run(self, flow: Flow) -> Any:
        driver = self._drive(flow)
        while True:
            try:
                next(driver)
            except StopIteration as stop:
                return stop.value

    # -- sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(flows.get_tuple(self._wire, config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._drive(flows.list_checkpoints(self._wire, config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(flows.put(self._wire, config, checkpoint, metadata, new_versions, blocking=True))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(flows.put_writes(self._wire, config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(flows.delete_thread(self._wire, thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(flows.delete_for_runs(self._wire, run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(flows.copy_thread(self._wire, source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._run(flows.prune(self._wire, thread_ids, strategy))

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


class AsyncStepwiseSaver(_Saver):
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
        own = client is None
        client = AsyncStepwise(base_url, api_key) if client is None else client
        super().__init__(client, own, serde, mirror_channels, cache_size, compress)
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

    # -- running flows

    async def _perform(self, op: Op) -> _Outcome:
        try:
            if type(op) is Hot:
                return await self._call(op.method, op.path, json=op.json, params=op.params), None
            if type(op) is Plain:
                return await self.client.request(op.method, op.path, json=op.json, idempotent=op.idempotent), None
            await asyncio.sleep(op.seconds)  # the parent's aput_writes runs on this loop
            return None, None
        except BaseException as exc:  # handed to the flow, which may handle it
            return None, exc

    async def _run(self, flow: Flow) -> Any:
        value, error = None, None
        try:
            while True:
                done, op = advance(flow, value, error)
                if done:
                    return op
                value, error = await self._perform(op)
        finally:
            flow.close()

    async def _iterate(self, flow: Flow) -> AsyncIterator[CheckpointTuple]:
        """Runs a flow, yielding the tuples it reads."""
        value, error = None, None
        try:
            while True:
                done, op = advance(flow, value, error)
                if done:
                    return
                if type(op) is CheckpointTuple:
                    value, error = None, None
                    yield op
                else:
                    value, error = await self._perform(op)
        finally:
            flow.close()

    # -- async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._run(flows.get_tuple(self._wire, config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        flow = flows.list_checkpoints(self._wire, config, filter, before, limit)
        async with aclosing(self._iterate(flow)) as tuples:
            async for tup in tuples:
                yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._run(flows.put(self._wire, config, checkpoint, metadata, new_versions, blocking=False))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._run(flows.put_writes(self._wire, config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._run(flows.delete_thread(self._wire, thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._run(flows.delete_for_runs(self._wire, run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._run(flows.copy_thread(self._wire, source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._run(flows.prune(self._wire, thread_ids, strategy))

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
