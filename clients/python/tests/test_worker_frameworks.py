"""The framework runners of `stepwise.worker` (smolagents, LangGraph, OpenAI Agents SDK)
against a real `stepwise serve`, with workers as real processes and offline models."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from stepwise import Stepwise, StepwiseError
from stepwise.testing import LocalServer

from _worker_support import (  # noqa: F401 - start_worker is a fixture
    PATIENCE,
    short_lease_server,
    start_worker,
    steps_of,
)


@pytest.fixture(scope="module")
def wserver() -> Iterator[LocalServer]:
    with short_lease_server() as running:
        yield running


@pytest.fixture
def client(wserver: LocalServer) -> Iterator[Stepwise]:
    with Stepwise(wserver.url) as c:
        yield c


def send(client: Stepwise, text: str, agent: str | dict[str, Any], session_id: str | None = None) -> dict[str, Any]:
    if session_id is None:
        answer = client.send_message(text, agent=agent, session={"name": f"f-{uuid.uuid4().hex[:12]}"})
    else:
        answer = client.post_message(session_id, text, agent=agent)
    return answer["execution"]


def prompt(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())


# --- smolagents -----------------------------------------------------------------------------


SMOL = "worker_apps.smol:worker"


def test_smolagents_run_taken_over_after_a_crash_continues_with_the_same_memory(
    wserver, client, start_worker, tmp_path
):
    pytest.importorskip("smolagents")
    from stepwise.smolagents import decode_step

    # A reference run that nobody interrupts, in its own session.
    (tmp_path / "record-3").touch()
    (tmp_path / "record-4").touch()
    reference = start_worker(wserver, SMOL, name="ref")
    plain = client.wait(send(client, "steps:10", "coder")["id"], timeout=PATIENCE)
    assert plain["status"] == "completed", plain
    assert reference.stop() == 0

    # The first worker dies in step 3 (inside the model call); a second one takes the run over.
    (tmp_path / "crash-at-3").touch()
    first = start_worker(wserver, SMOL, name="a")
    execution = send(client, "steps:10", "coder")
    assert first.wait_exit() == -9, first.log()[-3000:]
    second = start_worker(wserver, SMOL, name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "done after 10 steps"
    assert "goes on at step 3" in second.log()

    # Steps 1-10 of the agent each saved once: the task, actions 1..10, the final answer.
    steps = steps_of(client, execution["id"])
    assert [s["step_number"] for s in steps] == list(range(1, 13))
    assert [s["kind"] for s in steps] == ["task"] + ["action"] * 10 + ["final_answer"]
    decoded = [decode_step(s) for s in steps]
    assert [d.step_number for d in decoded[1:11]] == list(range(1, 11))
    assert [s["code"] for s in steps[1:10]] == [f"print({n})" for n in range(1, 10)]

    # The second worker's agent was asked for step 3 exactly what the first one was, and its
    # memory before step 4 is the uninterrupted agent's.
    crashed = prompt(tmp_path / "prompt-3-a.json")
    resumed = prompt(tmp_path / "prompt-3-b-steps:10.json")
    assert resumed == crashed
    assert prompt(tmp_path / "prompt-4-b-steps:10.json") == prompt(tmp_path / "prompt-4-ref-steps:10.json")
    assert second.stop() == 0


def test_smolagents_user_input_pauses_and_the_answer_resumes(wserver, client, start_worker):
    pytest.importorskip("smolagents")
    start_worker(wserver, SMOL)
    execution = send(client, "ask", "coder")
    paused = client.wait(execution["id"], timeout=PATIENCE)
    assert paused["status"] == "paused", paused
    client.post_message(execution["session_id"], "Ada")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "Hi Ada"
    kinds = [s["kind"] for s in steps_of(client, execution["id"])]
    assert kinds == ["task", "user_input", "user_input", "action", "action", "final_answer"]


def test_smolagents_memory_carries_over_to_the_session_s_next_message(wserver, client, start_worker, tmp_path):
    pytest.importorskip("smolagents")
    from stepwise.smolagents import StepwiseMemory
    from worker_apps.smol import make_agent

    start_worker(wserver, SMOL)
    first = client.wait(send(client, "steps:2", "coder")["id"], timeout=PATIENCE)
    second = client.wait(send(client, "steps:3", "coder", session_id=first["session_id"])["id"], timeout=PATIENCE)
    assert (first["output"], second["output"]) == ("done after 2 steps", "done after 3 steps")
    # The session restores as one conversation: both tasks and their steps.
    agent = make_agent()
    StepwiseMemory(client, session=first["session_id"]).attach(agent)
    tasks = [s.task for s in agent.memory.steps if type(s).__name__ == "TaskStep"]
    assert tasks == ["steps:2", "steps:3"]


# --- LangGraph ------------------------------------------------------------------------------


def test_langgraph_interrupt_pauses_and_the_answer_resumes_the_graph(wserver, client, start_worker):
    pytest.importorskip("langgraph")
    start_worker(wserver, "worker_apps.graph:worker")
    execution = send(client, "Book me a trip", "trip")
    paused = client.wait(execution["id"], timeout=PATIENCE)
    assert paused["status"] == "paused", paused
    before = steps_of(client, execution["id"])
    assert before[0]["model_output"] == "Planning the trip"
    assert (before[-1]["kind"], before[-1]["model_output"]) == ("user_input", "Which city?")

    client.post_message(execution["session_id"], "Paris")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "Booked a trip to Paris"
    outputs = [s["model_output"] for s in steps_of(client, execution["id"]) if s["kind"] == "action"]
    assert outputs == ["Planning the trip", "Booked a trip to Paris"]

    # The next message in the session continues the same thread.
    again = client.wait(send(client, "And another", "trip", session_id=execution["session_id"])["id"], timeout=PATIENCE)
    assert again["status"] == "paused"
    client.post_message(execution["session_id"], "Rome")
    assert client.wait(again["id"], timeout=PATIENCE)["output"] == "Booked a trip to Rome"


def test_langgraph_run_taken_over_after_a_crash_goes_on_from_its_last_checkpoint(
    wserver, client, start_worker, tmp_path
):
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from stepwise.langgraph import StepwiseSaver
    from worker_apps.graph import relay_builder

    (tmp_path / "crash-in-b").touch()
    first = start_worker(wserver, "worker_apps.graph:worker", name="a")
    execution = send(client, "go", "relay")
    assert first.wait_exit() == -9, first.log()[-3000:]
    second = start_worker(wserver, "worker_apps.graph:worker", name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "c done"
    assert "goes on from its last checkpoint" in second.log()
    steps = steps_of(client, execution["id"])
    assert [s["model_output"] for s in steps] == ["a done", "b done", "c done"]
    # The thread holds the user's message and each node's message once.
    with StepwiseSaver(base_url=wserver.url) as saver:
        state = relay_builder.compile(checkpointer=saver).get_state(
            {"configurable": {"thread_id": execution["session_id"]}}
        )
    texts = [(type(m) is HumanMessage, m.content) for m in state.values["messages"]]
    assert texts == [(True, "go"), (False, "a done"), (False, "b done"), (False, "c done")]


class _Crash(BaseException):
    """Stands for a worker process that dies where it is raised."""


def claim_run(server: LocalServer, agent_type: str) -> Any:
    """Claims the next execution of `agent_type` as a worker would; its `Run`."""
    from stepwise.worker import Run
    from stepwise.worker._http import Api

    api = Api(server.url, {})
    answer = api.claim(
        {"worker_id": "in-test", "agents": [{"type": agent_type}], "slots": 1, "wait_s": 10}, 10
    )
    (claim,) = answer["items"]
    return Run(claim, api=api)


def relay_graph(saver: Any, crash_in: set[str]) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def node(name: str) -> Any:
        def run_node(state: MessagesState) -> dict:
            if name in crash_in:
                crash_in.discard(name)
                raise _Crash(name)
            return {"messages": [AIMessage(f"{name} done")]}

        return run_node

    builder = StateGraph(MessagesState)
    for name in ("a", "b", "c"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder.compile(checkpointer=saver)


def test_langgraph_run_whose_last_checkpoint_was_lost_replays_the_writes_stored_before_it(wserver, client):
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from stepwise.langgraph import StepwiseSaver
    from stepwise.worker._langgraph import langgraph_handler

    class LosesCheckpointAfterA(StepwiseSaver):
        """A saver whose checkpoint after node a never reached the server (a's writes did)."""

        def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
            if metadata.get("step") == 1:
                conf = config["configurable"]
                return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": "",
                                         "checkpoint_id": checkpoint["id"]}}
            return super().put(config, checkpoint, metadata, new_versions)

    agent_type = f"relay-{uuid.uuid4().hex[:8]}"
    execution = send(client, "go", {"type": agent_type, "wait": True})
    with LosesCheckpointAfterA(base_url=wserver.url) as lossy, StepwiseSaver(base_url=wserver.url) as saver:
        run = claim_run(wserver, agent_type)
        with pytest.raises(_Crash):
            langgraph_handler(relay_graph(lossy, {"b"}))(run)
        run._write("POST", "/fail", {"error_message": "lost", "retry": True})

        again = claim_run(wserver, agent_type)
        assert again.attempt == 2
        # What the first attempt saved is in `steps`, not in the session's memory.
        assert [s["model_output"] for s in again.steps] == ["a done"]
        assert [s for s in again.memory["steps"] if s["execution_id"] == execution["id"]] == []
        graph = relay_graph(saver, set())
        answer = langgraph_handler(graph)(again)
        assert answer == "c done"
        again._write("POST", "/complete", {"output": answer})
        state = graph.get_state({"configurable": {"thread_id": execution["session_id"]}})
    # Node a ran once: its stored writes were replayed, and its step is not saved twice.
    steps = steps_of(client, execution["id"])
    assert [s["model_output"] for s in steps] == ["a done", "b done", "c done"]
    assert [s["output"]["langgraph"] for s in steps] == [
        {"node": "a", "step": 1}, {"node": "b", "step": 2}, {"node": "c", "step": 3}
    ]
    texts = [(type(m) is HumanMessage, m.content) for m in state.values["messages"]]
    assert texts == [(True, "go"), (False, "a done"), (False, "b done"), (False, "c done")]


