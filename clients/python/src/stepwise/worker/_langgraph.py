"""`Worker.langgraph`: a compiled LangGraph graph as an agent type of a worker.

The graph keeps its state with its own checkpointer (`stepwise.langgraph.StepwiseSaver`, so
it lives in Stepwise too); the worker's run only decides what to invoke it with:

* a new message: ``{"messages": [("user", text)]}`` (or ``input_fn(run)``);
* the user's answer to an ``interrupt()``: ``Command(resume=answer)``;
* a run taken over after a lost worker whose graph had started: ``None``, so the graph goes
  on from its last stored checkpoint (each checkpoint of a run carries
  ``metadata.stepwise_execution_id``, which tells them apart from the previous turn's). The
  tasks of that checkpoint whose writes were stored before the worker was lost are not run
  again (LangGraph replays their writes); the others run.

The graph runs with ``stream_mode=["updates", "messages", "checkpoints"]`` and
``durability="sync"``: each superstep's checkpoint is stored before the next superstep starts.
Each node's update becomes a step (the node's new AI text, tool calls and tool results, with
``output.langgraph = {node, step}``, the superstep) once the checkpoint holding it is stored, so
a step never outlives its checkpoint; a node already saved as a step is not saved again when
its superstep is replayed, and a run taken over saves the steps a lost worker stored the
checkpoint of but did not get to save. Model tokens go out as live tokens. An interrupt pauses
the execution with the interrupt's value as the question. The answer is the last AI message's
text (or ``output_fn(state_values)``).

A run queued by LangGraph's own clients (``langgraph-sdk`` on the server's ``/langgraph``) has
its request under the input's ``langgraph`` key: the graph then runs with that request's
``input`` or ``command``, ``config``, ``context``, ``checkpoint_id`` (a run from that past
checkpoint) and ``interrupt_before``/``interrupt_after``, and the ``values``, ``updates`` and
``custom`` chunks it streams are kept durably, as LangGraph's server serialises them, so that
the server can stream them to any client at any time: ``[mode, namespace, data, seq]`` in
order, on the first step saved after them (``output.langgraph.stream``, with the ``batch`` id and
its ``count``), those after the last step in the run's snapshot. Each kept chunk also goes out
live as it comes (a delta's ``metadata.langgraph``, with its batch and ``seq``), with the model's
messages (``messages``) and, when the request's ``stream_mode`` has ``events``, the graph's
``astream_events`` events, so LangGraph's clients see them in LangGraph's own order. Every run ends (answers, pauses or fails) by saving a snapshot of the thread,
``state.langgraph = {values, next, tasks, interrupts, checkpoint, parent_checkpoint, metadata,
created_at, stream}``, which the server answers ``threads.get_state`` and ``runs.wait`` from.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import enum
import json
import logging
import math
import queue
import threading
import uuid
import warnings
from typing import Any, Callable, Mapping

from langchain_core.messages import AIMessageChunk, BaseMessage
from langgraph.types import Command, Interrupt, Send

from .._errors import StepwiseError
from ..langgraph._wire import text_of, tool_call
from ._http import Api, is_transient, retrying
from ._run import Run

__all__ = ["langgraph_handler", "announce_assistant", "assistant_item", "to_json"]

logger = logging.getLogger("stepwise.worker")

#: The checkpoint metadata key naming the execution that wrote a checkpoint.
EXECUTION_KEY = "stepwise_execution_id"
_MAX_OBSERVATION = 20_000
#: The modes the graph streams: steps come from root ``updates`` (and ``checkpoints`` say when
#: they are stored), live tokens from ``messages``; ``values``, ``updates`` and ``custom``
#: chunks are kept for LangGraph's clients.
_STREAM_MODES = ["updates", "messages", "checkpoints", "values", "custom"]
_KEPT_MODES = frozenset({"values", "updates", "custom"})
#: Modes kept only for a run whose request asks for them (``stream_mode``): they repeat much of
#: the state, so they are not stored for every run.
_ON_REQUEST_MODES = frozenset({"checkpoints", "tasks", "debug"})


def _asked_modes(request: Mapping[str, Any] | None) -> list[str]:
    """The ``stream_mode`` of a LangGraph API request, as a list."""
    asked = request.get("stream_mode") if request is not None else None
    if isinstance(asked, str):
        return [asked]
    return [m for m in asked if isinstance(m, str)] if isinstance(asked, list) else []


def _modes_of(request: Mapping[str, Any] | None) -> tuple[list[str], frozenset[str]]:
    """The modes to stream the graph with, and those whose chunks are kept for the run's
    stream: `values`, `updates`, `custom`, and what of `_ON_REQUEST_MODES` the request asks."""
    extra = frozenset(m for m in _asked_modes(request) if m in _ON_REQUEST_MODES)
    modes = _STREAM_MODES + sorted(m for m in extra if m not in _STREAM_MODES)
    return modes, _KEPT_MODES | extra
# A step is at most 2 MiB of JSON and a request body 4 MiB (the server's limits): one chunk
# larger than this is dropped, and the chunks one step carries stay under the second bound.
_MAX_CHUNK_BYTES = 1_000_000
_MAX_STREAM_BYTES = 1_500_000
_MAX_SNAPSHOT_BYTES = 3_500_000
#: Where a worker announces its graphs for LangGraph's clients (the server's assistants).
ASSISTANTS_NAMESPACE = ["stepwise", "assistants"]
_ANNOUNCE_RETRY_S = 300.0


def _question(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        for key in ("question", "message", "text", "prompt"):
            if isinstance(value.get(key), str):
                return value[key]
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _messages_of(update: Any) -> list[Any]:
    if isinstance(update, Mapping):
        found = update.get("messages")
        if isinstance(found, BaseMessage):
            return [found]
        if isinstance(found, (list, tuple)):
            return [m for m in found if isinstance(m, BaseMessage)]
    return []


def _step_of(node: str, update: Any) -> dict[str, Any]:
    """A node's update as a step: its AI text and tool calls, and the tool results."""
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    observations: list[str] = []
    usage: dict[str, int] | None = None
    for message in _messages_of(update):
        kind = getattr(message, "type", "")
        if kind in ("ai", "AIMessageChunk"):
            text = text_of(message.content)
            if text:
                texts.append(text)
            tool_calls.extend(tool_call(tc) for tc in getattr(message, "tool_calls", None) or [])
            um = getattr(message, "usage_metadata", None)
            if um:
                usage = usage or {"input": 0, "output": 0, "total": 0}
                usage["input"] += int(um.get("input_tokens", 0))
                usage["output"] += int(um.get("output_tokens", 0))
                usage["total"] += int(um.get("total_tokens", 0))
        elif kind == "tool":
            observations.append(f"{getattr(message, 'name', None) or 'tool'}: {text_of(message.content)}")
    if not texts and not tool_calls and not observations and update is not None:
        try:
            observations.append(json.dumps(update, ensure_ascii=False, default=str))
        except (TypeError, ValueError):
            observations.append(str(update))
    observation = "\n".join(observations)
    if len(observation) > _MAX_OBSERVATION:
        observation = observation[: _MAX_OBSERVATION - 1] + "…"
    return {
        "kind": "action",
        "model_output": "\n".join(texts) or None,
        "tool_calls": tool_calls,
        "observations": observation or None,
        "token_usage": usage,
        "output": {"langgraph": {"node": node}},
    }


