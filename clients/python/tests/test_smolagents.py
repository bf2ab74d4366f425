"""`stepwise.smolagents.StepwiseMemory` against a real `stepwise serve`, with smolagents'
own offline fake-model style: a `Model` whose `generate` returns scripted `ChatMessage`s
(no network, no key)."""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

pytest.importorskip("smolagents")

from smolagents import CodeAgent, ToolCallingAgent, tool  # noqa: E402
from smolagents.memory import ActionStep, FinalAnswerStep, TaskStep, ToolCall  # noqa: E402
from smolagents.models import (  # noqa: E402
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from smolagents.monitoring import Timing, TokenUsage  # noqa: E402

from stepwise import Stepwise  # noqa: E402
from stepwise.smolagents import StepwiseMemory, encode_step  # noqa: E402
from stepwise.smolagents._sender import _BATCH_MAX  # noqa: E402
from stepwise.testing import local_server  # noqa: E402

RFC3339_MICROS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


# --- fake models (smolagents' tests/test_agents.py style) ---------------------------------


class ScriptedModel(Model):
    """Answers each `generate` with the next scripted message; records the prompts."""

    def __init__(self, script: list[ChatMessage | Exception | Callable[[list], ChatMessage]]):
        super().__init__(model_id="scripted")
        self.script = list(script)
        self.prompts: list[list[ChatMessage]] = []

    def generate(self, messages, stop_sequences=None, tools_to_call_from=None, **kwargs):
        self.prompts.append(list(messages))
        if not self.script:
            raise RuntimeError("the script is over")
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        if callable(item):
            return item(messages)
        return item


def code(thought: str, source: str, tokens: tuple[int, int] | None = (12, 7)) -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=f"Thought: {thought}\n<code>\n{source}\n</code>",
        token_usage=TokenUsage(*tokens) if tokens else None,
    )


def plan(text: str) -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, token_usage=TokenUsage(5, 3))


def call(name: str, arguments: Any, call_id: str, thought: str = "") -> ChatMessage:
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content=thought,
        tool_calls=[
            ChatMessageToolCall(
                id=call_id,
                type="function",
                function=ChatMessageToolCallFunction(name=name, arguments=arguments),
            )
        ],
        token_usage=TokenUsage(20, 4),
    )


@tool
def lookup(query: str, limit: int) -> str:
    """Looks something up.

    Args:
        query: what to look for
        limit: how many results
    """
    return f"{limit} results for {query}"


def code_agent(script, **kwargs) -> CodeAgent:
    return CodeAgent(tools=[], model=ScriptedModel(script), verbosity_level=0, **kwargs)


def tool_agent(script, **kwargs) -> ToolCallingAgent:
    return ToolCallingAgent(tools=[lookup], model=ScriptedModel(script), verbosity_level=0, **kwargs)


def code_script(answer: str = "done") -> list:
    return [
        code("compute", "x = 6 * 7\nprint(x)"),
        code("broken", "raise ValueError('boom')"),
        code("answer", f"final_answer({answer!r})"),
    ]


def tool_script(answer: str = "42") -> list:
    return [
        call("lookup", {"query": "cats", "limit": 2}, "call_a", "Let me look."),
        call("no_such_tool", {}, "call_b", "Oops."),
        call("final_answer", {"answer": answer}, "call_c"),
    ]


AGENTS = {
    "CodeAgent": (code_agent, code_script),
    "ToolCallingAgent": (tool_agent, tool_script),
}


# --- fixtures and helpers -----------------------------------------------------------------


# `server` (one `stepwise serve` for the test run) and `client` come from conftest.py.


@pytest.fixture
def name() -> str:
    return f"smol-{uuid.uuid4().hex[:12]}"


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def executions(client, session_id: str) -> list[dict]:
    return sorted(client.list_executions(session_id), key=lambda e: e["created_at"])


def steps_of(client, execution_id: str) -> list[dict]:
    return list(client.list_steps(execution_id))


def dicts(messages: list[ChatMessage]) -> list[dict]:
    return [json.loads(json.dumps(m.dict(), default=str)) for m in messages]


# --- saving -------------------------------------------------------------------------------


