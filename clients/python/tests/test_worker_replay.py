"""Replay of a worker's function on a new claim: `run.step` returns the saved steps in order and
writes only past them, `run.call` runs each of its functions once per position of the run
(its result, or its error, comes back from the saved step), `run.ask` fits the same numbering.
Unit tests on a `Run` with a fake API, and a worker process SIGKILLed mid-run whose run another
worker process takes over."""

from __future__ import annotations

import asyncio
import logging
import signal
import uuid
from collections import Counter
from typing import Any, Iterator

import pytest

from stepwise import Stepwise
from stepwise.testing import LocalServer
from stepwise.worker import CallError, Retry, Run
from stepwise.worker._run import Paused as _Paused

from _worker_support import (  # noqa: F401 - start_worker is a fixture
    PATIENCE,
    short_lease_server,
    start_worker,
    steps_of,
    wait_for,
)


class FakeApi:
    """Takes every write, numbering nothing itself: a step is stored as sent."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.writes.append((method, path, body))
        if path.endswith("/steps"):
            return {**body, "id": f"s{body['step_number']}", "tool_calls": body.get("tool_calls", []),
                    "output": body.get("output")}
        return {}

    def steps(self) -> list[dict[str, Any]]:
        return [body for _, path, body in self.writes if path.endswith("/steps")]


def make_run(steps: list[dict[str, Any]] | None = None, *, answer: Any = None) -> tuple[Run, FakeApi]:
    api = FakeApi()
    numbered = [{"kind": "action", "tool_calls": [], "output": None, **s, "step_number": i}
                for i, s in enumerate(steps or [], start=1)]
    claim = {"execution": {"id": "e1", "agent_type": "t"}, "attempt": 2 if numbered else 1, "lease": "l",
             "steps": numbered, "resume_answer": answer}
    return Run(claim, api=api), api  # type: ignore[arg-type]


def first_run_steps(fn: Any) -> list[dict[str, Any]]:
    """The steps `fn(run)` saves on a first claim (until it returns or pauses)."""
    run, api = make_run()
    try:
        fn(run)
    except _Paused:
        pass
    return [{k: v for k, v in s.items() if k != "step_number"} for s in api.steps()]


# --- step ------------------------------------------------------------------------------------


def test_steps_replay_the_saved_ones_and_write_only_past_them(caplog):
    run, api = make_run([{"model_output": "one"}, {"model_output": "two"}])
    assert run.replaying
    assert run.step(model_output="one")["step_number"] == 1
    assert run.step(model_output="two")["step_number"] == 2
    assert api.writes == [] and not run.replaying
    assert run.step(model_output="three")["step_number"] == 3
    assert [(s["step_number"], s["model_output"]) for s in api.steps()] == [(3, "three")]
    assert [s["step_number"] for s in run.steps] == [1, 2, 3]
    assert "differs" not in caplog.text


def test_a_step_that_differs_from_the_saved_one_logs_both_and_is_not_written(caplog):
    run, api = make_run([{"model_output": "searched Paris", "observations": "3 hits"}])
    with caplog.at_level(logging.WARNING, logger="stepwise.worker"):
        replayed = run.step(model_output="searched Rome", observations="3 hits")
    assert replayed["model_output"] == "searched Paris" and api.writes == []
    (record,) = [r for r in caplog.records if "differs" in r.getMessage()]
    assert "searched Rome" in record.getMessage() and "searched Paris" in record.getMessage()
    assert "3 hits" not in record.getMessage()  # only the fields that differ
    with pytest.raises(ValueError):
        make_run([{"model_output": "x"}])[0].step(model_output="x", step_number=2)


def test_skip_replay_writes_after_the_saved_steps():
    run, api = make_run([{"model_output": "one"}])
    run.skip_replay()
    assert not run.replaying
    assert run.step(model_output="two")["step_number"] == 2
    assert [s["model_output"] for s in api.steps()] == ["two"]


# --- call ------------------------------------------------------------------------------------


def agent(calls: list[str]):
    def tool(name: str, value: Any) -> Any:
        calls.append(name)
        return value

    def failing(city: str) -> Any:
        calls.append("failing")
        raise KeyError(city)

    def body(run: Run) -> list[Any]:
        results = [run.call("text", tool, "text", "héllo"),
                   run.call("json", tool, "json", {"a": [1, 2.5, None, True], "b": {"c": "d"}})]
        try:
            run.call("failing", failing, "Paris")
        except KeyError as error:
            results.append(("raised", type(error).__name__, error.args))
        run.step(kind="planning", model_output="plan")
        results.append(run.call("object", tool, "object", object.__new__(_Opaque)))
        results.append(run.call("last", tool, "last", 7))
        return results

    return body


class _Opaque:
    def __str__(self) -> str:
        return "an opaque thing"


def test_calls_run_once_and_their_results_and_errors_come_back_on_replay():
    calls: list[str] = []
    first, api = make_run()
    results = agent(calls)(first)
    assert calls == ["text", "json", "failing", "object", "last"]
    saved = api.steps()
    assert [s["step_number"] for s in saved] == [1, 2, 3, 4, 5, 6]
    assert saved[1]["tool_calls"][0]["name"] == "json"
    assert saved[1]["tool_calls"][0]["arguments"] == {"args": ["json", {"a": [1, 2.5, None, True], "b": {"c": "d"}}]}
    assert saved[2]["error"] == {"kind": "KeyError", "message": "Paris"}
    assert isinstance(results[3], _Opaque)  # the first run returns fn's own value

    # A new claim holding the first four steps: those replay, the rest run.
    calls.clear()
    again, api2 = make_run([{k: v for k, v in s.items() if k != "step_number"} for s in saved[:4]])
    replayed = agent(calls)(again)
    assert calls == ["object", "last"]
    assert replayed[:3] == ["héllo", {"a": [1, 2.5, None, True], "b": {"c": "d"}}, ("raised", "KeyError", ("Paris",))]
    assert [s["step_number"] for s in api2.steps()] == [5, 6]

    # A claim holding all of them calls nothing; a result that was not JSON is its text.
    calls.clear()
    last, api3 = make_run([{k: v for k, v in s.items() if k != "step_number"} for s in saved])
    assert agent(calls)(last)[3:] == ["an opaque thing", 7]
    assert calls == [] and api3.writes == []


def test_a_replayed_error_of_a_type_not_loaded_is_a_call_error_and_retry_is_not_saved():
    run, _ = make_run([{"tool_calls": [{"id": "c", "name": "x", "arguments": {}}], "output": {"call": "x", "raised": "nowhere.mod:Gone"},
                        "error": {"kind": "Gone", "message": "it went"}}])
    with pytest.raises(CallError) as raised:
        run.call("x", lambda: 1)
    assert (raised.value.name, raised.value.error_type, raised.value.message) == ("x", "Gone", "it went")

    def not_yet() -> None:
        raise Retry("later")

    fresh, api = make_run()
    with pytest.raises(Retry):
        fresh.call("flaky", not_yet)
    assert api.writes == []


def test_a_replayed_call_with_other_arguments_warns_and_a_plain_step_is_not_a_result(caplog):
    run, api = make_run([{"tool_calls": [{"id": "c", "name": "search", "arguments": {"args": ["Paris"]}}],
                          "output": {"call": "search"}, "observations": "[\"Paris hotel\"]"},
                         {"model_output": "a plain step"}])
    calls: list[str] = []
    with caplog.at_level(logging.WARNING, logger="stepwise.worker"):
        assert run.call("search", lambda city: calls.append(city), "Rome") == ["Paris hotel"]
        assert run.call("other", lambda: calls.append("other") or "fresh") == "fresh"
    assert calls == ["other"] and api.writes == []
    text = caplog.text
    assert "Rome" in text and "Paris" in text and "holds no call's result" in text


def test_an_async_function_needs_acall_and_acall_replays_too():
    async def fetch(n: int) -> dict[str, int]:
        await asyncio.sleep(0)
        return {"n": n}

    run, api = make_run()
    with pytest.raises(TypeError, match="acall"):
        run.call("fetch", fetch, 1)  # type: ignore[arg-type]
    assert api.writes == []

    async def body(run: Run) -> list[Any]:
        return [await run.acall("fetch", fetch, 1), await run.acall("sync", lambda n: n * 2, 21)]

    assert asyncio.run(body(run)) == [{"n": 1}, 42]
    saved = [{k: v for k, v in s.items() if k != "step_number"} for s in api.steps()]
    again, api2 = make_run(saved)

    async def never(n: int) -> dict[str, int]:
        raise AssertionError("replayed calls do not run")

    async def replay(run: Run) -> list[Any]:
        return [await run.acall("fetch", never, 1), await run.acall("sync", never, 21)]

    assert asyncio.run(replay(again)) == [{"n": 1}, 42]
    assert api2.writes == []


# --- with questions ------------------------------------------------------------------------


def test_questions_and_answers_keep_the_numbering_of_steps_and_calls():
    calls: list[str] = []

    def body(run: Run) -> str:
        run.step(model_output="before")
        name = run.ask("Name?")
        greeting = run.call("greet", lambda n: calls.append(n) or f"hi {n}", name)
        city = run.ask("City?")
        run.step(model_output=f"after {city}")
        return f"{greeting} from {city}"

    # First claim: a step, the question, paused.
    first = first_run_steps(body)
    assert [s["kind"] for s in first] == ["action", "user_input"]
    # The answer came (the server saved it as step 3): the step and question replay, the call runs.
    run, api = make_run([*first, {"kind": "user_input", "observations": "Ada", "output": {"answer": "Ada"}}],
                        answer="Ada")
    run._record_answer()
    with pytest.raises(_Paused):
        body(run)
    assert calls == ["Ada"]
    assert [(s["step_number"], s["kind"]) for s in api.steps()] == [(4, "action"), (5, "user_input")]
    assert api.steps()[1]["model_output"] == "City?"
    # The second answer: everything before it replays; only the last step is new.
    saved = [{k: v for k, v in s.items() if k != "step_number"} for s in run.steps]
    last, api2 = make_run([*saved, {"kind": "user_input", "observations": "Paris", "output": {"answer": "Paris"}}],
                          answer="Paris")
    last._record_answer()
    assert body(last) == "hi Ada from Paris"
    assert calls == ["Ada"]
    assert [(s["step_number"], s["model_output"]) for s in api2.steps()] == [(7, "after Paris")]


def test_a_question_saved_by_a_lost_worker_before_it_paused_is_not_asked_twice():
    def body(run: Run) -> str:
        run.step(model_output="before")
        return run.ask("Name?")

    first = first_run_steps(body)
    run, api = make_run(first)  # the worker died after saving the question, before /pause
    with pytest.raises(_Paused):
        body(run)
    assert [path for _, path, _ in api.writes] == ["/v1/executions/e1/pause"]


# --- a worker process killed mid-run ---------------------------------------------------------


@pytest.fixture(scope="module")
def rserver() -> Iterator[LocalServer]:
    with short_lease_server() as running:
        yield running


def test_a_killed_worker_s_calls_are_not_run_again_by_the_worker_that_takes_over(rserver, start_worker, tmp_path):
    (tmp_path / "crash-in-price").touch()
    with Stepwise(rserver.url) as client:
        first = start_worker(rserver, "worker_apps.durable:worker", name="a")
        session = client.create_session(name=f"replay-{uuid.uuid4().hex[:10]}")
        execution = client.post_message(session["id"], "Paris", agent="travel")["execution"]
        assert first.wait_exit() == -signal.SIGKILL, first.log()[-3000:]
        assert [s["step_number"] for s in steps_of(client, execution["id"])] == [1, 2]

        second = start_worker(rserver, "worker_apps.durable:worker", name="b")
        done = client.wait(execution["id"], timeout=PATIENCE)
        assert done["status"] == "completed", done
        assert done["output"] == {
            "booking": {"booking": "Paris hostel x2", "ok": True, "nested": {"list": [1, 2, None]}},
            "prices": {"Paris hotel": 241.0, "Paris hostel": 60.5},
            "forecast": {"unknown": "no forecast for Paris"},
            "confirmation": "confirmed Paris hostel x2",
            "attempt": 2,
        }
        lines = (tmp_path / "calls.log").read_text().split()
        tools = Counter(tool for eid, tool in zip(lines[::2], lines[1::2]) if eid == execution["id"])
        assert tools == {t: 1 for t in ("search", "weather", "price", "book", "confirm", "notify")}, tools
        steps = steps_of(client, execution["id"])
        assert [s["step_number"] for s in steps] == [1, 2, 3, 4, 5, 6, 7]
        assert [(s["tool_calls"] or [{}])[0].get("name") for s in steps] == [
            "search", "weather", "price", None, "book", "confirm", "notify"
        ]
        assert steps[1]["error"] == {"kind": "LookupError", "message": "no forecast for Paris"}
        messages = [m["content"] for m in client.list_messages(session["id"])]
        assert "Worker lost: resuming from step 3, attempt 2" in messages
        assert second.stop() == 0


def test_a_worker_frozen_past_its_lease_runs_no_call_after_it_wakes(rserver, start_worker, tmp_path):
    """Frozen before a call, woken after another worker took the run over and finished it:
    the call is not run a second time (its lease is renewed first, and found taken)."""
    (tmp_path / "hold-book").touch()
    with Stepwise(rserver.url) as client:
        frozen = start_worker(rserver, "worker_apps.durable:worker", name="a")
        session = client.create_session(name=f"freeze-{uuid.uuid4().hex[:10]}")
        execution = client.post_message(session["id"], "Oslo", agent="travel")["execution"]
        wait_for(lambda: len(steps_of(client, execution["id"])) == 4, "the steps before book")
        frozen.signal(signal.SIGSTOP)  # past its lease: it cannot renew it

        (tmp_path / "gate-book-2").touch()
        other = start_worker(rserver, "worker_apps.durable:worker", name="b")
        done = client.wait(execution["id"], timeout=PATIENCE)
        assert done["status"] == "completed", done
        assert done["output"]["attempt"] == 2
        assert other.stop() == 0

        (tmp_path / "gate-book-1").touch()
        frozen.signal(signal.SIGCONT)  # it wakes at its book call, holding a lease no longer current
        wait_for(lambda: "lease lost (taken over)" in frozen.log(), "the woken worker to find its lease gone")
        lines = (tmp_path / "calls.log").read_text().split()
        tools = Counter(tool for eid, tool in zip(lines[::2], lines[1::2]) if eid == execution["id"])
        assert tools == {t: 1 for t in ("search", "weather", "price", "book", "confirm", "notify")}, tools
        assert [s["step_number"] for s in steps_of(client, execution["id"])] == [1, 2, 3, 4, 5, 6, 7]
        assert frozen.stop() == 0
