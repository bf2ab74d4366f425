"""LangGraph's own SDK (`langgraph_sdk`, pinned) against a real `stepwise serve` at
``/langgraph``: assistants are the graphs a real worker process serves
(``worker_apps/lgapi.py``), threads are sessions, runs are executions the worker runs. The
flows are those of LangGraph's docs: streaming in each mode, wait, background runs joined
later, an interrupt and its resume, multitask strategies, a fork from a past checkpoint,
stateless runs, and a worker killed mid-run whose run another worker finishes with its
stream still joinable.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

pytest.importorskip("langgraph.graph")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

from langgraph_sdk import get_sync_client  # noqa: E402

from stepwise import Stepwise  # noqa: E402
from stepwise.testing import LocalServer, find_binary, local_server  # noqa: E402

from _worker_support import PATIENCE, short_lease_server, start_worker, wait_for  # noqa: E402,F401

APP = "worker_apps.lgapi:worker"


def postgres_database() -> str:
    """A new PostgreSQL database on $STEPWISE_TEST_POSTGRES_URL's server (skips without one)."""
    base = os.environ.get("STEPWISE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    name = f"lgapi_{uuid.uuid4().hex[:12]}"
    made = subprocess.run(["psql", base, "-qc", f"CREATE DATABASE {name}"], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"no PostgreSQL at {base}: {made.stderr.strip()[:200]}")
    return urlunsplit(urlsplit(base)._replace(path=f"/{name}"))


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lserver(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    """The server, on a fresh SQLite file and on a fresh PostgreSQL database."""
    database = postgres_database() if request.param == "postgres" else None
    with short_lease_server(database=database) as running:
        yield running


@pytest.fixture
def lg(lserver: LocalServer) -> Iterator[Any]:
    client = get_sync_client(url=f"{lserver.url}/langgraph", api_key=None, timeout=PATIENCE)
    yield client


@pytest.fixture
def served(lserver: LocalServer, start_worker: Any, lg: Any) -> Any:
    """A worker serving the graphs, once it has announced them as assistants."""
    worker = start_worker(lserver, APP)
    wait_for(lambda: len(lg.assistants.search(limit=100)) >= 5, "the worker to announce its graphs")
    return worker


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values.get("messages", [])]


# --- assistants -------------------------------------------------------------------------------


def test_assistants_are_the_graphs_the_worker_serves(lg: Any, served: Any) -> None:
    found = {a["graph_id"]: a for a in lg.assistants.search(limit=100)}
    assert {"chat", "approve", "counter", "relay"} <= set(found)
    chat = found["chat"]
    # LangGraph's id of a graph's own assistant.
    assert chat["assistant_id"] == str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), "chat"))
    assert lg.assistants.get(chat["assistant_id"])["graph_id"] == "chat"
    assert lg.assistants.get("chat")["assistant_id"] == chat["assistant_id"]
    schemas = lg.assistants.get_schemas("counter")
    assert "count" in schemas["input_schema"]["properties"]
    graph = lg.assistants.get_graph("approve")
    assert {"draft", "review"} <= {n["id"] for n in graph["nodes"]}
    assert lg.assistants.search(graph_id="relay", limit=10)[0]["graph_id"] == "relay"
    with pytest.raises(httpx.HTTPStatusError) as missing:
        lg.assistants.get(str(uuid.uuid4()))
    assert missing.value.response.status_code == 404


def test_an_assistant_of_ones_own_runs_its_graph_with_its_config_and_keeps_versions(lg: Any, served: Any) -> None:
    made = lg.assistants.create(
        "chat", config={"configurable": {"prefix": "Bonjour"}}, metadata={"team": "fr"}, name="French chat"
    )
    aid = made["assistant_id"]
    assert uuid.UUID(aid) and made["graph_id"] == "chat" and made["version"] == 1
    assert made["name"] == "French chat" and made["metadata"] == {"team": "fr"}
    assert lg.assistants.get(aid) == made
    # A run of it runs its graph with its config; the run's own config goes over it.
    tid = lg.threads.create()["thread_id"]
    assert texts(lg.runs.wait(tid, aid, input=human("salut")))[-1] == "Bonjour: salut"
    hola = lg.runs.wait(tid, aid, input=human("amigo"), config={"configurable": {"prefix": "Hola"}})
    assert texts(hola)[-1] == "Hola: amigo"
    assert lg.runs.list(tid)[0]["assistant_id"] == aid
    # The graph's own assistant is unchanged.
    assert texts(lg.runs.wait(tid, "chat", input=human("hi")))[-1] == "Echo: hi"
    # Found by graph, name and metadata, beside the graph's own.
    assert aid in [a["assistant_id"] for a in lg.assistants.search(metadata={"team": "fr"})]
    by_graph = [a["assistant_id"] for a in lg.assistants.search(graph_id="chat", limit=100)]
    assert aid in by_graph and lg.assistants.get("chat")["assistant_id"] in by_graph
    assert [a["assistant_id"] for a in lg.assistants.search(name="french", limit=100)] == [aid]
    assert lg.assistants.get_schemas(aid)["graph_id"] == "chat"
    # Each change is a version; an older one can be made the assistant again.
    changed = lg.assistants.update(aid, config={"configurable": {"prefix": "Ciao"}}, metadata={"lang": "it"})
    assert changed["version"] == 2 and changed["metadata"] == {"team": "fr", "lang": "it"}
    assert texts(lg.runs.wait(tid, aid, input=human("tutti")))[-1] == "Ciao: tutti"
    assert [v["version"] for v in lg.assistants.get_versions(aid)] == [2, 1]
    assert lg.assistants.set_latest(aid, 1)["config"] == {"configurable": {"prefix": "Bonjour"}}
    assert lg.assistants.get(aid)["version"] == 1
    # Made again with the same id: 409, or the existing one with if_exists="do_nothing".
    with pytest.raises(httpx.HTTPStatusError) as taken:
        lg.assistants.create("chat", assistant_id=aid)
    assert taken.value.response.status_code == 409
    assert lg.assistants.create("chat", assistant_id=aid, if_exists="do_nothing")["version"] == 1
    with pytest.raises(httpx.HTTPStatusError) as no_graph:
        lg.assistants.create("no-such-graph")
    assert no_graph.value.response.status_code == 404
    lg.assistants.delete(aid)
    with pytest.raises(httpx.HTTPStatusError) as gone:
        lg.assistants.get(aid)
    assert gone.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as kept:
        lg.assistants.delete("chat")  # the graph's own: its worker serves it
    assert kept.value.response.status_code == 409