def test_action_step_is_saved_as_soon_as_it_finishes(client, name):
    seen_during_run: list[list[str]] = []
    memory_box: list[StepwiseMemory] = []

    def check_server(step: ActionStep) -> None:
        # Runs at step 2 before Stepwise's own callback: step 1 must already be stored.
        if step.step_number == 2:
            memory = memory_box[0]
            assert memory.flush()
            execution = executions(client, memory.session_id)[0]
            assert execution["status"] == "running"
            seen_during_run.append([s["kind"] for s in steps_of(client, execution["id"])])

    def first_model_call(messages):
        # The task is stored when the run starts, before the model answers.
        memory = memory_box[0]
        assert memory.flush()
        execution = executions(client, memory.session_id)[0]
        seen_during_run.append([s["kind"] for s in steps_of(client, execution["id"])])
        return code("compute", "x = 6 * 7\nprint(x)")

    agent = code_agent([first_model_call] + code_script()[1:], step_callbacks=[check_server])
    memory = StepwiseMemory(client, session=name)
    memory_box.append(memory)
    memory.attach(agent)
    assert agent.run("What is 6 times 7?") == "done"
    assert memory.flush()

    assert seen_during_run == [["task"], ["task", "action"]]
    (execution,) = executions(client, memory.session_id)
    assert execution["status"] == "completed"
    assert execution["agent_type"] == "external"
    assert execution["input"] == {"task": "What is 6 times 7?", "reset": True}
    assert execution["output"] == {"final_answer": "done"}
    steps = steps_of(client, execution["id"])
    assert [s["kind"] for s in steps] == ["task", "action", "action", "action", "final_answer"]
    assert [s["step_number"] for s in steps] == [1, 2, 3, 4, 5]
    task, first, failed, last, final = steps
    assert task["observations"] == "What is 6 times 7?"
    assert first["model_output"].startswith("Thought: compute")
    assert first["code"] == "x = 6 * 7\nprint(x)"
    assert first["tool_calls"] == [
        {"id": "call_1", "name": "python_interpreter", "arguments": {"code": "x = 6 * 7\nprint(x)"}}
    ]
    assert "42" in first["observations"]
    assert first["error"] is None
    assert first["token_usage"] == {"input": 12, "output": 7, "total": 19}
    assert RFC3339_MICROS.match(first["started_at"]) and RFC3339_MICROS.match(first["ended_at"])
    assert first["started_at"] <= first["ended_at"]
    assert first["output"]["smolagents"]["version"] == 1
    assert first["output"]["smolagents"]["type"] == "ActionStep"
    assert failed["error"]["kind"] == "AgentExecutionError"
    assert "boom" in failed["error"]["message"]
    assert final["model_output"] == "done"
    assert final["output"]["smolagents"]["type"] == "FinalAnswerStep"
    # The final answer is the session's assistant message too.
    messages = list(client.list_messages(memory.session_id))
    assert [(m["role"], m["content"]) for m in messages] == [("assistant", "done")]
    assert memory.errors == 0


def test_planning_step_is_saved(client, name):
    agent = code_agent(
        [plan("1. multiply"), code("compute", "x = 6 * 7"), plan("2. answer"), code("answer", "final_answer(x)")],
        planning_interval=1,
    )
    memory = StepwiseMemory(client, session=name).attach(agent)
    assert agent.run("What is 6 times 7?") == 42
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    steps = steps_of(client, execution["id"])
    assert [s["kind"] for s in steps] == ["task", "planning", "action", "planning", "action", "final_answer"]
    first_plan = steps[1]
    assert "1. multiply" in first_plan["model_output"]
    assert first_plan["token_usage"] == {"input": 5, "output": 3, "total": 8}
    assert first_plan["output"]["smolagents"]["type"] == "PlanningStep"
    assert RFC3339_MICROS.match(first_plan["started_at"])
    assert execution["output"] == {"final_answer": 42}


def test_tool_calling_agent_steps_read_in_stepwise_terms(client, name):
    agent = tool_agent(tool_script())
    memory = StepwiseMemory(client, session=name).attach(agent)
    assert agent.run("How many cats?") == "42"
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    steps = steps_of(client, execution["id"])
    assert [s["kind"] for s in steps] == ["task", "action", "action", "action", "final_answer"]
    assert steps[1]["tool_calls"] == [
        {"id": "call_a", "name": "lookup", "arguments": {"query": "cats", "limit": 2}}
    ]
    assert steps[1]["observations"] == "2 results for cats"
    assert steps[1]["model_output"] == "Let me look."
    assert steps[2]["error"]["kind"] == "AgentToolExecutionError"
    assert "no_such_tool" in steps[2]["error"]["message"]
    assert steps[3]["tool_calls"][0]["name"] == "final_answer"
    assert execution["status"] == "completed"


class GatedClient:
    """The real client, but `append_step` waits until the gate opens (a slow server)."""

    def __init__(self, client) -> None:
        self._client = client
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def append_step(self, *args, **kwargs):
        self.waiting.set()
        assert self.gate.wait(30), "the gate never opened"
        return self._client.append_step(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._client, attr)


