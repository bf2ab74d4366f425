"""What saving smolagents steps to Stepwise costs the agent, and what the sender sustains.

    STEPWISE_BIN=target/release/stepwise python clients/python/bench/bench_smolagents.py

Starts `stepwise serve` with `stepwise.testing.local_server()` (a temporary SQLite
database) and prints one JSON object:

* ``callback_in_runs_us``: the time each step of real agent runs (a ToolCallingAgent with
  an offline scripted model and a tool: per run a task, 5 action steps and the final
  answer) spends inside StepwiseMemory (the step callback; for the task, the hook that
  queues it), in microseconds (p50/p90/p99/max over all steps). The save itself happens
  on the background thread; this is all the agent waits for.
* ``callback_burst_us``: the same for 1,000 steps handed to the callback back to back.
* ``sender``: those 1,000 steps, from the first one enqueued until ``flush()`` returns:
  the steps per second the background sender stores (the steps queued together go out in
  one ``POST .../steps/batch``; against a server without that endpoint, one
  ``POST .../steps`` each).

Options: ``--runs N`` (agent runs, default 200), ``--steps N`` (burst size, default 1000).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from typing import Any

from smolagents import ToolCallingAgent, tool
from smolagents.memory import ActionStep, FinalAnswerStep, TaskStep
from smolagents.models import ChatMessage, ChatMessageToolCall, ChatMessageToolCallFunction, MessageRole, Model
from smolagents.monitoring import TokenUsage

import stepwise.smolagents as smol
from stepwise.smolagents import StepwiseMemory
from stepwise.testing import find_binary, local_server


@tool
def lookup(query: str, limit: int) -> str:
    """Looks something up.

    Args:
        query: what to look for
        limit: how many results
    """
    return f"{limit} results for {query}: " + "lorem ipsum dolor sit amet " * 8


class LoopModel(Model):
    """Calls `lookup` `calls` times, then answers."""

    def __init__(self, calls: int) -> None:
        super().__init__(model_id="bench")
        self.calls = calls
        self.n = 0

    def generate(self, messages, stop_sequences=None, tools_to_call_from=None, **kwargs):
        self.n += 1
        if self.n % (self.calls + 1) == 0:
            name, arguments = "final_answer", {"answer": "done"}
        else:
            name, arguments = "lookup", {"query": f"item {self.n}", "limit": 3}
        return ChatMessage(
            role=MessageRole.ASSISTANT,
            content="I will call a tool to find out more about this item.",
            tool_calls=[
                ChatMessageToolCall(
                    id=f"call_{self.n}",
                    type="function",
                    function=ChatMessageToolCallFunction(name=name, arguments=arguments),
                )
            ],
            token_usage=TokenUsage(input_tokens=850, output_tokens=40),
        )


def percentiles(samples_s: list[float]) -> dict[str, Any]:
    us = sorted(s * 1e6 for s in samples_s)

    def at(q: float) -> float:
        return round(us[min(len(us) - 1, int(q * len(us)))], 2)

    return {
        "n": len(us),
        "p50": at(0.50),
        "p90": at(0.90),
        "p99": at(0.99),
        "max": round(us[-1], 2),
        "mean": round(statistics.fmean(us), 2),
    }


def timed_callbacks() -> list[float]:
    """Times, from now on, every call the agent's thread makes into StepwiseMemory for a
    step: the step callback, and the hook that queues a run's task as `run` appends it."""
    samples: list[float] = []
    on_step = StepwiseMemory._on_step
    task_appended = StepwiseMemory._task_appended

    def timed_on_step(self, memory_step, agent=None):
        start = time.perf_counter()
        try:
            return on_step(self, memory_step, agent)
        finally:
            samples.append(time.perf_counter() - start)

    def timed_task_appended(self, state, task):
        start = time.perf_counter()
        try:
            return task_appended(self, state, task)
        finally:
            samples.append(time.perf_counter() - start)

    StepwiseMemory._on_step = timed_on_step  # type: ignore[method-assign]
    StepwiseMemory._task_appended = timed_task_appended  # type: ignore[method-assign]
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()

    samples = timed_callbacks()
    binary = find_binary()
    with local_server() as server:
        client = server.client

        # 1. Real runs: 4 tool steps and a final answer each.
        agent = ToolCallingAgent(tools=[lookup], model=LoopModel(calls=4), verbosity_level=0)
        memory = StepwiseMemory(client, session="bench-runs").attach(agent)
        started = time.perf_counter()
        for i in range(args.runs):
            agent.run(f"Find out about batch {i}")
        runs_s = time.perf_counter() - started
        memory.flush(timeout=600)
        in_runs = percentiles(samples)
        run_steps = len(samples)
        assert memory.errors == 0, "some saves failed"

        # 2. A burst: N action steps handed to the callback back to back, then flush().
        samples.clear()
        template = next(s for s in agent.memory.steps if isinstance(s, ActionStep))
        burst_agent = ToolCallingAgent(tools=[lookup], model=LoopModel(calls=1), verbosity_level=0)
        burst = StepwiseMemory(client, session="bench-burst").attach(burst_agent)
        state = burst._begin(burst_agent, "burst", True)
        burst_agent.memory.steps.append(TaskStep(task="burst"))  # as `run` does
        burst.flush(timeout=60)  # the execution is open: time the steps alone
        steps = []
        for n in range(args.steps):
            step = copy.copy(template)
            step.step_number = n + 1
            steps.append(step)
        t0 = time.perf_counter()
        for step in steps:
            burst._on_step(step, agent=burst_agent)
        t_enqueued = time.perf_counter()
        assert burst.flush(timeout=600)
        t_drained = time.perf_counter()
        burst._on_step(FinalAnswerStep(output="done"), agent=burst_agent)
        burst.flush(timeout=60)
        assert burst.errors == 0, "some saves failed"
        execution = client.get_execution(state.execution_id)
        assert execution["step_count"] == args.steps + 2, execution["step_count"]  # + task, final

        print(
            json.dumps(
                {
                    "server": os.path.relpath(binary, os.getcwd()) if binary.startswith(os.getcwd()) else binary,
                    "python": sys.version.split()[0],
                    "agent_runs": args.runs,
                    "agent_run_steps": run_steps,
                    "agent_runs_s": round(runs_s, 3),
                    "callback_in_runs_us": in_runs,
                    "callback_burst_us": percentiles(samples),
                    "sender": {
                        "steps": args.steps,
                        "enqueue_ms": round((t_enqueued - t0) * 1e3, 2),
                        "drain_s": round(t_drained - t0, 3),
                        "steps_per_s": round(args.steps / (t_drained - t0), 1),
                    },
                    "payload_version": smol.PAYLOAD_VERSION,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
