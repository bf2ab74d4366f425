"""Stepwise as the session store of smolagents agents.

```python
from stepwise import Stepwise
from stepwise.smolagents import StepwiseMemory

client = Stepwise()
memory = StepwiseMemory(client, session="alpha")   # a session name or id; created if missing
memory.attach(agent)                                # any MultiStepAgent: CodeAgent, ToolCallingAgent
agent.run("...")                                    # every step saved as it finishes
memory.switch(agent, "beta")                        # agent.memory now holds beta's steps only
agent.run("...", reset=False)                       # continues beta's conversation
```

How it hooks into smolagents (1.26):

* ``attach`` registers one callback in the agent's ``step_callbacks`` registry for
  ``ActionStep``, ``PlanningStep`` and ``FinalAnswerStep``, and wraps the agent's ``run``
  method on the instance (``agent.run``), so it learns when a run starts, ends with its
  final answer, or raises. ``run(stream=True)`` keeps working: the generator it returns is
  wrapped, and a stream closed before its final answer ends the execution as failed. The
  run's TaskStep is queued as ``run`` appends it to ``agent.memory.steps`` (the wrapper
  puts a list there that reports it; for ``reset=True`` it empties the memory itself and
  calls ``run`` with ``reset=False``, which does the same), before the model is called.
  ``detach`` undoes the callback and the wrapper.
* Each ``agent.run`` is one Stepwise execution of agent type ``external``
  (``input = {"task": ..., "reset": ...}``). Its steps are numbered 1, 2, 3, ... in the
  order they finished: the run's ``task`` step first, then ``planning`` and ``action``
  steps, and a ``final_answer`` step; the execution then ends ``completed`` (its
  ``final_message`` is the answer as text) or ``failed`` with the error.
* Nothing in the agent's thread waits for the network: the callback takes a shallow copy
  of the finished step and puts it on a queue; a background thread converts it to JSON
  and a second one sends it (``append_step(..., step_number=n)``, so a retried send never
  writes twice), so converting the next steps overlaps sending the last ones. Steps of a
  run that queued up while the threads were busy go out together, numbered, in one
  ``append_steps`` request (up to 1,000); the run's open, complete and fail still come in
  order, after the steps queued before them.
  ``flush()`` waits until everything queued so far is saved; interpreter exit flushes too.
* A saved step is readable in Stepwise's terms (``kind``, ``model_output``, ``tool_calls``,
  ``code``, ``observations``, ``error``, ``token_usage``, ``started_at``/``ended_at``) and
  its ``output`` holds the whole smolagents step as JSON
  (``{"smolagents": {"version": 1, "type": "ActionStep", "data": {...}}}``), from which
  ``restore`` rebuilds it. Images are kept as base64 PNG (with Pillow). Not kept: a chat
  message's ``raw`` provider answer; the steps' ``model_input_messages`` unless
  ``save_model_input=True`` (each step's prompt is the system prompt plus every step
  before it, so keeping them grows with the square of the session's length); an
  ``action_output`` that is not JSON comes back in smolagents' JSON form.

The conversion is in `_smolagents_codec`, the two threads in `_smolagents_sender`.
"""

from __future__ import annotations

import copy
import inspect
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from smolagents.memory import (
    ActionStep,
    FinalAnswerStep,
    MemoryStep,
    PlanningStep,
    SystemPromptStep,
    TaskStep,
)

from ._smolagents_codec import PAYLOAD_VERSION, decode_step, encode_step, memory_steps
from ._smolagents_sender import (
    _COMPLETE,
    _FAIL,
    _LIVE,
    _OPEN,
    _STEP,
    _Run,
    _Sender,
    _TaskWatch,
)

__all__ = ["StepwiseMemory", "PAYLOAD_VERSION", "encode_step", "decode_step", "memory_steps"]

logger = logging.getLogger("stepwise.smolagents")

# --- the public class ---------------------------------------------------------------------