def test_saving_does_not_block_the_agent(client, name):
    gated = GatedClient(client)
    in_callback_done: list[bool] = []

    def after_ours(step, agent):
        # Registered after Stepwise's callback: the agent goes on while the save waits.
        in_callback_done.append(gated.gate.is_set())

    agent = code_agent(code_script())
    memory = StepwiseMemory(gated, session=name).attach(agent)
    agent.step_callbacks.register(ActionStep, after_ours)
    try:
        assert agent.run("What is 6 times 7?") == "done"  # finishes although no step is saved
        assert gated.waiting.wait(10)
        (execution,) = executions(client, memory.session_id)
        assert execution["status"] == "running"
        assert steps_of(client, execution["id"]) == []
        assert in_callback_done == [False, False, False]
        assert memory.flush(timeout=0.05) is False  # still held at the gate
    finally:
        gated.gate.set()
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    assert execution["status"] == "completed"
    assert len(steps_of(client, execution["id"])) == 5


class HeldTransport(httpx.BaseTransport):
    """The real HTTP transport, recording each request (method, path, JSON body); it can
    hold the next request that matches at a gate (a server busy with it), or answer
    requests itself (`answer` returns a response, or None to send them on)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.requests: list[tuple[str, str, Any]] = []
        self.gate = threading.Event()
        self.held = threading.Event()
        self.hold: Callable[[str, str], bool] | None = None
        self.answer: Callable[[str, str], httpx.Response | None] | None = None

    def hold_next(self, predicate: Callable[[str, str], bool]) -> None:
        self.gate.clear()
        self.held.clear()
        self.hold = predicate

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        if self.hold is not None and self.hold(method, path):
            self.hold = None
            self.held.set()
            assert self.gate.wait(30), "the gate never opened"
        self.requests.append((method, path, json.loads(request.content) if request.content else None))
        if self.answer is not None:
            answer = self.answer(method, path)
            if answer is not None:
                return answer
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()

    def step_posts(self) -> list[tuple[str, list[int]]]:
        """The requests that carried steps: ("one" | "batch", their step numbers)."""
        found = []
        for method, path, body in self.requests:
            if method == "POST" and path.endswith("/steps"):
                found.append(("one", [body["step_number"]]))
            elif method == "POST" and path.endswith("/steps/batch"):
                found.append(("batch", [step["step_number"] for step in body["steps"]]))
        return found


def is_step_post(method: str, path: str) -> bool:
    return method == "POST" and (path.endswith("/steps") or path.endswith("/steps/batch"))


def action_step(n: int) -> ActionStep:
    return ActionStep(
        step_number=n,
        timing=Timing(start_time=1_700_000_000.0 + n, end_time=1_700_000_000.5 + n),
        model_output=f"thought {n}",
        observations=f"seen {n}",
        token_usage=TokenUsage(10, 2),
    )


def held_memory(server, name: str, transport: HeldTransport, agent) -> tuple[StepwiseMemory, Any]:
    """A memory whose run is open and whose task step is held at the transport's gate."""
    memory = StepwiseMemory(Stepwise(server.url, transport=transport), session=name).attach(agent)
    transport.hold_next(is_step_post)
    state = memory._begin(agent, "many steps", True)
    agent.memory.steps.append(TaskStep(task="many steps"))  # as `run` does
    assert transport.held.wait(10)
    return memory, state


def test_queued_steps_go_out_in_batches_in_order_once(server, client, name):
    transport = HeldTransport()
    agent = tool_agent([])
    memory, state = held_memory(server, name, transport, agent)
    count = 2_500
    for n in range(1, count + 1):  # queued while the server is busy with the task step
        memory._on_step(action_step(n), agent=agent)
    memory._on_step(FinalAnswerStep(output="all counted"), agent=agent)
    assert memory.flush(timeout=0.05) is False
    transport.gate.set()
    assert memory.flush(timeout=120)
    assert memory.errors == 0

    total = count + 2  # the task, the actions, the final answer
    posts = transport.step_posts()
    # The task alone (the sender had found it alone), then the rest in order, each step once,
    # in batches of 1,000 at most: those converted while the server was busy go together.
    assert posts[0] == ("one", [1])
    assert [n for _, numbers in posts for n in numbers] == list(range(1, total + 1))
    assert all(len(numbers) <= 1_000 for _, numbers in posts)
    assert len(posts[1]) and len(posts[1][1]) >= _BATCH_MAX  # queued while the task was held
    assert len(posts) <= 2 + (total - 1) // _BATCH_MAX
    # The execution is completed only after its last step went out.
    ends = [i for i, (method, path, _) in enumerate(transport.requests) if path.endswith("/complete")]
    assert ends == [len(transport.requests) - 1]

    stored = list(client.list_steps(state.execution_id, page_size=500))
    assert [s["step_number"] for s in stored] == list(range(1, total + 1))
    assert [s["kind"] for s in stored] == ["task"] + ["action"] * count + ["final_answer"]
    assert [s["model_output"] for s in stored[1:-1]] == [f"thought {n}" for n in range(1, count + 1)]
    execution = client.get_execution(state.execution_id)
    assert (execution["status"], execution["step_count"]) == ("completed", total)

    restored = StepwiseMemory(client, session=name).load()
    assert [s.step_number for s in restored[1:]] == list(range(1, count + 1))