def test_langgraph_run_taken_over_saves_the_step_a_lost_worker_stored_the_checkpoint_of(wserver, client):
    pytest.importorskip("langgraph")
    from stepwise.langgraph import StepwiseSaver
    from stepwise.worker._langgraph import langgraph_handler

    agent_type = f"relay-{uuid.uuid4().hex[:8]}"
    execution = send(client, "go", {"type": agent_type, "wait": True})
    with StepwiseSaver(base_url=wserver.url) as saver:
        graph = relay_graph(saver, set())
        run = claim_run(wserver, agent_type)

        def lost(**fields: Any) -> Any:  # the worker dies while it saves a's step
            raise _Crash("in step")

        run.step = lost  # type: ignore[method-assign]
        with pytest.raises(_Crash):
            langgraph_handler(graph)(run)
        run._write("POST", "/fail", {"error_message": "lost", "retry": True})
        assert steps_of(client, execution["id"]) == []

        again = claim_run(wserver, agent_type)
        answer = langgraph_handler(graph)(again)
        assert answer == "c done"
        again._write("POST", "/complete", {"output": answer})
    steps = steps_of(client, execution["id"])
    assert [s["model_output"] for s in steps] == ["a done", "b done", "c done"]


def test_langgraph_rollback_removes_the_busy_run_and_its_checkpoints(wserver, client):
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from stepwise.langgraph import StepwiseSaver
    from stepwise.worker._langgraph import langgraph_handler

    agent_type = f"relay-{uuid.uuid4().hex[:8]}"
    agent = {"type": agent_type, "wait": True}
    execution = send(client, "go", agent)
    session = execution["session_id"]
    with StepwiseSaver(base_url=wserver.url) as saver:
        run = claim_run(wserver, agent_type)
        with pytest.raises(_Crash):  # still running (leased), its thread half-way: node a done
            langgraph_handler(relay_graph(saver, {"b"}))(run)
        thread = {"configurable": {"thread_id": session}}
        assert relay_graph(saver, set()).get_state(thread).values["messages"][-1].content == "a done"

        answer = client.post_message(session, "again", agent=agent, on_busy="rollback")
        with pytest.raises(StepwiseError) as gone:
            client.get_execution(execution["id"])
        assert gone.value.status == 404
        assert relay_graph(saver, set()).get_state(thread).values == {}, "its checkpoints went with it"

        again = claim_run(wserver, agent_type)
        assert again.execution_id == answer["execution"]["id"]
        graph = relay_graph(saver, set())
        result = langgraph_handler(graph)(again)
        again._write("POST", "/complete", {"output": result})
        state = graph.get_state(thread)
    texts = [(type(m) is HumanMessage, m.content) for m in state.values["messages"]]
    assert texts == [(True, "again"), (False, "a done"), (False, "b done"), (False, "c done")]
    assert [m["content"] for m in client.list_messages(session, roles="user")] == ["again"]


