"""`Worker.smolagents`: a smolagents agent as an agent type of a worker.

For each claim, the factory builds an agent; its memory becomes the session's memory (the
claim's ``memory``, decoded as `stepwise.smolagents.StepwiseMemory` restores it) followed by
this execution's own saved steps, so a run taken over after a lost worker goes on from its
last saved step: ``run(task, reset=False)`` with the task step already in memory, and the
step counter where the lost worker left it. The agent's prompt before the next step is then
the one the lost worker would have sent.

Steps are saved as they finish, in the agent's thread (``POST .../steps`` with the lease), in
`stepwise.smolagents`' format (so `StepwiseMemory` and later runs restore them), the task
first (with ``reset: false``: a session's runs build one conversation). A ``user_input``
tool of the agent is replaced by one that asks the user through Stepwise: the execution
pauses, and when the answer comes the run goes on from its last saved step, where the
agent's call of ``user_input`` returns the answer. Cancel calls ``agent.interrupt()`` and
stops at the next step. Not restored after a lost worker: the Python variables a
``CodeAgent``'s earlier steps defined.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Callable

from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep, SystemPromptStep, TaskStep
from smolagents.models import ChatMessageStreamDelta
from smolagents.tools import Tool
from smolagents.utils import make_json_serializable

from ..smolagents._codec import tool_input_names, decode_step, encode_step, memory_steps
from ._run import Cancelled, Run, is_answer

__all__ = ["smolagents_handler"]

logger = logging.getLogger("stepwise.worker")

USER_INPUT = "user_input"


class _StepNumber:
    """``agent.step_number`` on a resumed agent: the reset to 1 that a run begins with becomes
    the number of the step to resume at (once); everything else as usual."""

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        if obj is None:
            return self
        return obj.__dict__.get("_stepwise_step_number", 0)

    def __set__(self, obj: Any, value: Any) -> None:
        first = obj.__dict__.pop("_stepwise_resume_at", None)
        if first is not None and value == 1:
            value = first
        obj.__dict__["_stepwise_step_number"] = value


_RESUMABLE: dict[type, type] = {}


def _resume_at(agent: Any, number: int) -> None:
    """Makes the agent's next run start counting its steps at `number`."""
    cls = type(agent)
    if not isinstance(cls.__dict__.get("step_number"), _StepNumber):
        sub = _RESUMABLE.get(cls)
        if sub is None:
            sub = type(cls.__name__, (cls,), {"step_number": _StepNumber(), "__module__": cls.__module__,
                                               "__qualname__": cls.__qualname__})
            _RESUMABLE[cls] = sub
        current = agent.__dict__.get("step_number", 0)
        agent.__class__ = sub
        agent.__dict__["_stepwise_step_number"] = current
    agent.__dict__["_stepwise_resume_at"] = number


class _Steps(list):
    """The agent's ``memory.steps`` for one run: the TaskStep that ``run`` appends is dropped
    (it is in memory already, saved or restored)."""

    def __init__(self, items: list) -> None:
        super().__init__(items)
        self.task_dropped = False

    def append(self, item: Any) -> None:
        if not self.task_dropped and isinstance(item, TaskStep):
            self.task_dropped = True
            return
        super().append(item)

    def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles as a plain list
        return (list, (list(self),))


class _AskUser(Tool):
    """The agent's ``user_input`` tool, asking the user through Stepwise."""

    name = USER_INPUT
    description = "Asks for user's input on a specific question"
    inputs = {"question": {"type": "string", "description": "The question to ask the user"}}
    output_type = "string"

    def __init__(self, run: Run, original: Any = None) -> None:
        description = getattr(original, "description", None)
        if isinstance(description, str) and description:
            self.description = description
        super().__init__()
        self._run = run

    def forward(self, question: str) -> str:  # type: ignore[override]
        return self._run.ask(question)


def _build(factory: Callable[..., Any], run: Run) -> Any:
    try:
        takes_run = len(inspect.signature(factory).parameters) >= 1
    except (TypeError, ValueError):
        takes_run = False
    return factory(run) if takes_run else factory()


def _answer(output: Any) -> Any:
    if isinstance(output, str):
        return str(output)
    return make_json_serializable(output)


def smolagents_handler(
    factory: Callable[..., Any], *, max_steps: int | None = None, restore_all_runs: bool = False
) -> Callable[[Run], Any]:
    """The agent function running `factory()`'s agent for each claim."""

    def handler(run: Run) -> Any:
        run.skip_replay()  # the agent goes on from its restored memory: new steps only
        # This execution's steps so far (after a lost worker or a pause): what to go on from.
        own: list[Any] = []
        task: TaskStep | None = None
        last_smol_number = 0
        for stored in run.steps:
            try:
                step = decode_step(stored, task)
            except ValueError as e:
                logger.warning("execution %s: step %s cannot be decoded (%s); left out",
                               run.execution_id, stored.get("step_number"), e)
                continue
            if step is None:
                continue
            last_smol_number = int(stored.get("step_number") or 0)
            if isinstance(step, FinalAnswerStep):
                # Saved before the lost worker could complete: the answer is known.
                return _answer(step.output)
            if isinstance(step, TaskStep) and task is None:
                task = step
                continue
            own.append(step)
        # Answers given before the last saved step were used by the steps restored above.
        run._asked = sum(
            1 for s in run.steps if is_answer(s) and int(s.get("step_number") or 0) < last_smol_number
        )

        agent = _build(factory, run)
        run.check()
        if USER_INPUT in agent.tools:
            agent.tools[USER_INPUT] = _AskUser(run, agent.tools[USER_INPUT])

        if task is None:
            task = TaskStep(task=run.input_text)
            run.step(**encode_step(task, extra={"reset": False}))
        previous = memory_steps(run.memory, restore_all_runs=restore_all_runs,
                                where=f"session {run.session_id}")
        agent.memory.system_prompt = SystemPromptStep(system_prompt=agent.system_prompt)
        agent.memory.steps = _Steps([*previous, task, *own])
        done = [s.step_number for s in own if isinstance(s, ActionStep)]
        if done:
            _resume_at(agent, max(done) + 1)
            logger.info("execution %s: the agent goes on at step %d", run.execution_id, max(done) + 1)

        def save(memory_step: Any, agent: Any = None) -> None:
            if run._paused:
                return  # the step that asked the user: it runs again when the answer comes
            if run.lease_lost:
                raise Cancelled(run.cancel_reason or "lease_lost")
            run.step(**encode_step(memory_step, tool_inputs=tool_input_names(agent), task_images=task.task_images))
            if run.cancelled:  # a stopping worker: this step is saved, the run stops here
                raise Cancelled(run.cancel_reason or "cancelled")

        for cls in (ActionStep, PlanningStep, FinalAnswerStep):
            agent.step_callbacks.register(cls, save)
        run.on_cancel(agent.interrupt)

        final: Any = None
        finished = False
        for event in agent.run(task.task, reset=False, stream=True, max_steps=max_steps):
            if isinstance(event, ChatMessageStreamDelta):
                if event.content:
                    run.delta(event.content)
            elif isinstance(event, FinalAnswerStep):
                final, finished = event.output, True
        run.check()
        if not finished:  # pragma: no cover - smolagents always ends with a final answer
            raise RuntimeError("the agent ended without a final answer")
        return _answer(final)

    return handler
