"""The sync client against a real server (and, for retries, against counted transports)."""

from __future__ import annotations

import inspect
import json
import re
import socket
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx
import pytest

import stepwise
from stepwise import AsyncStepwise, Stepwise, StepwiseError
from stepwise._transport.retry import RetryPolicy, retry_after_seconds
from stepwise.testing import LocalServer, local_server

PYTHON_DIR = Path(__file__).resolve().parents[1]
REPO = PYTHON_DIR.parents[1]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --- package --------------------------------------------------------------------------


def test_version_is_the_workspace_version() -> None:
    def version_in(text: str, table: str) -> str:
        # The `version = "..."` line of one TOML table (tomllib is Python 3.11+).
        section = re.search(rf"^\[{re.escape(table)}\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
        assert section, table
        found = re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
        assert found, table
        return found.group(1)

    workspace_version = version_in((REPO / "Cargo.toml").read_text(), "workspace.package")
    assert version_in((PYTHON_DIR / "pyproject.toml").read_text(), "project") == workspace_version
    assert stepwise.__version__ == workspace_version


def test_both_clients_have_the_same_documented_methods() -> None:
    def public(cls: type) -> set[str]:
        return {n for n, v in inspect.getmembers(cls) if callable(v) and not n.startswith("_")}

    sync_methods = public(Stepwise)
    async_methods = public(AsyncStepwise)
    assert sync_methods - {"close"} <= async_methods
    for name in sync_methods | async_methods:
        for cls in (Stepwise, AsyncStepwise):
            method = getattr(cls, name, None)
            if method is not None:
                assert inspect.getdoc(method), f"{cls.__name__}.{name} has no docstring"
    assert (PYTHON_DIR / "src" / "stepwise" / "py.typed").is_file()


# --- operations and sessions ----------------------------------------------------------


def test_health_and_ready(client: Stepwise) -> None:
    assert client.health()["status"] == "ok"
    assert client.ready()["status"] == "ready"


def test_session_crud(client: Stepwise) -> None:
    name = unique("crud")
    created = client.create_session(
        name=name,
        title="Support #42",
        related_type="ticket",
        related_id="42",
        metadata={"team": "a"},
    )
    assert created["name"] == name
    assert created["status"] == "active"
    assert created["metadata"] == {"team": "a"}

    fetched = client.get_session(created["id"])
    assert fetched["id"] == created["id"]
    assert fetched["title"] == "Support #42"

    updated = client.update_session(created["id"], title="Renamed", status="completed")
    assert (updated["title"], updated["status"]) == ("Renamed", "completed")
    # Fields left out stay as they were.
    assert client.update_session(created["id"], metadata={"team": "b"})["title"] == "Renamed"

    listed = list(client.list_sessions(related_type="ticket", related_id="42"))
    assert created["id"] in [s["id"] for s in listed]
    assert [s["id"] for s in client.list_sessions(name=name)] == [created["id"]]

    assert client.delete_session(created["id"]) is None
    assert client.get_session(created["id"])["status"] == "deleted"
    assert created["id"] not in [s["id"] for s in client.list_sessions()]
    assert created["id"] in [s["id"] for s in client.list_sessions(status="deleted")]
    assert client.find_session(name) is None


def test_find_session_and_session_by_name_or_id(client: Stepwise) -> None:
    name = unique("named")
    assert client.find_session(name) is None

    made = client.session(name, title="made on first use")
    assert made["name"] == name
    assert made["title"] == "made on first use"
    # The second call finds it instead of creating another one.
    assert client.session(name)["id"] == made["id"]
    assert client.session(made["id"])["id"] == made["id"]
    assert client.find_session(name)["id"] == made["id"]  # type: ignore[index]

    # A completed session is still found by name.
    client.update_session(made["id"], status="completed")
    assert client.find_session(name)["id"] == made["id"]  # type: ignore[index]

    with pytest.raises(TypeError):
        client.session(unique("x"), bogus=1)


def test_list_methods_follow_cursors(client: Stepwise) -> None:
    related_id = unique("page")
    ids = {client.create_session(related_type="pagination", related_id=related_id)["id"] for _ in range(7)}
    # Seven sessions at two a page: four requests, each item once, newest first.
    listed = list(client.list_sessions(related_type="pagination", related_id=related_id, page_size=2))
    assert [s["id"] for s in listed] == sorted(ids, reverse=True) or {s["id"] for s in listed} == ids
    assert len(listed) == 7

    session = client.create_session()
    execution = client.open_execution(session["id"], input="pages")
    for n in range(1, 6):
        client.append_step(execution["id"], {"kind": "action", "model_output": f"step {n}"}, step_number=n)
    steps = list(client.list_steps(execution["id"], page_size=2))
    assert [s["step_number"] for s in steps] == [1, 2, 3, 4, 5]
    for n in range(3):
        client.save_snapshot(execution["id"], {"n": n}, step_number=n + 1)
    assert len(list(client.list_snapshots(execution["id"], page_size=1))) == 3

    for n in range(3):
        client.open_execution(session["id"], input=n)
    assert len(list(client.list_executions(session["id"], page_size=2))) == 4


def test_list_messages_pages_after_and_roles(client: Stepwise) -> None:
    session = client.create_session()
    for text in ("2+3", "4*5"):
        client.wait(client.post_message(session["id"], text)["execution"]["id"])
    messages = list(client.list_messages(session["id"], page_size=1))
    assert len(messages) >= 4
    assert [m["content"] for m in messages if m["role"] == "user"] == ["2+3", "4*5"]
    only = list(client.list_messages(session["id"], roles=["user", "assistant"], page_size=2))
    assert {m["role"] for m in only} == {"user", "assistant"}
    after_first = list(client.list_messages(session["id"], after=messages[0]["id"]))
    assert [m["id"] for m in after_first] == [m["id"] for m in messages[1:]]


def test_lists_are_lazy_and_errors_come_with_iteration(client: Stepwise) -> None:
    pages = client.list_messages(str(uuid.uuid4()))
    with pytest.raises(StepwiseError) as e:
        next(iter(pages))
    assert e.value.code == "not_found"


# --- errors ---------------------------------------------------------------------------


def test_errors_carry_status_code_message_and_field(client: Stepwise) -> None:
    with pytest.raises(StepwiseError) as e:
        client.get_session(str(uuid.uuid4()))
    assert (e.value.status, e.value.code) == (404, "not_found")
    assert str(e.value) == "404 not_found: session not found"

    name = unique("dup")
    client.create_session(name=name)
    with pytest.raises(StepwiseError) as e:
        client.create_session(name=name)
    assert (e.value.status, e.value.code) == (409, "conflict")

    session = client.create_session()
    with pytest.raises(StepwiseError) as e:
        client.update_session(session["id"], status="bogus")
    assert (e.value.status, e.value.code, e.value.field) == (400, "invalid_request", "status")
    assert "(field: status)" in str(e.value)

    with pytest.raises(StepwiseError) as e:
        list(client.list_sessions(page_size=0))
    assert (e.value.code, e.value.field) == ("invalid_request", "limit")

    with pytest.raises(StepwiseError) as e:
        client.post_message(session["id"], "   ")
    assert e.value.status == 400 and e.value.field == "content"

    execution = client.open_execution(session["id"])
    client.complete_execution(execution["id"], output=1)
    with pytest.raises(StepwiseError) as e:
        client.cancel_execution(execution["id"])
    assert e.value.code == "conflict"


def test_arguments_are_checked_before_sending(client: Stepwise) -> None:
    with pytest.raises(ValueError, match="session_id"):
        client.get_session("")
    with pytest.raises(ValueError):
        client.events("  ")
    with pytest.raises(ValueError):
        client.events(str(uuid.uuid4()), after="x")
    with pytest.raises(ValueError):
        Stepwise("localhost:7777")
    # Ids are path segments: nothing can climb out of the path.
    with pytest.raises(StepwiseError) as e:
        client.get_session("../../healthz")
    assert e.value.status in (400, 404)


def test_defaults_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"status": "ok"})

    monkeypatch.setenv("STEPWISE_URL", "http://stepwise.test:9999/")
    monkeypatch.setenv("STEPWISE_API_KEY", "sk-test")
    with Stepwise(transport=httpx.MockTransport(handler)) as c:
        assert c.base_url == "http://stepwise.test:9999"
        c.health()
    assert str(seen[0].url) == "http://stepwise.test:9999/healthz"
    assert seen[0].headers["authorization"] == "Bearer sk-test"

    monkeypatch.delenv("STEPWISE_URL")
    monkeypatch.delenv("STEPWISE_API_KEY")
    with Stepwise(transport=httpx.MockTransport(handler), headers={"X-Trace": "1"}) as c:
        assert c.base_url == "http://127.0.0.1:7777"
        c.health()
    assert "authorization" not in seen[1].headers
    assert seen[1].headers["x-trace"] == "1"


