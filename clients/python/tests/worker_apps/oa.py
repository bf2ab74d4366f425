"""An OpenAI Agents SDK worker with the SDK's offline `ScriptedModel`: it calls
``get_weather`` first, then answers with the tool's result. The worker SIGKILLs itself in the
tool once when ``$WORKER_DIR/crash-in-tool`` exists."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from stepwise import Stepwise
from stepwise.worker import Worker


DIR = Path(os.environ.get("WORKER_DIR", "."))


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    crash = DIR / "crash-in-tool"
    if crash.exists():  # the worker dies in the tool, once
        crash.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"18 °C and light rain in {city}"


def respond(call):
    items = call.input if isinstance(call.input, list) else []
    last = items[-1] if items else {}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        return [assistant_message(f"It is {last['output']}.", item_id=f"msg_{len(items)}")]
    return [function_call("get_weather", {"city": "Paris"}, call_id=f"call_{len(items)}")]


model = ScriptedModel([ModelStep.respond(respond) for _ in range(1000)])
agent = Agent(name="Assistant", instructions="Be brief.", model=model, tools=[get_weather])

worker = Worker(Stepwise(), concurrency=2)
worker.openai_agents("weather", agent, description="Tells the weather")
