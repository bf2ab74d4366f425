"""`Worker.langgraph` serving LangGraph's own clients, without a server: a run whose input holds
a LangGraph API request (``input.langgraph``) runs the graph with its input, command, config,
context, checkpoint and interrupts; the chunks it streams are kept on its steps and in its
snapshot, and the snapshot holds the thread's state. The worker's `Api` is a fake that answers
as the server does and records what was sent."""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import threading
import uuid
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.memory")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from langgraph.types import Command, Interrupt, Send, interrupt

from stepwise import Stepwise, StepwiseError
from stepwise.worker import Run, Worker
from stepwise.worker._langgraph import (
    ASSISTANTS_NAMESPACE,
    _Chunks,
    announce_assistant,
    assistant_item,
    langgraph_handler,
    to_json,
)
from stepwise.worker._run import Paused


class FakeApi:
    """Answers the worker's calls as the server would, and keeps what they sent."""

    def __init__(self, refuse: dict[str, StepwiseError] | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.steps: list[dict[str, Any]] = []
        self.snapshots: list[dict[str, Any]] = []
        self.paused: str | None = None
        self.refuse = refuse or {}

    def call(self, method: str, path: str, body: Any = None, *, lease: str | None = None,
             timeout: float | None = None) -> Any:
        # What the server gets is JSON: no NaN, nothing that is not JSON.
        body = json.loads(json.dumps(body, allow_nan=False))
        self.calls.append((method, path, body))
        for suffix, error in self.refuse.items():
            if path.endswith(suffix):
                raise error
        if path.endswith("/steps"):
            stored = {**body, "id": uuid.uuid4().hex}
            self.steps.append(stored)
            return stored
        if path.endswith("/snapshots"):
            self.snapshots.append(body["state"])
            return {"id": uuid.uuid4().hex, **body}
        if path.endswith("/pause"):
            self.paused = body["question"]
            return {}
        return None


class Tokens:
    """Stands for the worker's delta sender: the texts and the stream items sent live."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.items: list[dict[str, Any]] = []

    def put(self, run: Run, text: str, items: list[Any] | None = None, size: int = 0) -> None:
        self.texts.append(text)
        self.items.extend(json.loads(json.dumps(items or [], allow_nan=False)))


def claim(api: FakeApi, execution_id: str, request: dict[str, Any] | None = None, *, message: str = "",
          answer: Any = None, session: str = "thread-1", deltas: Any = None) -> Run:
    """The `Run` of a claim of `execution_id` (its steps so far are the ones `api` stored)."""
    run_input: dict[str, Any] = {"message": message}
    if request is not None:
        run_input["langgraph"] = {
            "input": None, "command": None, "config": None, "context": None, "checkpoint_id": None,
            "interrupt_before": None, "interrupt_after": None, "thread_id": session, "assistant_id": "g",
            **request,
        }
    steps = [s for s in api.steps if s.get("_execution") == execution_id]
    answer_claim = {
        "execution": {"id": execution_id, "session_id": session, "agent_type": "g", "input": run_input},
        "attempt": 1,
        "lease": "lease",
        "steps": steps,
        "resume_answer": answer,
    }
    run = Run(answer_claim, api=api, deltas=deltas)  # type: ignore[arg-type]
    original = run._append

    def append(body: dict[str, Any]) -> dict[str, Any]:
        stored = original(body)
        api.steps[-1]["_execution"] = execution_id
        return stored

    run._append = append  # type: ignore[method-assign]
    return run


class Items(TypedDict):
    items: Annotated[list, operator.add]


def relay(checkpointer: Any, calls: list[str] | None = None) -> Any:
    """Two nodes, a then b, each adding its name to `items`."""
    seen = calls if calls is not None else []

    def node(name: str) -> Any:
        def run_node(state: Items) -> dict:
            seen.append(name)
            return {"items": [name]}

        return run_node

    builder = StateGraph(Items)
    builder.add_node("a", node("a"))
    builder.add_node("b", node("b"))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=checkpointer)


def asking(checkpointer: Any) -> Any:
    """plan, then ask (``interrupt``) for a city, then say it."""

    def plan(state: MessagesState) -> dict:
        return {"messages": [AIMessage("Planning the trip", id="plan-1")]}

    def ask(state: MessagesState) -> dict:
        city = interrupt({"question": "Which city?"})
        if isinstance(city, dict):
            city = city.get("city")
        return {"messages": [AIMessage(f"Booked a trip to {city}", id="ask-1")]}

    builder = StateGraph(MessagesState)
    builder.add_node("plan", plan)
    builder.add_node("ask", ask)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=checkpointer)


def chunks_of(api: FakeApi) -> list[list[Any]]:
    """Every kept chunk (``[mode, namespace, data, seq]``), in order: the steps' then the last
    snapshot's."""
    found = [c for s in api.steps for c in s.get("output", {}).get("langgraph", {}).get("stream", [])]
    return found + (api.snapshots[-1]["langgraph"]["stream"] if api.snapshots else [])


def test_a_langgraph_api_run_keeps_its_chunks_on_steps_and_its_state_in_a_snapshot():
    api, live = FakeApi(), Tokens()
    graph = relay(InMemorySaver())
    answer = langgraph_handler(graph)(claim(api, "e1", {"input": {"items": ["x"]}}, deltas=live))
    assert answer == {"items": ["x", "a", "b"]}  # no AI message: the state as JSON

    # A step per node, as ever, each with the chunks streamed since the step before: a
    # batch, its chunks numbered in it.
    assert [s["output"]["langgraph"]["node"] for s in api.steps] == ["a", "b"]
    first, second = (s["output"]["langgraph"] for s in api.steps)
    assert first["stream"] == [
        ["values", "", {"items": ["x"]}, 0],
        ["updates", "", {"a": {"items": ["a"]}}, 1],
        ["values", "", {"items": ["x", "a"]}, 2],
    ]
    assert second["stream"] == [
        ["updates", "", {"b": {"items": ["b"]}}, 0],
        ["values", "", {"items": ["x", "a", "b"]}, 1],
    ]
    assert first["count"] == 3 and second["count"] == 2
    assert isinstance(first["batch"], str) and first["batch"] != second["batch"]
    # Each chunk went out live first, with its batch, its number and the batch before.
    assert live.items == [
        {"mode": c[0], "ns": c[1], "data": c[2], "seq": c[3], "batch": b["batch"], "prev": prev}
        for b, prev in ((first, None), (second, first["batch"]))
        for c in b["stream"]
    ]
    # One snapshot, at the end, with the thread's state.
    [snapshot] = api.snapshots
    state = snapshot["langgraph"]
    assert state["values"] == {"items": ["x", "a", "b"]}
    assert state["next"] == [] and state["tasks"] == [] and state["interrupts"] == []
    assert state["stream"] == []
    latest = graph.get_state({"configurable": {"thread_id": "thread-1"}})
    assert state["checkpoint"] == {
        "thread_id": "thread-1", "checkpoint_ns": "", "checkpoint_id": latest.config["configurable"]["checkpoint_id"]
    }
    assert state["parent_checkpoint"]["checkpoint_id"] == latest.parent_config["configurable"]["checkpoint_id"]
    assert state["metadata"]["step"] == 2 and state["metadata"]["stepwise_execution_id"] == "e1"
    assert state["created_at"] == latest.created_at


def chatting(answer: AIMessage) -> Any:
    """One node, ``chat``: an offline model that streams `answer`."""
    model = GenericFakeChatModel(messages=iter([answer]))

    def chat(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_messages_are_kept_as_their_model_dump_and_tokens_go_out_live():
    graph = chatting(AIMessage("hello there", id="m-1"))
    api, tokens = FakeApi(), Tokens()
    request = {"input": {"messages": [{"role": "user", "content": "hi", "id": "u-1"}]}}
    answer = langgraph_handler(graph)(claim(api, "e1", request, deltas=tokens))
    assert answer == "hello there"
    assert "".join(tokens.texts) == "hello there"
    # Live, in the order LangGraph streams them: the input's values, the model's message
    # chunks (with the id the message keeps and the node's metadata), then the node's update.
    kinds = [i["mode"] for i in tokens.items]
    assert kinds[0] == "values" and kinds[-2:] == ["updates", "values"]
    tuples = [i["data"] for i in tokens.items if i["mode"] == "messages"]
    assert tuples and "".join(m["content"] for m, _ in tuples) == "hello there"
    assert {m["id"] for m, _ in tuples} == {"m-1"} and all(m["type"] == "AIMessageChunk" for m, _ in tuples)
    assert all(meta["langgraph_node"] == "chat" for _, meta in tuples)
    [step] = api.steps
    assert step["model_output"] == "hello there"
    updates = [c for c in step["output"]["langgraph"]["stream"] if c[0] == "updates"]
    [(_, namespace, update, _)] = updates
    assert namespace == ""
    [message] = update["chat"]["messages"]
    assert message["type"] == "ai" and message["content"] == "hello there"
    assert isinstance(message["id"], str) and message["id"]
    assert {"additional_kwargs", "response_metadata", "tool_calls", "name"} <= set(message)
    values = api.snapshots[-1]["langgraph"]["values"]["messages"]
    assert [(m["type"], m["content"]) for m in values] == [("human", "hi"), ("ai", "hello there")]
    assert values[0]["id"] == "u-1"


def test_an_interrupt_pauses_with_a_snapshot_whose_tasks_carry_it_and_the_answer_resumes():
    api = FakeApi()
    graph = asking(InMemorySaver())
    request = {"input": {"messages": [{"role": "user", "content": "trip"}]}}
    with pytest.raises(Paused):
        langgraph_handler(graph)(claim(api, "e1", request))
    assert api.paused == "Which city?"
    # The snapshot came before the pause.
    kinds = [path.rsplit("/", 1)[-1] for _, path, _ in api.calls]
    assert kinds.index("snapshots") < kinds.index("pause")
    [snapshot] = api.snapshots
    state = snapshot["langgraph"]
    assert state["next"] == ["ask"]
    [task] = state["tasks"]
    assert task["name"] == "ask" and task["error"] is None and task["result"] is None
    assert task["path"] == ["__pregel_pull", "ask"]
    [pending] = task["interrupts"]
    assert pending["value"] == {"question": "Which city?"} and isinstance(pending["id"], str)
    assert state["interrupts"] == [pending]
    # The interrupt's update came after the last step: it is in the snapshot's stream.
    assert ["updates", "", {"__interrupt__": [pending]}] in [c[:3] for c in state["stream"]]
    assert [s["output"]["langgraph"]["node"] for s in api.steps if s["kind"] == "action"] == ["plan"]

    # The user's answer (any JSON, here a dict) resumes the same execution.
    answer = langgraph_handler(graph)(claim(api, "e1", request, answer={"city": "Rome"}))
    assert answer == "Booked a trip to Rome"
    assert [s["output"]["langgraph"]["node"] for s in api.steps if s["kind"] == "action"] == ["plan", "ask"]
    final = api.snapshots[-1]["langgraph"]
    assert final["next"] == [] and final["tasks"] == [] and final["interrupts"] == []
    assert [m["content"] for m in final["values"]["messages"]] == ["trip", "Planning the trip", "Booked a trip to Rome"]
    # Nothing kept twice and nothing lost: plan's update, then ask's.
    updates = [next(iter(c[2])) for c in chunks_of(api) if c[0] == "updates"]
    assert updates == ["plan", "ask"]


def test_a_command_of_a_new_run_resumes_the_thread():
    api = FakeApi()
    graph = asking(InMemorySaver())
    with pytest.raises(Paused):
        langgraph_handler(graph)(claim(api, "e1", {"input": {"messages": [{"role": "user", "content": "trip"}]}}))
    answer = langgraph_handler(graph)(claim(api, "e2", {"command": {"resume": "Paris"}}))
    assert answer == "Booked a trip to Paris"
    assert api.snapshots[-1]["langgraph"]["metadata"]["stepwise_execution_id"] == "e2"


def test_a_command_with_update_and_goto():
    api = FakeApi()
    calls: list[str] = []
    graph = relay(InMemorySaver(), calls)
    langgraph_handler(graph)(claim(api, "e1", {"input": {"items": []}}))
    answer = langgraph_handler(graph)(claim(api, "e2", {"command": {"update": {"items": ["u"]}, "goto": "b"}}))
    assert calls == ["a", "b", "b"]
    assert answer == {"items": ["a", "b", "u", "b"]}
    # goto as {node, input} is a Send: the node runs with that input.
    request = {"command": {"goto": [{"node": "a", "input": {"items": []}}]}}
    answer = langgraph_handler(graph)(claim(api, "e3", request))
    assert calls == ["a", "b", "b", "a", "b"]
    assert answer == {"items": ["a", "b", "u", "b", "a", "b"]}


def test_a_run_from_a_past_checkpoint_forks_the_thread():
    api = FakeApi()
    calls: list[str] = []
    graph = relay(InMemorySaver(), calls)
    langgraph_handler(graph)(claim(api, "e1", {"input": {"items": ["x"]}}))
    thread = {"configurable": {"thread_id": "thread-1"}}
    after_a = next(s for s in graph.get_state_history(thread) if s.next == ("b",))
    checkpoint_id = after_a.config["configurable"]["checkpoint_id"]

    calls.clear()
    answer = langgraph_handler(graph)(claim(api, "e2", {"checkpoint_id": checkpoint_id}))
    assert calls == ["b"], "only what came after that checkpoint runs again"
    assert answer == {"items": ["x", "a", "b"]}
    final = api.snapshots[-1]["langgraph"]
    assert final["next"] == []
    # The thread goes on from the fork: its latest checkpoint descends from the one named
    # (through LangGraph's "fork" checkpoint).
    latest, fork = list(graph.get_state_history(thread))[:2]
    assert latest.config["configurable"]["checkpoint_id"] == final["checkpoint"]["checkpoint_id"]
    assert final["parent_checkpoint"]["checkpoint_id"] == fork.config["configurable"]["checkpoint_id"]
    assert fork.metadata["source"] == "fork"
    assert fork.parent_config["configurable"]["checkpoint_id"] == checkpoint_id
    e2 = [s for s in api.steps if s["_execution"] == "e2"]
    assert [s["output"]["langgraph"]["node"] for s in e2] == ["b"]

    # The same through config.configurable.checkpoint_id, with an input at that checkpoint.
    calls.clear()
    request = {"input": {"items": ["y"]}, "config": {"configurable": {"checkpoint_id": checkpoint_id}}}
    answer = langgraph_handler(graph)(claim(api, "e3", request))
    assert calls == ["a", "b"]
    assert answer == {"items": ["x", "a", "y", "a", "b"]}


@dataclasses.dataclass
class Context:
    tone: str


def test_config_and_context_of_the_request_reach_the_nodes_but_the_thread_stays_the_workers():
    seen: dict[str, Any] = {}

    def node(state: Items, config: RunnableConfig, runtime: Runtime[Context]) -> dict:
        seen["user"] = config["configurable"].get("user")
        seen["model"] = config["configurable"].get("model")
        seen["thread"] = config["configurable"]["thread_id"]
        seen["tags"] = config.get("tags")
        seen["recursion_limit"] = config.get("recursion_limit")
        seen["metadata"] = dict(config.get("metadata") or {})
        seen["tone"] = runtime.context.tone if runtime.context else None
        return {"items": ["n"]}

    builder = StateGraph(Items, context_schema=Context)
    builder.add_node("n", node)
    builder.add_edge(START, "n")
    builder.add_edge("n", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    handler = langgraph_handler(graph, config={"configurable": {"model": "small", "user": "default"}, "tags": ["w"]})
    request = {
        "input": {"items": []},
        "config": {
            "configurable": {"user": "u1", "thread_id": "elsewhere"},
            "tags": ["c"], "recursion_limit": 7, "metadata": {"from": "sdk", "stepwise_execution_id": "forged"},
        },
        "context": {"tone": "warm"},
    }
    handler(claim(api := FakeApi(), "e1", request))
    assert seen["user"] == "u1" and seen["model"] == "small"
    assert seen["thread"] == "thread-1"
    assert seen["tags"] == ["w", "c"] and seen["recursion_limit"] == 7
    assert seen["metadata"]["from"] == "sdk" and seen["metadata"]["stepwise_execution_id"] == "e1"
    assert seen["tone"] == "warm"
    assert api.snapshots[-1]["langgraph"]["checkpoint"]["thread_id"] == "thread-1"


def test_interrupt_before_ends_the_run_with_the_node_next_and_a_run_without_input_goes_on():
    api = FakeApi()
    calls: list[str] = []
    graph = relay(InMemorySaver(), calls)
    answer = langgraph_handler(graph)(claim(api, "e1", {"input": {"items": []}, "interrupt_before": ["b"]}))
    assert answer == {"items": ["a"]} and api.paused is None
    state = api.snapshots[-1]["langgraph"]
    assert state["next"] == ["b"] and state["interrupts"] == []
    assert [t["name"] for t in state["tasks"]] == ["b"]
    assert ["updates", "", {"__interrupt__": []}] in [c[:3] for c in chunks_of(api)]
    answer = langgraph_handler(graph)(claim(api, "e2", {"input": None}))
    assert calls == ["a", "b"] and answer == {"items": ["a", "b"]}
    assert api.snapshots[-1]["langgraph"]["next"] == []


def test_a_subgraphs_chunks_are_kept_with_their_namespace_and_steps_stay_the_root_nodes():
    inner = StateGraph(Items)
    inner.add_node("inner", lambda state: {"items": ["i"]})
    inner.add_edge(START, "inner")
    builder = StateGraph(Items)
    builder.add_node("outer", inner.compile())
    builder.add_edge(START, "outer")
    builder.add_edge("outer", END)
    api = FakeApi()
    langgraph_handler(builder.compile(checkpointer=InMemorySaver()))(claim(api, "e1", {"input": {"items": []}}))
    [step] = api.steps
    assert step["output"]["langgraph"]["node"] == "outer" and step["output"]["langgraph"]["step"] == 1
    assert step["output"]["langgraph"]["stream"] == chunks_of(api)
    nested = [c for c in chunks_of(api) if c[1]]
    assert nested and all(c[1].startswith("outer:") for c in nested)
    assert ["updates", nested[0][1], {"inner": {"items": ["i"]}}] in [c[:3] for c in nested]


def test_a_run_without_a_langgraph_request_is_as_before_plus_its_snapshot():
    api = FakeApi()
    graph = asking(InMemorySaver())
    with pytest.raises(Paused):
        langgraph_handler(graph)(claim(api, "e1", message="trip"))
    assert [s["output"] for s in api.steps if s["kind"] == "action"] == [{"langgraph": {"node": "plan", "step": 1}}]
    assert api.snapshots[-1]["langgraph"]["next"] == ["ask"]
    assert api.snapshots[-1]["langgraph"]["stream"] == []
    answer = langgraph_handler(graph)(claim(api, "e1", message="trip", answer="Oslo"))
    assert answer == "Booked a trip to Oslo"
    assert [s["output"] for s in api.steps if s["kind"] == "action"] == [
        {"langgraph": {"node": "plan", "step": 1}}, {"langgraph": {"node": "ask", "step": 2}}
    ]


def test_a_snapshot_that_cannot_be_saved_is_a_warning(caplog):
    api = FakeApi(refuse={"/snapshots": StepwiseError("invalid_request", "too large", status=413)})
    with caplog.at_level(logging.WARNING, logger="stepwise.worker"):
        answer = langgraph_handler(relay(InMemorySaver()))(claim(api, "e1", {"input": {"items": []}}))
    assert answer == {"items": ["a", "b"]}
    assert "snapshot could not be saved" in caplog.text


def test_a_failing_graph_still_saves_its_state():
    def boom(state: Items) -> dict:
        raise RuntimeError("no luck")

    builder = StateGraph(Items)
    builder.add_node("a", lambda state: {"items": ["a"]})
    builder.add_node("boom", boom)
    builder.add_edge(START, "a")
    builder.add_edge("a", "boom")
    api = FakeApi()
    with pytest.raises(RuntimeError):
        langgraph_handler(builder.compile(checkpointer=InMemorySaver()))(claim(api, "e1", {"input": {"items": []}}))
    state = api.snapshots[-1]["langgraph"]
    assert state["values"] == {"items": ["a"]} and state["next"] == ["boom"]


def test_to_json_writes_what_langgraphs_server_writes():
    @dataclasses.dataclass
    class Point:
        x: int
        y: float

    class Other:
        def __str__(self) -> str:
            return "other"

    assert to_json(HumanMessage("hi", id="1"))["type"] == "human"
    assert to_json(Interrupt(value={"q": 1}, id="i1")) == {"value": {"q": 1}, "id": "i1"}
    assert to_json({"__interrupt__": (Interrupt(value="v", id="i2"),)}) == {"__interrupt__": [{"value": "v", "id": "i2"}]}
    assert to_json(Send("n", {"a": 1})) == {"node": "n", "arg": {"a": 1}}
    assert to_json(Command(resume="r")) == {"graph": None, "update": None, "resume": "r", "goto": []}
    assert to_json(Command(update={"a": 1}, goto="b"))["goto"] == "b"
    assert to_json(Point(1, float("nan"))) == {"x": 1, "y": None}
    assert to_json({1: (1, 2), "s": {3}}) == {"1": [1, 2], "s": [3]}
    assert to_json(Other()) == "other"
    assert to_json(Context) == str(Context)
    json.dumps(to_json({"m": [AIMessage("x", tool_calls=[{"id": "c", "name": "f", "args": {"a": 1}}])]}), allow_nan=False)


def test_kept_chunks_stay_bounded(monkeypatch, caplog):
    import stepwise.worker._langgraph as lg

    monkeypatch.setattr(lg, "_MAX_CHUNK_BYTES", 200)
    monkeypatch.setattr(lg, "_MAX_STREAM_BYTES", 300)
    sent = Tokens()

    class Sending:
        execution_id = "e1"

        def _stream(self, items: list[Any], size: int, text: str = "") -> None:
            sent.put(self, text, items, size)  # type: ignore[arg-type]

    chunks = _Chunks(Sending())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="stepwise.worker"):
        chunks.add("values", (), {"big": "x" * 500})
        assert chunks.items == [] and "too large to keep" in caplog.text
        chunks.add("values", (), {"v": "1" * 100})
        chunks.add("updates", (), {"u": "2" * 100})
        chunks.add("values", (), {"v": "3" * 100})  # the older values chunk goes
        assert [c[0] for c in chunks.items] == ["updates", "values"]
        assert chunks.items[1][2] == {"v": "3" * 100}
        chunks.add("custom", (), {"c": "4" * 150})  # nothing older to drop but values
        chunks.add("custom", (), {"c": "5" * 150})  # no room: this one is dropped
    assert [c[0] for c in chunks.items] == ["updates", "custom"]
    # A chunk keeps the number it was sent live with: the stored ones have gaps.
    assert [c[3] for c in chunks.items] == [1, 3]
    assert [i["seq"] for i in sent.items] == [0, 1, 2, 3]
    taken = chunks.take()
    assert taken is not None and taken["count"] == 4 and chunks.take() is None


def test_the_assistant_item_describes_the_graph():
    item = assistant_item("trip", asking(InMemorySaver()), "Books trips")
    assert item["graph_id"] == "trip" and item["description"] == "Books trips"
    assert [n["id"] for n in item["graph"]["nodes"]] == ["__start__", "plan", "ask", "__end__"]
    assert {"source": "plan", "target": "ask"} in item["graph"]["edges"]
    assert item["input_schema"]["title"] == "MessagesState"
    assert "messages" in item["output_schema"]["properties"]
    assert "messages" in item["state_schema"]["properties"]
    assert item["config_schema"] is not None
    assert "context_schema" in item
    json.dumps(item, allow_nan=False)

    class Broken:
        def get_graph(self) -> Any:
            raise RuntimeError("no drawing")

        def get_input_jsonschema(self) -> Any:
            raise RuntimeError("no schema")

        get_output_jsonschema = get_config_jsonschema = get_input_jsonschema

    broken = assistant_item("b", Broken())
    assert broken["graph"] == {"nodes": [], "edges": []}
    assert broken["input_schema"] is None and broken["state_schema"] is None and broken["context_schema"] is None


def test_the_worker_announces_each_graph_once_when_it_starts(caplog):
    with Stepwise("http://127.0.0.1:9") as client:
        worker = Worker(client)
        worker.langgraph("trip", asking(InMemorySaver()), description="Books trips")
        worker.langgraph("relay", relay(InMemorySaver()))
        api = FakeApi()
        for hook in worker._on_start:
            hook(api)  # type: ignore[arg-type]
    puts = [(m, p, b) for m, p, b in api.calls if p == "/langgraph/store/items"]
    assert [(m, b["namespace"], b["key"]) for m, _, b in puts] == [
        ("PUT", ASSISTANTS_NAMESPACE, "trip"), ("PUT", ASSISTANTS_NAMESPACE, "relay")
    ]
    assert puts[0][2]["value"]["description"] == "Books trips"

    refused = FakeApi(refuse={"/langgraph/store/items": StepwiseError("forbidden", "no", status=403)})
    with caplog.at_level(logging.WARNING, logger="stepwise.worker"):
        announce_assistant(refused, "trip", asking(InMemorySaver()))  # type: ignore[arg-type]
    assert "not announced" in caplog.text


def test_the_events_mode_streams_the_graphs_events_live_and_keeps_the_same_chunks():
    api, live = FakeApi(), Tokens()
    request = {"input": {"messages": [{"role": "user", "content": "hey"}]}, "stream_mode": ["events", "values"]}
    answer = langgraph_handler(chatting(AIMessage("hi you", id="m-2")))(claim(api, "e1", request, deltas=live))
    assert answer == "hi you"
    events = [i["data"] for i in live.items if i["mode"] == "events"]
    names = [e["event"] for e in events]
    # astream_events (v2) as LangGraph's server streams it: the graph's start first, the
    # model's tokens, the graph's end last; the root's own stream chunks are not events.
    assert names[0] == "on_chain_start" and names[-1] == "on_chain_end"
    tokens = [e["data"]["chunk"]["content"] for e in events if e["event"] == "on_chat_model_stream"]
    assert "".join(tokens) == "hi you"
    assert all(e["data"]["chunk"]["id"] == "m-2" for e in events if e["event"] == "on_chat_model_stream")
    assert {"run_id", "name", "tags", "metadata", "data"} <= set(events[0])
    # The kept chunks are the same as without events, and go out live as well.
    [step] = api.steps
    assert [c[0] for c in step["output"]["langgraph"]["stream"]] == ["values", "updates", "values"]
    assert [i["mode"] for i in live.items if "batch" in i] == ["values", "updates", "values"]
    assert api.snapshots[-1]["langgraph"]["values"]["messages"][-1]["content"] == "hi you"


def test_a_run_that_stops_early_in_the_events_mode_stops_its_graph():
    calls: list[str] = []
    graph = relay(InMemorySaver(), calls)
    api = FakeApi(refuse={"/steps": StepwiseError("lease_lost", "gone", status=409)})
    with pytest.raises(BaseException, match="lease_lost"):  # the worker's own stop
        langgraph_handler(graph)(claim(api, "e1", {"input": {"items": []}, "stream_mode": "events"}))
    # The step of a could not be saved: the graph was stopped (it may have started b, as a
    # lost worker may have), nothing was saved, and its thread is gone.
    assert calls[:1] == ["a"]
    assert api.steps == [] and api.snapshots == []
    assert not [t for t in threading.enumerate() if t.name == "stepwise-langgraph-events"]
