"""stepwise.langgraph against a real `stepwise serve`: LangGraph graphs checkpointed in Stepwise.

Real graphs (a tool-calling agent on an offline fake chat model, interrupts, subgraphs,
time travel) run with `StepwiseSaver` / `AsyncStepwiseSaver`; what they store is read back
through LangGraph and through the Stepwise API.
"""

from __future__ import annotations

import asyncio
import operator
import subprocess
import uuid
from pathlib import Path
from typing import Annotated, Any, Iterator, TypedDict
from urllib.parse import quote

import httpx
import pytest

pytest.importorskip("langgraph.graph")

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from stepwise import Stepwise, StepwiseError
from stepwise.langgraph import AsyncStepwiseSaver, StepwiseSaver
from stepwise.testing import LocalServer, find_binary, local_server


def cfg(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **extra}}


def new_thread(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def saver(server: LocalServer) -> Iterator[StepwiseSaver]:
    with StepwiseSaver(base_url=server.url) as s:
        yield s


# --------------------------------------------------------------------------- a tool-calling agent


@tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@tool
def multiply(a: int, b: int) -> int:
    """Multiplies two integers."""
    return a * b


def agent_graph(checkpointer: Any, responses: list[AIMessage]) -> Any:
    model = FakeMessagesListChatModel(responses=responses)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([add, multiply]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def usage(i: int, o: int) -> dict[str, int]:
    return {"input_tokens": i, "output_tokens": o, "total_tokens": i + o}


AGENT_RESPONSES = [
    AIMessage("", tool_calls=[{"id": "call_1", "name": "add", "args": {"a": 2, "b": 3}}], usage_metadata=usage(20, 7)),
    AIMessage("2 + 3 = 5", usage_metadata=usage(30, 5)),
    AIMessage("", tool_calls=[{"id": "call_2", "name": "multiply", "args": {"a": 5, "b": 4}}], usage_metadata=usage(40, 7)),
    AIMessage("5 × 4 = 20", usage_metadata=usage(50, 6)),
]


def session_of(client: Stepwise, thread_id: str) -> dict[str, Any]:
    return client.request("GET", f"/v1/threads/{thread_id}")


def all_steps(client: Stepwise, session_id: str) -> list[dict[str, Any]]:
    return [s for e in client.list_executions(session_id) for s in client.list_steps(e["id"])]


def test_a_tool_calling_agent_over_several_turns(server: LocalServer, saver: StepwiseSaver) -> None:
    thread = new_thread("agent")
    graph = agent_graph(saver, AGENT_RESPONSES)
    first = graph.invoke({"messages": [HumanMessage("what is 2+3?")]}, cfg(thread))
    assert first["messages"][-1].content == "2 + 3 = 5"
    second = graph.invoke({"messages": [HumanMessage("and times 4?")]}, cfg(thread))
    assert [type(m).__name__ for m in second["messages"]] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
    ]
    assert second["messages"][6].content == "20" and second["messages"][6].tool_call_id == "call_2"

    # A new saver (a new process) sees the same state, exactly.
    with StepwiseSaver(base_url=server.url) as other:
        state = agent_graph(other, AGENT_RESPONSES).get_state(cfg(thread))
    assert state.values["messages"] == second["messages"]
    assert state.values["messages"][1].tool_calls == AGENT_RESPONSES[0].tool_calls
    assert state.values["messages"][1].usage_metadata == usage(20, 7)
    assert state.next == ()

    # The thread is a Stepwise session: its conversation and tool steps are visible there.
    client = server.client
    info = session_of(client, thread)
    assert info["thread_id"] == thread and info["checkpoints"] >= 8
    session = info["session"]
    assert session["name"] == thread
    assert session["metadata"]["langgraph_thread_id"] == thread
    messages = list(client.list_messages(session["id"]))
    user_texts = [m["content"] for m in messages if m["role"] == "user"]
    assert user_texts == ["what is 2+3?", "and times 4?"]
    assistant_texts = [m["content"] for m in messages if m["role"] == "assistant"]
    assert "2 + 3 = 5" in assistant_texts and "5 × 4 = 20" in assistant_texts
    steps = all_steps(client, session["id"])
    calls = [tc for s in steps for tc in s.get("tool_calls") or []]
    assert [(c["name"], c["arguments"]) for c in calls] == [("add", {"a": 2, "b": 3}), ("multiply", {"a": 5, "b": 4})]
    observations = " ".join(str(s.get("observations") or "") for s in steps)
    assert "5" in observations and "20" in observations

    # A third turn after the session was read keeps appending to the same thread.
    third = agent_graph(saver, [AIMessage("bye")]).invoke({"messages": [HumanMessage("thanks")]}, cfg(thread))
    assert len(third["messages"]) == 10
    user_texts = [m["content"] for m in client.list_messages(session["id"]) if m["role"] == "user"]
    assert user_texts == ["what is 2+3?", "and times 4?", "thanks"]


async def test_the_async_saver_runs_the_agent_and_sync_reads_work(server: LocalServer) -> None:
    thread = new_thread("async-agent")
    async with AsyncStepwiseSaver(base_url=server.url) as saver:
        graph = agent_graph(saver, AGENT_RESPONSES)
        out = await graph.ainvoke({"messages": [HumanMessage("what is 2+3?")]}, cfg(thread))
        assert out["messages"][-1].content == "2 + 3 = 5"
        state = await graph.aget_state(cfg(thread))
        assert state.values["messages"] == out["messages"]
        history = [s async for s in graph.aget_state_history(cfg(thread))]
        assert len(history) >= 4
        # The sync interface goes through a synchronous client to the same server.
        assert saver.get_tuple(cfg(thread)).checkpoint["id"] == state.config["configurable"]["checkpoint_id"]
        assert len(list(saver.list(cfg(thread), limit=2))) == 2



class Fan(TypedDict):
    log: Annotated[list, operator.add]


def fan_out_graph(checkpointer: Any) -> Any:
    """START -> (left, right in parallel) -> join: two tasks of one superstep write at once."""

    def branch(name: str) -> Any:
        async def node(state: Fan) -> dict[str, Any]:
            await asyncio.sleep(0.005)
            return {"log": [f"{name}{len(state['log'])}"]}

        return node

    async def join(state: Fan) -> dict[str, Any]:
        return {"log": [f"join{len(state['log'])}"]}

    g = StateGraph(Fan)
    g.add_node("left", branch("left"))
    g.add_node("right", branch("right"))
    g.add_node("join", join)
    g.add_edge(START, "left")
    g.add_edge(START, "right")
    g.add_edge(["left", "right"], "join")
    g.add_edge("join", END)
    return g.compile(checkpointer=checkpointer)


async def test_the_async_saver_stores_parallel_tasks_over_its_lean_connections(server: LocalServer) -> None:
    # A thread id that must be quoted in the path, and two tasks whose writes go out together.
    thread = new_thread("fan out/é ?#")
    memory = InMemorySaver()
    async with AsyncStepwiseSaver(base_url=server.url) as saver:
        runs = []
        for checkpointer in (saver, memory):
            graph = fan_out_graph(checkpointer)
            for _ in range(3):
                await graph.ainvoke({"log": []}, cfg(thread))
            history = [h async for h in graph.aget_state_history(cfg(thread))]
            runs.append([(h.metadata["step"], h.next, sorted(h.values["log"])) for h in history])
        assert saver._fast[asyncio.get_running_loop()] is not None  # the lean connections were used
        assert runs[0] == runs[1]
        assert len(runs[0]) == 3 * 4 and len(runs[0][0][2]) == 9
        # The server's errors come back as StepwiseErrors over these connections too.
        with pytest.raises(StepwiseError) as info:
            await fan_out_graph(saver).ainvoke({"log": []}, cfg("x" * 300))
        assert (info.value.status, info.value.code) == (400, "invalid_request")
    stored = server.client.request("GET", f"/v1/threads/{quote(thread, safe='')}")
    assert (stored["thread_id"], stored["checkpoints"]) == (thread, 12)

# --------------------------------------------------------------------------- interrupts across a restart


class Approval(TypedDict):
    request: str
    decision: str
    log: Annotated[list[str], operator.add]


def approval_graph(checkpointer: Any) -> Any:
    def prepare(state: Approval) -> dict[str, Any]:
        return {"log": [f"prepared {state['request']}"]}

    def ask(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": f"approve {state['request']}?"})
        return {"decision": answer, "log": [f"human said {answer}"]}

    def act(state: Approval) -> dict[str, Any]:
        return {"log": [f"done: {state['decision']}"]}

    builder = StateGraph(Approval)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_node("act", act)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=checkpointer)


def test_interrupt_and_resume_across_a_server_restart() -> None:
    thread = new_thread("approval")
    with local_server() as srv:
        with StepwiseSaver(base_url=srv.url) as saver:
            out = approval_graph(saver).invoke({"request": "refund #42", "log": []}, cfg(thread))
            assert out["__interrupt__"][0].value == {"question": "approve refund #42?"}

            srv.restart()

            # The saver's kept-alive connections died with the server: it reconnects.
            assert approval_graph(saver).get_state(cfg(thread)).next == ("ask",)

        with StepwiseSaver(base_url=srv.url) as saver:
            graph = approval_graph(saver)
            state = graph.get_state(cfg(thread))
            assert state.next == ("ask",)
            assert state.tasks[0].interrupts[0].value == {"question": "approve refund #42?"}
            final = graph.invoke(Command(resume="yes"), cfg(thread))
            assert final["decision"] == "yes"
            assert final["log"] == ["prepared refund #42", "human said yes", "done: yes"]
            assert graph.get_state(cfg(thread)).next == ()


# --------------------------------------------------------------------------- history, replay, fork


def echo_graph(checkpointer: Any) -> Any:
    def echo(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"echo {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("echo", echo)
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=checkpointer)


def contents(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


def test_state_history_replay_and_fork(saver: StepwiseSaver) -> None:
    thread = new_thread("history")
    graph = echo_graph(saver)
    for text in ("a", "b", "c"):
        graph.invoke({"messages": [HumanMessage(text)]}, cfg(thread))
    history = list(graph.get_state_history(cfg(thread)))
    # Newest first; each turn makes an input checkpoint, one after the input, one after echo.
    steps = [h.metadata["step"] for h in history]
    assert steps == sorted(steps, reverse=True)
    assert contents(history[0].values["messages"]) == ["a", "echo a", "b", "echo b", "c", "echo c"]
    after_first = next(h for h in history if contents(h.values.get("messages", [])) == ["a", "echo a"])
    assert after_first.parent_config is not None

    # Replay from the checkpoint after the first turn with a different second turn (a fork).
    forked = graph.update_state(after_first.config, {"messages": [HumanMessage("x")]}, as_node=START)
    out = graph.invoke(None, forked)
    assert contents(out["messages"]) == ["a", "echo a", "x", "echo x"]
    assert contents(graph.get_state(cfg(thread)).values["messages"]) == ["a", "echo a", "x", "echo x"]
    new_history = list(graph.get_state_history(cfg(thread)))
    assert len(new_history) > len(history)
    fork_point = next(h for h in new_history if h.config["configurable"]["checkpoint_id"] == forked["configurable"]["checkpoint_id"])
    assert fork_point.metadata["source"] == "update"
    assert fork_point.parent_config["configurable"]["checkpoint_id"] == after_first.config["configurable"]["checkpoint_id"]
    # The old branch is still there, whole.
    old_head = graph.get_state(history[0].config)
    assert contents(old_head.values["messages"]) == ["a", "echo a", "b", "echo b", "c", "echo c"]
    # And continuing the old branch works too (its list grows from its own version).
    out = graph.invoke({"messages": [HumanMessage("d")]}, history[0].config)
    assert contents(out["messages"])[-2:] == ["d", "echo d"] and len(out["messages"]) == 8

    # list(): filter, before, limit.
    assert [t.metadata["source"] for t in saver.list(cfg(thread), filter={"source": "update"})] == ["update"]
    two = list(saver.list(cfg(thread), limit=2))
    assert len(two) == 2 and two[0].checkpoint["id"] > two[1].checkpoint["id"]
    before = list(saver.list(cfg(thread), before=two[0].config, limit=1))
    assert before[0].checkpoint["id"] == two[1].checkpoint["id"]


# --------------------------------------------------------------------------- subgraphs


class Outer(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def nested_graph(checkpointer: Any) -> Any:
    def research(state: Outer) -> dict[str, Any]:
        return {"notes": [f"found {state['topic']}"]}

    def review(state: Outer) -> dict[str, Any]:
        verdict = interrupt({"notes": state["notes"]})
        return {"notes": [f"review: {verdict}"]}

    sub = StateGraph(Outer)
    sub.add_node("research", research)
    sub.add_node("review", review)
    sub.add_edge(START, "research")
    sub.add_edge("research", "review")
    sub.add_edge("review", END)

    def publish(state: Outer) -> dict[str, Any]:
        return {"notes": ["published"]}

    builder = StateGraph(Outer)
    builder.add_node("team", sub.compile())
    builder.add_node("publish", publish)
    builder.add_edge(START, "team")
    builder.add_edge("team", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=checkpointer)


def test_subgraph_checkpoints_live_in_their_namespace(saver: StepwiseSaver) -> None:
    thread = new_thread("nested")
    graph = nested_graph(saver)
    out = graph.invoke({"topic": "tides", "notes": []}, cfg(thread))
    assert out["__interrupt__"][0].value == {"notes": ["found tides"]}

    state = graph.get_state(cfg(thread), subgraphs=True)
    assert state.next == ("team",)
    sub_state = state.tasks[0].state
    assert sub_state.values["notes"] == ["found tides"]
    sub_ns = sub_state.config["configurable"]["checkpoint_ns"]
    assert sub_ns.startswith("team:")

    namespaces = {t.config["configurable"]["checkpoint_ns"] for t in saver.list(cfg(thread))}
    assert namespaces == {"", sub_ns}
    root_only = list(saver.list(cfg(thread, checkpoint_ns="")))
    assert root_only and all(t.config["configurable"]["checkpoint_ns"] == "" for t in root_only)
    sub_only = list(saver.list(cfg(thread, checkpoint_ns=sub_ns)))
    assert sub_only and all(t.config["configurable"]["checkpoint_ns"] == sub_ns for t in sub_only)
    assert saver.get_tuple(cfg(thread, checkpoint_ns=sub_ns)).checkpoint["channel_values"]["notes"] == ["found tides"]

    final = graph.invoke(Command(resume="fine"), cfg(thread))
    assert final["notes"] == ["found tides", "review: fine", "published"]


# --------------------------------------------------------------------------- tenants


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


def test_two_tenants_with_the_same_thread_id_never_see_each_other(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_a, key_b = make_key(database, "acme"), make_key(database, "globex")
    with local_server(database=database) as srv:
        with StepwiseSaver(base_url=srv.url, api_key=key_a) as a, StepwiseSaver(base_url=srv.url, api_key=key_b) as b:
            graph_a, graph_b = echo_graph(a), echo_graph(b)
            graph_a.invoke({"messages": [HumanMessage("secret of acme")]}, cfg("shared"))
            assert b.get_tuple(cfg("shared")) is None
            assert list(b.list(cfg("shared"))) == []
            assert list(b.list(None)) == []

            graph_b.invoke({"messages": [HumanMessage("globex here")]}, cfg("shared"))
            assert contents(graph_a.get_state(cfg("shared")).values["messages"]) == ["secret of acme", "echo secret of acme"]
            assert contents(graph_b.get_state(cfg("shared")).values["messages"]) == ["globex here", "echo globex here"]
            assert {t.config["configurable"]["thread_id"] for t in a.list(None)} == {"shared"}
            a_ids = {t.checkpoint["id"] for t in a.list(cfg("shared"))}
            b_ids = {t.checkpoint["id"] for t in b.list(cfg("shared"))}
            assert a_ids and b_ids and not a_ids & b_ids

            # A checkpoint id of the other tenant is not found; deleting, copying and pruning stay inside.
            some_a = next(iter(a_ids))
            assert b.get_tuple(cfg("shared", checkpoint_id=some_a)) is None
            b.prune(["shared"], strategy="delete")
            b.copy_thread("shared", "copied")
            b.delete_thread("shared")
            assert {t.checkpoint["id"] for t in a.list(cfg("shared"))} == a_ids
            assert list(a.list(cfg("copied"))) == []
            assert list(b.list(cfg("shared"))) == []


# --------------------------------------------------------------------------- flat storage


class Counting(httpx.HTTPTransport):
    """Counts the request bytes of checkpoint puts."""

    def __init__(self) -> None:
        super().__init__()
        self.put_bytes: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PUT" and "/checkpoints/" in request.url.path and not request.url.path.endswith("/writes"):
            self.put_bytes.append(len(request.read()))
        return super().handle_request(request)


class Log(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: int


def log_graph(checkpointer: Any) -> Any:
    def work(state: Log) -> dict[str, Any]:
        n = state["turn"]
        return {"messages": [{"role": "assistant", "content": f"step {n} " + "lorem ipsum " * 80}]}

    builder = StateGraph(Log)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=checkpointer)


def test_flat_storage_bytes_per_put_stay_constant_as_the_thread_grows(server: LocalServer) -> None:
    thread = new_thread("flat")
    transport = Counting()
    with Stepwise(server.url, transport=transport) as client:
        saver = StepwiseSaver(client)
        graph = log_graph(saver)
        per_turn = []
        for turn in range(60):
            before = sum(transport.put_bytes)
            graph.invoke({"turn": turn}, cfg(thread))
            per_turn.append(sum(transport.put_bytes) - before)
        # Every turn sends about one ~1 KB message, at turn 60 as at turn 5 (the whole list
        # would be ~60 KB by then).
        assert max(per_turn[5:]) < min(per_turn[5:]) + 600, per_turn
        assert per_turn[-1] < 10_000, per_turn

        # What the server rebuilds is exactly the list, for a fresh saver without a cache too.
        expected = [{"role": "assistant", "content": f"step {n} " + "lorem ipsum " * 80} for n in range(60)]
        assert graph.get_state(cfg(thread)).values["messages"] == expected
        with StepwiseSaver(base_url=server.url) as fresh:
            assert log_graph(fresh).get_state(cfg(thread)).values["messages"] == expected
            # An older checkpoint of the thread gives its shorter list.
            old = [t for t in fresh.list(cfg(thread)) if len(t.checkpoint["channel_values"].get("messages", [])) == 30]
            assert old and old[0].checkpoint["channel_values"]["messages"] == expected[:30]

        # A restarted process reads the latest state, then appends again (no full resend).
        restarted = StepwiseSaver(client)
        before = sum(transport.put_bytes)
        log_graph(restarted).invoke({"turn": 60}, cfg(thread))
        assert sum(transport.put_bytes) - before < per_turn[-1] + 600


def _message_appends(client: Stepwise, thread: str) -> list[dict[str, Any]]:
    """The `messages` append blobs of a thread, as its session's export document has them."""
    session_id = client.request("GET", f"/v1/threads/{thread}")["session"]["id"]
    doc = client.request("GET", f"/v1/sessions/{session_id}/export")
    return [b for b in doc["thread"]["checkpoint_blobs"] if b["channel"] == "messages" and b["kind"] == "append"]


def _assert_mostly_references(appends: list[dict[str, Any]]) -> None:
    """Each turn appends one item: the node's pending write, referred to (read back as an item
    to splice). LangGraph sends a task's writes and the next checkpoint from two threads; when
    the writes' thread has not begun within the put's 20 ms wait for it (a very loaded
    machine), the saver cannot know the write is coming and sends the message as a value
    instead: correct, stored twice. So most turns, not all, are references."""
    assert all(len(b["items"]) == 1 for b in appends), appends
    spliced = sum(1 for b in appends if b["items"][0].get("splice"))
    assert spliced >= len(appends) * 3 // 4, (spliced, appends)


def test_a_nodes_output_is_stored_once_as_its_pending_write(server: LocalServer) -> None:
    """The items a node appends are its pending write: the next checkpoint refers to that
    write instead of storing them again (the export shows one item to splice per turn), and
    every reader, pruned or not, gets the same list back."""
    thread = new_thread("once")
    expected = [{"role": "assistant", "content": f"step {n} " + "lorem ipsum " * 80} for n in range(20)]
    with Stepwise(server.url) as client:
        graph = log_graph(StepwiseSaver(client))
        for turn in range(20):
            graph.invoke({"turn": turn}, cfg(thread))
        appends = _message_appends(client, thread)
        assert len(appends) == 19, appends
        _assert_mostly_references(appends)
        with StepwiseSaver(base_url=server.url) as fresh:
            assert log_graph(fresh).get_state(cfg(thread)).values["messages"] == expected
            old = [t for t in fresh.list(cfg(thread)) if len(t.checkpoint["channel_values"].get("messages", [])) == 10]
            assert old and old[0].checkpoint["channel_values"]["messages"] == expected[:10]
            # Pruning deletes the writes of the older checkpoints; the values stay.
            fresh.prune([thread])
        with StepwiseSaver(base_url=server.url) as fresh:
            assert log_graph(fresh).get_state(cfg(thread)).values["messages"] == expected
        assert graph.get_state(cfg(thread)).values["messages"] == expected


async def test_the_async_saver_refers_to_pending_writes_too(server: LocalServer) -> None:
    thread = new_thread("once-async")
    expected = [{"role": "assistant", "content": f"step {n} " + "lorem ipsum " * 80} for n in range(8)]
    async with AsyncStepwiseSaver(base_url=server.url) as saver:
        graph = log_graph(saver)
        for turn in range(8):
            await graph.ainvoke({"turn": turn}, cfg(thread))
        assert (await graph.aget_state(cfg(thread))).values["messages"] == expected
    with Stepwise(server.url) as client:
        appends = _message_appends(client, thread)
    assert len(appends) == 7, appends
    _assert_mostly_references(appends)
    with StepwiseSaver(base_url=server.url) as fresh:
        assert log_graph(fresh).get_state(cfg(thread)).values["messages"] == expected


def test_a_reference_to_a_write_stored_with_other_bytes_is_resent_as_items(server: LocalServer) -> None:
    """Another saver stored the same task's write first (the server keeps the first): the
    reference names other bytes, is refused, and the saver sends the new items instead."""
    thread = new_thread("clash")
    with StepwiseSaver(base_url=server.url) as a, StepwiseSaver(base_url=server.url) as b:
        first = empty_checkpoint()
        first["id"] = str(uuid6(clock_seq=1))
        v1 = a.get_next_version(None, None)
        first["channel_values"] = {"messages": [{"n": 0}]}
        first["channel_versions"] = {"messages": v1}
        conf = a.put(cfg(thread, checkpoint_ns=""), first, {"source": "loop", "step": 0}, {"messages": v1})
        b.put_writes(conf, [("messages", [{"n": "from b"}])], "task-1")
        mine = [{"n": 1}]
        a.put_writes(conf, [("messages", mine)], "task-1")  # kept: b's write was first
        second = empty_checkpoint()
        second["id"] = str(uuid6(clock_seq=2))
        v2 = a.get_next_version(v1, None)
        second["channel_values"] = {"messages": first["channel_values"]["messages"] + mine}
        second["channel_versions"] = {"messages": v2}
        a.put(conf, second, {"source": "loop", "step": 1}, {"messages": v2})
    with StepwiseSaver(base_url=server.url) as fresh:
        back = fresh.get_tuple(cfg(thread))
        assert back.checkpoint["channel_values"]["messages"] == [{"n": 0}, {"n": 1}]
        assert [w[2] for w in back.pending_writes] == []
    with Stepwise(server.url) as client:
        appends = _message_appends(client, thread)
    assert len(appends) == 1 and not appends[0]["items"][0].get("splice"), appends


def test_an_append_whose_base_is_gone_is_resent_whole(server: LocalServer) -> None:
    thread = new_thread("gone")
    with StepwiseSaver(base_url=server.url) as a, StepwiseSaver(base_url=server.url) as b:
        graph = log_graph(a)
        graph.invoke({"turn": 0}, cfg(thread))
        graph.invoke({"turn": 1}, cfg(thread))
        head = a.get_tuple(cfg(thread))
        version = head.checkpoint["channel_versions"]["messages"]
        b.delete_thread(thread)  # `a` still remembers the list it wrote last
        assert a.get_tuple(cfg(thread)) is None
        # A put whose list continues that one would be an append onto a blob that is gone.
        cp = dict(head.checkpoint)
        cp["id"] = str(uuid6(clock_seq=99))
        grown = head.checkpoint["channel_values"]["messages"] + [{"role": "user", "content": "more"}]
        cp["channel_values"] = {**head.checkpoint["channel_values"], "messages": grown}
        new_version = a.get_next_version(version, None)
        cp["channel_versions"] = {**head.checkpoint["channel_versions"], "messages": new_version}
        a.put(cfg(thread, checkpoint_ns=""), cp, {"source": "loop", "step": 9}, dict(cp["channel_versions"]))
        back = a.get_tuple(cfg(thread))
        assert back.checkpoint["id"] == cp["id"]
        assert back.checkpoint["channel_values"]["messages"] == grown


# --------------------------------------------------------------------------- conformance, sync and async


async def test_langgraph_conformance_suite(server: LocalServer) -> None:
    # langgraph-checkpoint-conformance==0.0.2; ci/langgraph_conformance.sh also runs it on PostgreSQL.
    conformance = pytest.importorskip("langgraph.checkpoint.conformance")
    checkpointer_test, validate = conformance.checkpointer_test, conformance.validate

    @checkpointer_test(name="AsyncStepwiseSaver")
    async def async_saver() -> Any:
        async with AsyncStepwiseSaver(base_url=server.url) as s:
            yield s

    @checkpointer_test(name="StepwiseSaver")
    async def sync_saver() -> Any:
        with StepwiseSaver(base_url=server.url) as s:
            yield s

    for registered in (async_saver, sync_saver):
        report = await validate(registered)
        failures = {k: r.failures for k, r in report.results.items() if r.passed is not True}
        assert not failures, failures
        assert all(r.detected for r in report.results.values()), report.to_dict()
        assert sum(r.tests_passed for r in report.results.values()) >= 80


def test_matches_in_memory_saver_on_the_same_graph(saver: StepwiseSaver) -> None:
    thread = new_thread("same")
    memory = InMemorySaver()
    results = []
    for checkpointer in (saver, memory):
        graph = agent_graph(checkpointer, AGENT_RESPONSES)
        graph.invoke({"messages": [HumanMessage("what is 2+3?")]}, cfg(thread))
        graph.invoke({"messages": [HumanMessage("and times 4?")]}, cfg(thread))
        history = list(graph.get_state_history(cfg(thread)))
        results.append(
            [(h.metadata["step"], h.metadata["source"], h.next, [m.content for m in h.values.get("messages", [])]) for h in history]
        )
    assert results[0] == results[1]


def test_messages_of_tool_results_reach_the_session(server: LocalServer, saver: StepwiseSaver) -> None:
    # A ToolMessage with an error status keeps its tool_call_id in the stored state.
    thread = new_thread("toolerr")
    graph = agent_graph(saver, [
        AIMessage("", tool_calls=[{"id": "call_x", "name": "add", "args": {"a": "two", "b": 3}}]),
        AIMessage("sorry"),
    ])
    out = graph.invoke({"messages": [HumanMessage("2+3 please")]}, cfg(thread))
    tool_msg = out["messages"][2]
    assert isinstance(tool_msg, ToolMessage) and tool_msg.tool_call_id == "call_x" and tool_msg.status == "error"
    assert graph.get_state(cfg(thread)).values["messages"][2] == tool_msg
    session = session_of(server.client, thread)["session"]
    calls = [tc["name"] for s in all_steps(server.client, session["id"]) for tc in s.get("tool_calls") or []]
    assert calls == ["add"]


def test_server_errors_are_stepwise_errors(saver: StepwiseSaver) -> None:
    assert saver._fast is not None  # the lean connection is in use for a plain http:// server
    graph = echo_graph(saver)
    with pytest.raises(StepwiseError) as info:
        graph.invoke({"messages": [HumanMessage("hi")]}, cfg("x" * 300))
    assert info.value.status == 400 and info.value.code == "invalid_request"
    with pytest.raises(StepwiseError) as info:
        saver.copy_thread(new_thread("nothing"), "")  # an empty target id
    assert info.value.status == 400
    assert saver.get_tuple(cfg(new_thread("missing"))) is None
    assert list(saver.list(cfg(new_thread("missing")))) == []