def test_runs_queued_together_keep_their_order(server, client, name):
    transport = HeldTransport()
    agent = tool_agent(tool_script("first") + tool_script("second"))
    memory = StepwiseMemory(Stepwise(server.url, transport=transport), session=name).attach(agent)
    transport.hold_next(lambda method, path: method == "POST" and path.endswith("/executions"))
    assert agent.run("First question") == "first"
    assert transport.held.wait(10)
    assert agent.run("Second question", reset=False) == "second"
    transport.gate.set()
    assert memory.flush()
    assert memory.errors == 0

    writes = [
        ("steps", [s["step_number"] for s in body["steps"]]) if path.endswith("/batch")
        else ("steps", [body["step_number"]]) if path.endswith("/steps")
        else (path.rsplit("/", 1)[-1], None)
        for method, path, body in transport.requests
        if method == "POST" and "/executions" in path  # not the session's creation
    ]
    # Each run: opened, its steps in order (those queued together in one batch or a few),
    # completed; the second run's requests after the first's.
    second = writes.index(("executions", None), 1)
    for run in (writes[:second], writes[second:]):
        assert run[0] == ("executions", None) and run[-1] == ("complete", None)
        assert [n for _, numbers in run[1:-1] for n in numbers] == [1, 2, 3, 4, 5]
        assert {kind for kind, _ in run[1:-1]} == {"steps"}
    first, second = executions(client, memory.session_id)
    for execution, answer in ((first, "first"), (second, "second")):
        assert execution["status"] == "completed"
        steps = steps_of(client, execution["id"])
        assert [s["kind"] for s in steps] == ["task", "action", "action", "action", "final_answer"]
        assert steps[-1]["model_output"] == answer


def test_a_step_stored_with_another_body_fails_alone_in_a_batch(server, client, name, caplog):
    transport = HeldTransport()
    agent = tool_agent([])
    memory, state = held_memory(server, name, transport, agent)
    client.append_step(state.execution_id, {"kind": "action", "model_output": "someone else"}, step_number=3)
    for n in range(1, 6):  # steps 2 to 6
        memory._on_step(action_step(n), agent=agent)
    with caplog.at_level(logging.ERROR, logger="stepwise.smolagents"):
        transport.gate.set()
        assert memory.flush()
    # As when each step went alone: step 3 is not saved (logged, counted), the others are.
    assert memory.errors == 1
    # Only this adapter's records: other libraries' background threads may log meanwhile.
    assert [r.getMessage() for r in caplog.records if r.name == "stepwise.smolagents"] == [
        f"stepwise: step 3 of execution {state.execution_id} was not saved: "
        "409 conflict: step 3 of this execution already exists with another body"
    ]
    stored = steps_of(client, state.execution_id)
    assert [s["step_number"] for s in stored] == [1, 2, 3, 4, 5, 6]
    assert [s["model_output"] for s in stored[1:]] == [
        "thought 1", "someone else", "thought 3", "thought 4", "thought 5"
    ]


def test_a_batch_over_the_body_limit_is_split(server, client, name):
    transport = HeldTransport()
    agent = tool_agent([])
    memory, state = held_memory(server, name, transport, agent)
    for n in range(1, 5):  # each ~1.4 MB of JSON (the text twice): 4 are over the 4 MiB limit
        step = action_step(n)
        step.observations = f"{n}" * 700_000
        memory._on_step(step, agent=agent)
    transport.gate.set()
    assert memory.flush(timeout=60)
    assert memory.errors == 0
    assert transport.step_posts() == [
        ("one", [1]), ("batch", [2, 3, 4, 5]), ("batch", [2, 3]), ("batch", [4, 5])
    ]
    stored = steps_of(client, state.execution_id)
    assert [len(s["observations"] or "") for s in stored] == [len("many steps")] + [700_000] * 4


