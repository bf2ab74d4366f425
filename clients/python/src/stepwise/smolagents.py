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
"""

from __future__ import annotations

import atexit
import base64
import copy
import datetime as _dt
import inspect
import io
import json
import logging
import math
import queue
import threading
import time
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
    ToolCall,
)
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)
from smolagents.monitoring import Timing, TokenUsage
from smolagents import utils as _smol_utils
from smolagents.utils import AgentError, make_json_serializable

from ._errors import StepwiseError

__all__ = ["StepwiseMemory", "PAYLOAD_VERSION", "encode_step", "decode_step", "memory_steps"]

logger = logging.getLogger("stepwise.smolagents")

#: Version of the ``output.smolagents`` payload written by this module.
PAYLOAD_VERSION = 1

_STEP_TYPES = {
    "ActionStep": "action",
    "PlanningStep": "planning",
    "TaskStep": "task",
    "FinalAnswerStep": "final_answer",
}

# Errors a stored step may name: smolagents' own AgentError classes only (never an
# arbitrary import path from the database).
_ERROR_CLASSES: dict[str, type[AgentError]] = {
    name: obj
    for name, obj in vars(_smol_utils).items()
    if isinstance(obj, type) and issubclass(obj, AgentError)
}


# --- JSON encoding of free-form values ----------------------------------------------------
#
# The server keeps JSON objects with their keys sorted, and a tuple is not JSON; both
# matter to smolagents (a tool call's arguments reach the model through `str(...)`). Plain
# JSON with sorted keys is stored as it is; anything else is tagged:
#   {"$dict": [[key, value], ...]}  a dict whose key order (or key types) must be kept
#   {"$tuple": [...]}               a tuple
#   {"$float": "nan" | "inf" | "-inf"}
#   {"$int": "123..."}              an integer beyond 64 bits
#   {"$image": {"format": "png", "base64": "..."}}   a PIL image
#   {"$object": "TypeName", "value": <make_json_serializable(obj)>}  (comes back as value)

_TAGS = ("$dict", "$tuple", "$float", "$int", "$image", "$object")


def _enc(value: Any) -> Any:
    # The common exact types first (a step is mostly these): about half the time per step.
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is dict:
        return _enc_dict(value)
    if t is list:
        return [_enc(v) for v in value]
    if t is int and -(2**63) <= value < 2**64:
        return value
    if t is float and math.isfinite(value):
        return value
    if isinstance(value, (bool, int, str)):
        # str subclasses (smolagents' AgentText) are kept as their text.
        if isinstance(value, str):
            return str(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not -(2**63) <= value < 2**64:  # beyond what the server's JSON keeps exactly
                return {"$int": str(int(value))}
            return int(value)
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return {"$float": "nan"}
        if math.isinf(value):
            return {"$float": "inf" if value > 0 else "-inf"}
        return float(value)
    if isinstance(value, list):
        return [_enc(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [_enc(v) for v in value]}
    if isinstance(value, dict):
        return _enc_dict(value)
    image = _encode_image(value)
    if image is not None:
        return {"$image": image}
    return {"$object": type(value).__name__, "value": _enc(make_json_serializable(value))}


def _enc_dict(value: dict) -> dict:
    """A dict with sorted text keys as JSON keeps it; any other as ``{"$dict": pairs}``."""
    keys = list(value)
    plain = (
        all(type(k) is str for k in keys)
        and keys == sorted(keys)
        and not (len(keys) in (1, 2) and keys[0] in _TAGS)
    )
    if plain:
        return {k: _enc(v) for k, v in value.items()}
    return {"$dict": [[_enc(k), _enc(v)] for k, v in value.items()]}


def _dec(value: Any) -> Any:
    if isinstance(value, list):
        return [_dec(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$dict":
                return {_hashable(_dec(k)): _dec(v) for k, v in inner}
            if key == "$tuple":
                return tuple(_dec(v) for v in inner)
            if key == "$float":
                return float(inner)
            if key == "$int":
                return int(inner)
            if key == "$image":
                return _decode_image(inner)
        if len(value) == 2 and "$object" in value and "value" in value:
            return _dec(value["value"])
        return {k: _dec(v) for k, v in value.items()}
    return value


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:  # an object key that came back as JSON
        return json.dumps(key, sort_keys=True, default=str)
    return key


def _encode_image(value: Any) -> dict | None:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with smolagents' image tools
        return None
    if not isinstance(value, Image.Image):
        return None
    buffer = io.BytesIO()
    try:
        value.save(buffer, format="PNG")
    except Exception as e:  # an image type PNG cannot hold: kept in smolagents' JSON form
        logger.warning("stepwise: an image of a step is not saved as PNG: %s", e)
        return None
    encoded: dict[str, Any] = {"format": "png", "base64": base64.b64encode(buffer.getvalue()).decode("ascii")}
    if value.info:
        info = {str(k): v for k, v in value.info.items() if isinstance(v, (str, int, float, bool))}
        if info:
            encoded["info"] = _enc(info)
    return encoded


def _decode_image(data: dict) -> Any:
    raw = base64.b64decode(data["base64"])
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        logger.warning("an image of a restored step is kept as PNG bytes: Pillow is not installed")
        return raw
    with Image.open(io.BytesIO(raw)) as opened:
        image = opened.copy()  # a plain Image, as images made in memory are
    image.info = _dec(data.get("info")) or {}
    return image


# --- smolagents objects <-> JSON ----------------------------------------------------------


def _timing(t: Timing | None) -> dict | None:
    if t is None:
        return None
    return {"start_time": _enc(t.start_time), "end_time": _enc(t.end_time)}


def _timing_back(d: dict | None) -> Timing | None:
    if d is None:
        return None
    return Timing(start_time=_dec(d["start_time"]), end_time=_dec(d.get("end_time")))


def _usage(u: TokenUsage | None) -> dict | None:
    if u is None:
        return None
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens}


def _usage_back(d: dict | None) -> TokenUsage | None:
    if d is None:
        return None
    return TokenUsage(input_tokens=d["input_tokens"], output_tokens=d["output_tokens"])


def _message(m: ChatMessage | None) -> dict | None:
    if m is None:
        return None
    role = m.role.value if isinstance(m.role, MessageRole) else m.role
    return {
        "role": role,
        "content": _enc(m.content),
        "tool_calls": [
            {
                "id": tc.id,
                "type": tc.type,
                "function": {
                    "name": tc.function.name,
                    "arguments": _enc(tc.function.arguments),
                    "description": tc.function.description,
                },
            }
            for tc in m.tool_calls
        ]
        if m.tool_calls is not None
        else None,
        "token_usage": _usage(m.token_usage),
    }


def _message_back(d: dict | None) -> ChatMessage | None:
    if d is None:
        return None
    role = d["role"]
    try:
        role = MessageRole(role)
    except ValueError:
        pass
    tool_calls = d.get("tool_calls")
    return ChatMessage(
        role=role,
        content=_dec(d.get("content")),
        tool_calls=[
            ChatMessageToolCall(
                function=ChatMessageToolCallFunction(
                    arguments=_dec(tc["function"]["arguments"]),
                    name=tc["function"]["name"],
                    description=tc["function"].get("description"),
                ),
                id=tc["id"],
                type=tc["type"],
            )
            for tc in tool_calls
        ]
        if tool_calls is not None
        else None,
        token_usage=_usage_back(d.get("token_usage")),
    )


def _messages(ms: list[ChatMessage] | None) -> list | None:
    return None if ms is None else [_message(m) for m in ms]


def _messages_back(ds: list | None) -> list[ChatMessage] | None:
    return None if ds is None else [_message_back(d) for d in ds]


def _error(e: Any) -> dict | None:
    if e is None:
        return None
    message = e.message if isinstance(e, AgentError) else e
    return {"type": type(e).__name__, "message": str(message)}


def _error_back(d: dict | None) -> AgentError | None:
    if d is None:
        return None
    cls = _ERROR_CLASSES.get(d.get("type", ""), AgentError)
    # AgentError.__init__ wants a logger and logs the message: build it without that.
    error = cls.__new__(cls)
    Exception.__init__(error, d["message"])
    error.message = d["message"]
    return error


def _images(images: list | None) -> list | None:
    return None if images is None else [_enc(i) for i in images]


def _images_back(ds: list | None) -> list | None:
    return None if ds is None else [_dec(d) for d in ds]


def _tool_calls(tcs: list[ToolCall] | None) -> list | None:
    if tcs is None:
        return None
    return [{"id": tc.id, "name": tc.name, "arguments": _enc(tc.arguments)} for tc in tcs]


def _tool_calls_back(ds: list | None) -> list[ToolCall] | None:
    if ds is None:
        return None
    return [ToolCall(name=d["name"], arguments=_dec(d["arguments"]), id=d["id"]) for d in ds]


# `run(task, images=...)` gives every ActionStep of the run the task's own image list:
# such a step refers to its run's TaskStep instead of storing the images again.
_TASK_IMAGES = "task_images"


def _step_data(step: MemoryStep, save_model_input: bool, task_images: list | None = None) -> dict:
    if isinstance(step, ActionStep):
        same = step.observations_images is not None and step.observations_images is task_images
        return {
            "step_number": step.step_number,
            "timing": _timing(step.timing),
            "model_input_messages": _messages(step.model_input_messages) if save_model_input else None,
            "tool_calls": _tool_calls(step.tool_calls),
            "error": _error(step.error),
            "model_output_message": _message(step.model_output_message),
            "model_output": _enc(step.model_output),
            "code_action": step.code_action,
            "observations": step.observations,
            "observations_images": _TASK_IMAGES if same else _images(step.observations_images),
            "action_output": _enc(step.action_output),
            "token_usage": _usage(step.token_usage),
            "is_final_answer": step.is_final_answer,
        }
    if isinstance(step, PlanningStep):
        return {
            "model_input_messages": _messages(step.model_input_messages) if save_model_input else None,
            "model_output_message": _message(step.model_output_message),
            "plan": step.plan,
            "timing": _timing(step.timing),
            "token_usage": _usage(step.token_usage),
        }
    if isinstance(step, TaskStep):
        return {"task": step.task, "task_images": _images(step.task_images)}
    if isinstance(step, FinalAnswerStep):
        return {"output": _enc(step.output)}
    raise TypeError(f"not a step type Stepwise saves: {type(step).__name__}")


def _step_from_data(type_name: str, d: dict, task: TaskStep | None = None) -> MemoryStep:
    if type_name == "ActionStep":
        images = d.get("observations_images")
        if images == _TASK_IMAGES:
            if task is None or task.task_images is None:
                raise ValueError("the step refers to its task's images, which are not there")
            images = task.task_images
        else:
            images = _images_back(images)
        return ActionStep(
            step_number=d["step_number"],
            timing=_timing_back(d["timing"]),
            model_input_messages=_messages_back(d.get("model_input_messages")),
            tool_calls=_tool_calls_back(d.get("tool_calls")),
            error=_error_back(d.get("error")),
            model_output_message=_message_back(d.get("model_output_message")),
            model_output=_dec(d.get("model_output")),
            code_action=d.get("code_action"),
            observations=d.get("observations"),
            observations_images=images,
            action_output=_dec(d.get("action_output")),
            token_usage=_usage_back(d.get("token_usage")),
            is_final_answer=bool(d.get("is_final_answer", False)),
        )
    if type_name == "PlanningStep":
        return PlanningStep(
            model_input_messages=_messages_back(d.get("model_input_messages")) or [],
            model_output_message=_message_back(d["model_output_message"]),
            plan=d["plan"],
            timing=_timing_back(d["timing"]),
            token_usage=_usage_back(d.get("token_usage")),
        )
    if type_name == "TaskStep":
        return TaskStep(task=d["task"], task_images=_images_back(d.get("task_images")))
    if type_name == "FinalAnswerStep":
        return FinalAnswerStep(output=_dec(d.get("output")))
    raise ValueError(f"unknown smolagents step type {type_name!r}")


def _rfc3339(t: float | None) -> str | None:
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return None
    moment = _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _text(value: Any) -> str | None:
    """A model output as text (smolagents allows a list of content parts)."""
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list):
        parts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(parts)
    return str(value)


def _arguments_object(name: str, arguments: Any, single_input: str | None) -> dict:
    """A tool call's arguments as the JSON object Stepwise shows (`tool_calls[].arguments`)."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    if isinstance(arguments, dict):
        return {str(k): v for k, v in make_json_serializable(arguments).items()}
    key = single_input or ("code" if name == "python_interpreter" else "input")
    return {key: make_json_serializable(arguments)}


