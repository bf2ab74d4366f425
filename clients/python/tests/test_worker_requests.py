"""A worker's requests: its writes go over keep-alive connections of its own (the same answers
and errors as through httpx), and `run.step(..., last=True)` sends the last step with the
answer in one `complete` request (written alone first by any other write, by an exception,
and at once for a server whose claims do not say `complete_takes_steps`). Unit tests on a
`Run` with a fake API, then a real server."""

from __future__ import annotations

import re
import uuid
from typing import Any, Iterator

import httpx
import pytest

from stepwise import Stepwise, StepwiseError
from stepwise.testing import LocalServer
from stepwise.worker import Cancelled, Run, Worker
from stepwise.worker._http import Api

from _worker_support import PATIENCE, short_lease_server, steps_of


class FakeApi:
    """Records every write; a step is stored as sent; `refuse` maps a path suffix to the
    error its write raises (once)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, Any]] = []
        self.refuse: dict[str, StepwiseError] = {}

    def call(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        suffix = path.rsplit("/", 1)[-1]
        self.writes.append((suffix, body))
        error = self.refuse.pop(suffix, None)
        if error is not None:
            raise error
        if suffix == "steps":
            return {**body, "id": f"s{body['step_number']}"}
        return {}


def make_run(*, takes_steps: bool = True) -> tuple[Run, FakeApi]:
    api = FakeApi()
    claim: dict[str, Any] = {"execution": {"id": "e1", "agent_type": "t"}, "attempt": 1, "lease": "l", "steps": []}
    if takes_steps:
        claim["complete_takes_steps"] = True
    return Run(claim, api=api), api  # type: ignore[arg-type]


def test_a_last_step_waits_for_the_answer_and_goes_with_it():
    run, api = make_run()
    sent = run.step(model_output="Echoing", observations="Ada", last=True)
    assert sent == {"kind": "action", "model_output": "Echoing", "observations": "Ada", "step_number": 1}
    assert api.writes == []
    assert [s["step_number"] for s in run.steps] == [1]
    run._complete({"output": "Echo: Ada"})
    assert api.writes == [("complete", {"output": "Echo: Ada", "steps": [sent]})]


def test_a_server_that_does_not_take_steps_with_complete_gets_the_step_at_once():
    run, api = make_run(takes_steps=False)
    stored = run.step(model_output="Echoing", last=True)
    assert stored["id"] == "s1"
    run._complete({"output": "done"})
    assert [suffix for suffix, _ in api.writes] == ["steps", "complete"]
    assert api.writes[1][1] == {"output": "done"}


def test_any_other_write_first_writes_the_held_step_in_order():
    run, api = make_run()
    run.step(model_output="first", last=True)
    run.info("still going")
    run.step(model_output="second", last=True)
    run.step(model_output="third")
    assert [(s, b.get("step_number") if s == "steps" else b.get("content")) for s, b in api.writes] == [
        ("steps", 1), ("messages", "still going"), ("steps", 2), ("steps", 3),
    ]
    assert [s["id"] for s in run.steps] == ["s1", "s2", "s3"]  # stored, as written


def test_a_completion_refused_for_its_step_writes_the_step_alone_and_raises_its_error():
    run, api = make_run()
    run.step(model_output="x" * 10, last=True)
    api.refuse["complete"] = StepwiseError("invalid_request", "the step is larger than 2 MiB", status=400)
    api.refuse["steps"] = StepwiseError("invalid_request", "the step is larger than 2 MiB", status=400)
    with pytest.raises(StepwiseError) as refused:
        run._complete({"output": "done"})
    assert refused.value.status == 400
    assert [suffix for suffix, _ in api.writes] == ["complete", "steps"]
    # The next write tries the step again first.
    run._write("POST", "/fail", {"error_message": "could not save"})
    assert [suffix for suffix, _ in api.writes] == ["complete", "steps", "steps", "fail"]


# --- against a server ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def rserver() -> Iterator[LocalServer]:
    with short_lease_server() as running:
        yield running


def requests_to(server: LocalServer, route: str) -> float:
    """The server's count of `POST route` requests (every status)."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    pattern = r'^stepwise_http_requests_total\{method="POST",route="' + re.escape(route) + r'",status="[^"]*"\} (\S+)$'
    return sum(float(m.group(1)) for m in re.finditer(pattern, text, re.M))