def test_a_server_without_the_batch_endpoint_gets_one_step_per_request(server, client, name):
    transport = HeldTransport()

    def no_batches(method: str, path: str) -> httpx.Response | None:
        if path.endswith("/steps/batch"):
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no such endpoint"}})
        return None

    transport.answer = no_batches
    agent = tool_agent([])
    memory, state = held_memory(server, name, transport, agent)
    for n in range(1, 11):
        memory._on_step(action_step(n), agent=agent)
    transport.gate.set()
    assert memory.flush()
    transport.hold_next(is_step_post)
    for n in range(11, 21):
        memory._on_step(action_step(n), agent=agent)
    assert transport.held.wait(10)
    transport.gate.set()
    assert memory.flush()
    assert memory.errors == 0
    posts = transport.step_posts()
    assert posts[:2] == [("one", [1]), ("batch", list(range(2, 12)))]  # the one batch tried
    assert posts[2:] == [("one", [n]) for n in range(2, 22)]
    assert [s["step_number"] for s in steps_of(client, state.execution_id)] == list(range(1, 22))


# --- loading ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_restore_in_a_new_agent_gives_the_same_messages(client, name, kind):
    make, script = AGENTS[kind]
    agent = make(script(), planning_interval=2)
    memory = StepwiseMemory(client, session=name).attach(agent)
    agent.run("First question")
    assert memory.flush()
    original = agent.write_memory_to_messages()

    fresh = make([])
    restored = StepwiseMemory(client, session=name).attach(fresh)
    assert fresh.write_memory_to_messages() == original
    assert [type(s) for s in fresh.memory.steps] == [type(s) for s in agent.memory.steps]
    assert restored.session_id == memory.session_id
    # Every field smolagents keeps, except the prompts (not saved by default).
    for a, b in zip(agent.memory.steps, fresh.memory.steps):
        left, right = a.dict(), b.dict()
        left.pop("model_input_messages", None)
        right.pop("model_input_messages", None)
        assert json.dumps(left, default=str) == json.dumps(right, default=str)


def test_task_images_come_back_and_are_stored_once_per_run(client, name):
    from PIL import Image

    images = [Image.new("RGB", (4, 4), (200, 10, 10)), Image.new("L", (2, 3), 7)]
    agent = tool_agent(tool_script())
    memory = StepwiseMemory(client, session=name).attach(agent)
    agent.run("What is in these pictures?", images=images)
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    steps = steps_of(client, execution["id"])
    assert len(steps[0]["output"]["smolagents"]["data"]["task_images"]) == 2
    for action in steps[1:4]:
        assert action["output"]["smolagents"]["data"]["observations_images"] == "task_images"

    fresh = tool_agent([])
    StepwiseMemory(client, session=name).attach(fresh)
    assert fresh.write_memory_to_messages() == agent.write_memory_to_messages()
    assert fresh.memory.steps[1].observations_images is fresh.memory.steps[0].task_images


def test_model_input_messages_are_saved_when_asked(client, name):
    agent = code_agent(code_script())
    memory = StepwiseMemory(client, session=name, save_model_input=True).attach(agent)
    agent.run("First question")
    assert memory.flush()
    fresh = code_agent([])
    StepwiseMemory(client, session=name).attach(fresh)
    for a, b in zip(agent.memory.steps, fresh.memory.steps):
        if isinstance(a, ActionStep):
            assert b.model_input_messages == a.model_input_messages
            assert a.model_input_messages


def test_an_empty_session_gives_an_empty_memory(client, name):
    agent = code_agent([])
    agent.memory.steps.append(TaskStep(task="left over from somewhere else"))
    memory = StepwiseMemory(client, session=name).attach(agent)
    assert agent.memory.steps == []
    assert memory.load() == []
    assert [m.role for m in agent.write_memory_to_messages()] == [MessageRole.SYSTEM]


