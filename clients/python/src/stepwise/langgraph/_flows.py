"""What both LangGraph savers do, written once: each operation is a generator ("flow") that
yields the requests it needs and is sent their answers (or thrown their errors), as the
clients' `_base` does. `StepwiseSaver` runs the flows with blocking calls, `AsyncStepwiseSaver`
awaits them; `list` flows also yield the `CheckpointTuple`s they read, for the caller.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple, Union

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)

from .._calls import Sleep
from .._errors import StepwiseError
from ._wire import Wire, is_not_found

__all__ = [
    "Flow",
    "Hot",
    "Plain",
    "advance",
    "copy_thread",
    "delete_for_runs",
    "delete_thread",
    "get_tuple",
    "list_checkpoints",
    "prune",
    "put",
    "put_writes",
]

PRUNE_STRATEGIES = ("keep_latest", "delete")
# How long a put waits for its parent's pending writes that are being sent (to refer to
# them rather than send their items again).
WAIT_FOR_WRITES = 2.0
# How long the sync saver's put of a loop checkpoint waits for the thread that sends its
# parent's writes to begin (LangGraph hands both to its executor at once).
EXPECT_WRITES = 0.02


class Hot(NamedTuple):
    """A get, put or put_writes call (each safe to repeat): over the lean keep-alive
    connections when the server is reached over plain HTTP, else through the client."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] | None = None


class Plain(NamedTuple):
    """Any other call, through the client's `request` (`idempotent` ``None``: by method)."""

    method: str
    path: str
    json: Any = None
    idempotent: bool | None = None


Op = Union[Hot, Plain, Sleep, CheckpointTuple]
Flow = Generator[Op, Any, Any]


def advance(flow: Flow, value: Any, error: BaseException | None) -> tuple[bool, Any]:
    """One step of a flow, sent `value` or thrown `error`: ``(True, its result)`` when it
    ended, else ``(False, what it yielded next)``."""
    try:
        return False, (flow.throw(error) if error is not None else flow.send(value))
    except StopIteration as stop:
        return True, stop.value


def get_tuple(wire: Wire, config: RunnableConfig) -> Flow:
    path, params, held = wire.get_request(config)
    try:
        answer = yield Hot("GET", path, params=params)
    except StepwiseError as e:
        if is_not_found(e):
            return None
        raise
    return wire.tuple_from(answer, remember=get_checkpoint_id(config) is None, held=held)


def list_checkpoints(
    wire: Wire,
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> Flow:
    if limit is not None and limit <= 0:
        return
    if config is not None and get_checkpoint_id(config):
        tup = yield from get_tuple(wire, config)
        if tup is not None and wire.matches(tup, filter, before):
            yield tup
        return
    path, params = wire.list_request(config, filter, before)
    remaining, cursor = limit, None
    while True:
        try:
            page = yield Hot("GET", path, params=wire.list_page_params(params, remaining, cursor))
        except StepwiseError as e:
            if is_not_found(e):  # no such thread
                return
            raise
        for item in page.get("items") or []:
            yield wire.tuple_from(item)
            if remaining is not None:
                remaining -= 1
                if remaining <= 0:
                    return
        cursor = page.get("next_cursor")
        if not cursor:
            return


def put(
    wire: Wire,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    *,
    blocking: bool,
) -> Flow:
    """A put. `blocking` (the sync saver, in a thread of its own): it waits for the parent's
    writes inside `Wire.put_request`; else the flow pauses (the writes are sent on the same
    event loop)."""
    if blocking:
        request = wire.put_request(
            config, checkpoint, metadata, new_versions, wait=WAIT_FOR_WRITES, expect=EXPECT_WRITES
        )
    else:
        parent = wire.writes_key(config) if config["configurable"].get("checkpoint_id") else None
        deadline = time.monotonic() + WAIT_FOR_WRITES
        while parent and wire.written.sending(parent) and time.monotonic() < deadline:
            yield Sleep(0.0005)
        request = wire.put_request(config, checkpoint, metadata, new_versions)
    while True:
        path, body, updates, result = request
        try:
            yield Hot("PUT", path, json=body)
            break
        except StepwiseError as e:
            fallback = wire.fallback(e, body, config, checkpoint, metadata, new_versions)
            if fallback is None:
                raise
            request = fallback
    wire.commit(updates)
    return result


def put_writes(
    wire: Wire, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
) -> Flow:
    with wire.sending_writes(config, writes, task_id, task_path) as requests:
        for path, body in requests:
            yield Hot("PUT", path, json=body)


def delete_thread(wire: Wire, thread_id: str) -> Flow:
    wire.drop_threads([thread_id])
    try:
        yield Plain("DELETE", wire.thread_path(thread_id))
    except StepwiseError as e:
        if not is_not_found(e):
            raise


def delete_for_runs(wire: Wire, run_ids: Sequence[str]) -> Flow:
    if not run_ids:
        return
    wire.drop_threads(None)
    yield Plain(
        "POST", "/v1/checkpoints/delete-for-runs", json={"run_ids": [str(r) for r in run_ids]}, idempotent=True
    )


def copy_thread(wire: Wire, source_thread_id: str, target_thread_id: str) -> Flow:
    try:
        yield Plain(
            "POST", f"{wire.thread_path(source_thread_id)}/copy", json={"target_thread_id": target_thread_id}
        )
    except StepwiseError as e:
        if not is_not_found(e):
            raise


def prune(wire: Wire, thread_ids: Sequence[str], strategy: str) -> Flow:
    if strategy not in PRUNE_STRATEGIES:
        raise ValueError(f"strategy must be one of {PRUNE_STRATEGIES}, got {strategy!r}")
    if not thread_ids:
        return
    wire.drop_threads(list(thread_ids))
    yield Plain(
        "POST",
        "/v1/checkpoints/prune",
        json={"thread_ids": list(thread_ids), "strategy": strategy},
        idempotent=True,
    )