def encode_step(
    step: MemoryStep,
    *,
    save_model_input: bool = False,
    tool_inputs: dict[str, str] | None = None,
    extra: dict | None = None,
    task_images: list | None = None,
) -> dict:
    """The Stepwise step body (``kind``, ``model_output``, ... ``output``) of a smolagents step.

    ``tool_inputs`` maps a tool's name to its single input's name, so that a tool called
    with a bare value shows as ``{input_name: value}``.
    """
    type_name = type(step).__name__
    base = next((t for t in type(step).__mro__ if t.__name__ in _STEP_TYPES), None)
    if base is None:
        raise TypeError(f"not a step type Stepwise saves: {type_name}")
    type_name = base.__name__
    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "type": type_name,
        "data": _step_data(step, save_model_input, task_images),
    }
    if extra:
        payload.update(extra)
    body: dict[str, Any] = {"kind": _STEP_TYPES[type_name], "output": {"smolagents": payload}}
    tool_inputs = tool_inputs or {}
    if isinstance(step, ActionStep):
        body["model_output"] = _text(step.model_output)
        body["tool_calls"] = [
            {
                "id": str(tc.id),
                "name": str(tc.name),
                "arguments": _arguments_object(tc.name, tc.arguments, tool_inputs.get(tc.name)),
            }
            for tc in (step.tool_calls or [])
        ]
        body["code"] = step.code_action
        body["observations"] = step.observations
        if step.error is not None:
            body["error"] = {"kind": type(step.error).__name__, "message": str(step.error)}
        if step.token_usage is not None:
            body["token_usage"] = _stepwise_usage(step.token_usage)
        body["started_at"] = _rfc3339(step.timing.start_time if step.timing else None)
        body["ended_at"] = _rfc3339(step.timing.end_time if step.timing else None)
    elif isinstance(step, PlanningStep):
        body["model_output"] = step.plan
        if step.token_usage is not None:
            body["token_usage"] = _stepwise_usage(step.token_usage)
        body["started_at"] = _rfc3339(step.timing.start_time if step.timing else None)
        body["ended_at"] = _rfc3339(step.timing.end_time if step.timing else None)
    elif isinstance(step, TaskStep):
        # Where Stepwise's own agents read a task's text from.
        body["observations"] = step.task
    elif isinstance(step, FinalAnswerStep):
        body["model_output"] = _answer_text(step.output)
    return body