def test_langgraph_fork_after_a_run_holds_the_thread_as_it_was_and_goes_on_from_there(wserver, client):
    pytest.importorskip("langgraph")
    from langchain_core.messages import HumanMessage

    from stepwise.langgraph import StepwiseSaver
    from stepwise.worker._langgraph import langgraph_handler

    agent_type = f"relay-{uuid.uuid4().hex[:8]}"
    agent = {"type": agent_type, "wait": True}

    def run_next(saver: Any) -> None:
        run = claim_run(wserver, agent_type)
        run._write("POST", "/complete", {"output": langgraph_handler(relay_graph(saver, set()))(run)})

    def texts(saver: Any, thread_id: str) -> list[tuple[bool, str]]:
        state = relay_graph(saver, set()).get_state({"configurable": {"thread_id": thread_id}})
        return [(type(m) is HumanMessage, m.content) for m in state.values.get("messages", [])]

    first = send(client, "one", agent)
    session = first["session_id"]
    with StepwiseSaver(base_url=wserver.url) as saver:
        run_next(saver)
        send(client, "two", agent, session_id=session)
        run_next(saver)
        assert [t for t in texts(saver, session) if t[0]] == [(True, "one"), (True, "two")]

        fork = client.fork_session(session, execution_id=first["id"])
        assert texts(saver, fork["id"]) == [(True, "one"), (False, "a done"), (False, "b done"), (False, "c done")]
        send(client, "three", agent, session_id=fork["id"])
        run_next(saver)
        assert [t for t in texts(saver, fork["id"]) if t[0]] == [(True, "one"), (True, "three")]
        assert [t for t in texts(saver, session) if t[0]] == [(True, "one"), (True, "two")], "the original is untouched"


