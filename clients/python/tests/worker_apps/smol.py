"""A smolagents ``CodeAgent`` worker with an offline model (smolagents' test style: a `Model`
whose answers are scripted), deterministic from the prompt alone, so a second worker taking
over a run gets the answers the first would have got.

Task ``steps:N``: step n < N prints n, step N gives the final answer ``done after N steps``.
Task ``ask``: step 1 asks the user's name (``user_input``), step 2 answers with it.

``$WORKER_DIR/crash-at-<n>``: the worker records the prompt of step n in ``prompt-<n>-a.json``
and SIGKILLs itself; otherwise the prompt of step n is recorded in ``prompt-<n>-<execution>.json``
when ``record-<n>`` exists.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

from smolagents import CodeAgent
from smolagents.default_tools import UserInputTool
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import TokenUsage

from stepwise import Stepwise
from stepwise.worker import Worker

DIR = Path(os.environ.get("WORKER_DIR", "."))


def _text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _dump(path: Path, messages: list[ChatMessage]) -> None:
    path.write_text(json.dumps([m.dict() for m in messages], default=str, sort_keys=True))


class StepModel(Model):
    """Answers from the prompt: which step this is (the assistant messages after the last task)."""

    def __init__(self) -> None:
        super().__init__(model_id="offline-steps")

    def generate(self, messages, stop_sequences=None, tools_to_call_from=None, **kwargs):
        task_at = max(i for i, m in enumerate(messages) if m.role == MessageRole.USER and _text(m).startswith("New task"))
        task = _text(messages[task_at]).split("\n", 1)[1].strip()
        number = 1 + sum(1 for m in messages[task_at:] if m.role == MessageRole.ASSISTANT)
        crash = DIR / f"crash-at-{number}"
        if crash.exists():
            crash.unlink()
            _dump(DIR / f"prompt-{number}-a.json", messages)
            os.kill(os.getpid(), signal.SIGKILL)
        if (DIR / f"record-{number}").exists():
            _dump(DIR / f"prompt-{number}-{os.environ.get('WORKER_NAME', 'x')}-{task}.json", messages)
        if task == "ask":
            if number == 1:
                source = 'name = user_input(question="What is your name?")\nprint(name)'
            else:
                observations = [_text(m) for m in messages if _text(m).startswith("Observation:")]
                name = re.findall(r"Execution logs:\n(.*)", observations[-1])[0].strip()
                source = f"final_answer('Hi {name}')"
        else:
            total = int(task.split(":")[1])
            source = f"final_answer('done after {total} steps')" if number >= total else f"print({number})"
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=f"Thought: step {number}\n<code>\n{source}\n</code>",
            token_usage=TokenUsage(10, 5),
        )


def make_agent() -> CodeAgent:
    return CodeAgent(tools=[UserInputTool()], model=StepModel(), verbosity_level=0, max_steps=20)


worker = Worker(Stepwise(), concurrency=2)
worker.smolagents("coder", make_agent, description="An offline CodeAgent")