def test_undecodable_steps_are_skipped_with_a_warning(client, name, caplog):
    session = client.session(name)
    execution = client.open_execution(session["id"], input={"task": "t"})
    good_task = encode_step(TaskStep(task="Keep me"), extra={"reset": True})
    client.append_step(execution["id"], good_task, step_number=1)
    broken = {"kind": "action", "output": {"smolagents": {"version": 1, "type": "ActionStep", "data": {"oops": 1}}}}
    client.append_step(execution["id"], broken, step_number=2)
    not_an_object = {"kind": "action", "output": {"smolagents": "garbage"}}
    client.append_step(execution["id"], not_an_object, step_number=3)
    future = {"kind": "action", "output": {"smolagents": {"version": 99, "type": "ActionStep", "data": {}}}}
    client.append_step(execution["id"], future, step_number=4)
    unknown = {"kind": "action", "output": {"smolagents": {"version": 1, "type": "Nope", "data": {}}}}
    client.append_step(execution["id"], unknown, step_number=5)
    agent = code_agent(code_script())
    agent.run("Something")
    good_action = encode_step(agent.memory.steps[1])
    client.append_step(execution["id"], good_action, step_number=6)

    fresh = code_agent([])
    with caplog.at_level(logging.WARNING, logger="stepwise.smolagents"):
        StepwiseMemory(client, session=name).attach(fresh)
    assert [type(s) for s in fresh.memory.steps] == [TaskStep, ActionStep]
    assert fresh.memory.steps[0].task == "Keep me"
    assert fresh.memory.steps[1].code_action == agent.memory.steps[1].code_action
    warnings = [r for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(warnings) == 4


def test_max_restore_steps_restores_the_last_steps_after_a_summary_of_the_rest(client, name):
    agent = tool_agent([])
    memory = StepwiseMemory(client, session=name).attach(agent)
    memory._begin(agent, "count to eight", True)
    agent.memory.steps.append(TaskStep(task="count to eight"))
    for n in range(1, 9):
        step = action_step(n)
        step.tool_calls = [ToolCall(name="counter", arguments={"n": n}, id=f"c{n}")]
        memory._on_step(step, agent=agent)
    memory._on_step(FinalAnswerStep(output="eight"), agent=agent)
    assert memory.flush(timeout=30)

    everything = StepwiseMemory(client, session=name).load()
    assert len(everything) == 9  # the task and the eight actions
    short = StepwiseMemory(client, session=name, max_restore_steps=3).load()
    summary, *kept = short
    assert isinstance(summary, TaskStep)
    assert "6 steps not restored" in summary.task
    assert "'count to eight'" in summary.task and "counter ×5" in summary.task
    assert [s.step_number for s in kept] == [6, 7, 8]
    assert len(StepwiseMemory(client, session=name, max_restore_steps=50).load()) == 9
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError):
            StepwiseMemory(client, session=name, max_restore_steps=bad)


def test_a_summary_from_the_server_becomes_a_task_step(name):
    # A step the server itself cannot decode (damaged in the database): the server answers
    # `restored: "summary"`, and the agent gets that summary as context.
    with local_server() as server:
        client = server.client
        agent = code_agent(code_script())
        memory = StepwiseMemory(client, session=name).attach(agent)
        agent.run("Please compute 6 times 7")
        assert memory.flush()
        (execution,) = executions(client, memory.session_id)
        server.stop()
        path = server.database.removeprefix("sqlite://")
        with sqlite3.connect(path) as db:
            changed = db.execute(
                "UPDATE steps SET payload = ? WHERE execution_id = ? AND step_number = 3",
                (b'{"version": 2, "model_output": tru', uuid.UUID(execution["id"]).bytes),
            ).rowcount
        assert changed == 1
        server.restart()
        fresh = code_agent([])
        StepwiseMemory(client, session=name).attach(fresh)
        summary, *rest = fresh.memory.steps
        assert isinstance(summary, TaskStep)
        assert "could not be restored" in summary.task
        assert [type(s) for s in rest] == [TaskStep, ActionStep, ActionStep]
        assert rest[0].task == "Please compute 6 times 7"


# --- sessions and runs --------------------------------------------------------------------


def test_switching_sessions_keeps_each_memory_apart(client, name):
    alpha, beta = f"{name}-alpha", f"{name}-beta"
    agent = code_agent(code_script("alpha answer") + code_script("beta answer") + code_script("alpha again"))
    memory = StepwiseMemory(client, session=alpha).attach(agent)
    agent.run("ALPHA question")
    alpha_messages = agent.write_memory_to_messages()

    memory.switch(agent, beta)
    assert agent.memory.steps == []
    agent.run("BETA question", reset=False)
    beta_messages = agent.write_memory_to_messages()
    assert "ALPHA" not in str(beta_messages)

    memory.switch(agent, alpha)
    assert agent.write_memory_to_messages() == alpha_messages
    assert "BETA" not in str(agent.write_memory_to_messages())
    agent.run("ALPHA follow-up", reset=False)
    assert memory.flush()

    memory.switch(agent, beta)
    assert agent.write_memory_to_messages() == beta_messages

    alpha_id = client.session(alpha)["id"]
    beta_id = client.session(beta)["id"]
    alpha_tasks = [e["input"]["task"] for e in executions(client, alpha_id)]
    beta_tasks = [e["input"]["task"] for e in executions(client, beta_id)]
    assert alpha_tasks == ["ALPHA question", "ALPHA follow-up"]
    assert beta_tasks == ["BETA question"]
    for execution in executions(client, beta_id):
        assert "ALPHA" not in json.dumps(steps_of(client, execution["id"]))


