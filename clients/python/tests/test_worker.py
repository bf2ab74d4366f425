"""`stepwise.worker` against a real `stepwise serve`, with workers as real processes
(``stepwise-worker`` / ``python -m stepwise.worker`` running an app of ``worker_apps/``):
answers, steps, live tokens, failures and retries, a lost worker's run taken over, a frozen
worker's writes refused, many sessions on two workers in order, pause and answer, cancel,
graceful shutdown, a server that goes away, and hostile requests."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from typing import Any, Iterator

import httpx
import pytest

from stepwise import Stepwise, StepwiseError
from stepwise.testing import LocalServer, local_server
from stepwise.worker import Cancelled, Retry, Run, Worker

from _worker_support import (  # noqa: F401 - start_worker is a fixture
    LEASE_S,
    PATIENCE,
    TESTS,
    make_key,
    short_lease_server,
    start_worker,
    steps_of,
    wait_for,
    wait_status,
    worker_script,
)

BASIC = "worker_apps.basic:worker"


@pytest.fixture(scope="module")
def wserver() -> Iterator[LocalServer]:
    """A server with a short lease for this module's tests."""
    with short_lease_server() as running:
        yield running


@pytest.fixture
def client(wserver: LocalServer) -> Iterator[Stepwise]:
    with Stepwise(wserver.url) as c:
        yield c


def send(client: Stepwise, text: str, agent: str | dict[str, Any], session_id: str | None = None) -> dict[str, Any]:
    """Posts a message for `agent` (in a new session unless one is given); its execution."""
    if session_id is None:
        answer = client.send_message(text, agent=agent, session={"name": f"w-{uuid.uuid4().hex[:12]}"})
    else:
        answer = client.post_message(session_id, text, agent=agent)
    return answer["execution"]


def raw(server: LocalServer, method: str, path: str, body: Any = None, *, lease: str | None = None,
        api_key: str | None = None) -> httpx.Response:
    headers = {}
    if lease is not None:
        headers["Stepwise-Lease"] = lease
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.request(method, server.url + path, json=body, headers=headers, timeout=40)