def test_a_one_step_agent_completes_with_one_request(rserver):
    agent_type = f"onestep-{uuid.uuid4().hex[:8]}"
    returned: list[dict[str, Any]] = []
    worker = Worker(Stepwise(rserver.url), concurrency=2, wait_s=1)

    @worker.agent(agent_type)
    def echo(run: Run) -> str:
        returned.append(run.step(model_output="Echoing", observations=run.input_text, last=True))
        return f"Echo: {run.input_text}"

    with worker, Stepwise(rserver.url) as client:
        steps_before = requests_to(rserver, "/v1/executions/{id}/steps")
        completes_before = requests_to(rserver, "/v1/executions/{id}/complete")
        executions = [client.send_message(f"m{n}", agent=agent_type)["execution"] for n in range(3)]
        done = [client.wait(e["id"], timeout=PATIENCE) for e in executions]
        assert [d["output"] for d in done] == ["Echo: m0", "Echo: m1", "Echo: m2"]
        assert [d["step_count"] for d in done] == [1, 1, 1]
        assert requests_to(rserver, "/v1/executions/{id}/steps") == steps_before
        assert requests_to(rserver, "/v1/executions/{id}/complete") == completes_before + 3
        steps = steps_of(client, executions[0]["id"])
        assert [(s["step_number"], s["model_output"], s["observations"]) for s in steps] == [(1, "Echoing", "m0")]
        lines = [m["content"] for m in client.list_messages(executions[0]["session_id"])
                 if m.get("execution_id") == executions[0]["id"]]
        assert lines.index("Step 1: Echoing") < lines.index("Echo: m0")
    assert [r["step_number"] for r in returned] == [1, 1, 1]


def test_a_last_step_then_an_exception_saves_the_step_and_fails(rserver):
    agent_type = f"onestep-fail-{uuid.uuid4().hex[:8]}"
    worker = Worker(Stepwise(rserver.url), wait_s=1)

    @worker.agent(agent_type)
    def broken(run: Run) -> str:
        run.step(model_output="about to fail", last=True)
        raise RuntimeError("no answer after all")

    with worker, Stepwise(rserver.url) as client:
        execution = client.send_message("x", agent=agent_type)["execution"]
        done = client.wait(execution["id"], timeout=PATIENCE)
        assert done["status"] == "failed"
        assert "no answer after all" in done["error_message"]
        assert [s["model_output"] for s in steps_of(client, execution["id"])] == ["about to fail"]


def test_the_worker_s_keep_alive_connections_answer_as_httpx_does(rserver):
    api = Api(rserver.url, {})
    try:
        assert api._lean is not None  # a plain http:// server: the worker's own connections
        for _ in range(5):
            assert api.call("GET", "/v1/agents")["items"] is not None
        assert len(api._lean._idle) == 1  # one connection, kept alive between calls
        with pytest.raises(StepwiseError) as missing:
            api.call("GET", "/v1/executions/00000000-0000-7000-8000-000000000000")
        assert (missing.value.status, missing.value.code) == (404, "not_found")
        with Stepwise(rserver.url) as client:
            execution = client.send_message("x", agent={"type": f"raw-{uuid.uuid4().hex[:8]}", "wait": True})["execution"]
            with pytest.raises(StepwiseError) as lost:
                api.call("POST", f"/v1/executions/{execution['id']}/steps", {"model_output": "forged"}, lease="forged")
            assert (lost.value.status, lost.value.code) == (409, "lease_lost")
            assert steps_of(client, execution["id"]) == []
            client.cancel_execution(execution["id"])
    finally:
        api.close()
    # Through a custom transport the calls go through httpx, with the same answers.
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("stepwise-lease", ""))
        return httpx.Response(409, json={"error": {"code": "lease_lost", "message": "gone"}})

    mocked = Api(rserver.url, {}, transport=httpx.MockTransport(handler))
    assert mocked._lean is None
    with pytest.raises(StepwiseError) as lost:
        mocked.call("POST", "/v1/executions/x/steps", {}, lease="l1")
    assert (lost.value.status, lost.value.code, seen) == (409, "lease_lost", ["l1"])
    mocked.close()


def test_a_write_refused_for_a_cancel_says_cancelled_and_one_for_another_lease_says_lease_lost(rserver):
    api = Api(rserver.url, {})
    try:
        with Stepwise(rserver.url) as client:
            agent = f"raw-{uuid.uuid4().hex[:8]}"
            reasons = []
            for cancel in (True, False):
                execution = client.send_message("x", agent={"type": agent, "wait": True})["execution"]
                claim = api.call("POST", "/v1/workers/claim", {"worker_id": "w-test", "agents": [{"type": agent}], "slots": 1, "wait_s": 5})
                claimed = claim["items"][0]
                assert claimed["execution"]["id"] == execution["id"]
                if not cancel:
                    claimed = {**claimed, "lease": "lease_not_this_one"}
                run = Run(claimed, api=api)
                if cancel:
                    client.cancel_execution(execution["id"])
                with pytest.raises(Cancelled):
                    run.step(model_output="too late")
                reasons.append(run.cancel_reason)
                if not cancel:
                    client.cancel_execution(execution["id"])
            assert reasons == ["cancelled", "lease_lost"]
    finally:
        api.close()
