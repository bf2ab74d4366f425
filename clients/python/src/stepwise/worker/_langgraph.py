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
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Callable, Mapping

from langchain_core.messages import AIMessageChunk, BaseMessage
from langgraph.types import Command

from ..langgraph._wire import text_of, tool_call
from ._run import Run

__all__ = ["langgraph_handler"]

logger = logging.getLogger("stepwise.worker")

#: The checkpoint metadata key naming the execution that wrote a checkpoint.
EXECUTION_KEY = "stepwise_execution_id"
_MAX_OBSERVATION = 20_000


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

    def __init__(self, run: Run) -> None:
        self.run = run
        self.seen = _reported(run)
        self.waiting: list[dict[str, Any]] = []

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
        waiting, self.waiting = self.waiting, []
        for step in waiting:
            self.run.step(**step)


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
        configurable = {**dict(extra.get("configurable") or {}), "thread_id": str(thread_id)}
        # `run_id` names the checkpoints this run writes: a rollback (`on_busy: rollback`)
        # removes them with the execution.
        metadata = {
            "run_id": run.execution_id,
            **dict(extra.get("metadata") or {}),
            EXECUTION_KEY: run.execution_id,
        }
        run_config: dict[str, Any] = {**extra, "configurable": configurable, "metadata": metadata}
        steps = _Steps(run)

        graph_input: Any
        if run.attempt > 1 or run.answer is not None:
            state = graph.get_state(run_config)
            pending = list(getattr(state, "interrupts", ()) or ())
            # Whether the thread's latest checkpoint is this execution's: its graph had started.
            started_here = (getattr(state, "metadata", None) or {}).get(EXECUTION_KEY) == run.execution_id
        else:
            state, pending, started_here = None, [], False

        if run.answer is not None and (pending or not started_here):
            if len(pending) > 1 and getattr(pending[0], "id", None):
                graph_input = Command(resume={pending[0].id: run.answer})
            else:
                graph_input = Command(resume=run.answer)
        elif started_here:
            # Taken over after a lost worker (or resumed after the answer was used already).
            _recover(graph, run_config, run, steps)
            if pending:  # lost between the interrupt and the pause: ask again
                run.pause(_question(pending[0].value))
            if not state.next and not state.tasks:  # it had finished: the answer is in the state
                return answer_of(state.values)
            # Tasks with saved writes (the next checkpoint was lost) are replayed, not run again.
            logger.info("execution %s: the graph goes on from its last checkpoint", run.execution_id)
            graph_input = None
        else:
            graph_input = input_fn(run) if input_fn is not None else {"messages": [("user", run.input_text)]}

        interrupts: list[Any] = []
        superstep: int | None = None
        stream = graph.stream(
            graph_input, run_config, stream_mode=["updates", "messages", "checkpoints"], durability="sync"
        )
        try:
            for mode, chunk in stream:
                run.check()
                if mode == "messages":
                    message = chunk[0] if isinstance(chunk, tuple) else chunk
                    if isinstance(message, AIMessageChunk):
                        text = text_of(message.content)
                        if text:
                            run.delta(text)
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
            # What the stream wrote before the error is stored: its steps are saved too.
            with contextlib.suppress(Exception):
                steps.flush()
            raise
        finally:
            close = getattr(stream, "close", None)
            if callable(close):
                close()
        run.check()
        steps.flush()  # the stream has ended: everything it wrote is stored
        if interrupts:
            run.pause(_question(getattr(interrupts[0], "value", interrupts[0])))
        state = graph.get_state(run_config)
        pending = list(getattr(state, "interrupts", ()) or ())
        if pending:
            run.pause(_question(pending[0].value))
        return answer_of(state.values)

    return handler