class StepwiseMemory:
    """A Stepwise session as the memory of smolagents agents.

    Args:
        client: a ``stepwise.Stepwise`` client.
        session: a session name or id; a missing session is created with that name.
        save_model_input: also save each step's ``model_input_messages`` (off by default:
            they repeat the whole conversation at every step).
        restore_all_runs: ``restore`` rebuilds the steps of every run of the session. By
            default it rebuilds what the agent had in memory: the steps from the last run
            started with ``reset=True`` (smolagents' default, which empties the memory) on.
        max_restore_steps: ``restore`` puts only the last N steps in the agent's memory, after
            a ``TaskStep`` summing up the earlier ones (for long sessions); ``None`` restores
            them all.
        retry_for: how long (seconds) the background sender keeps retrying a save while
            the server cannot be reached or answers 5xx/429; then the save is given up
            (logged, counted in ``errors``).
        session_kwargs: fields for a session created here (``title``, ``metadata``, ...).
    """

    def __init__(
        self,
        client: Any,
        session: str,
        *,
        save_model_input: bool = False,
        restore_all_runs: bool = False,
        max_restore_steps: int | None = None,
        retry_for: float = 60.0,
        **session_kwargs: Any,
    ) -> None:
        if max_restore_steps is not None and (
            isinstance(max_restore_steps, bool) or not isinstance(max_restore_steps, int) or max_restore_steps < 1
        ):
            raise ValueError(f"max_restore_steps must be a positive integer or None, got {max_restore_steps!r}")
        self.max_restore_steps = max_restore_steps
        self.client = client
        self.retry_for = retry_for
        self.save_model_input = save_model_input
        self.restore_all_runs = restore_all_runs
        self._session_kwargs = session_kwargs
        self.session: dict = client.session(session, **session_kwargs)
        self._agent: Any = None
        self._original_run: Any = None
        self._run: _Run | None = None
        self._sender = _Sender(client, self)
        # A memory dropped without close(): its thread sends what is queued, then ends.
        # (Not at interpreter exit: `_flush_at_exit` waits for the queue then.)
        weakref.finalize(self, self._sender.stop_soon).atexit = False
        _LIVE.add(self)

    @property
    def session_id(self) -> str:
        return self.session["id"]

    @property
    def errors(self) -> int:
        """How many saves failed (each is logged on ``stepwise.smolagents``)."""
        return self._sender.errors

    # -- attaching --------------------------------------------------------------------------

    def attach(self, agent: Any, *, restore: bool = True) -> StepwiseMemory:
        """Saves the agent's steps to this session from now on; restores the session's
        memory into the agent first (``restore=False`` to keep the agent's memory)."""
        if self._agent is agent:
            return self
        if self._agent is not None:
            raise RuntimeError("this StepwiseMemory is attached to another agent; detach() it first")
        if getattr(agent, "_stepwise_memory", None) is not None:
            raise RuntimeError("this agent is attached to another StepwiseMemory; detach() it first")
        registry = agent.step_callbacks
        for cls in (ActionStep, PlanningStep, FinalAnswerStep):
            registry.register(cls, self._on_step)
        self._original_run = agent.__dict__.get("run")
        agent.run = self._wrap_run(agent, agent.run)
        agent._stepwise_memory = self
        self._agent = agent
        if restore:
            self.restore(agent)
        return self

    def detach(self) -> None:
        """Stops saving the agent's steps (what is queued is still sent)."""
        agent = self._agent
        if agent is None:
            return
        callbacks = getattr(agent.step_callbacks, "_callbacks", {})
        for cls in (ActionStep, PlanningStep, FinalAnswerStep):
            entries = callbacks.get(cls, [])
            for cb in list(entries):
                if getattr(cb, "__self__", None) is self and getattr(cb, "__func__", None) is StepwiseMemory._on_step:
                    entries.remove(cb)
        if self._original_run is None:
            agent.__dict__.pop("run", None)
        else:
            agent.run = self._original_run
        agent._stepwise_memory = None
        self._agent = None
        self._original_run = None

    # -- sessions ---------------------------------------------------------------------------

    def restore(self, agent: Any | None = None) -> list[MemoryStep]:
        """Replaces ``agent.memory.steps`` with the steps saved in this session.

        Steps whose smolagents payload cannot be decoded are skipped (a warning is logged).
        When the server could restore only part of the session (``restored: "summary"``),
        its context summary comes first, as a ``TaskStep``. Returns the steps.
        """
        agent = agent if agent is not None else self._agent
        if agent is None:
            raise RuntimeError("restore() needs an agent: pass one or attach() first")
        if self._run is not None and not self._run.finished and self._run.agent_ref() is agent:
            raise RuntimeError("cannot restore while the agent is running")
        steps = self.load()
        agent.memory.system_prompt = SystemPromptStep(system_prompt=agent.system_prompt)
        agent.memory.steps = steps
        return steps

    def load(self) -> list[MemoryStep]:
        """The smolagents steps saved in this session (what ``restore`` puts in memory)."""
        return memory_steps(
            self.client.get_memory(self.session_id),
            restore_all_runs=self.restore_all_runs,
            where=f"session {self.session_id}",
            max_restore_steps=self.max_restore_steps,
        )

    def switch(self, agent: Any, session: str, **session_kwargs: Any) -> StepwiseMemory:
        """Makes ``session`` (a name or id; created when missing) this memory's session and
        restores it into the agent: ``agent.memory`` then holds that session's steps only."""
        if self._run is not None and not self._run.finished:
            raise RuntimeError("cannot switch sessions while the agent is running")
        self.session = self.client.session(session, **(session_kwargs or self._session_kwargs))
        if self._agent is None:
            self.attach(agent)
        elif self._agent is not agent:
            raise RuntimeError("this StepwiseMemory is attached to another agent")
        else:
            self.restore(agent)
        return self

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Waits until every step queued so far is sent (saved, or given up on and logged).
        Returns False when ``timeout`` seconds passed first."""
        return self._sender.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flushes, detaches and stops the sender thread."""
        self.flush(timeout)
        self.detach()
        self._sender.stop(timeout)
        _LIVE.discard(self)

    def __enter__(self) -> StepwiseMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- hooks ------------------------------------------------------------------------------

    def _wrap_run(self, agent: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        memory = self

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # let smolagents say what is wrong
            bound.apply_defaults()
            arguments = bound.arguments
            reset = bool(arguments.get("reset", True))
            try:
                state = memory._begin(agent, arguments.get("task"), reset)
            except Exception:  # saving must never break the agent
                logger.exception("stepwise: could not start saving a run")
                return original(*args, **kwargs)
            if reset and "reset" in arguments:
                # Done by _begin already (so that the step list it watches is the one
                # `run` appends the task to).
                arguments["reset"] = False
                args, kwargs = bound.args, bound.kwargs
            try:
                result = original(*args, **kwargs)
            except BaseException as e:
                memory._end(state, error=e)
                raise
            if arguments.get("stream"):
                return memory._wrap_stream(state, result)
            memory._end(state)
            return result

        run.__wrapped__ = original  # type: ignore[attr-defined]
        run.__doc__ = getattr(original, "__doc__", None)
        run.__name__ = "run"
        return run

    def _wrap_stream(self, state: _Run, stream: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from stream
        except GeneratorExit:
            self._end(state, error="the run's stream was closed before its final answer")
            raise
        except BaseException as e:
            self._end(state, error=e)
            raise
        self._end(state)

    def _begin(self, agent: Any, task: Any, reset: bool) -> _Run:
        previous = self._run
        if previous is not None and not previous.finished:
            self._end(previous, error="a new run started before this one ended")
        state = _Run(self.session_id, task, reset, agent)
        self._run = state
        self._sender.put((_OPEN, state, type(agent).__name__))
        if reset:  # what `run(reset=True)` does first
            agent.memory.reset()
            monitor = getattr(agent, "monitor", None)
            if monitor is not None:
                monitor.reset()
        watch = _TaskWatch(agent.memory.steps, lambda step: self._task_appended(state, step))
        agent.memory.steps = watch
        state.steps_ref = watch
        state.steps_base = len(watch)
        return state

    def _end(self, state: _Run, *, error: Any = None) -> None:
        if state.finished:
            return
        try:
            self._save_task(state)
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a run's task")
        state.finished = True
        if error is None:
            error = "the run ended without a final answer"
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        self._sender.put((_FAIL, state, error))

    def _task_appended(self, state: _Run, task: TaskStep) -> None:
        try:
            self._save_task(state, task)
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a run's task")

    def _save_task(self, state: _Run, task: TaskStep | None = None) -> None:
        """Queues the run's TaskStep: given by the watched step list as `run` appends it,
        else (a run that replaced the list) looked for in the memory's new steps."""
        if state.task_saved or state.finished:
            return
        state.task_saved = True
        if task is None:
            agent = state.agent_ref()
            if agent is None:
                return
            steps = agent.memory.steps
            start = state.steps_base if steps is state.steps_ref else 0
            task = next((s for s in steps[start:] if isinstance(s, TaskStep)), None)
            if task is None:
                return
        number = state.next_number
        state.next_number += 1
        state.task_images = task.task_images
        self._sender.put((_STEP, state, number, copy.copy(task), state.agent_ref, {"reset": state.reset}))

    def _on_step(self, memory_step: MemoryStep, agent: Any = None) -> None:
        state = self._run
        if state is None or state.finished or (agent is not None and agent is not self._agent):
            return
        try:
            if not state.task_saved:
                self._save_task(state)
            number = state.next_number
            state.next_number += 1
            # A shallow copy: the step's fields as they are now; converting and sending
            # happen on the sender thread.
            self._sender.put((_STEP, state, number, copy.copy(memory_step), state.agent_ref))
            if isinstance(memory_step, FinalAnswerStep):
                state.finished = True
                self._sender.put((_COMPLETE, state, memory_step.output))
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a smolagents step")