def default_output(values: Any) -> Any:
    """The text of the last AI message of the state's ``messages``, else the state as JSON."""
    for message in reversed(_messages_of(values)):
        if getattr(message, "type", "") in ("ai", "AIMessageChunk"):
            return text_of(message.content)
    if values is None:
        return None
    try:
        return json.loads(json.dumps(values, default=str))
    except (TypeError, ValueError):
        return str(values)


def _superstep_of(metadata: Mapping[str, Any] | None) -> int | None:
    """The superstep whose tasks run after the checkpoint with this metadata."""
    step = (metadata or {}).get("step")
    return step + 1 if isinstance(step, int) else None


def _reported(run: Run) -> dict[tuple[str, int], int]:
    """How many steps of this execution each (node, superstep) was saved as."""
    counts: dict[tuple[str, int], int] = {}
    for stored in run.steps:
        output = stored.get("output")
        mark = output.get("langgraph") if isinstance(output, Mapping) else None
        if isinstance(mark, Mapping) and isinstance(mark.get("node"), str) and isinstance(mark.get("step"), int):
            key = (mark["node"], mark["step"])
            counts[key] = counts.get(key, 0) + 1
    return counts


class _Steps:
    """Node updates on their way to being steps.

    A node's update is saved as a step only once the checkpoint that holds it is stored (the
    graph runs with ``durability="sync"``: the next superstep's ``checkpoints`` event comes
    after that checkpoint is saved, and everything is saved when the stream ends), so a worker
    lost in the next node never leaves a step whose checkpoint is gone. A node of a superstep
    already saved as a step (by a lost worker, before the user's answer) is not saved again
    when the graph replays it or runs it once more.
    """

    def __init__(self, run: Run, chunks: "_Chunks | None" = None) -> None:
        self.run = run
        self.seen = _reported(run)
        self.waiting: list[dict[str, Any]] = []
        self.chunks = chunks

    def add(self, node: str, update: Any, superstep: int | None) -> None:
        if superstep is not None:
            key = (node, superstep)
            if self.seen.get(key, 0) > 0:
                self.seen[key] -= 1
                return
        step = _step_of(node, update)
        if superstep is not None:
            step["output"]["langgraph"]["step"] = superstep
        self.waiting.append(step)

    def flush(self) -> None:
        """Saves the waiting steps; the first carries the stream chunks kept since the last
        step (without a step they wait for the next one, or the run's snapshot)."""
        waiting, self.waiting = self.waiting, []
        if waiting and self.chunks is not None:
            batch = self.chunks.take()
            if batch is not None:
                waiting[0]["output"]["langgraph"].update(batch)
        for step in waiting:
            self.run.step(**step)