@pytest.mark.parametrize("kind", sorted(AGENTS))
def test_run_with_reset_false_continues_the_restored_conversation(client, name, kind):
    make, script = AGENTS[kind]
    first = make(script("first answer"))
    memory = StepwiseMemory(client, session=name).attach(first)
    first.run("REMEMBER the number 7")
    assert memory.flush()

    second = make(script("second answer"))
    memory2 = StepwiseMemory(client, session=name).attach(second)
    before = second.write_memory_to_messages()
    second.run("What number did I ask you to remember?", reset=False)
    # The model saw the earlier run's whole context, then the new task.
    prompt = second.model.prompts[0]
    assert prompt[: len(before)] == before
    assert "REMEMBER the number 7" in str(prompt)
    assert memory2.flush()

    third = make([])
    StepwiseMemory(client, session=name).attach(third)
    assert third.write_memory_to_messages() == second.write_memory_to_messages()
    tasks = [s.task for s in third.memory.steps if isinstance(s, TaskStep)]
    assert tasks == ["REMEMBER the number 7", "What number did I ask you to remember?"]


def test_a_run_that_resets_restores_as_the_agent_had_it(client, name):
    agent = code_agent(code_script("one") + code_script("two"))
    memory = StepwiseMemory(client, session=name).attach(agent)
    agent.run("first task")
    agent.run("second task")  # reset=True (smolagents' default) forgets the first run
    assert memory.flush()
    fresh = code_agent([])
    StepwiseMemory(client, session=name).attach(fresh)
    assert fresh.write_memory_to_messages() == agent.write_memory_to_messages()
    everything = code_agent([])
    StepwiseMemory(client, session=name, restore_all_runs=True).attach(everything)
    tasks = [s.task for s in everything.memory.steps if isinstance(s, TaskStep)]
    assert tasks == ["first task", "second task"]


def test_a_run_that_reaches_max_steps_is_saved_and_restored(client, name):
    # Two steps without an answer, then smolagents asks the model for a final answer.
    agent = code_agent(
        [code("a", "x = 1"), code("b", "y = 2"), ChatMessage(role=MessageRole.ASSISTANT, content="Gave up: 3")]
    )
    memory = StepwiseMemory(client, session=name).attach(agent)
    assert agent.run("Add things", max_steps=2, additional_args={"z": 3}) == "Gave up: 3"
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    steps = steps_of(client, execution["id"])
    assert [s["kind"] for s in steps] == ["task", "action", "action", "action", "final_answer"]
    assert steps[3]["error"]["kind"] == "AgentMaxStepsError"
    assert "additional arguments" in steps[0]["observations"]
    assert execution["status"] == "completed"
    fresh = code_agent([])
    StepwiseMemory(client, session=name).attach(fresh)
    assert fresh.write_memory_to_messages() == agent.write_memory_to_messages()


def test_a_failing_run_fails_its_execution(client, name):
    agent = code_agent([code("compute", "x = 1"), RuntimeError("the model is down")])
    memory = StepwiseMemory(client, session=name).attach(agent)
    with pytest.raises(Exception, match="the model is down"):
        agent.run("Try this")
    assert memory.flush()
    (execution,) = executions(client, memory.session_id)
    assert execution["status"] == "failed"
    assert "the model is down" in execution["error_message"]
    assert [s["kind"] for s in steps_of(client, execution["id"])] == ["task", "action", "action"]
    # The next run is a new execution, and the failed run's steps stay in memory.
    agent.model.script = code_script("recovered")
    assert agent.run("Try again", reset=False) == "recovered"
    assert memory.flush()
    assert [e["status"] for e in executions(client, memory.session_id)] == ["failed", "completed"]


def test_streaming_runs_are_saved_too(client, name):
    agent = code_agent(code_script() + code_script())
    memory = StepwiseMemory(client, session=name).attach(agent)
    events = list(agent.run("Stream it", stream=True))
    assert isinstance(events[-1], FinalAnswerStep)
    stream = agent.run("Stop early", stream=True, reset=False)
    for event in stream:
        if isinstance(event, ActionStep):
            break
    stream.close()
    assert memory.flush()
    done, stopped = executions(client, memory.session_id)
    assert done["status"] == "completed"
    assert [s["kind"] for s in steps_of(client, done["id"])][-1] == "final_answer"
    assert stopped["status"] == "failed"
    assert "closed before its final answer" in stopped["error_message"]


def test_detach_stops_saving(client, name):
    agent = code_agent(code_script() + code_script())
    original_run = agent.run
    memory = StepwiseMemory(client, session=name).attach(agent)
    agent.run("saved")
    memory.detach()
    assert agent.run == original_run
    agent.run("not saved")
    assert memory.flush()
    assert [e["input"]["task"] for e in executions(client, memory.session_id)] == ["saved"]