def test_unauthorized_is_an_error_with_code(tmp_path: Path) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            401, json={"error": {"code": "unauthorized", "message": "a valid API key is required"}}
        )

    with Stepwise("http://x.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(StepwiseError) as e:
            c.get_session(str(uuid.uuid4()))
    assert (e.value.status, e.value.code) == (401, "unauthorized")


def test_an_answer_without_the_error_shape_still_gives_a_code() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>bad gateway</html>")

    with Stepwise("http://x.test", max_retries=0, transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(StepwiseError) as e:
            c.health()
    assert (e.value.status, e.value.code) == (502, "server_error")
    assert "bad gateway" in e.value.message


def test_find_session_never_takes_another_session_for_the_one_named() -> None:
    # A server that ignores `?name=` answers with other sessions.
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"items": [{"id": "s1", "name": "other"}], "next_cursor": None})

    with mock_client(handler) as c:
        assert c.find_session("mine") is None


def test_errors_pickle_with_their_fields() -> None:
    import pickle

    error = StepwiseError("conflict", "taken", status=409, field="name")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.status, copy.code, copy.message, copy.field) == (409, "conflict", "taken", "name")
    assert str(copy) == "409 conflict: taken (field: name)"


# --- retries --------------------------------------------------------------------------


class Counting:
    """A mock server that counts requests by method and path and answers with `answer`."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    def count(self, method: str | None = None) -> int:
        return sum(1 for r in self.requests if method is None or r.method == method)


def unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        503, json={"error": {"code": "unavailable", "message": "try later"}}, headers={"Retry-After": "0"}
    )


def mock_client(handler: Callable[[httpx.Request], httpx.Response], retries: int = 2) -> Stepwise:
    return Stepwise(
        "http://stepwise.test", max_retries=retries, backoff=0.001, transport=httpx.MockTransport(handler)
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class CountingTransport(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def test_connection_refused_is_retried_then_raises_connection_error() -> None:
    transport = CountingTransport()
    url = f"http://127.0.0.1:{closed_port()}"
    with Stepwise(url, max_retries=3, backoff=0.001, transport=transport) as c:
        with pytest.raises(StepwiseError) as e:
            c.get_session(str(uuid.uuid4()))
    assert e.value.code == "connection_error"
    assert e.value.status is None
    assert url in e.value.message
    assert transport.sent == 4  # the first try and three retries

    # A refused connection sent nothing, so even a write is safe to try again.
    transport = CountingTransport()
    with Stepwise(url, max_retries=2, backoff=0.001, transport=transport) as c:
        with pytest.raises(StepwiseError) as e:
            c.create_session(name="never")
    assert e.value.code == "connection_error"
    assert transport.sent == 3


def test_reads_are_retried_on_5xx_and_429() -> None:
    server = Counting(unavailable)
    with mock_client(server, retries=2) as c:
        with pytest.raises(StepwiseError) as e:
            c.get_session(str(uuid.uuid4()))
        assert (e.value.status, e.value.code) == (503, "unavailable")
        assert server.count() == 3

        answers = iter(
            [
                httpx.Response(429, json={"error": {"code": "rate_limited", "message": "slow"}}, headers={"Retry-After": "0"}),
                httpx.Response(502),
                httpx.Response(200, json={"id": "s1"}),
            ]
        )
        server.answer = lambda request: next(answers)
        server.requests.clear()
        assert c.get_session("s1") == {"id": "s1"}
        assert server.count() == 3


def test_writes_that_could_happen_twice_are_never_retried() -> None:
    server = Counting(unavailable)
    session_id = str(uuid.uuid4())
    calls: list[Callable[[Stepwise], Any]] = [
        lambda c: c.create_session(name="once"),
        lambda c: c.post_message(session_id, "hello"),
        lambda c: c.send_message("hello"),
        lambda c: c.open_execution(session_id),
        lambda c: c.append_step("e1", {"kind": "action"}),
        lambda c: c.save_snapshot("e1", {"x": 1}),
        lambda c: c.complete_execution("e1", output=1),
        lambda c: c.import_session({"format_version": 1}),
        lambda c: c.cancel_execution("e1"),
        lambda c: c.request("POST", "/v1/anything", json={}),
    ]
    with mock_client(server, retries=3) as c:
        for call in calls:
            server.requests.clear()
            with pytest.raises(StepwiseError) as e:
                call(c)
            assert e.value.status == 503
            assert server.count() == 1, server.requests[0].url

    # A connection lost after the request went out: the write may have happened.
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("connection reset by peer", request=request)

    server = Counting(drop)
    with mock_client(server, retries=3) as c:
        with pytest.raises(StepwiseError) as e:
            c.post_message(session_id, "hello")
        assert e.value.code == "connection_error" and e.value.status is None
        assert server.count() == 1
        server.requests.clear()
        with pytest.raises(StepwiseError):
            c.get_session(session_id)
        assert server.count() == 4


def test_append_step_with_a_step_number_is_retried() -> None:
    answers = iter([httpx.Response(503), httpx.Response(201, json={"step_number": 4})])
    server = Counting(lambda request: next(answers))
    with mock_client(server, retries=3) as c:
        assert c.append_step("e1", {"kind": "action"}, step_number=4) == {"step_number": 4}
    assert server.count() == 2
    assert all(b'"step_number":4' in r.content.replace(b" ", b"") for r in server.requests)

    # The number may also come inside the step.
    answers = iter([httpx.Response(500), httpx.Response(200, json={"step_number": 2})])
    server = Counting(lambda request: next(answers))
    with mock_client(server, retries=3) as c:
        assert c.append_step("e1", {"kind": "action", "step_number": 2})["step_number"] == 2
    assert server.count() == 2

    with mock_client(server) as c, pytest.raises(ValueError):
        c.append_step("e1", {"step_number": 2}, step_number=3)


def test_append_steps_is_retried_when_its_numbers_are_known() -> None:
    answers = iter([httpx.Response(503), httpx.Response(201, json={"items": [], "created": 2})])
    server = Counting(lambda request: next(answers))
    with mock_client(server, retries=3) as c:
        steps = [{"kind": "action"}, {"kind": "final_answer"}]
        assert c.append_steps("e1", steps, first_step_number=4) == {"items": [], "created": 2}
    assert server.count() == 2
    for request in server.requests:
        assert request.url.path == "/v1/executions/e1/steps/batch"
        assert [s["step_number"] for s in json.loads(request.content)["steps"]] == [4, 5]
    assert steps == [{"kind": "action"}, {"kind": "final_answer"}]  # the caller's dicts: unchanged
    assert "items" not in server.requests[0].url.params  # the stored steps are wanted back

    server = Counting(lambda request: httpx.Response(201, json={"items": [], "created": 1}))
    with mock_client(server) as c:
        assert c.append_steps("e1", [{"kind": "action"}], first_step_number=1, return_items=False) is None
    assert server.requests[0].url.params["items"] == "false"  # not written back by the server

    # The first step's own number fixes the others' too.
    answers = iter([httpx.Response(500), httpx.Response(201, json={"items": [], "created": 1})])
    server = Counting(lambda request: next(answers))
    with mock_client(server, retries=3) as c:
        c.append_steps("e1", ({"step_number": 7} for _ in range(1)))
    assert server.count() == 2

    # Without numbers the server numbers the steps: a retry could write them twice.
    server = Counting(unavailable)
    with mock_client(server, retries=3) as c:
        with pytest.raises(StepwiseError) as e:
            c.append_steps("e1", [{"kind": "action"}, {"kind": "action", "step_number": 2}])
        assert e.value.status == 503
        assert server.count() == 1

        for bad, error in [
            ([], ValueError),
            ([{}] * 1_001, ValueError),
            ({"kind": "action"}, TypeError),
            (["action"], TypeError),
        ]:
            with pytest.raises(error):
                c.append_steps("e1", bad)
        with pytest.raises(ValueError):
            c.append_steps("e1", [{}, {"step_number": 9}], first_step_number=1)
        assert server.count() == 1


def test_a_rate_limited_write_is_retried_as_it_wrote_nothing() -> None:
    answers = iter(
        [
            httpx.Response(429, json={"error": {"code": "rate_limited", "message": "slow down"}}, headers={"Retry-After": "0"}),
            httpx.Response(201, json={"id": "s1"}),
        ]
    )
    server = Counting(lambda request: next(answers))
    with mock_client(server) as c:
        assert c.create_session() == {"id": "s1"}
    assert server.count() == 2


def test_max_retries_zero_sends_once() -> None:
    server = Counting(unavailable)
    with mock_client(server, retries=0) as c, pytest.raises(StepwiseError):
        c.health()
    assert server.count() == 1


def test_retry_after_is_honoured() -> None:
    policy = RetryPolicy(3, backoff=0.5)
    assert policy.after_answer(429, {"retry-after": "7"}, idempotent=False, attempt=0) == 7
    assert policy.after_answer(503, {"retry-after": "2"}, idempotent=True, attempt=1) == 2
    assert policy.after_answer(503, {"retry-after": "2"}, idempotent=False, attempt=0) is None
    assert policy.after_answer(503, {}, idempotent=True, attempt=3) is None
    assert policy.after_answer(404, {}, idempotent=True, attempt=0) is None
    # Without Retry-After: exponential backoff with jitter (between half and all of it).
    for attempt in range(3):
        delay = policy.after_answer(503, {}, idempotent=True, attempt=attempt)
        assert delay is not None and 0.25 * 2**attempt <= delay <= 0.5 * 2**attempt
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0
    assert retry_after_seconds({"retry-after": "soon"}) is None


# --- executions -----------------------------------------------------------------------


def test_demo_agent_answers_through_post_message_and_wait(client: Stepwise) -> None:
    session = client.session(unique("demo"))
    answer = client.post_message(session["id"], "2+3")
    assert answer["session_id"] == session["id"]
    assert answer["message"]["content"] == "2+3"
    execution = client.wait(answer["execution"]["id"], timeout=60)
    assert execution["status"] == "completed"
    assert str(execution["output"]) == "5"
    assistant = [m for m in client.list_messages(session["id"], roles="assistant")]
    assert assistant and "5" in assistant[-1]["content"]
    memory = client.get_memory(session["id"])
    assert memory["restored"] == "full"
    assert any(step["kind"] == "final_answer" for step in memory["steps"])
    assert [e["id"] for e in client.list_executions(session["id"])] == [execution["id"]]


def test_send_message_creates_the_session(client: Stepwise) -> None:
    name = unique("sent")
    answer = client.send_message("4*5", session={"name": name, "title": "via send_message"}, agent="demo")
    assert client.find_session(name)["id"] == answer["session_id"]  # type: ignore[index]
    assert str(client.wait(answer["execution"]["id"], timeout=60)["output"]) == "20"


def test_a_paused_execution_resumes_with_the_next_message(client: Stepwise) -> None:
    session = client.create_session()
    first = client.post_message(session["id"], "ask me")
    paused = client.wait(first["execution"]["id"], timeout=60)
    assert paused["status"] == "paused"
    second = client.post_message(session["id"], "the calculator")
    assert second["execution"]["id"] == paused["id"]
    assert client.wait(paused["id"], timeout=60)["status"] == "completed"


def test_external_execution_end_to_end(client: Stepwise) -> None:
    session = client.create_session(name=unique("external"))
    execution = client.open_execution(
        session["id"], input={"task": "add"}, agent_config={"model": "mine"}, metadata={"run": 1}
    )
    assert (execution["agent_type"], execution["status"]) == ("external", "running")

    step = {
        "kind": "action",
        "model_output": "I will add",
        "tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2+3"}}],
        "observations": "5",
        "token_usage": {"input": 10, "output": 3, "total": 13},
    }
    first = client.append_step(execution["id"], step, step_number=1)
    again = client.append_step(execution["id"], step, step_number=1)
    assert again["id"] == first["id"]  # the same number and body again is the same step
    with pytest.raises(StepwiseError) as e:
        client.append_step(execution["id"], {**step, "observations": "6"}, step_number=1)
    assert e.value.code == "conflict"
    auto = client.append_step(execution["id"], {"kind": "final_answer", "output": 5})
    assert auto["step_number"] == 2
    assert [s["step_number"] for s in client.list_steps(execution["id"])] == [1, 2]

    snapshot = client.save_snapshot(
        execution["id"], {"memory": ["2+3"]}, step_number=2, is_final=True, agent_name="adder"
    )
    assert client.get_snapshot(snapshot["id"])["state"] == {"memory": ["2+3"]}
    assert [s["id"] for s in client.list_snapshots(execution["id"])] == [snapshot["id"]]

    with pytest.raises(TimeoutError):
        client.wait(execution["id"], timeout=0.1)

    done = client.complete_execution(execution["id"], output={"answer": 5}, final_message="It is 5.")
    assert done["status"] == "completed"
    finished = client.wait(execution["id"])
    assert finished["output"] == {"answer": 5}
    assert finished["step_count"] == 2
    assert client.get_execution(execution["id"])["status"] == "completed"
    assistant = list(client.list_messages(session["id"], roles="assistant"))
    assert assistant[-1]["content"] == "It is 5."

    failing = client.open_execution(session["id"], input="x")
    assert client.fail_execution(failing["id"], "tool crashed")["status"] == "failed"
    asking = client.open_execution(session["id"], input="y")
    assert client.pause_execution(asking["id"], "Which one?")["status"] == "paused"
    assert client.wait(asking["id"])["status"] == "paused"
    cancelled = client.open_execution(session["id"], input="z")
    assert client.cancel_execution(cancelled["id"])["status"] in ("cancelled", "running")
    assert client.wait(cancelled["id"], timeout=60)["status"] == "cancelled"


def test_append_steps_saves_a_batch_in_order_once(client: Stepwise) -> None:
    session = client.create_session(name=unique("batch"))
    execution = client.open_execution(session["id"], input={"task": "count"})
    client.append_step(execution["id"], {"kind": "task", "observations": "count"}, step_number=1)
    client.append_step(execution["id"], {"kind": "action", "model_output": "first"}, step_number=2)

    batch = client.append_steps(
        execution["id"], [{"kind": "action", "model_output": f"more {n}"} for n in range(3)]
    )
    assert [s["step_number"] for s in batch["items"]] == [3, 4, 5]
    assert batch["created"] == 3
    again = client.append_steps(
        execution["id"],
        [{"kind": "action", "model_output": f"more {n}"} for n in range(3)],
        first_step_number=3,
    )
    assert [s["id"] for s in again["items"]] == [s["id"] for s in batch["items"]]
    assert again["created"] == 0  # the same steps again: nothing written
    quiet = [{"kind": "action", "model_output": "more 2"}]
    assert client.append_steps(execution["id"], quiet, first_step_number=5, return_items=False) is None
    with pytest.raises(StepwiseError) as e:
        client.append_steps(
            execution["id"], [{"kind": "action", "model_output": "more 2"}], first_step_number=3
        )
    assert e.value.code == "conflict"
    assert [s["model_output"] for s in client.list_steps(execution["id"])] == [
        None, "first", "more 0", "more 1", "more 2"
    ]
    assert client.get_execution(execution["id"])["step_count"] == 5


def test_a_batch_with_items_false_is_stored_and_answered_without_the_steps(client: Stepwise) -> None:
    session = client.create_session(name=unique("batch-quiet"))
    execution = client.open_execution(session["id"], input={"task": "count"})
    steps = [{"kind": "action", "model_output": f"step {n}", "step_number": n} for n in (1, 2, 3)]
    answer = client.request(
        "POST", f"/v1/executions/{execution['id']}/steps/batch", json={"steps": steps}, params={"items": "false"}
    )
    assert answer == {"items": [], "created": 3}
    assert [s["model_output"] for s in client.list_steps(execution["id"])] == ["step 1", "step 2", "step 3"]
    again = client.request("POST", f"/v1/executions/{execution['id']}/steps/batch", json={"steps": steps})
    assert [s["step_number"] for s in again["items"]] == [1, 2, 3] and again["created"] == 0
    with pytest.raises(StepwiseError) as e:
        client.request(
            "POST", f"/v1/executions/{execution['id']}/steps/batch", json={"steps": steps}, params={"items": "maybe"}
        )
    assert e.value.status == 400


def test_a_batch_is_read_as_json_with_clear_errors(server: LocalServer, client: Stepwise) -> None:
    session = client.create_session(name=unique("batch-errors"))
    execution = client.open_execution(session["id"], input={"task": "count"})
    url = f"{server.url}/v1/executions/{execution['id']}/steps/batch"
    # Whole numbers written as floats are numbers all the same.
    answer = httpx.post(url, json={"steps": [{"step_number": 1.0, "token_usage": {"input": 3.0}}]})
    assert answer.status_code == 201, answer.text
    assert answer.json()["items"][0]["token_usage"]["input"] == 3
    for body, headers, status, field in [
        (b"{not json", {"content-type": "application/json"}, 400, None),
        (b'{"steps": []}', {"content-type": "application/json"}, 400, "steps"),
        (b'{"steps": {}}', {"content-type": "application/json"}, 400, "steps"),
        (b'{"steps": [{"step_number": "two"}]}', {"content-type": "application/json"}, 400, None),
        (b'{"steps": [{"step_number": 2}]}', {"content-type": "text/plain"}, 415, None),
        (b'{"steps": [{"step_number": 2}]}', {}, 415, None),
    ]:
        answer = httpx.post(url, content=body, headers=headers)
        assert answer.status_code == status, (body, answer.text)
        error = answer.json()["error"]
        if field:
            assert error["field"] == field
    assert [s["step_number"] for s in client.list_steps(execution["id"])] == [1]


def test_export_and_import(client: Stepwise) -> None:
    session = client.create_session(name=unique("export"), title="to copy")
    client.wait(client.post_message(session["id"], "2+3")["execution"]["id"])
    document = client.export_session(session["id"])
    assert {"format_version", "session", "messages", "executions", "steps", "snapshots"} <= set(document)
    document["session"]["name"] = unique("imported")
    copy = client.import_session(document)
    assert copy["id"] != session["id"]
    assert copy["title"] == "to copy"
    assert [m["content"] for m in client.list_messages(copy["id"])] == [
        m["content"] for m in client.list_messages(session["id"])
    ]


def test_request_is_a_low_level_escape_hatch(client: Stepwise) -> None:
    session = client.create_session()
    assert client.request("GET", f"/v1/sessions/{session['id']}")["id"] == session["id"]
    page = client.request("GET", "/v1/sessions", params={"limit": 1})
    assert set(page) == {"items", "next_cursor"}
    assert client.request("DELETE", f"/v1/sessions/{session['id']}") is None
    with pytest.raises(StepwiseError) as e:
        client.request("GET", "/v1/nowhere")
    assert e.value.status == 404
    with pytest.raises(ValueError):
        client.request("GET", "v1/sessions")


def test_local_server_uses_its_own_database_and_port(server: LocalServer) -> None:
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server.url)
    assert server.database.startswith("sqlite://")
    assert server.running
    assert server.client.ready()["backend"] == "sqlite"


# --- the README -----------------------------------------------------------------------


def readme_examples() -> list[str]:
    text = (PYTHON_DIR / "README.md").read_text()
    # The sections up to the adapters' are this client's; their examples must run as written.
    own = text.split("\n## smolagents")[0]
    return re.findall(r"```python\n(.*?)```", own, flags=re.S)


@pytest.mark.parametrize("index", range(len(readme_examples())))
def test_readme_examples_run(
    index: int,
    server: LocalServer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("STEPWISE_URL", server.url)
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    # `Stepwise.local()` examples keep their database, socket and files in this test's folder.
    monkeypatch.setenv("STEPWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"readme_example_{index}"}
    exec(compile(readme_examples()[index], f"README.md example {index + 1}", "exec"), namespace)
    for name, value in list(namespace.items()):
        if name.startswith("test_") and callable(value):
            with local_server() as example_server:
                value(example_server)
    output = capsys.readouterr().out
    if index == 0:
        assert output.startswith("completed 5\n")
    if "Stepwise.local()" in readme_examples()[index]:
        # The embedded server answered and was this example's own; its files are in tmp_path.
        assert output == "5\nTrue\n"
        assert (tmp_path / "data" / "stepwise.db").is_file() and (tmp_path / "sessions").is_dir()


# --- local_server ----------------------------------------------------------------------


def test_local_server_reports_a_failed_start_with_the_server_log() -> None:
    from stepwise.testing import ServerStartError

    with pytest.raises(ServerStartError) as e:
        with local_server(args=["--no-such-flag"]):
            pass
    assert "exited with status" in str(e.value)
    assert "--no-such-flag" in str(e.value)  # the end of the server's own message


def test_local_server_needs_a_binary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STEPWISE_BIN", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="STEPWISE_BIN"):
        local_server()


def test_local_server_kill_restart_keeps_the_data() -> None:
    with local_server() as own:
        session = own.client.create_session(name="kept")
        port = own.port
        own.kill()
        assert not own.running
        with own.new_client(max_retries=0) as probe, pytest.raises(StepwiseError) as e:
            probe.health()
        assert e.value.code == "connection_error"
        own.restart()
        assert own.port == port
        assert own.client.find_session("kept")["id"] == session["id"]  # type: ignore[index]
        assert own.stop() == 0  # SIGTERM: a clean exit


def test_a_tenants_own_retention_is_set_read_and_cleared() -> None:
    with local_server() as server, Stepwise(server.url) as client:
        before = client.get_retention()
        assert before["completed_days"] == before["server"]["completed_days"]
        assert before["own"]["completed_days"] is None
        own = client.set_retention(completed_days=7, mark_abandoned_days=3)
        assert (own["completed_days"], own["mark_abandoned_days"]) == (7, 3)
        assert own["abandoned_days"] == before["server"]["abandoned_days"]
        assert client.get_retention() == own
        with pytest.raises(StepwiseError) as refused:
            client.set_retention(deleted_days=0)
        assert refused.value.status == 400 and refused.value.field == "deleted_days"
        assert client.set_retention()["completed_days"] == before["server"]["completed_days"]