def to_json(value: Any, _depth: int = 0) -> Any:
    """`value` as JSON the way LangGraph's server writes it: a message (any pydantic model)
    as its ``model_dump()``, a dataclass as its fields, an ``Interrupt`` as ``{value, id}``,
    ``Send`` and ``Command`` as their fields, tuples and sets as lists, NaN and infinities as
    ``null``, anything else as its text."""
    if _depth > 100:
        return str(value)
    depth = _depth + 1
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_json(v, depth) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v, depth) for v in value]
    if isinstance(value, Interrupt):
        return {"value": to_json(value.value, depth), "id": getattr(value, "id", None)}
    if isinstance(value, Send):
        return {"node": value.node, "arg": to_json(value.arg, depth)}
    if isinstance(value, Command):
        return {k: to_json(getattr(value, k, None), depth) for k in ("graph", "update", "resume", "goto")}
    if isinstance(value, type):
        return str(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # messages and other pydantic models
        try:
            return to_json(dump(), depth)
        except Exception:  # noqa: BLE001 - then as text
            return str(value)
    if dataclasses.is_dataclass(value):
        return {f.name: to_json(getattr(value, f.name, None), depth) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_json(value.value, depth)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


class _Chunks:
    """The stream chunks of a LangGraph API run not saved yet, ``[mode, namespace, data, seq]``
    in order, bounded: a chunk over `_MAX_CHUNK_BYTES` is dropped (a warning says so), and when
    the kept ones pass `_MAX_STREAM_BYTES` the oldest ``values`` chunks go first (a later one
    holds the state they held), then the new chunk.

    The chunks saved together are a batch (``batch``, an id, and ``count``, the chunks it had);
    ``seq`` numbers a chunk in its batch. Each chunk is also sent live as it comes, with its
    batch, its ``seq`` and the batch saved before (``prev``), so the server can stream it at
    once, in order with what is stored, and with the id it gets once stored."""

    def __init__(self, run: Run, prev: str | None = None) -> None:
        self.run = run
        self.execution_id = run.execution_id
        self.items: list[list[Any]] = []
        self.sizes: list[int] = []
        self.prev = prev
        self.batch = uuid.uuid4().hex
        self.count = 0

    def add(self, mode: str, namespace: tuple[str, ...], data: Any) -> None:
        ns = "|".join(namespace)
        chunk = [mode, ns, to_json(data), self.count]
        size = _json_size(chunk)
        if size > _MAX_CHUNK_BYTES:
            logger.warning(
                "execution %s: a %s chunk of %d bytes is too large to keep; the stream goes on without it",
                self.execution_id, mode, size,
            )
            return
        while sum(self.sizes) + size > _MAX_STREAM_BYTES:
            older = next((i for i, c in enumerate(self.items) if c[0] == "values"), None)
            if older is None:
                logger.warning(
                    "execution %s: the stream chunks of this step pass %d bytes; a %s chunk is dropped",
                    self.execution_id, _MAX_STREAM_BYTES, mode,
                )
                return
            logger.warning("execution %s: an older values chunk is dropped to keep the stream bounded",
                           self.execution_id)
            del self.items[older]
            del self.sizes[older]
        self.items.append(chunk)
        self.sizes.append(size)
        live = {"mode": mode, "ns": ns, "data": chunk[2], "batch": self.batch, "seq": self.count, "prev": self.prev}
        self.count += 1
        self.run._stream([live], size)

    def take(self) -> dict[str, Any] | None:
        """The batch to save (``{stream, batch, count}``), or ``None`` when it has no chunk;
        the next chunks are a new batch."""
        if self.count == 0:
            return None
        taken = {"stream": self.items, "batch": self.batch, "count": self.count}
        self.items, self.sizes = [], []
        self.prev, self.batch, self.count = self.batch, uuid.uuid4().hex, 0
        return taken


def _last_batch(run: Run) -> str | None:
    """The stream batch saved last in this turn of the run (the steps after its last
    ``user_input`` step), if any: the live chunks of the next batch follow it."""
    found = None
    for stored in run.steps:
        if stored.get("kind") == "user_input":
            found = None
            continue
        output = stored.get("output")
        mark = output.get("langgraph") if isinstance(output, Mapping) else None
        if isinstance(mark, Mapping) and isinstance(mark.get("batch"), str):
            found = mark["batch"]
    return found


def _messages_item(namespace: tuple[str, ...], chunk: Any) -> tuple[dict[str, Any], int, str]:
    """A ``messages`` chunk (``(message, metadata)``) sent live: the item, its size and the
    text of a root AI message chunk (the tokens /v1's watchers see)."""
    message, metadata = chunk if isinstance(chunk, tuple) and len(chunk) == 2 else (chunk, {})
    data = [to_json(message), to_json(metadata)]
    item = {"mode": "messages", "ns": "|".join(namespace), "data": data}
    text = text_of(message.content) if not namespace and isinstance(message, AIMessageChunk) else ""
    return item, _json_size(data), text or ""


class _EventsStream:
    """``graph.astream_events(version="v2")`` run on an event loop of its own thread, read as
    ``graph.stream(..., subgraphs=True)`` is: ``(namespace, mode, chunk)``. The root run's
    stream chunks come as they are; every other event comes as ``((), "events", event)``, as
    LangGraph's server streams them for ``stream_mode="events"``. Unlike ``graph.stream``, the
    graph does not wait for the reader (``astream_events`` runs it in a task of its own): a
    step is still saved only once its checkpoint is, and a lost lease stops the graph when the
    reader sees it."""

    _DONE = object()

    def __init__(
        self, graph: Any, graph_input: Any, config: dict[str, Any], modes: list[str], options: dict[str, Any]
    ) -> None:
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.loop = asyncio.new_event_loop()
        self.task: asyncio.Task[None] | None = None
        self.ready = threading.Event()
        root = uuid.uuid4()
        config = {**config, "run_id": root}

        async def pump() -> None:
            try:
                events = graph.astream_events(
                    graph_input, config, version="v2", stream_mode=modes, subgraphs=True, durability="sync",
                    **options,
                )
                async with contextlib.aclosing(events):
                    async for event in events:
                        if event.get("event") == "on_chain_stream" and event.get("run_id") == str(root):
                            namespace, mode, chunk = event["data"]["chunk"]
                            self.queue.put((tuple(namespace), mode, chunk))
                        elif "langsmith:hidden" not in (event.get("tags") or ()):
                            self.queue.put(((), "events", event))
            except BaseException as error:  # noqa: BLE001 - raised again by the reader
                self.queue.put(error)
            finally:
                self.queue.put(self._DONE)

        def main() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                self.task = self.loop.create_task(pump())
                self.ready.set()
                with contextlib.suppress(BaseException):
                    self.loop.run_until_complete(self.task)
            finally:
                self.ready.set()
                # What the graph left running (stopped early): cancelled and waited for.
                left = asyncio.all_tasks(self.loop)
                for task in left:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    self.loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                with contextlib.suppress(BaseException):
                    self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()

        self.thread = threading.Thread(target=main, name="stepwise-langgraph-events", daemon=True)
        self.thread.start()

    def __iter__(self) -> Any:
        while True:
            item = self.queue.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        """Stops the graph (when the reader stops early) and waits for its thread."""
        self.ready.wait(10.0)
        if self.task is not None and self.thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop has closed meanwhile
                self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(30.0)


def _request_of(run: Run) -> dict[str, Any] | None:
    """The LangGraph API request of a run (the input's ``langgraph``), or ``None``."""
    raw = run.input.get("langgraph") if isinstance(run.input, Mapping) else None
    return dict(raw) if isinstance(raw, Mapping) else None


def _command_of(spec: Mapping[str, Any]) -> Command:
    """A LangGraph API ``command`` (``{resume?, update?, goto?}``) as a `Command`."""
    fields: dict[str, Any] = {}
    for key in ("resume", "update", "goto"):
        if key not in spec:
            continue
        value = spec[key]
        if key == "update" and isinstance(value, list):
            value = [tuple(v) if isinstance(v, list) else v for v in value]  # [[key, value], ...]
        if key == "goto":
            value = _goto_of(value)
        fields[key] = value
    return Command(**fields)


def _goto_of(value: Any) -> Any:
    """``goto`` as the API writes it: a node, ``{node, input}`` (a `Send`), or a list of them."""
    if isinstance(value, list):
        return [_goto_of(v) for v in value]
    if isinstance(value, Mapping) and "node" in value:
        return Send(str(value["node"]), value.get("input"))
    return value


#: The key under which the server hands a whole LangGraph API command (``{resume?, update?,
#: goto?}``) as a paused run's answer, when it has more than a resume value.
_COMMAND_KEY = "__langgraph_command__"


def _resume_of(answer: Any, pending: list[Any]) -> Command:
    """The user's answer as the `Command` that resumes the pending interrupts (with the
    command's ``update`` and ``goto`` when the answer is a whole command)."""
    if isinstance(answer, Mapping) and set(answer) == {_COMMAND_KEY} and isinstance(answer[_COMMAND_KEY], Mapping):
        spec = dict(answer[_COMMAND_KEY])
        command = _command_of({k: v for k, v in spec.items() if k != "resume"})
        if "resume" not in spec:
            return command
        return dataclasses.replace(command, resume=_resume_of(spec["resume"], pending).resume)
    ids = {getattr(p, "id", None) for p in pending} - {None}
    if isinstance(answer, Mapping) and answer and ids and set(answer) <= ids:
        return Command(resume=dict(answer))  # already by interrupt id
    if len(pending) > 1 and getattr(pending[0], "id", None):
        return Command(resume={pending[0].id: answer})
    return Command(resume=answer)


def _merged_config(
    extra: Mapping[str, Any], request: Mapping[str, Any] | None, thread_id: str, execution_id: str
) -> dict[str, Any]:
    """The run's config: the worker's `extra`, with a LangGraph API request's ``config`` over
    it; the thread and the execution's metadata marks stay the worker's."""
    asked = request.get("config") if request is not None else None
    asked = asked if isinstance(asked, Mapping) else {}
    configurable = {**dict(extra.get("configurable") or {})}
    theirs = asked.get("configurable")
    if isinstance(theirs, Mapping):
        configurable.update({k: v for k, v in theirs.items() if k not in ("checkpoint_id", "checkpoint_ns")})
    configurable["thread_id"] = str(thread_id)
    # `run_id` names the checkpoints this run writes: a rollback (`on_busy: rollback`)
    # removes them with the execution.
    theirs_meta = asked.get("metadata") if isinstance(asked.get("metadata"), Mapping) else {}
    metadata = {
        "run_id": execution_id,
        **dict(extra.get("metadata") or {}),
        **{k: v for k, v in theirs_meta.items() if k not in ("run_id", EXECUTION_KEY)},
        EXECUTION_KEY: execution_id,
    }
    config: dict[str, Any] = {**extra, "configurable": configurable, "metadata": metadata}
    if isinstance(asked.get("tags"), list):
        tags = list(extra.get("tags") or [])
        config["tags"] = tags + [t for t in asked["tags"] if isinstance(t, str) and t not in tags]
    for key in ("recursion_limit", "max_concurrency", "run_name"):
        if asked.get(key) is not None:
            config[key] = asked[key]
    return config


def _fork_of(request: Mapping[str, Any]) -> str | None:
    """The past checkpoint a LangGraph API run starts from, if any."""
    found = request.get("checkpoint_id")
    if not found:
        config = request.get("config")
        configurable = config.get("configurable") if isinstance(config, Mapping) else None
        found = configurable.get("checkpoint_id") if isinstance(configurable, Mapping) else None
    return str(found) if found else None


def _checkpoint_of(config: Any) -> dict[str, Any] | None:
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        return None
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns") or "",
        "checkpoint_id": configurable.get("checkpoint_id"),
    }


def _interrupt_of(value: Any) -> dict[str, Any]:
    return {"value": to_json(getattr(value, "value", value)), "id": getattr(value, "id", None)}


def thread_state(state: Any, batch: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A LangGraph ``StateSnapshot`` as the run's snapshot keeps it (``state.langgraph``),
    with the stream chunks of `batch` (`_Chunks.take`) not saved with a step."""
    tasks = []
    for task in getattr(state, "tasks", ()) or ():
        error = getattr(task, "error", None)
        result = getattr(task, "result", None)
        tasks.append({
            "id": task.id,
            "name": task.name,
            "path": to_json(list(getattr(task, "path", ()) or ())),
            "error": str(error) if error is not None else None,
            "interrupts": [_interrupt_of(i) for i in getattr(task, "interrupts", ()) or ()],
            "checkpoint": None,
            "state": None,
            "result": to_json(result) if result is not None else None,
        })
    return {
        "values": to_json(getattr(state, "values", None) or {}),
        "next": list(getattr(state, "next", ()) or ()),
        "tasks": tasks,
        "interrupts": [_interrupt_of(i) for i in getattr(state, "interrupts", ()) or ()],
        "checkpoint": _checkpoint_of(getattr(state, "config", None)),
        "parent_checkpoint": _checkpoint_of(getattr(state, "parent_config", None)),
        "metadata": to_json(getattr(state, "metadata", None) or {}),
        "created_at": getattr(state, "created_at", None),
        "stream": list(batch["stream"]) if batch else [],
        **({"batch": batch["batch"], "count": batch["count"]} if batch else {}),
    }


def _update_state(graph: Any, run: Run, run_config: dict[str, Any], update: Mapping[str, Any]) -> Any:
    """`threads.update_state` of LangGraph's clients: the values written to the thread (at the
    checkpoint named, else its latest) as if node `as_node` had written them; the new state is
    saved as this run's snapshot, and the answer is the new checkpoint's config."""
    target = run_config
    checkpoint_id = update.get("checkpoint_id")
    if isinstance(checkpoint_id, str) and checkpoint_id:
        target = {**run_config, "configurable": {**run_config["configurable"], "checkpoint_id": checkpoint_id}}
    as_node = update.get("as_node")
    written = graph.update_state(target, update.get("values"), as_node=as_node if isinstance(as_node, str) else None)
    _save_state(run, graph.get_state(run_config), None)
    configurable = dict((written or {}).get("configurable") or {})
    return {
        "checkpoint": {
            "thread_id": configurable.get("thread_id"),
            "checkpoint_ns": configurable.get("checkpoint_ns", ""),
            "checkpoint_id": configurable.get("checkpoint_id"),
        }
    }


def _save_state(run: Run, state: Any, chunks: _Chunks | None) -> None:
    """Saves the thread's state and the chunks not saved yet as the run's snapshot. A
    snapshot that cannot be saved is logged, never fatal (only a lost lease stops the run)."""
    saved = thread_state(state, chunks.take() if chunks is not None else None)
    body = {"langgraph": saved}
    if _json_size(body) > _MAX_SNAPSHOT_BYTES and saved["stream"]:
        logger.warning("execution %s: the snapshot is too large; its stream keeps no values chunks",
                       run.execution_id)
        saved["stream"] = [c for c in saved["stream"] if c[0] != "values"]
        if _json_size(body) > _MAX_SNAPSHOT_BYTES:
            logger.warning("execution %s: the snapshot is still too large; it keeps no stream chunks",
                           run.execution_id)
            saved["stream"] = []
    try:
        retrying(lambda: run.save_snapshot(body), give_up_after=30.0)
    except Exception as error:  # noqa: BLE001 - the run's outcome does not depend on it
        logger.warning("execution %s: the thread's snapshot could not be saved (%s)", run.execution_id, error)


def _state_schema(graph: Any) -> Any:
    """The JSON schema of the graph's whole state (its stream channels), as LangGraph's server
    gives it; the output schema when it cannot be made."""
    from langgraph.channels.base import BaseChannel

    try:
        from langgraph._internal._pydantic import create_model
    except ImportError:  # pragma: no cover - another langgraph layout
        return graph.get_output_jsonschema()
    fields: dict[str, Any] = {}
    for key in graph.stream_channels_list:
        channel = graph.channels.get(key)
        if not isinstance(channel, BaseChannel):
            continue
        try:
            create_model(key, root=(channel.UpdateType, None)).model_json_schema()
            fields[key] = (channel.UpdateType, None)
        except Exception:  # noqa: BLE001 - a type pydantic cannot describe
            fields[key] = (Any, None)
    return create_model(graph.get_name("State"), field_definitions=fields).model_json_schema()


def assistant_item(name: str, graph: Any, description: str | None = None) -> dict[str, Any]:
    """What a worker announces of a graph for LangGraph's clients: the store item value under
    `ASSISTANTS_NAMESPACE`, key `name`. A part that cannot be made is ``None``."""

    def guarded(what: str, make: Callable[[], Any]) -> Any:
        try:
            with warnings.catch_warnings():  # get_config_jsonschema is deprecated, yet asked for
                warnings.simplefilter("ignore")
                return to_json(make())
        except Exception as error:  # noqa: BLE001 - announced without it
            logger.debug("graph %s: no %s (%s)", name, what, error)
            return None

    drawn = guarded("graph", lambda: graph.get_graph().to_json())
    context = getattr(graph, "get_context_jsonschema", None)
    return {
        "graph_id": name,
        "description": description,
        "graph": drawn if isinstance(drawn, dict) else {"nodes": [], "edges": []},
        "input_schema": guarded("input schema", graph.get_input_jsonschema),
        "output_schema": guarded("output schema", graph.get_output_jsonschema),
        "state_schema": guarded("state schema", lambda: _state_schema(graph)),
        "config_schema": guarded("config schema", graph.get_config_jsonschema),
        "context_schema": guarded("context schema", context) if callable(context) else None,
    }


def announce_assistant(
    api: Api, name: str, graph: Any, description: str | None = None, *, stopping: threading.Event | None = None
) -> None:
    """Announces `graph` as LangGraph assistant `name` (``PUT /langgraph/store/items``). When
    the server cannot be reached it tries again in the background for a while; a refusal is a
    warning, never fatal."""
    try:
        body = {"namespace": ASSISTANTS_NAMESPACE, "key": name, "value": assistant_item(name, graph, description)}
    except Exception as error:  # noqa: BLE001
        logger.warning("graph %s is not announced to LangGraph's clients: %s", name, error)
        return

    def send() -> None:
        api.call("PUT", "/langgraph/store/items", body, timeout=10.0)

    def refused(error: StepwiseError) -> None:
        logger.warning("graph %s is not announced to LangGraph's clients: %s", name, error)

    try:
        send()
        return
    except StepwiseError as error:
        if not is_transient(error):
            refused(error)
            return
        logger.info("graph %s: announcing it to LangGraph's clients failed (%s); trying again", name, error)

    def again() -> None:
        try:
            retrying(send, give_up_after=_ANNOUNCE_RETRY_S,
                     should_stop=lambda: stopping is not None and stopping.is_set())
        except StepwiseError as error:
            refused(error)
        except Exception as error:  # noqa: BLE001 - the worker closed its connections
            logger.debug("graph %s: not announced (%s)", name, error)

    threading.Thread(target=again, name=f"stepwise-announce-{name}", daemon=True).start()


def _recover(graph: Any, config: dict[str, Any], run: Run, steps: _Steps) -> None:
    """Saves the node updates that this execution's stored checkpoints hold but a lost worker
    did not save as steps (it was lost in between), oldest first. Not the latest checkpoint's:
    the graph replays those when it goes on."""
    history = graph.get_state_history(config, filter={EXECUTION_KEY: run.execution_id})
    next(history, None)
    missing: list[tuple[int | None, list[tuple[str, Any]]]] = []
    for snapshot in history:
        superstep = _superstep_of(snapshot.metadata)
        done = [
            (task.name, task.result)
            for task in snapshot.tasks
            if not task.name.startswith("__") and task.error is None and task.result is not None
        ]
        if done and superstep is not None and all(steps.seen.get((name, superstep), 0) for name, _ in done):
            break  # saved as steps, and so is every superstep before it
        missing.append((superstep, done))
    for superstep, done in reversed(missing):
        for name, result in done:
            steps.add(name, result, superstep)
    steps.flush()


def langgraph_handler(
    graph: Any,
    *,
    input_fn: Callable[[Run], Any] | None = None,
    output_fn: Callable[[Any], Any] | None = None,
    thread_fn: Callable[[Run], str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> Callable[[Run], Any]:
    """The agent function running `graph` for each claim."""
    if getattr(graph, "checkpointer", None) in (None, False):
        raise ValueError(
            "the graph needs a checkpointer to pause, resume and go on after a lost worker: "
            "compile it with checkpointer=StepwiseSaver(...) (from stepwise.langgraph)"
        )
    extra = dict(config or {})
    answer_of = output_fn or default_output

    def handler(run: Run) -> Any:
        run.skip_replay()  # the graph goes on from its checkpoint: new steps only
        thread_id = thread_fn(run) if thread_fn is not None else run.session_id or run.execution_id
        request = _request_of(run)  # a run of LangGraph's own clients
        run_config = _merged_config(extra, request, str(thread_id), run.execution_id)
        chunks = _Chunks(run, _last_batch(run)) if request is not None else None
        steps = _Steps(run, chunks)
        options: dict[str, Any] = {}
        if request is not None:
            if request.get("context") is not None:
                options["context"] = request["context"]
            for key in ("interrupt_before", "interrupt_after"):
                if request.get(key) is not None:
                    options[key] = request[key]

        if request is not None and isinstance(request.get("update_state"), Mapping):
            return _update_state(graph, run, run_config, request["update_state"])

        graph_input: Any
        stream_config = run_config
        if run.attempt > 1 or run.answer is not None:
            state = graph.get_state(run_config)
            pending = list(getattr(state, "interrupts", ()) or ())
            # Whether the thread's latest checkpoint is this execution's: its graph had started.
            started_here = (getattr(state, "metadata", None) or {}).get(EXECUTION_KEY) == run.execution_id
        else:
            state, pending, started_here = None, [], False

        if run.answer is not None and (pending or not started_here):
            graph_input = _resume_of(run.answer, pending)
        elif started_here:
            # Taken over after a lost worker (or resumed after the answer was used already).
            _recover(graph, run_config, run, steps)
            if pending:  # lost between the interrupt and the pause: ask again
                _save_state(run, state, chunks)
                run.pause(_question(pending[0].value))
            if not state.next and not state.tasks:  # it had finished: the answer is in the state
                _save_state(run, state, chunks)
                return answer_of(state.values)
            # Tasks with saved writes (the next checkpoint was lost) are replayed, not run again.
            logger.info("execution %s: the graph goes on from its last checkpoint", run.execution_id)
            graph_input = None
        elif request is not None:
            command = request.get("command")
            graph_input = _command_of(command) if isinstance(command, Mapping) else request.get("input")
            fork = _fork_of(request)
            if fork is not None:  # a run from a past checkpoint of the thread
                stream_config = {
                    **run_config, "configurable": {**run_config["configurable"], "checkpoint_id": fork}
                }
        else:
            graph_input = input_fn(run) if input_fn is not None else {"messages": [("user", run.input_text)]}

        interrupts: list[Any] = []
        superstep: int | None = None
        stream_modes, kept_modes = _modes_of(request)
        stream: Any
        if request is not None and "events" in _asked_modes(request):
            stream = _EventsStream(graph, graph_input, stream_config, stream_modes, options)
        else:
            stream = graph.stream(
                graph_input, stream_config, stream_mode=stream_modes, subgraphs=True, durability="sync", **options
            )
        try:
            for namespace, mode, chunk in stream:
                run.check()
                root = not namespace
                if chunks is not None and mode in kept_modes:
                    chunks.add(mode, tuple(namespace), chunk)
                if mode == "events":
                    data = to_json(chunk)
                    size = _json_size(data)
                    if size <= _MAX_CHUNK_BYTES:
                        run._stream([{"mode": "events", "ns": "", "data": data}], size)
                elif mode == "messages":
                    if request is not None:  # the messages as LangGraph's clients get them
                        item, size, text = _messages_item(tuple(namespace), chunk)
                        if size <= _MAX_CHUNK_BYTES:
                            run._stream([item], size, text)
                        continue
                    message = chunk[0] if isinstance(chunk, tuple) else chunk
                    if root and isinstance(message, AIMessageChunk):
                        text = text_of(message.content)
                        if text:
                            run.delta(text)
                elif not root:
                    continue  # a subgraph's: its parent node's update is the step
                elif mode == "checkpoints" and isinstance(chunk, Mapping):
                    # The checkpoint of the supersteps before is stored: their steps can go.
                    steps.flush()
                    superstep = _superstep_of(chunk.get("metadata"))
                elif mode == "updates" and isinstance(chunk, Mapping):
                    for node, update in chunk.items():
                        if node == "__interrupt__":
                            interrupts.extend(update if isinstance(update, (list, tuple)) else [update])
                        elif node != "__metadata__":  # {"cached": true} of replayed writes
                            steps.add(str(node), update, superstep)
        except Exception:
            # What the stream wrote before the error is stored: its steps are saved too, and
            # the thread's state with the chunks after them.
            with contextlib.suppress(Exception):
                steps.flush()
            with contextlib.suppress(Exception):
                _save_state(run, graph.get_state(run_config), chunks)
            raise
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()
        run.check()
        steps.flush()  # the stream has ended: everything it wrote is stored
        state = graph.get_state(run_config)
        _save_state(run, state, chunks)
        if interrupts:
            run.pause(_question(getattr(interrupts[0], "value", interrupts[0])))
        pending = list(getattr(state, "interrupts", ()) or ())
        if pending:
            run.pause(_question(pending[0].value))
        return answer_of(state.values)

    return handler