def test_steps_appear_on_the_event_stream_while_the_agent_runs(client, name):
    memory = StepwiseMemory(client, session=name)
    seen: list = []
    stream = client.events(memory.session_id)
    finished = threading.Event()

    def watch():
        for event in stream:
            seen.append(event)
            if event.type in ("execution.completed", "execution.failed"):
                finished.set()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    step_events_during_run: list[int] = []

    def look(step, agent):
        if step.step_number == 3:  # by now steps 1-3 (task, actions 1, 2) are sent
            memory.flush()
            wait_for(lambda: sum(e.type == "step.completed" for e in seen) >= 3, what="3 step events")
            step_events_during_run.append(sum(e.type == "step.completed" for e in seen))

    agent = code_agent(code_script() + [], step_callbacks={ActionStep: look})
    agent.model.script = [code("a", "x = 1"), code("b", "y = 2"), code("c", "z = 3"), code("d", "final_answer(x + y + z)")]
    memory.attach(agent)
    assert agent.run("Count") == 6
    assert memory.flush()
    assert finished.wait(20), [e.type for e in seen]
    try:
        stream.close()
    except Exception:
        pass
    assert step_events_during_run and step_events_during_run[0] >= 3
    numbers = [e.metadata["step_number"] for e in seen if e.type == "step.completed"]
    assert numbers == [1, 2, 3, 4, 5, 6]  # task, 4 actions, final answer
    types = [e.type for e in seen]
    assert types.index("execution.started") < types.index("step.completed")
    assert seen[-1].type == "execution.completed"
    assert seen[-1].content == "6"


CRASHING_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys
    from stepwise import Stepwise
    from stepwise.smolagents import StepwiseMemory
    sys.path.insert(0, {tests!r})
    from test_smolagents import code_agent, code
    from smolagents.memory import ActionStep

    client = Stepwise({url!r})
    memory = StepwiseMemory(client, session={session!r})

    def crash(step, agent):
        if step.step_number == 4:
            memory.flush()  # steps 1-3 are stored
            with open({out!r}, "w") as f:
                json.dump([m.dict() for m in agent.write_memory_to_messages()], f, default=str)
            os.kill(os.getpid(), signal.SIGKILL)

    agent = code_agent(
        [code("s%d" % i, "v%d = %d" % (i, i)) for i in range(1, 8)],
        step_callbacks={{ActionStep: crash}},
    )
    memory.attach(agent)
    agent.run("A long task")
    """
)


def test_steps_saved_before_a_crash_come_back(server, client, name, tmp_path):
    out = tmp_path / "messages.json"
    script = CRASHING_CHILD.format(
        tests=str(Path(__file__).parent), url=server.url, session=name, out=str(out)
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    expected = json.loads(out.read_text())

    agent = code_agent([])
    StepwiseMemory(client, session=name).attach(agent)
    assert [type(s) for s in agent.memory.steps] == [TaskStep, ActionStep, ActionStep, ActionStep]
    assert [s.step_number for s in agent.memory.steps[1:]] == [1, 2, 3]
    assert dicts(agent.write_memory_to_messages()) == expected
    (execution,) = executions(client, client.session(name)["id"])
    assert execution["status"] == "running"  # nobody ended it: the process died


EXITING_CHILD = textwrap.dedent(
    """
    import sys
    from stepwise import Stepwise
    from stepwise.smolagents import StepwiseMemory
    sys.path.insert(0, {tests!r})
    from test_smolagents import code_agent, code_script

    memory = StepwiseMemory(Stepwise({url!r}), session={session!r})
    agent = code_agent(code_script())
    memory.attach(agent)
    print(agent.run("Quick one"))
    # no flush(): interpreter exit sends what is queued
    """
)


def test_interpreter_exit_sends_what_is_queued(server, client, name):
    script = EXITING_CHILD.format(tests=str(Path(__file__).parent), url=server.url, session=name)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == 0, child.stderr.decode()[-2000:]
    (execution,) = executions(client, client.session(name)["id"])
    assert execution["status"] == "completed"
    assert [s["kind"] for s in steps_of(client, execution["id"])] == [
        "task", "action", "action", "action", "final_answer"
    ]


def test_steps_wait_for_a_server_that_restarts(name):
    with local_server() as server:
        client = server.client
        agent = code_agent(code_script())
        memory = StepwiseMemory(client, session=name).attach(agent)
        server.stop()
        assert agent.run("While the server is down") == "done"  # the agent does not wait
        server.restart()
        assert memory.flush(timeout=60)
        (execution,) = executions(client, memory.session_id)
        assert execution["status"] == "completed"
        assert len(steps_of(client, execution["id"])) == 5
        assert memory.errors == 0