# --- threads ----------------------------------------------------------------------------------


def test_threads_are_created_found_updated_and_deleted(lg: Any) -> None:
    mine = str(uuid.uuid4())
    tag = uuid.uuid4().hex
    thread = lg.threads.create(thread_id=mine, metadata={"tag": tag})
    assert (thread["thread_id"], thread["status"], thread["metadata"]) == (mine, "idle", {"tag": tag})
    with pytest.raises(httpx.HTTPStatusError) as taken:
        lg.threads.create(thread_id=mine)
    assert taken.value.response.status_code == 409
    assert lg.threads.create(thread_id=mine, if_exists="do_nothing")["thread_id"] == mine
    other = lg.threads.create(metadata={"tag": tag, "n": 2})
    found = lg.threads.search(metadata={"tag": tag}, limit=10)
    assert {t["thread_id"] for t in found} == {mine, other["thread_id"]}
    assert [t["thread_id"] for t in lg.threads.search(metadata={"tag": tag, "n": 2})] == [other["thread_id"]]
    updated = lg.threads.update(mine, metadata={"more": True})
    assert updated["metadata"] == {"tag": tag, "more": True}
    assert lg.threads.get(mine)["metadata"]["more"] is True
    lg.threads.delete(mine)
    with pytest.raises(httpx.HTTPStatusError) as gone:
        lg.threads.get(mine)
    assert gone.value.response.status_code == 404
    assert lg.threads.get(other["thread_id"])["thread_id"] == other["thread_id"]


# --- runs -------------------------------------------------------------------------------------


