"""A smolagents worker for the web UI's browser tests (tests/workers.test.mjs): agent type
``py-smolagents``, a ``CodeAgent`` with a ``user_input`` tool and an offline model (smolagents'
own test approach: a ``Model`` whose answers are scripted from the prompt, no LLM).

The task ``ask``: step 1 asks the user's name with ``user_input`` (the execution pauses until
the user answers in the page), step 2 answers ``Hi <name>``. Any other task: step 1 prints the
task's length, step 2 answers ``<task> has <n> characters``.

Run it from this directory: ``python -m stepwise.worker smol_worker:worker --url URL``.
"""

from __future__ import annotations

import re

from smolagents import CodeAgent
from smolagents.default_tools import UserInputTool
from smolagents.models import ChatMessage, MessageRole, Model
from smolagents.monitoring import TokenUsage

from stepwise import Stepwise
from stepwise.worker import Worker

AGENT_TYPE = "py-smolagents"


def _text(message: ChatMessage) -> str:
    content = message.content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


class ScriptedModel(Model):
    """Answers from the prompt alone: which step this is, counted from the last task."""

    def __init__(self) -> None:
        super().__init__(model_id="offline-scripted")

    def generate(self, messages, stop_sequences=None, tools_to_call_from=None, **kwargs):
        task_at = max(i for i, m in enumerate(messages) if m.role == MessageRole.USER and _text(m).startswith("New task"))
        task = _text(messages[task_at]).split("\n", 1)[1].strip()
        number = 1 + sum(1 for m in messages[task_at:] if m.role == MessageRole.ASSISTANT)
        if task == "ask":
            if number == 1:
                source = 'name = user_input(question="What is your name?")\nprint(name)'
            else:
                observations = [_text(m) for m in messages if _text(m).startswith("Observation:")]
                name = re.findall(r"Execution logs:\n(.*)", observations[-1])[0].strip()
                source = f"final_answer({'Hi ' + name!r})"
        elif number == 1:
            source = f"print(len({task!r}))"
        else:
            source = f"final_answer({f'{task} has {len(task)} characters'!r})"
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content=f"Thought: step {number}\n<code>\n{source}\n</code>",
            token_usage=TokenUsage(10, 5),
        )


def make_agent() -> CodeAgent:
    return CodeAgent(tools=[UserInputTool()], model=ScriptedModel(), verbosity_level=0, max_steps=6)


worker = Worker(Stepwise(), concurrency=1)
worker.smolagents(AGENT_TYPE, make_agent, description="An offline smolagents CodeAgent (browser tests)")