def _stepwise_usage(u: TokenUsage) -> dict:
    return {"input": int(u.input_tokens), "output": int(u.output_tokens), "total": int(u.total_tokens)}


def _answer_text(answer: Any) -> str:
    if isinstance(answer, str):
        return str(answer)
    try:
        return json.dumps(make_json_serializable(answer), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(answer)


def decode_step(stored: dict, task: TaskStep | None = None) -> MemoryStep | None:
    """The smolagents step a Stepwise step holds (``None`` when it holds none).

    ``task`` is the step's run's TaskStep (for action steps that show the task's images).

    Raises ``ValueError`` when its ``output.smolagents`` payload cannot be decoded.
    """
    output = stored.get("output")
    if not isinstance(output, dict) or "smolagents" not in output:
        return None
    payload = output["smolagents"]
    try:
        if not isinstance(payload, dict):
            raise ValueError("the payload is not an object")
        version = payload.get("version")
        if version != PAYLOAD_VERSION:
            raise ValueError(f"unsupported payload version {version!r}")
        data = payload.get("data")
        if not isinstance(data, dict):
            raise ValueError("the payload has no data object")
        return _step_from_data(str(payload.get("type")), data, task)
    except ValueError:
        raise
    except Exception as e:  # KeyError, TypeError, a broken image, ...
        raise ValueError(f"{type(e).__name__}: {e}") from e


def memory_steps(
    memory: dict, *, restore_all_runs: bool = False, where: str = "the session"
) -> list[MemoryStep]:
    """The smolagents steps of a session's memory (``GET /v1/sessions/{id}/memory``, or a
    worker claim's ``memory``): what ``StepwiseMemory.restore`` puts in an agent's memory.

    Steps that hold no smolagents step, and final answers, are left out; steps whose payload
    cannot be decoded are skipped with a warning. Unless ``restore_all_runs``, the steps start
    at the session's last run that began with ``reset=True``. When the server restored only
    part of the session (``restored: "summary"``), its summary comes first, as a ``TaskStep``.
    """
    steps: list[MemoryStep] = []
    tasks: dict[Any, TaskStep] = {}  # each execution's TaskStep
    for stored in memory.get("steps") or []:
        try:
            step = decode_step(stored, tasks.get(stored.get("execution_id")))
        except ValueError as e:
            logger.warning(
                "stepwise: skipped step %s (number %s of execution %s) of %s: "
                "its smolagents data cannot be decoded: %s",
                stored.get("id"), stored.get("step_number"), stored.get("execution_id"),
                where, e,
            )
            continue
        if step is None:
            logger.debug("stepwise: step %s holds no smolagents step; left out", stored.get("id"))
            continue
        if isinstance(step, FinalAnswerStep):
            continue  # not part of an agent's memory
        if (
            isinstance(step, TaskStep)
            and stored["output"]["smolagents"].get("reset")
            and not restore_all_runs
        ):
            steps = []  # this run began by emptying the agent's memory
        if isinstance(step, TaskStep):
            tasks.setdefault(stored.get("execution_id"), step)
        steps.append(step)
    summary = memory.get("summary")
    if memory.get("restored") == "summary" and isinstance(summary, dict) and summary.get("text"):
        steps.insert(0, TaskStep(task=summary["text"]))
    return steps


# --- the background sender ----------------------------------------------------------------


class _Run:
    """One `agent.run`: one Stepwise execution."""

    __slots__ = (
        "session_id", "task", "reset", "execution_id", "next_number", "task_saved",
        "finished", "steps_ref", "steps_base", "open_failed", "agent_ref", "task_images",
    )

    def __init__(self, session_id: str, task: Any, reset: bool, agent: Any) -> None:
        self.session_id = session_id
        self.task = task
        self.reset = reset
        self.execution_id: str | None = None
        self.next_number = 1
        self.task_saved = False
        self.finished = False
        self.open_failed = False
        self.agent_ref = weakref.ref(agent)
        self.task_images: list | None = None
        # To find the TaskStep `run` appends: the memory's step list before the run (a
        # reset run replaces the list) and its length.
        steps = agent.memory.steps
        self.steps_ref = steps
        self.steps_base = len(steps)


class _TaskWatch(list):
    """``agent.memory.steps`` from a run's start: tells the memory about the TaskStep that
    ``run`` appends, once, so the task is saved before the model is first called."""

    __slots__ = ("_on_task",)

    def __init__(self, items: list, on_task: Callable[[TaskStep], None]) -> None:
        super().__init__(items)
        self._on_task: Callable[[TaskStep], None] | None = on_task

    def append(self, item: Any) -> None:
        super().append(item)
        on_task = self._on_task
        if on_task is not None and isinstance(item, TaskStep):
            self._on_task = None
            on_task(item)

    def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles as a plain list
        return (list, (list(self),))


_OPEN, _STEP, _COMPLETE, _FAIL, _MARK, _STOP = range(6)

# The answers that mean the server has an operation already (a retried complete/fail).
_DONE_CODES = {"invalid_state", "conflict"}

# Most steps converted in one go: the next ones are converted while these are on the wire.
_BATCH_MAX = 250
# Most steps sent in one request (what `POST .../steps/batch` takes): converted batches of
# one run that wait together for the sending thread go out as one.
_REQUEST_MAX = 1_000
# Requests converted ahead of the one being sent (then the converting thread waits).
_AHEAD = 4
# An item of the send queue: steps of a run, converted (numbered bodies).
_POST = -1


class _Sender:
    """Two threads that send a memory's operations in order.

    The first takes operations off ``queue`` and converts steps to request bodies; the
    second takes what the first hands it (``outbox``, in the same order) and sends it.
    Steps of one run that are queued together (the agent went faster than the server)
    are converted ``_BATCH_MAX`` at a time, and the converted batches of a run that wait
    together go out in one ``append_steps`` request, up to ``_REQUEST_MAX`` steps; any other
    operation (open, complete, fail, a flush mark) waits until the steps queued before it
    are sent. A step found alone is sent with ``append_step``, as one request.
    """

    def __init__(self, client: Any, memory: StepwiseMemory) -> None:
        self.client = client
        self.memory_ref = weakref.ref(memory)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.Queue = queue.Queue(maxsize=_AHEAD)
        self.thread: threading.Thread | None = None  # converts
        self.poster: threading.Thread | None = None  # sends
        self.lock = threading.Lock()
        self.errors_lock = threading.Lock()
        self.errors = 0
        self.stopping = False
        # Only a client whose class has `append_steps` (`Stepwise`) gets batches: a stand-in
        # that forwards the client's other methods but has its own `append_step` keeps
        # getting every step through it. Turned off too when the server has no batch
        # endpoint (an older server).
        self.batching = callable(getattr(type(client), "append_steps", None))

    def put(self, item: tuple) -> None:
        if self.thread is None:
            self._start()
        self.queue.put(item)

    def _start(self) -> None:
        with self.lock:
            if self.thread is None:
                poster = threading.Thread(target=self._post_loop, name="stepwise-smolagents-sender", daemon=True)
                poster.start()
                self.poster = poster
                thread = threading.Thread(target=self._loop, name="stepwise-smolagents-converter", daemon=True)
                thread.start()
                self.thread = thread

    def lost(self, n: int) -> None:
        """Counts `n` operations given up on (from either thread)."""
        with self.errors_lock:
            self.errors += n

    def flush(self, timeout: float | None) -> bool:
        poster = self.poster
        if poster is None or not poster.is_alive():
            return True
        if self.stopping:  # no mark would be read after the stop: wait for the threads
            poster.join(timeout)
            return not poster.is_alive()
        done = threading.Event()
        self.queue.put((_MARK, done))
        return done.wait(timeout)

    def stop_soon(self) -> None:
        """The thread ends once it has sent everything queued before this call."""
        if not self.stopping:
            self.stopping = True
            self.queue.put((_STOP,))

    def stop(self, timeout: float | None) -> None:
        self.stop_soon()
        if self.poster is not None and self.poster.is_alive():
            self.poster.join(timeout)

    def _loop(self) -> None:
        """The converting thread: steps become numbered bodies; every operation goes on to
        the sending thread in the order it was queued."""
        after: tuple | None = None  # taken from the queue behind a batch: handled next
        while True:
            item = after if after is not None else self.queue.get()
            after = None
            if item[0] == _STEP:
                batch, after = self._take_steps(item) if self.batching else ([item], None)
                try:
                    item = (_POST, item[1], self._encode_steps(batch))
                except Exception:  # never let the thread die
                    self.lost(len(batch))
                    logger.exception("stepwise: could not save a smolagents step")
                    continue
            self.outbox.put(item)
            if item[0] == _STOP:
                return

    def _post_loop(self) -> None:
        """The sending thread: sends what the converting thread hands it, in order."""
        after: tuple | None = None  # taken from the outbox behind a request: handled next
        while True:
            item = after if after is not None else self.outbox.get()
            after = None
            if item[0] == _POST:
                item, after = self._take_posts(item)
            op = item[0]
            if op == _STOP:
                return
            if op == _MARK:
                item[1].set()
                continue
            try:
                if op == _POST:
                    self._post_run_steps(item[1], item[2])
                else:
                    self._send(item)
            except Exception:  # never let the thread die
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")

    def _take_steps(self, first: tuple) -> tuple[list[tuple], tuple | None]:
        """``first`` and the steps of its run queued right behind it (up to ``_BATCH_MAX``),
        and the operation that stopped the batch, taken from the queue (or None)."""
        batch = [first]
        run = first[1]
        while len(batch) < _BATCH_MAX:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return batch, None
            if item[0] != _STEP or item[1] is not run:
                return batch, item
            batch.append(item)
        return batch, None

    def _take_posts(self, first: tuple) -> tuple[tuple, tuple | None]:
        """``first`` joined by the converted steps of its run waiting right behind it (up to
        ``_REQUEST_MAX`` steps), and the item that stopped it, taken from the outbox (or
        None)."""
        run, numbered = first[1], first[2]
        while len(numbered) < _REQUEST_MAX:
            try:
                item = self.outbox.get_nowait()
            except queue.Empty:
                break
            if item[0] != _POST or item[1] is not run or len(numbered) + len(item[2]) > _REQUEST_MAX:
                return (_POST, run, numbered), item
            numbered = numbered + item[2]
        return (_POST, run, numbered), None

    def _encode_steps(self, batch: list[tuple]) -> list[tuple[int, dict]]:
        """Steps of one run as numbered request bodies (a step that cannot be converted is
        counted and logged; the others go on)."""
        run = batch[0][1]
        memory = self.memory_ref()
        save_model_input = memory.save_model_input if memory is not None else False
        tool_inputs: dict[Any, dict[str, str]] = {}  # per agent_ref: the same for a run's steps
        numbered: list[tuple[int, dict]] = []
        for item in batch:
            number, step, agent_ref = item[2], item[3], item[4]
            try:
                if agent_ref not in tool_inputs:
                    tool_inputs[agent_ref] = _tool_inputs(agent_ref())
                body = encode_step(
                    step,
                    save_model_input=save_model_input,
                    tool_inputs=tool_inputs[agent_ref],
                    extra=item[5] if len(item) > 5 else None,
                    task_images=run.task_images,
                )
            except Exception:  # this one is lost, not the others
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")
                continue
            body["step_number"] = number
            numbered.append((number, body))
        return numbered

    def _post_run_steps(self, run: _Run, numbered: list[tuple[int, dict]]) -> None:
        """Sends steps of one run, numbered, in as few requests as the server takes."""
        if run.execution_id is None:  # its execution could not be opened (logged then)
            if not run.open_failed:  # pragma: no cover - _OPEN always comes first
                logger.error("stepwise: a step of a run without an execution was dropped")
            self.lost(len(numbered))
            return
        self._post_steps(run.execution_id, numbered)

    def _post_steps(self, eid: str, numbered: list[tuple[int, dict]]) -> None:
        if not numbered:
            return
        if len(numbered) == 1 or not self.batching:
            self._post_each(eid, numbered)
            return
        bodies = [body for _, body in numbered]
        try:
            self._call(lambda: self.client.append_steps(eid, bodies, return_items=False))
        except StepwiseError as e:
            first, last = numbered[0][0], numbered[-1][0]
            if e.status == 413:  # over the server's body limit: in halves
                half = len(numbered) // 2
                self._post_steps(eid, numbered[:half])
                self._post_steps(eid, numbered[half:])
                return
            if e.status is None or e.status >= 500 or e.status == 429:  # retried for retry_for
                self.lost(len(numbered))
                logger.error(
                    "stepwise: steps %d to %d of execution %s were not saved: %s", first, last, eid, e
                )
                return
            # Any other answer concerns one step or the endpoint (a 409 at a number stored
            # with another body, a field the server refuses, a server without the batch
            # endpoint): each step is sent alone, so that each one fares as it would have.
            saved = self._post_each(eid, numbered)
            if e.status in (404, 405) and saved:
                self.batching = False
                logger.info("stepwise: the server has no batch endpoint for steps: one request per step")
        except Exception:  # not sent (a value the client cannot send?): each step alone too
            self._post_each(eid, numbered)

    def _post_each(self, eid: str, numbered: list[tuple[int, dict]]) -> int:
        """Sends the steps one request each; returns how many were saved."""
        saved = 0
        for number, body in numbered:
            try:
                saved += self._post_step(eid, number, body)
            except Exception:  # as the thread's loop does for a step sent alone
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")
        return saved

    def _post_step(self, eid: str, number: int, body: dict) -> bool:
        try:
            self._call(lambda: self.client.append_step(eid, body, step_number=number))
        except StepwiseError as e:
            self.lost(1)
            logger.error("stepwise: step %d of execution %s was not saved: %s", number, eid, e)
            return False
        return True

    def _send(self, item: tuple) -> None:
        op, run = item[0], item[1]
        if op == _OPEN:
            try:
                execution = self._call(
                    lambda: self.client.open_execution(
                        run.session_id,
                        input={"task": _answer_text(run.task), "reset": run.reset},
                        agent_config={"framework": "smolagents", "agent": item[2]},
                    ),
                )
            except StepwiseError as e:
                run.open_failed = True
                self.lost(1)
                logger.error("stepwise: could not open an execution for the run: %s", e)
                return
            run.execution_id = execution["id"]
            return
        if run.execution_id is None:  # its execution could not be opened (logged then)
            self.lost(1)
            return
        eid = run.execution_id
        if op == _COMPLETE:
            answer = item[2]
            text = _answer_text(answer)
            if len(text) > 100_000:
                text = text[:99_999] + "…"
            output = {"final_answer": _enc(answer)}
            self._finish(lambda: self.client.complete_execution(eid, output=output, final_message=text), eid)
            return
        if op == _FAIL:
            message = str(item[2]).strip() or "the run failed"
            if len(message) > 65_536:
                message = message[:65_535] + "…"
            self._finish(lambda: self.client.fail_execution(eid, message), eid)
            return

    def _finish(self, call: Callable[[], Any], eid: str) -> None:
        try:
            self._call(call, done_codes=_DONE_CODES)
        except StepwiseError as e:
            self.lost(1)
            logger.error("stepwise: could not end execution %s: %s", eid, e)

    def _call(
        self,
        call: Callable[[], Any],
        *,
        done_codes: set[str] | frozenset = frozenset(),
    ) -> Any:
        """Calls again, backing off, while the server cannot be reached or answers 5xx/429,
        for up to ``retry_for`` seconds of the memory (a server restarting).

        Steps carry their number, so a step sent twice is saved once; a complete/fail whose
        earlier attempt got through answers 409/422 the next time, which counts as done.
        """
        memory = self.memory_ref()
        deadline = time.monotonic() + (memory.retry_for if memory is not None else 0.0)
        delay = 0.05
        attempt = 0
        while True:
            try:
                return call()
            except StepwiseError as e:
                if attempt > 0 and e.code in done_codes:
                    return None
                transient = e.status is None or e.status >= 500 or e.status == 429
                if not transient or time.monotonic() + delay > deadline:
                    raise
                if attempt == 0:
                    logger.warning("stepwise: the server is not answering (%s); retrying", e)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                attempt += 1


def _tool_inputs(agent: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    if agent is None:
        return found
    for source in (getattr(agent, "tools", None), getattr(agent, "managed_agents", None)):
        for name, tool in (source or {}).items():
            inputs = getattr(tool, "inputs", None)
            if isinstance(inputs, dict) and len(inputs) == 1:
                found[name] = next(iter(inputs))
    return found


_LIVE: weakref.WeakSet[StepwiseMemory] = weakref.WeakSet()
_EXIT_TIMEOUT = 10.0


@atexit.register
def _flush_at_exit() -> None:
    for memory in list(_LIVE):
        try:
            memory.flush(timeout=_EXIT_TIMEOUT)
        except Exception:  # pragma: no cover
            logger.exception("stepwise: flush at exit failed")


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
        retry_for: float = 60.0,
        **session_kwargs: Any,
    ) -> None:
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