# --- OpenAI Agents SDK ----------------------------------------------------------------------


def test_openai_agents_run_streams_saves_its_items_and_answers(wserver, client, start_worker):
    pytest.importorskip("agents")
    start_worker(wserver, "worker_apps.oa:worker")
    execution = send(client, "Weather in Paris?", "weather")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "It is 18 °C and light rain in Paris."
    steps = steps_of(client, execution["id"])
    assert [s["tool_calls"][0]["name"] for s in steps if s["tool_calls"]] == ["get_weather"]
    assert steps[0]["tool_calls"][0]["arguments"] == {"city": "Paris"}
    assert any(s["observations"] == "18 °C and light rain in Paris" for s in steps)
    assert steps[-1]["model_output"] == "It is 18 °C and light rain in Paris."
    messages = list(client.list_messages(execution["session_id"], roles=["assistant"]))
    assert messages[-1]["content"] == "It is 18 °C and light rain in Paris."


async def test_openai_agents_run_taken_over_after_a_crash_does_not_repeat_the_message(
    wserver, client, start_worker, tmp_path
):
    pytest.importorskip("agents")
    from stepwise.openai_agents import StepwiseSession

    (tmp_path / "crash-in-tool").touch()
    first = start_worker(wserver, "worker_apps.oa:worker", name="a")
    execution = send(client, "Weather in Rome?", "weather")
    assert first.wait_exit() == -9, first.log()[-3000:]
    start_worker(wserver, "worker_apps.oa:worker", name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "It is 18 °C and light rain in Paris."
    session = StepwiseSession(execution["session_id"], base_url=wserver.url)
    try:
        items = await session.get_items()
    finally:
        await session.aclose()
    users = [i for i in items if i.get("role") == "user"]
    assert [u["content"] for u in users] == ["Weather in Rome?"]