def test_stream_values_and_updates_then_the_same_stream_joined_again(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    parts = list(
        lg.runs.stream(thread["thread_id"], "chat", input=human("hello"), stream_mode=["values", "updates"])
    )
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    events = [p.event for p in parts[1:]]
    assert "values" in events and "updates" in events
    updates = [p.data for p in parts if p.event == "updates"]
    assert [list(u) for u in updates] == [["model"]]
    last_values = [p.data for p in parts if p.event == "values"][-1]
    assert texts(last_values) == ["hello", "Echo: hello"]
    assert lg.runs.get(thread["thread_id"], run_id)["status"] == "success"
    assert lg.threads.get(thread["thread_id"])["values"]["messages"][-1]["content"] == "Echo: hello"

    # The run's stream again, after it ended: the same stored chunks, in order.
    again = list(lg.runs.join_stream(thread["thread_id"], run_id, stream_mode=["values", "updates"]))
    assert [(p.event, p.data) for p in again if p.event != "metadata"] == [
        (p.event, p.data) for p in parts[1:]
    ]
    # From a Last-Event-ID on, only what came after it.
    first_id = next(p.id for p in parts if p.event == "values")
    rest = list(lg.runs.join_stream(thread["thread_id"], run_id, stream_mode=["values", "updates"], last_event_id=first_id))
    assert [p.data for p in rest] == [p.data for p in parts[1:] if p.id and int(p.id) > int(first_id)]


def test_messages_tuple_streams_the_models_tokens(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    parts = list(lg.runs.stream(thread["thread_id"], "chat", input=human("one two three"), stream_mode="messages-tuple"))
    tokens = [p.data[0]["content"] for p in parts if p.event == "messages"]
    assert "".join(tokens) == "Echo: one two three"
    assert all(p.data[0]["type"] == "AIMessageChunk" for p in parts if p.event == "messages")


def test_a_runs_stream_comes_in_langgraphs_order_with_the_ids_its_messages_keep(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    modes = ["values", "messages-tuple", "updates"]
    parts = list(lg.runs.stream(tid, "chat", input=human("red green blue"), stream_mode=modes))
    run_id = parts[0].data["run_id"]
    events = [p.event for p in parts]
    # The input's values first, then the model's tokens, then the node's update and values.
    assert events[1] == "values" and texts(parts[1].data) == ["red green blue"]
    tokens = [p.data for p in parts if p.event == "messages"]
    assert "".join(m["content"] for m, _ in tokens) == "Echo: red green blue"
    last_token = max(i for i, e in enumerate(events) if e == "messages")
    assert last_token < events.index("updates")
    # A token's message is the message the state keeps: same id; its metadata the node's.
    final = [p.data for p in parts if p.event == "values"][-1]["messages"][-1]
    assert {m["id"] for m, _ in tokens} == {final["id"]}
    assert all(meta["langgraph_node"] == "model" for _, meta in tokens)
    # Streamed live or joined later, the stored chunks have the same ids.
    stored = [(p.id, p.event, p.data) for p in parts if p.event in ("values", "updates")]
    assert all(i is not None for i, _, _ in stored)
    again = list(lg.runs.join_stream(tid, run_id, stream_mode=["values", "updates"]))
    assert [(p.id, p.event, p.data) for p in again if p.event != "metadata"] == stored


def test_messages_mode_streams_partial_messages_and_events_mode_the_graphs_events(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    parts = list(lg.runs.stream(tid, "chat", input=human("a b c"), stream_mode="messages"))
    events = [p.event for p in parts]
    assert events[1] == "messages/metadata"
    [(message_id, described)] = parts[1].data.items()
    assert described["metadata"]["langgraph_node"] == "model"
    partials = [p.data[0] for p in parts if p.event == "messages/partial"]
    assert partials and {m["id"] for m in partials} == {message_id}
    assert partials[-1]["content"] == "Echo: a b c"
    assert [len(m["content"]) for m in partials] == sorted(len(m["content"]) for m in partials)

    parts = list(lg.runs.stream(tid, "chat", input=human("x y"), stream_mode=["events", "values"]))
    named = [p.data["event"] for p in parts if p.event == "events"]
    assert named and named[0] == "on_chain_start" and named[-1] == "on_chain_end"
    streamed = [p.data["data"]["chunk"]["content"] for p in parts
                if p.event == "events" and p.data["event"] == "on_chat_model_stream"]
    assert "".join(streamed) == "Echo: x y"
    assert texts([p.data for p in parts if p.event == "values"][-1])[-2:] == ["x y", "Echo: x y"]


def test_an_interrupt_reaches_a_values_only_stream(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    parts = list(lg.runs.stream(tid, "approve", input=human("the plan"), stream_mode="values"))
    assert {p.event for p in parts} == {"metadata", "values"}
    [interrupted] = [p.data for p in parts if "__interrupt__" in p.data]
    assert interrupted["__interrupt__"][0]["value"] == {"question": "Approve the draft?"}
    assert parts[-1].data == interrupted


def test_wait_answers_the_final_values_and_a_stateless_run_works_too(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    values = lg.runs.wait(thread["thread_id"], "counter", input={"count": 1})
    assert values == {"count": 12, "log": ["first", "second"]}
    again = lg.runs.wait(thread["thread_id"], "counter", input={"count": 100})
    assert again["count"] == 111 and again["log"] == ["first", "second", "first", "second"]
    stateless = lg.runs.wait(None, "counter", input={"count": 5})
    assert stateless == {"count": 16, "log": ["first", "second"]}


def test_a_background_run_is_joined_later_and_listed(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    run = lg.runs.create(thread["thread_id"], "chat", input=human("later"), metadata={"origin": "test"})
    assert run["status"] in ("pending", "running", "success")
    assert run["thread_id"] == thread["thread_id"]
    values = lg.runs.join(thread["thread_id"], run["run_id"])
    assert texts(values)[-1] == "Echo: later"
    listed = lg.runs.list(thread["thread_id"])
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    assert listed[0]["status"] == "success" and listed[0]["metadata"] == {"origin": "test"}
    assert listed[0]["kwargs"]["input"] == human("later")
    # Joined with no mode named (the SDK then sends an empty `stream_mode`): the run's own.
    streamed = lg.runs.create(thread["thread_id"], "chat", input=human("again"), stream_mode=["values", "updates"])
    events = [p.event for p in lg.runs.join_stream(thread["thread_id"], streamed["run_id"])]
    assert events[0] == "metadata" and {"values", "updates"} <= set(events), events


def test_a_join_whose_client_leaves_cancels_the_run_only_when_asked(lserver: LocalServer, lg: Any, served: Any) -> None:
    url = f"{lserver.url}/langgraph"
    for cancel, status in ((True, "interrupted"), (False, "success")):
        tid = lg.threads.create()["thread_id"]
        run = lg.runs.create(tid, "relay", input=human("slow"))
        query = "?cancel_on_disconnect=1" if cancel else ""
        with pytest.raises(httpx.TimeoutException):
            httpx.get(f"{url}/threads/{tid}/runs/{run['run_id']}/join{query}", timeout=0.5)
        wait_for(lambda: lg.runs.get(tid, run["run_id"])["status"] == status, f"the run to end {status}")
    # The same for a wait with on_disconnect: cancel.
    tid = lg.threads.create()["thread_id"]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{url}/threads/{tid}/runs/wait",
            json={"assistant_id": "relay", "input": human("slow"), "on_disconnect": "cancel"},
            timeout=0.5,
        )
    wait_for(lambda: lg.runs.list(tid)[0]["status"] == "interrupted", "the waited-for run to be cancelled")
    # A run's stream joined by its id alone (the JS SDK's `joinStream(null, runId)`).
    done = lg.runs.create(tid, "counter", input={"count": 1}, stream_mode=["values"])
    lg.runs.join(tid, done["run_id"])
    again = httpx.get(f"{url}/runs/{done['run_id']}/stream", timeout=PATIENCE)
    events = [line.removeprefix("event: ") for line in again.text.splitlines() if line.startswith("event: ")]
    assert again.status_code == 200 and events[0] == "metadata" and "values" in events, again.text


def test_threads_are_found_by_their_values_and_history_goes_back_from_a_checkpoint_id(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    lg.runs.wait(tid, "counter", input={"count": 1})
    lg.runs.wait(tid, "counter", input={"count": 1000})
    found = [t["thread_id"] for t in lg.threads.search(values={"count": 1011}, limit=100)]
    assert found == [tid]
    assert lg.threads.search(values={"count": -1}, limit=100) == []
    history = lg.threads.get_history(tid, limit=10)
    assert len(history) == 2
    older = lg.threads.get_history(tid, before=history[0]["checkpoint"]["checkpoint_id"])
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == [history[1]["checkpoint"]["checkpoint_id"]]


def test_a_breakpoint_leaves_the_thread_interrupted_and_its_state_is_read_at_its_checkpoint(
    lg: Any, served: Any
) -> None:
    tid = lg.threads.create()["thread_id"]
    values = lg.runs.wait(tid, "counter", input={"count": 1}, interrupt_before=["second"])
    assert values == {"count": 2, "log": ["first"]}
    # Nodes still to run: the thread waits to go on, as LangGraph's server says.
    assert lg.threads.get(tid)["status"] == "interrupted"
    assert [t["thread_id"] for t in lg.threads.search(status="interrupted", limit=100)].count(tid) == 1
    state = lg.threads.get_state(tid)
    assert state["next"] == ["second"]
    checkpoint_id = state["checkpoint"]["checkpoint_id"]
    # The state at a checkpoint, by id and by the checkpoint's config.
    assert lg.threads.get_state(tid, checkpoint_id=checkpoint_id) == state
    assert lg.threads.get_state(tid, checkpoint={"checkpoint_id": checkpoint_id})["values"] == values
    with pytest.raises(httpx.HTTPStatusError) as missing:
        lg.threads.get_state(tid, checkpoint_id=str(uuid.uuid4()))
    assert missing.value.response.status_code == 404
    # Going on (no input) runs the rest; the thread is idle again.
    assert lg.runs.wait(tid, "counter", input=None) == {"count": 12, "log": ["first", "second"]}
    assert lg.threads.get(tid)["status"] == "idle"
    assert lg.threads.get_state(tid, checkpoint_id=checkpoint_id)["next"] == ["second"]


def test_a_failed_runs_error_names_the_exception(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    failed = lg.runs.wait(tid, "chat", input=human("raise: the model is down"), raise_error=False)
    assert failed["__error__"] == {"error": "RuntimeError", "message": "the model is down"}
    assert lg.threads.get(tid)["status"] == "error"


def test_an_interrupt_pauses_the_thread_and_a_resume_command_finishes_it(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    tid = thread["thread_id"]
    paused = lg.runs.wait(tid, "approve", input=human("the plan"))
    assert paused["__interrupt__"][0]["value"] == {"question": "Approve the draft?"}
    assert lg.threads.get(tid)["status"] == "interrupted"
    state = lg.threads.get_state(tid)
    assert state["next"] == ["review"]
    assert state["tasks"][0]["interrupts"][0]["value"] == {"question": "Approve the draft?"}
    assert texts(state["values"]) == ["the plan", "Draft for: the plan"]
    assert state["checkpoint"]["thread_id"] == tid and state["checkpoint"]["checkpoint_id"]

    # The resume value is any JSON, given to the graph as it was sent.
    parts = list(lg.runs.stream(tid, "approve", command={"resume": {"ok": True}}, stream_mode="values"))
    final = [p.data for p in parts if p.event == "values"][-1]
    assert texts(final)[-1] == "Reviewed: {'ok': True}"
    assert lg.threads.get(tid)["status"] == "idle"
    history = lg.threads.get_history(tid, limit=10)
    assert len(history) >= 2
    assert history[0]["next"] == [] and history[-1]["next"] == ["review"]


def test_a_resume_command_with_an_update_applies_both(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    assert "__interrupt__" in lg.runs.wait(tid, "approve", input=human("p4"))
    update = {"messages": [{"role": "user", "content": "extra"}]}
    done = lg.runs.wait(tid, "approve", command={"resume": "u", "update": update})
    assert texts(done) == ["p4", "Draft for: p4", "extra", "Reviewed: u"]


def test_new_input_on_an_interrupted_thread_starts_a_new_run_from_it(lg: Any, served: Any) -> None:
    tid = lg.threads.create()["thread_id"]
    first = lg.runs.create(tid, "approve", input=human("the plan"))
    assert "__interrupt__" in lg.runs.join(tid, first["run_id"])
    # As LangGraph: the input goes into the state and the graph runs again from the start
    # (it is not the interrupt's answer, which only a command gives).
    again = lg.runs.wait(tid, "approve", input=human("never mind"))
    assert texts(again) == ["the plan", "Draft for: the plan", "never mind", "Draft for: never mind"]
    assert again["__interrupt__"][0]["value"] == {"question": "Approve the draft?"}
    runs = lg.runs.list(tid)
    assert len(runs) == 2 and runs[1]["run_id"] == first["run_id"]
    assert runs[1]["status"] == "interrupted" and runs[0]["status"] == "interrupted"
    assert lg.threads.get(tid)["status"] == "interrupted"


def test_multitask_reject_refuses_while_a_run_is_queued_and_enqueue_queues(lg: Any) -> None:
    # No worker serves this graph: its runs stay queued.
    thread = lg.threads.create()
    tid = thread["thread_id"]
    first = lg.runs.create(tid, "nobody-serves-this", input={"x": 1})
    assert first["status"] == "pending"
    with pytest.raises(httpx.HTTPStatusError) as busy:
        lg.runs.create(tid, "nobody-serves-this", input={"x": 2}, multitask_strategy="reject")
    assert busy.value.response.status_code == 409
    second = lg.runs.create(tid, "nobody-serves-this", input={"x": 3}, multitask_strategy="enqueue")
    assert lg.threads.get(tid)["status"] == "busy"
    # `interrupt` cancels the queued ones and the new run goes next; both are kept.
    third = lg.runs.create(tid, "nobody-serves-this", input={"x": 4}, multitask_strategy="interrupt")
    statuses = {r["run_id"]: r["status"] for r in lg.runs.list(tid, limit=10)}
    assert statuses[first["run_id"]] == "interrupted" and statuses[second["run_id"]] == "interrupted"
    assert statuses[third["run_id"]] == "pending"
    # `rollback` removes them.
    fourth = lg.runs.create(tid, "nobody-serves-this", input={"x": 5}, multitask_strategy="rollback")
    left = {r["run_id"] for r in lg.runs.list(tid, limit=10)}
    assert third["run_id"] not in left and fourth["run_id"] in left
    lg.runs.cancel(tid, fourth["run_id"], wait=True)
    assert lg.runs.get(tid, fourth["run_id"])["status"] == "interrupted"
    lg.runs.delete(tid, fourth["run_id"])
    with pytest.raises(httpx.HTTPStatusError) as gone:
        lg.runs.get(tid, fourth["run_id"])
    assert gone.value.response.status_code == 404


def test_runs_cancelled_by_id_or_status_and_threads_pruned(lg: Any) -> None:
    # No worker serves this graph: its runs stay queued.
    tid = lg.threads.create()["thread_id"]
    first = lg.runs.create(tid, "nobody-serves-this", input={"x": 1})
    second = lg.runs.create(tid, "nobody-serves-this", input={"x": 2}, multitask_strategy="enqueue")
    lg.runs.cancel_many(thread_id=tid, run_ids=[first["run_id"], second["run_id"]])
    assert {r["status"] for r in lg.runs.list(tid, limit=10)} == {"interrupted"}
    other = lg.threads.create()["thread_id"]
    pending = lg.runs.create(other, "nobody-serves-this", input={"x": 3})
    lg.runs.cancel_many(status="pending")
    assert lg.runs.get(other, pending["run_id"])["status"] == "interrupted"
    rolled = lg.runs.create(other, "nobody-serves-this", input={"x": 4}, multitask_strategy="enqueue")
    lg.runs.cancel_many(thread_id=other, run_ids=[rolled["run_id"]], action="rollback")
    with pytest.raises(httpx.HTTPStatusError) as removed:
        lg.runs.get(other, rolled["run_id"])
    assert removed.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as unnamed:
        lg.runs.cancel_many()
    assert unnamed.value.response.status_code == 400

    # Pruned threads are gone; ids that name no thread are not counted.
    assert lg.threads.prune([tid, other, str(uuid.uuid4())]) == {"pruned_count": 2}
    for gone in (tid, other):
        with pytest.raises(httpx.HTTPStatusError) as missing:
            lg.threads.get(gone)
        assert missing.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as keep_latest:
        lg.threads.prune([lg.threads.create()["thread_id"]], strategy="keep_latest")
    assert keep_latest.value.response.status_code == 400


def test_a_batch_of_stateless_runs_each_on_its_own_thread(lg: Any, served: Any) -> None:
    made = lg.runs.create_batch([
        {"assistant_id": "counter", "input": {"count": 1}},
        {"assistant_id": "counter", "input": {"count": 2}},
    ])
    assert len(made) == 2 and made[0]["thread_id"] != made[1]["thread_id"]
    counts = [lg.runs.join(r["thread_id"], r["run_id"])["count"] for r in made]
    assert counts == [12, 13]


def test_a_run_from_a_past_checkpoint_forks_the_thread(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    tid = thread["thread_id"]
    lg.runs.wait(tid, "counter", input={"count": 1})
    after_first = lg.threads.get_state(tid)
    assert after_first["values"]["count"] == 12
    # Run again from the checkpoint the first run started from: the second run's input
    # replaces nothing that came after it.
    lg.runs.wait(tid, "counter", input={"count": 1000})
    forked = lg.runs.wait(tid, "counter", input={"count": 0}, checkpoint_id=after_first["checkpoint"]["checkpoint_id"])
    assert forked["count"] == 11 and forked["log"] == ["first", "second", "first", "second"]


def test_a_worker_killed_mid_run_another_finishes_and_the_stream_is_joinable(
    lserver: LocalServer, start_worker: Any, lg: Any, tmp_path: Path
) -> None:
    (tmp_path / "crash-in-b").write_text("once")
    first = start_worker(lserver, APP, name="first")
    wait_for(lambda: len(lg.assistants.search(graph_id="relay")) == 1, "the relay graph")
    thread = lg.threads.create()
    run = lg.runs.create(thread["thread_id"], "relay", input=human("go"))
    assert first.wait_exit() != 0  # killed itself in node b
    start_worker(lserver, APP, name="second")
    values = lg.runs.join(thread["thread_id"], run["run_id"])
    assert texts(values) == ["go", "a done", "b done", "c done"]
    parts = list(lg.runs.join_stream(thread["thread_id"], run["run_id"], stream_mode="updates"))
    nodes = [list(p.data)[0] for p in parts if p.event == "updates"]
    assert nodes == ["a", "b", "c"]


# --- users ------------------------------------------------------------------------------------


def make_key(database: str, tenant: str, user: str, role: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", user, "--role", role],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


def refused(*calls: Any) -> list[int]:
    """The HTTP status each call was refused with (0 for one that was not refused)."""
    statuses = []
    for call in calls:
        try:
            call()
        except httpx.HTTPStatusError as error:
            statuses.append(error.response.status_code)
        else:
            statuses.append(0)
    return statuses


def test_a_users_threads_are_its_own(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'users.db'}"
    admin_key = make_key(database, "acme", "ops", "admin")
    other_admin = make_key(database, "other", "ops", "admin")
    with local_server(database=database) as server:
        with Stepwise(server.url, api_key=admin_key) as admin:
            alice_key = admin.keys.create("alice", role="user")["key"]
            bob_key = admin.keys.create("bob", role="user")["key"]
            worker_key = admin.keys.create("runner", role="worker")["key"]
        alice = get_sync_client(url=f"{server.url}/langgraph", api_key=alice_key)
        bob = get_sync_client(url=f"{server.url}/langgraph", api_key=bob_key)
        thread = alice.threads.create(metadata={"who": "alice"})
        tid = thread["thread_id"]
        run = alice.runs.create(tid, "nobody-serves-this", input={"x": 1})
        # The owner gets each path; another user of the tenant gets 404 on the same paths.
        assert alice.threads.get(tid)["thread_id"] == tid
        assert alice.threads.get_state(tid)["checkpoint"]["thread_id"] == tid
        assert alice.runs.get(tid, run["run_id"])["run_id"] == run["run_id"]
        assert [t["thread_id"] for t in alice.threads.search(metadata={"who": "alice"})] == [tid]
        assert refused(
            lambda: bob.threads.get(tid),
            lambda: bob.threads.get_state(tid),
            lambda: bob.runs.get(tid, run["run_id"]),
            lambda: bob.runs.create(tid, "nobody-serves-this", input={"x": 2}),
            lambda: bob.threads.delete(tid),
        ) == [404] * 5
        assert bob.threads.search(metadata={"who": "alice"}) == []
        # Nor can bob take alice's thread id: not as a thread of his own (409), nor by writing
        # the first checkpoint of it (404), which would put her graph's checkpoints in his
        # thread. Alice writes there (201).
        assert refused(lambda: bob.threads.create(thread_id=tid)) == [409]
        # A run's stream by its id alone: the owner's (200), not another user's (404).
        joined = f"{server.url}/langgraph/runs/{run['run_id']}/stream"
        with httpx.stream("GET", joined, headers={"Authorization": f"Bearer {alice_key}"}, timeout=PATIENCE) as r:
            assert r.status_code == 200
        assert httpx.get(joined, headers={"Authorization": f"Bearer {bob_key}"}, timeout=PATIENCE).status_code == 404
        assert refused(lambda: bob.threads.get_state(tid, checkpoint_id=str(uuid.uuid4()))) == [404]
        checkpoint = {
            "checkpoint_ns": "",
            "parent_checkpoint_id": None,
            "checkpoint": {"type": "json", "data": "eyJ2IjoxfQ=="},
            "metadata": {"source": "input", "step": -1},
            "channel_versions": {},
            "blobs": [],
        }
        put = f"{server.url}/v1/threads/{tid}/checkpoints/cp-1"
        squat = httpx.put(put, json=checkpoint, headers={"Authorization": f"Bearer {bob_key}"}, timeout=PATIENCE)
        assert squat.status_code == 404, squat.text
        owned = httpx.put(put, json=checkpoint, headers={"Authorization": f"Bearer {alice_key}"}, timeout=PATIENCE)
        assert owned.status_code == 201, owned.text
        # Assistants are the tenant's: an admin makes one, a user finds and runs it but
        # cannot make or change one.
        lg_admin = get_sync_client(url=f"{server.url}/langgraph", api_key=admin_key)
        # (As a worker announces its graph.)
        lg_admin.store.put_item(["stepwise", "assistants"], "nobody-serves-this", {"graph_id": "nobody-serves-this"})
        aid = lg_admin.assistants.create("nobody-serves-this", name="shared")["assistant_id"]
        assert alice.assistants.get(aid)["name"] == "shared"
        assert alice.runs.create(alice.threads.create()["thread_id"], aid, input={"x": 3})["assistant_id"] == aid
        assert refused(
            lambda: alice.assistants.create("nobody-serves-this"),
            lambda: alice.assistants.update(aid, name="mine"),
            lambda: alice.assistants.delete(aid),
        ) == [403] * 3
        # Another tenant's admin: 404 on the same paths (the owner's 200s are above).
        stranger = get_sync_client(url=f"{server.url}/langgraph", api_key=other_admin)
        assert refused(
            lambda: stranger.threads.get(tid),
            lambda: stranger.runs.get(tid, run["run_id"]),
            lambda: stranger.runs.create(tid, "nobody-serves-this", input={"x": 5}),
            lambda: stranger.assistants.get(aid),
        ) == [404] * 4
        assert stranger.threads.search(limit=100) == [] and stranger.assistants.search(name="shared") == []
        # A worker key reaches the store and the assistants, not threads or runs (403, as
        # sessions are on /v1).
        worker = get_sync_client(url=f"{server.url}/langgraph", api_key=worker_key)
        worker.store.put_item(["w"], key="k", value={"ok": True})
        assert worker.assistants.get(aid)["assistant_id"] == aid
        assert refused(
            lambda: worker.threads.create(),
            lambda: worker.threads.get(tid),
            lambda: worker.runs.create(tid, aid, input={"x": 6}),
            lambda: worker.threads.search(),
        ) == [403] * 4
        # Without a key: 401.
        anonymous = get_sync_client(url=f"{server.url}/langgraph", api_key=None)
        with pytest.raises(httpx.HTTPStatusError) as unauthorized:
            anonymous.threads.get(tid)
        assert unauthorized.value.response.status_code == 401


def test_update_state_is_written_by_the_graphs_worker(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    tid = thread["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        lg.threads.update_state(tid, {"count": 1})
    assert unknown.value.response.status_code == 422  # no run yet: no graph to write it
    lg.runs.wait(tid, "counter", input={"count": 1})
    before = lg.threads.get_state(tid)
    written = lg.threads.update_state(tid, {"count": 500, "log": ["edited"]}, as_node="second")
    assert written["checkpoint"]["thread_id"] == tid
    assert written["checkpoint"]["checkpoint_id"] not in (None, before["checkpoint"]["checkpoint_id"])
    after = lg.threads.get_state(tid)
    assert after["values"] == {"count": 500, "log": ["first", "second", "edited"]}
    assert after["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
    # The update is a checkpoint, not a run.
    assert len(lg.runs.list(tid)) == 1


def test_a_copied_thread_goes_on_from_the_original_which_stays_as_it_was(lg: Any, served: Any) -> None:
    original = lg.threads.create(metadata={"kind": "original"})
    tid = original["thread_id"]
    lg.runs.wait(tid, "counter", input={"count": 1})
    copy = lg.threads.copy(tid)
    assert copy["thread_id"] != tid
    assert copy["metadata"] == {"kind": "original"}
    assert lg.threads.get_state(copy["thread_id"])["values"] == {"count": 12, "log": ["first", "second"]}
    went_on = lg.runs.wait(copy["thread_id"], "counter", input={"count": 0})
    assert went_on["log"] == ["first", "second", "first", "second"]
    assert lg.threads.get_state(tid)["values"] == {"count": 12, "log": ["first", "second"]}


def test_custom_chunks_and_a_subgraphs_chunks_with_its_namespace(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    parts = list(lg.runs.stream(thread["thread_id"], "counter", input={"count": 1}, stream_mode="custom"))
    assert [(p.event, p.data) for p in parts[1:]] == [("custom", {"progress": "first"})]
    parts = list(
        lg.runs.stream(None, "outer", input={"count": 1}, stream_mode="updates", stream_subgraphs=True)
    )
    events = [p.event for p in parts if p.event != "metadata"]
    nested = [e for e in events if e.startswith("updates|nested:")]
    assert len(nested) == 2 and events[-1] == "updates"
    assert [list(p.data)[0] for p in parts if p.event in nested] == ["first", "second"]
    # Without `stream_subgraphs`, only the parent graph's.
    plain = [p.event for p in lg.runs.stream(None, "outer", input={"count": 1}, stream_mode="updates")]
    assert plain == ["metadata", "updates"]


def test_the_async_client_streams_waits_and_joins(lserver: LocalServer, served: Any) -> None:
    from langgraph_sdk import get_client

    async def flow() -> None:
        client = get_client(url=f"{lserver.url}/langgraph", api_key=None, timeout=PATIENCE)
        thread = await client.threads.create()
        tid = thread["thread_id"]
        parts = [p async for p in client.runs.stream(tid, "chat", input=human("async"), stream_mode="values")]
        assert parts[0].event == "metadata"
        assert texts(parts[-1].data) == ["async", "Echo: async"]
        run = await client.runs.create(tid, "chat", input=human("again"))
        joined = await client.runs.join(tid, run["run_id"])
        assert texts(joined)[-1] == "Echo: again"
        state = await client.threads.get_state(tid)
        assert len(state["values"]["messages"]) == 4
        assert [t["thread_id"] for t in await client.threads.search(ids=[tid])] == [tid]

    import asyncio

    asyncio.run(flow())


def test_an_interrupt_answered_in_stepwise_resumes_the_graph(lserver: LocalServer, lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    tid = thread["thread_id"]
    run = lg.runs.create(tid, "approve", input=human("the memo"))
    lg.runs.join(tid, run["run_id"])
    with Stepwise(lserver.url) as stepwise:
        # The same execution, paused, in Stepwise's own API (what its UI shows and answers).
        execution = stepwise.get_execution(run["run_id"])
        assert execution["status"] == "paused"
        stepwise.post_message(execution["session_id"], "from the UI")
        assert stepwise.wait(run["run_id"], timeout=PATIENCE)["status"] == "completed"
    assert texts(lg.threads.get_state(tid)["values"])[-1] == "Reviewed: from the UI"
    assert lg.runs.get(tid, run["run_id"])["status"] == "success"


def test_if_not_exists_creates_the_thread_and_on_disconnect_cancels_the_run(lg: Any) -> None:
    mine = str(uuid.uuid4())
    with pytest.raises(httpx.HTTPStatusError) as missing:
        lg.runs.create(mine, "nobody-serves-this", input={"x": 1})
    assert missing.value.response.status_code == 404
    run = lg.runs.create(mine, "nobody-serves-this", input={"x": 1}, if_not_exists="create")
    assert lg.threads.get(mine)["status"] == "busy"
    lg.runs.cancel(mine, run["run_id"], wait=True)
    # A streamed run whose client leaves is cancelled with `on_disconnect: cancel`.
    stream = lg.runs.stream(mine, "nobody-serves-this", input={"x": 2}, on_disconnect="cancel")
    first = next(stream)
    assert first.event == "metadata"
    stream.close()
    left = first.data["run_id"]
    wait_for(lambda: lg.runs.get(mine, left)["status"] == "interrupted", "the left run to be cancelled")


def test_a_run_on_one_node_is_streamed_and_joined_on_another(start_worker: Any) -> None:
    """Two nodes on one PostgreSQL database: the worker serves node one, the client streams a
    run through node two and joins it again there."""
    database = postgres_database()
    with short_lease_server(database=database) as one, short_lease_server(database=database) as two:
        start_worker(one, APP, name="node-one")
        client = get_sync_client(url=f"{two.url}/langgraph", api_key=None, timeout=PATIENCE)
        wait_for(lambda: len(client.assistants.search(graph_id="counter")) == 1, "the counter graph")
        thread = client.threads.create()
        parts = list(client.runs.stream(thread["thread_id"], "counter", input={"count": 1}, stream_mode="updates"))
        assert [list(p.data)[0] for p in parts if p.event == "updates"] == ["first", "second"]
        run_id = parts[0].data["run_id"]
        other = get_sync_client(url=f"{one.url}/langgraph", api_key=None, timeout=PATIENCE)
        again = list(other.runs.join_stream(thread["thread_id"], run_id, stream_mode="updates"))
        assert [(p.event, p.data) for p in again[1:]] == [(p.event, p.data) for p in parts[1:]]


def test_checkpoints_and_tasks_modes_when_the_run_asks_for_them(lg: Any, served: Any) -> None:
    thread = lg.threads.create()
    parts = list(lg.runs.stream(thread["thread_id"], "counter", input={"count": 1}, stream_mode=["checkpoints", "tasks"]))
    events = {p.event for p in parts}
    assert events == {"metadata", "checkpoints", "tasks"}
    checkpoints = [p.data for p in parts if p.event == "checkpoints"]
    assert checkpoints[-1]["values"] == {"count": 12, "log": ["first", "second"]}
    assert {t["name"] for t in (p.data for p in parts if p.event == "tasks")} >= {"first", "second"}
