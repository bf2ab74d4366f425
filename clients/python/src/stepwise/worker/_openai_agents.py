"""`Worker.openai_agents`: an OpenAI Agents SDK ``Agent`` as an agent type of a worker.

Each run is ``Runner.run_streamed(agent, text, session=StepwiseSession(...))``: the SDK keeps
the conversation's items in Stepwise (`stepwise.openai_agents.StepwiseSession`, SDK session id
= the Stepwise session id unless ``session_fn`` says otherwise), streamed text goes out as live
tokens, every tool call, tool result and message becomes a step, a cancel stops the run
(``result.cancel()``), and the final output is the answer. A run taken over after a lost worker
whose user message is already the conversation's last user item goes on from the items
(empty input) instead of adding the message twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from agents import ItemHelpers, Runner

from ..openai_agents import StepwiseSession
from ._run import Cancelled, Run

__all__ = ["openai_agents_handler"]

logger = logging.getLogger("stepwise.worker")


def _raw(item: Any) -> Any:
    raw = getattr(item, "raw_item", None)
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return raw
    dump = getattr(raw, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) else {}


def _arguments(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    if isinstance(text, str):
        try:
            parsed = json.loads(text)
        except ValueError:
            return {"input": text}
        return parsed if isinstance(parsed, dict) else {"input": parsed}
    return {}


def _step_of(event: Any) -> dict[str, Any] | None:
    """A run item event as a step, or None for items not worth one."""
    item = event.item
    kind = getattr(item, "type", "")
    raw = _raw(item)
    if kind == "tool_call_item":
        name = raw.get("name") or raw.get("type") or "tool"
        return {
            "kind": "action",
            "tool_calls": [{
                "id": str(raw.get("call_id") or raw.get("id") or ""),
                "name": str(name),
                "arguments": _arguments(raw.get("arguments")),
            }],
            "output": {"openai_agents": {"item": raw}},
        }
    if kind == "tool_call_output_item":
        output = getattr(item, "output", None)
        return {
            "kind": "action",
            "observations": output if isinstance(output, str) else json.dumps(output, default=str),
            "output": {"openai_agents": {"item": raw}},
        }
    if kind == "message_output_item":
        return {
            "kind": "action",
            "model_output": ItemHelpers.text_message_output(item),
            "output": {"openai_agents": {"item": raw}},
        }
    return None


def _user_text(item: Any) -> str | None:
    if not isinstance(item, dict) or item.get("role") != "user":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return None


async def _continues(session: StepwiseSession, text: str) -> bool:
    """Whether the conversation's last user item is this message (a lost worker added it)."""
    items = await session.get_items()
    for item in reversed(items):
        said = _user_text(item)
        if said is not None:
            return said == text
    return False


def _final(output: Any) -> Any:
    if output is None or isinstance(output, (str, int, float, bool, list, dict)):
        return output
    dump = getattr(output, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return str(output)


def openai_agents_handler(
    agent: Any,
    *,
    client: Any,
    session_fn: Callable[[Run], str] | None = None,
    max_turns: int | None = None,
    run_config: Any = None,
) -> Callable[[Run], Any]:
    """The async agent function running `agent` for each claim."""

    async def handler(run: Run) -> Any:
        run.skip_replay()  # the conversation goes on from its saved items: new steps only
        session_id = session_fn(run) if session_fn is not None else run.session_id or run.execution_id
        session = StepwiseSession(str(session_id), client=client)
        loop = asyncio.get_running_loop()
        try:
            text: Any = run.input_text
            if run.attempt > 1 and await _continues(session, run.input_text):
                logger.info("execution %s: the conversation goes on from its saved items", run.execution_id)
                text = []
            kwargs: dict[str, Any] = {"session": session}
            if max_turns is not None:
                kwargs["max_turns"] = max_turns
            if run_config is not None:
                kwargs["run_config"] = run_config
            result = Runner.run_streamed(agent, text, **kwargs)
            run.on_cancel(lambda: loop.call_soon_threadsafe(result.cancel))
            async for event in result.stream_events():
                kind = getattr(event, "type", "")
                if kind == "raw_response_event":
                    data = event.data
                    if getattr(data, "type", "") == "response.output_text.delta" and getattr(data, "delta", None):
                        run.delta(data.delta)
                elif kind == "run_item_stream_event":
                    step = _step_of(event)
                    if step is not None:
                        await run.astep(**step)
            if run.cancelled:
                raise Cancelled(run.cancel_reason or "cancelled")
            return _final(result.final_output)
        finally:
            await session.aclose()

    return handler