def error_code(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def claim_raw(server: LocalServer, agent: str, *, worker_id: str = "raw-1", slots: int = 1, wait_s: float = 10,
              api_key: str | None = None) -> list[dict[str, Any]]:
    response = raw(server, "POST", "/v1/workers/claim",
                   {"worker_id": worker_id, "agents": [{"type": agent}], "slots": slots, "wait_s": wait_s},
                   api_key=api_key)
    assert response.status_code == 200, response.text
    return response.json()["items"]


# --- answering ------------------------------------------------------------------------------


def test_the_console_script_runs_a_worker_that_answers(wserver, client, start_worker):
    worker = start_worker(wserver, BASIC, script=True)
    execution = send(client, "Ada", "greeter")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "Hello, Ada"
    (step,) = steps_of(client, execution["id"])
    assert (step["step_number"], step["kind"], step["model_output"], step["observations"]) == (
        1, "action", "Greeting the user", "said hello"
    )
    messages = list(client.list_messages(done["session_id"], roles=["assistant"]))
    assert messages[-1]["content"] == "Hello, Ada"
    agents = {a["type"]: a for a in client.list_agents()["items"]}
    assert agents["greeter"]["builtin"] is False
    assert agents["greeter"]["description"] == "Says hello"
    assert agents["greeter"]["workers_online"] >= 1
    assert worker.stop() == 0


def test_a_module_that_runs_its_own_worker_stops_cleanly_under_the_command(wserver, client, start_worker):
    # worker.run() at the end of the module: importing it runs the worker; SIGTERM stops it,
    # and the command then exits 0 instead of starting the stopped worker again.
    worker = start_worker(wserver, "worker_apps.selfrun:worker", script=True)
    execution = send(client, "Ada", "selfrun")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed" and done["output"] == "hello, Ada", done
    assert worker.stop() == 0, worker.log()[-3000:]
    assert "before start()" not in worker.log()


def test_python_dash_m_and_an_async_agent_and_a_json_answer(wserver, client, start_worker):
    start_worker(wserver, BASIC)
    execution = send(client, "Bob", "async-greeter")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == {"greeting": "Hello, Bob", "attempt": 1}
    assert [s["model_output"] for s in steps_of(client, execution["id"])] == ["async step"]


def test_an_in_process_worker_starts_and_stops(wserver, client):
    seen: list[Run] = []
    worker = Worker(Stepwise(wserver.url), concurrency=2, wait_s=1)
    agent_type = f"inproc-{uuid.uuid4().hex[:8]}"

    @worker.agent(agent_type)
    def echo(run: Run) -> str:
        seen.append(run)
        run.step(model_output="echo", tool_calls=[{"id": "t1", "name": "echo", "arguments": {"text": run.input_text}}])
        return run.input_text.upper()

    with worker:
        first = send(client, "one", agent_type)
        assert client.wait(first["id"], timeout=PATIENCE)["output"] == "ONE"
        second = send(client, "two", agent_type, session_id=first["session_id"])
        assert client.wait(second["id"], timeout=PATIENCE)["output"] == "TWO"
    assert worker.stopped
    run = seen[-1]
    assert (run.execution_id, run.session_id, run.attempt, run.input_text) == (second["id"], first["session_id"], 1, "two")
    assert run.input == {"message": "two"}
    assert run.answer is None and not run.cancelled
    # The session's memory before the second message holds the first one's step.
    assert [s["model_output"] for s in run.memory["steps"] if s["execution_id"] == first["id"]] == ["echo"]
    assert [s["step_number"] for s in run.steps] == [1]


def test_a_started_worker_is_known_at_once_and_offline_at_once_when_stopped(wserver, client):
    agent_type = f"presence-{uuid.uuid4().hex[:8]}"

    def online() -> int | None:
        for agent in client.list_agents()["items"]:
            if agent["type"] == agent_type:
                return agent["workers_online"]
        return None

    # Never announced: a message naming it is refused, with the reason and what to do.
    with pytest.raises(StepwiseError) as refused:
        client.send_message("hi", agent=agent_type)
    assert (refused.value.status, refused.value.code) == (422, "unknown_agent")
    assert "agent.wait" in str(refused.value)
    assert online() is None

    worker = Worker(Stepwise(wserver.url), wait_s=1)
    worker.add_agent(agent_type, lambda run: run.input_text)
    worker.start()
    try:
        # start() returns once the server knows the worker: a message may name it at once.
        assert online() == 1
        answer = client.send_message("hi", agent=agent_type)
        assert client.wait(answer["execution"]["id"], timeout=PATIENCE)["output"] == "hi"
        # A misspelling names the type it resembles.
        with pytest.raises(StepwiseError) as misspelled:
            client.send_message("hi", agent=agent_type + "s")
        assert misspelled.value.code == "unknown_agent"
        assert f"did you mean {agent_type}?" in str(misspelled.value)
    finally:
        assert worker.stop(timeout=PATIENCE)
    # Offline at once after a clean stop; its type stays known, so messages still queue.
    assert online() == 0
    queued = client.send_message("later", agent=agent_type)["execution"]
    assert queued["status"] == "pending"
    # agent.wait queues a type no worker announced (yet).
    waiting = client.send_message("later", agent={"type": agent_type + "-next", "wait": True})["execution"]
    assert waiting["status"] == "pending"
    for execution in (queued, waiting):
        client.cancel_execution(execution["id"])


def test_an_agent_posts_info_and_notification_lines_to_its_session(wserver, client):
    agent_type = f"informer-{uuid.uuid4().hex[:8]}"
    worker = Worker(Stepwise(wserver.url), wait_s=1)

    @worker.agent(agent_type)
    def informer(run: Run) -> str:
        stored = run.info("Searching the docs…")
        assert stored is not None and stored["role"] == "info"
        run.step(model_output="searched")
        run.info("Your report is ready", notification=True)
        with pytest.raises(ValueError):
            run.info("  ")
        return "found it"

    with worker:
        execution = send(client, "find it", agent_type)
        assert client.wait(execution["id"], timeout=PATIENCE)["output"] == "found it"
    lines = [(m["role"], m["content"]) for m in client.list_messages(execution["session_id"])
             if m.get("execution_id") == execution["id"]]
    assert ("info", "Searching the docs…") in lines
    assert ("notification", "Your report is ready") in lines
    assert lines.index(("info", "Searching the docs…")) < lines.index(("notification", "Your report is ready"))


def test_an_agent_sees_the_page_a_message_came_from(wserver, client):
    agent_type = f"support-{uuid.uuid4().hex[:8]}"
    contexts: list[Any] = []
    worker = Worker(Stepwise(wserver.url), wait_s=1)

    @worker.agent(agent_type)
    def support(run: Run) -> str:
        contexts.append(run.context)
        return "on its way"

    with worker:
        sent = client.send_message("where is my parcel?", agent=agent_type, related_type="order", related_id="42",
                                   context_url="https://shop.example/orders/42", metadata={"plan": "pro"})
        assert client.wait(sent["execution"]["id"], timeout=PATIENCE)["output"] == "on its way"
        plain = client.post_message(sent["session_id"], "thanks", agent=agent_type)
        client.wait(plain["execution"]["id"], timeout=PATIENCE)
    assert contexts == [
        {"related_type": "order", "related_id": "42", "context_url": "https://shop.example/orders/42",
         "metadata": {"plan": "pro"}},
        None,
    ]


def test_live_tokens_reach_the_session_stream(wserver, client, start_worker):
    start_worker(wserver, BASIC)
    first = send(client, "warm up", "greeter")
    session_id = first["session_id"]
    events: list[Any] = []
    listening = threading.Event()
    done = threading.Event()

    def listen() -> None:
        with Stepwise(wserver.url) as own:
            for event in own.events(session_id):
                events.append(event)
                if event.type == "execution.completed" and event.execution_id == first["id"]:
                    listening.set()
                if event.type == "execution.completed" and listening.is_set() and event.execution_id != first["id"]:
                    done.set()
                    return

    threading.Thread(target=listen, daemon=True).start()
    assert listening.wait(PATIENCE), "the event stream never showed the first answer"
    streamed = send(client, "go", "streamer", session_id=session_id)
    assert done.wait(PATIENCE)
    deltas = [e for e in events if e.type == "message.delta" and e.execution_id == streamed["id"]]
    assert "".join(e.data.get("content") or "" for e in deltas) == "Hello there"
    assert all(e.id is None for e in deltas)
    assert client.get_execution(streamed["id"])["output"] == "Hello there"


def test_an_exception_fails_the_execution_and_retry_requeues_it(wserver, client, start_worker):
    start_worker(wserver, BASIC)
    failed = client.wait(send(client, "x", "failing")["id"], timeout=PATIENCE)
    assert failed["status"] == "failed"
    assert failed["error_message"].startswith("ValueError: boom")
    assert "second line" not in failed["error_message"]
    retried = client.wait(send(client, "x", "flaky")["id"], timeout=PATIENCE)
    assert retried["status"] == "completed", retried
    assert retried["output"] == "ok on attempt 2"


def test_a_subagent_runs_on_a_worker_and_its_answer_comes_back(wserver, client, start_worker):
    start_worker(wserver, BASIC)
    parent = client.wait(send(client, "x", "parent")["id"], timeout=PATIENCE)
    assert parent["status"] == "completed", parent
    assert parent["output"] == "sub: Hello, child"
    children = [e for e in client.list_executions(parent["session_id"]) if e["parent_execution_id"] == parent["id"]]
    assert [(c["agent_type"], c["status"], c["output"]) for c in children] == [("greeter", "completed", "Hello, child")]


# --- lost and frozen workers ------------------------------------------------------------------


def test_a_killed_worker_s_run_is_taken_over_from_its_last_step(wserver, client, start_worker, tmp_path):
    (tmp_path / "crash-at-3").touch()
    first = start_worker(wserver, BASIC, name="a")
    execution = send(client, "steps:10", "counter")
    assert first.wait_exit() == -signal.SIGKILL, first.log()[-3000:]
    assert [s["step_number"] for s in steps_of(client, execution["id"])] == [1, 2]

    second = start_worker(wserver, BASIC, name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == {"steps": 10, "attempt": 2}
    steps = steps_of(client, execution["id"])
    assert [s["step_number"] for s in steps] == list(range(1, 11))
    assert [s["model_output"] for s in steps] == [f"step {n}" for n in range(1, 11)]
    assert [s["observations"] for s in steps] == ["attempt 1"] * 2 + ["attempt 2"] * 8
    assert "attempt 2" in second.log()
    infos = [m["content"] for m in client.list_messages(done["session_id"], roles=["info"])]
    assert any("Worker lost" in text for text in infos), infos


def test_a_frozen_worker_s_writes_are_refused_after_another_finished(wserver, client, start_worker, tmp_path):
    frozen = start_worker(wserver, BASIC, name="a")
    execution = send(client, "steps:3 gate", "counter")
    wait_for(lambda: len(steps_of(client, execution["id"])) == 1, "step 1")
    frozen.signal(signal.SIGSTOP)  # past its lease: it cannot renew it

    (tmp_path / "gate-2").touch()
    other = start_worker(wserver, BASIC, name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == {"steps": 3, "attempt": 2}
    other.stop()

    (tmp_path / "gate-1").touch()
    frozen.signal(signal.SIGCONT)  # it wakes up, holding a lease that is no longer current
    outcome_file = tmp_path / f"{execution['id']}-1.json"
    wait_for(outcome_file.exists, "the frozen attempt to end")
    outcome = json.loads(outcome_file.read_text())
    assert outcome == {"cancelled": True, "reason": "lease_lost", "wrote": [1]}
    steps = steps_of(client, execution["id"])
    assert [(s["step_number"], s["observations"]) for s in steps] == [
        (1, "attempt 1"), (2, "attempt 2"), (3, "attempt 2")
    ]
    assert client.get_execution(execution["id"])["output"] == {"steps": 3, "attempt": 2}
    assert frozen.stop() == 0


def test_two_workers_run_each_execution_once_one_at_a_time_per_session_in_order(
    wserver, client, start_worker, tmp_path
):
    workers = [start_worker(wserver, BASIC, name=n) for n in ("a", "b")]
    sessions = [client.create_session(name=f"order-{uuid.uuid4().hex[:10]}")["id"] for _ in range(20)]
    posted: dict[str, list[str]] = defaultdict(list)
    for round_ in range(3):
        for index, session_id in enumerate(sessions):
            execution = send(client, f"s{index}-m{round_}", "recorder", session_id=session_id)
            posted[session_id].append(execution["id"])
    for session_id, ids in posted.items():
        for eid in ids:
            done = client.wait(eid, timeout=PATIENCE)
            assert done["status"] == "completed", done
    lines = [line.split() for line in (tmp_path / "order.log").read_text().splitlines()]
    starts = [eid for what, _, _, eid in lines if what == "start"]
    assert sorted(starts) == sorted(eid for ids in posted.values() for eid in ids)  # each ran once
    for session_id, ids in posted.items():
        mine = [(what, eid) for what, sid, _, eid in lines if sid == session_id]
        # Never two at once, and in the order the messages came.
        assert mine == [(what, eid) for eid in ids for what in ("start", "end")], mine
    for worker in workers:
        assert worker.stop() == 0


# --- the user -------------------------------------------------------------------------------


def test_questions_pause_and_the_answers_resume(wserver, client, start_worker):
    start_worker(wserver, BASIC)
    execution = send(client, "hi", "asker")
    paused = client.wait(execution["id"], timeout=PATIENCE)
    assert paused["status"] == "paused", paused
    session_id = execution["session_id"]
    assert client.post_message(session_id, "Ada")["execution"]["id"] == execution["id"]
    wait_for(lambda: len(steps_of(client, execution["id"])) == 3, "the second question")
    again = wait_status(client, execution["id"], "paused", "completed", "failed")
    assert again["status"] == "paused", again
    client.post_message(session_id, "Paris")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == "Hi Ada from Paris"
    steps = steps_of(client, execution["id"])
    assert [s["kind"] for s in steps] == ["user_input"] * 4
    assert [s["step_number"] for s in steps] == [1, 2, 3, 4]
    questions = [s["model_output"] for s in steps if (s.get("output") or {}).get("question")]
    assert questions == ["What is your name?", "Where do you live, Ada?"]


def test_cancel_reaches_the_running_agent(wserver, client, start_worker, tmp_path):
    start_worker(wserver, BASIC)
    execution = send(client, "x", "sleeper")
    wait_for(lambda: steps_of(client, execution["id"]), "the agent to start")
    client.cancel_execution(execution["id"])
    marker = tmp_path / f"{execution['id']}.cancelled"
    wait_for(marker.exists, "the agent to see the cancel")
    assert client.get_execution(execution["id"])["status"] == "cancelled"
    assert len(steps_of(client, execution["id"])) == 1


def test_a_stopping_worker_hands_its_runs_back_without_spending_an_attempt(wserver, client, start_worker):
    first = start_worker(wserver, BASIC, name="a")
    execution = send(client, "x", "resumable")
    wait_for(lambda: steps_of(client, execution["id"]), "the agent to start")
    assert first.stop() == 0
    assert "handed back to the queue" in first.log()
    assert client.get_execution(execution["id"])["status"] == "pending"
    start_worker(wserver, BASIC, name="b")
    done = client.wait(execution["id"], timeout=PATIENCE)
    assert done["status"] == "completed", done
    assert done["output"] == {"attempt": 1, "steps": 1}


def test_a_second_signal_exits_at_once(wserver, client, start_worker):
    worker = start_worker(wserver, BASIC)
    execution = send(client, "x", "stubborn")
    wait_for(lambda: steps_of(client, execution["id"]), "the agent to start")
    worker.signal(signal.SIGTERM)  # the agent ignores it: the worker waits for it to stop
    worker.wait_log("stopping")
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 128 + signal.SIGTERM
    assert "exiting at once" in worker.log()
    client.cancel_execution(execution["id"])  # so that no later test's worker gets it


# --- the server -----------------------------------------------------------------------------


def test_the_worker_waits_for_a_server_that_went_away(start_worker, tmp_path):
    with short_lease_server() as server:
        worker = start_worker(server, BASIC)
        worker.wait_log("serving")
        server.stop()
        worker.wait_log("cannot claim")
        server.restart()
        with Stepwise(server.url) as c:
            done = c.wait(send(c, "again", "greeter")["id"], timeout=PATIENCE)
        assert done["output"] == "Hello, again"
        worker.wait_log("reconnected")
        assert worker.stop() == 0


# --- hostile requests -----------------------------------------------------------------------


def test_bad_claims_are_refused(wserver):
    def claim(body: dict[str, Any]) -> httpx.Response:
        return raw(wserver, "POST", "/v1/workers/claim", {"worker_id": "w1", "agents": [{"type": "x1"}],
                                                           "slots": 1, "wait_s": 0, **body})

    for body in (
        {"slots": 10_000},
        {"slots": -1},
        {"wait_s": 26},
        {"worker_id": "has space"},
        {"worker_id": ""},
        {"agents": []},
        {"agents": [{"type": "bad name!"}]},
    ):
        response = claim(body)
        assert response.status_code == 400, (body, response.text)
        assert error_code(response) == "invalid_request", response.text
    # A well-formed name the server keeps for its own agent: not for a worker.
    response = claim({"agents": [{"type": "demo"}]})
    assert response.status_code == 422, response.text
    assert error_code(response) == "invalid_state", response.text


def test_forged_missing_and_superseded_leases_write_nothing(wserver, client):
    agent = f"raw-{uuid.uuid4().hex[:8]}"
    # Queued before any worker of the type has called: the message says it may wait.
    execution = send(client, "x", {"type": agent, "wait": True})
    eid = execution["id"]
    (claim,) = claim_raw(wserver, agent, worker_id="raw-a")
    assert claim["execution"]["id"] == eid and claim["attempt"] == 1
    step = {"step_number": 1, "kind": "action", "model_output": "forged"}
    for lease in ("forged", None, "lease_" + "0" * 32):
        response = raw(wserver, "POST", f"/v1/executions/{eid}/steps", step, lease=lease)
        assert response.status_code == 409, response.text
        assert error_code(response) == "lease_lost"
    for malformed in ("", "x" * 129):  # not a lease token at all: a plain 400
        response = raw(wserver, "POST", f"/v1/executions/{eid}/steps", step, lease=malformed)
        assert response.status_code in (400, 409), response.text
    response = raw(wserver, "POST", f"/v1/executions/{eid}/heartbeat", {"lease": "forged"})
    assert (response.status_code, error_code(response)) == (409, "lease_lost")
    for path, body in (("complete", {"output": "forged"}), ("fail", {"error_message": "forged"}),
                       ("pause", {"question": "forged?"}), ("deltas", {"text": "forged"})):
        response = raw(wserver, "POST", f"/v1/executions/{eid}/{path}", body, lease="forged")
        assert (response.status_code, error_code(response)) == (409, "lease_lost"), (path, response.text)
    assert steps_of(client, eid) == []
    assert client.get_execution(eid)["status"] == "running"

    # The lease runs out and another worker takes the execution over: the first lease is dead.
    (takeover,) = wait_for(lambda: claim_raw(wserver, agent, worker_id="raw-b", wait_s=1), "the takeover")
    assert takeover["execution"]["id"] == eid and takeover["attempt"] == 2
    stale = raw(wserver, "POST", f"/v1/executions/{eid}/steps", step, lease=claim["lease"])
    assert (stale.status_code, error_code(stale)) == (409, "lease_lost")
    assert raw(wserver, "POST", f"/v1/executions/{eid}/heartbeat", {"lease": claim["lease"]}).status_code == 409
    assert steps_of(client, eid) == []
    good = raw(wserver, "POST", f"/v1/executions/{eid}/steps", dict(step, model_output="real"), lease=takeover["lease"])
    assert good.status_code == 201, good.text
    done = raw(wserver, "POST", f"/v1/executions/{eid}/complete", {"output": "ok"}, lease=takeover["lease"])
    assert done.status_code == 200, done.text
    assert [s["model_output"] for s in steps_of(client, eid)] == ["real"]

    # A finished execution: its lease is no longer current for anything.
    beat = raw(wserver, "POST", f"/v1/executions/{eid}/heartbeat", {"lease": takeover["lease"]})
    assert (beat.status_code, error_code(beat)) == (409, "lease_lost")
    late = raw(wserver, "POST", f"/v1/executions/{eid}/steps", dict(step, step_number=2), lease=takeover["lease"])
    assert (late.status_code, error_code(late)) == (409, "lease_lost")
    release = raw(wserver, "POST", f"/v1/executions/{eid}/release", {}, lease=takeover["lease"])
    assert release.status_code == 409, release.text
    assert client.get_execution(eid)["status"] == "completed"
    assert len(steps_of(client, eid)) == 1


def test_another_tenant_never_sees_or_writes_an_execution(tmp_path):
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_a, key_b = make_key(database, "acme"), make_key(database, "globex")
    with local_server(database=database, args=["--lease-secs", str(LEASE_S)]) as server:
        with Stepwise(server.url, api_key=key_a) as a:
            execution = send(a, "secret of acme", {"type": "shared-type", "wait": True})
            eid = execution["id"]
            # Tenant B's worker for the same agent type is not given A's execution.
            assert claim_raw(server, "shared-type", worker_id="b-1", wait_s=0, api_key=key_b) == []
            answer = raw(server, "POST", "/v1/workers/claim",
                         {"worker_id": "a-1", "agents": [{"type": "shared-type"}, {"type": "acme-only"}],
                          "slots": 1, "wait_s": 10}, api_key=key_a)
            assert answer.status_code == 200, answer.text
            (claim,) = answer.json()["items"]
            lease = claim["lease"]
            for path, body in (("steps", {"step_number": 1, "model_output": "from b"}),
                               ("complete", {"output": "from b"}), ("deltas", {"text": "from b"}),
                               ("heartbeat", {"lease": lease}), ("release", {})):
                response = raw(server, "POST", f"/v1/executions/{eid}/{path}", body, lease=lease, api_key=key_b)
                assert response.status_code == 404, (path, response.text)
                assert error_code(response) == "not_found"
            assert raw(server, "GET", f"/v1/executions/{eid}", api_key=key_b).status_code == 404
            no_key = raw(server, "POST", "/v1/workers/claim",
                         {"worker_id": "x", "agents": [{"type": "shared-type"}], "slots": 1, "wait_s": 0})
            assert no_key.status_code == 401, no_key.text
            assert steps_of(a, eid) == []
            assert a.get_execution(eid)["status"] == "running"
            mine = raw(server, "POST", f"/v1/executions/{eid}/steps", {"step_number": 1, "model_output": "from a"},
                       lease=lease, api_key=key_a)
            assert mine.status_code == 201, mine.text
            agents_b = [x["type"] for x in raw(server, "GET", "/v1/agents", api_key=key_b).json()["items"]]
            assert "acme-only" not in agents_b
            agents_a = [x["type"] for x in raw(server, "GET", "/v1/agents", api_key=key_a).json()["items"]]
            assert "acme-only" in agents_a


def test_a_worker_with_a_wrong_key_stops_with_an_error(tmp_path, start_worker):
    database = f"sqlite://{tmp_path / 'keys.db'}"
    make_key(database, "acme")
    with local_server(database=database) as server:
        worker = start_worker(server, BASIC, api_key="not-a-key")
        assert worker.wait_exit() == 1
        assert "401" in worker.log() or "unauthorized" in worker.log()


# --- the command line -----------------------------------------------------------------------


def test_the_command_line_explains_itself_and_its_mistakes():
    command = worker_script()
    base = [command] if command else [sys.executable, "-m", "stepwise.worker"]
    shown = subprocess.run([*base, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0
    for word in ("MODULE:ATTRIBUTE", "--url", "--api-key", "--concurrency", "STEPWISE_URL", "STEPWISE_API_KEY"):
        assert word in shown.stdout
    for target, expected in (("no_such_module_here:worker", "cannot import"), ("json:dumps", "not a stepwise.worker.Worker"),
                             ("json", "MODULE:ATTRIBUTE"), ("worker_apps.basic:nothing", "has no attribute")):
        failed = subprocess.run([*base, target], capture_output=True, text=True, timeout=60, cwd=TESTS)
        assert failed.returncode != 0
        assert expected in failed.stderr, failed.stderr
    bad = subprocess.run([*base, BASIC, "--concurrency", "0"], capture_output=True, text=True, timeout=60, cwd=TESTS)
    assert bad.returncode == 2 and "concurrency" in bad.stderr


def test_worker_arguments_are_checked():
    client = Stepwise("http://127.0.0.1:9")
    with pytest.raises(ValueError):
        Worker(client, concurrency=0)
    with pytest.raises(ValueError):
        Worker(client, concurrency=257)
    with pytest.raises(ValueError):
        Worker(client, worker_id="no spaces")
    with pytest.raises(ValueError):
        Worker(client, wait_s=30)
    worker = Worker(client)
    with pytest.raises(ValueError):
        worker.add_agent("bad name", lambda run: None)
    worker.add_agent("ok", lambda run: None)
    with pytest.raises(ValueError):
        worker.add_agent("ok", lambda run: None)
    with pytest.raises(RuntimeError):
        Worker(client).start()  # no agents
    assert issubclass(Cancelled, BaseException) and not issubclass(Cancelled, Exception)
    assert issubclass(Retry, Exception)
