"""smolagents memory steps as Stepwise steps and back (`stepwise.smolagents.encode_step`,
`decode_step`, `memory_steps`): the readable fields, and the whole step as JSON in
``output.smolagents`` (free-form values tagged so they come back as they were)."""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import logging
import math
from typing import Any

from smolagents.memory import (
    ActionStep,
    FinalAnswerStep,
    MemoryStep,
    PlanningStep,
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


def encode_value(value: Any) -> Any:
    # The common exact types first (a step is mostly these): about half the time per step.
    t = type(value)
    if t is str or t is bool or value is None:
        return value
    if t is dict:
        return _enc_dict(value)
    if t is list:
        return [encode_value(v) for v in value]
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
        return [encode_value(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [encode_value(v) for v in value]}
    if isinstance(value, dict):
        return _enc_dict(value)
    image = _encode_image(value)
    if image is not None:
        return {"$image": image}
    return {"$object": type(value).__name__, "value": encode_value(make_json_serializable(value))}


def _enc_dict(value: dict) -> dict:
    """A dict with sorted text keys as JSON keeps it; any other as ``{"$dict": pairs}``."""
    keys = list(value)
    plain = (
        all(type(k) is str for k in keys)
        and keys == sorted(keys)
        and not (len(keys) in (1, 2) and keys[0] in _TAGS)
    )
    if plain:
        return {k: encode_value(v) for k, v in value.items()}
    return {"$dict": [[encode_value(k), encode_value(v)] for k, v in value.items()]}


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
            encoded["info"] = encode_value(info)
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
    return {"start_time": encode_value(t.start_time), "end_time": encode_value(t.end_time)}


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
        "content": encode_value(m.content),
        "tool_calls": [
            {
                "id": tc.id,
                "type": tc.type,
                "function": {
                    "name": tc.function.name,
                    "arguments": encode_value(tc.function.arguments),
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
    return None if images is None else [encode_value(i) for i in images]


def _images_back(ds: list | None) -> list | None:
    return None if ds is None else [_dec(d) for d in ds]


def _tool_calls(tcs: list[ToolCall] | None) -> list | None:
    if tcs is None:
        return None
    return [{"id": tc.id, "name": tc.name, "arguments": encode_value(tc.arguments)} for tc in tcs]


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
            "model_output": encode_value(step.model_output),
            "code_action": step.code_action,
            "observations": step.observations,
            "observations_images": _TASK_IMAGES if same else _images(step.observations_images),
            "action_output": encode_value(step.action_output),
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
        return {"output": encode_value(step.output)}
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
        body["model_output"] = answer_text(step.output)
    return body


def _stepwise_usage(u: TokenUsage) -> dict:
    return {"input": int(u.input_tokens), "output": int(u.output_tokens), "total": int(u.total_tokens)}


def answer_text(answer: Any) -> str:
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
    memory: dict,
    *,
    restore_all_runs: bool = False,
    where: str = "the session",
    max_restore_steps: int | None = None,
) -> list[MemoryStep]:
    """The smolagents steps of a session's memory (``GET /v1/sessions/{id}/memory``, or a
    worker claim's ``memory``): what ``StepwiseMemory.restore`` puts in an agent's memory.

    Steps that hold no smolagents step, and final answers, are left out; steps whose payload
    cannot be decoded are skipped with a warning. Unless ``restore_all_runs``, the steps start
    at the session's last run that began with ``reset=True``. When the server restored only
    part of the session (``restored: "summary"``), its summary comes first, as a ``TaskStep``.
    With ``max_restore_steps=N`` only the last N steps come back, after a ``TaskStep`` that
    sums up the ones left out (their tasks and the tools they called).
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
    if max_restore_steps is not None and len(steps) > max_restore_steps:
        cut = len(steps) - max_restore_steps
        steps = [TaskStep(task=_left_out(steps[:cut]))] + steps[cut:]
    summary = memory.get("summary")
    if memory.get("restored") == "summary" and isinstance(summary, dict) and summary.get("text"):
        steps.insert(0, TaskStep(task=summary["text"]))
    return steps


def _left_out(steps: list[MemoryStep], limit: int = 2000) -> str:
    """A short account of the steps a restore left out: the tasks asked and the tools called."""
    tasks = [s.task for s in steps if isinstance(s, TaskStep) and isinstance(s.task, str)]
    tools: dict[str, int] = {}
    for step in steps:
        for call in getattr(step, "tool_calls", None) or []:
            name = getattr(call, "name", None)
            if isinstance(name, str):
                tools[name] = tools.get(name, 0) + 1
    text = f"Earlier in this session ({len(steps)} steps not restored here)"
    if tasks:
        text += ", the user asked: " + "; ".join(repr(t[:200]) for t in tasks)
    if tools:
        text += ". Tools called: " + ", ".join(f"{name} ×{n}" for name, n in tools.items())
    text += "."
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_input_names(agent: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    if agent is None:
        return found
    for source in (getattr(agent, "tools", None), getattr(agent, "managed_agents", None)):
        for name, tool in (source or {}).items():
            inputs = getattr(tool, "inputs", None)
            if isinstance(inputs, dict) and len(inputs) == 1:
                found[name] = next(iter(inputs))
    return found
