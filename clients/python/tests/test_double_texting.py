"""A message to a busy session (`on_busy`) and forks, through the client against a real
`stepwise serve` (the demo agent: ``steps: N`` takes N steps of 20 ms)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from stepwise import Stepwise, StepwiseError


def running_session(client: Stepwise) -> tuple[str, str]:
    """A new session whose execution is running a long demo run: (session, execution)."""
    answer = client.send_message("steps: 1000", session={"name": f"busy-{uuid.uuid4().hex[:10]}"})
    execution = answer["execution"]["id"]
    deadline = time.monotonic() + 60
    while client.get_execution(execution)["status"] != "running":
        assert time.monotonic() < deadline, "the execution never started"
        time.sleep(0.02)
    return answer["session_id"], execution


def users(client: Stepwise, session: str) -> list[str]:
    return [m["content"] for m in client.list_messages(session, roles="user")]


def test_reject_raises_session_busy_and_writes_nothing(client: Stepwise) -> None:
    session, execution = running_session(client)
    with pytest.raises(StepwiseError) as refused:
        client.post_message(session, "2+2", on_busy="reject")
    assert (refused.value.status, refused.value.code) == (409, "session_busy")
    assert users(client, session) == ["steps: 1000"]
    client.cancel_execution(execution)
    assert client.wait(execution, timeout=60)["status"] == "cancelled"
    answer = client.post_message(session, "2+2", on_busy="reject")
    assert client.wait(answer["execution"]["id"], timeout=60)["output"] == "4"


def test_interrupt_keeps_both_and_rollback_removes_the_busy_run(client: Stepwise) -> None:
    session, first = running_session(client)
    second = client.post_message(session, "3*3", on_busy="interrupt")["execution"]["id"]
    assert client.wait(first, timeout=60)["status"] == "cancelled"
    assert client.wait(second, timeout=60)["status"] == "completed"
    assert users(client, session) == ["steps: 1000", "3*3"]

    third = client.post_message(session, "steps: 1000")["execution"]["id"]
    deadline = time.monotonic() + 60
    while client.get_execution(third)["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    fourth = client.post_message(session, "5+5", on_busy="rollback")["execution"]["id"]
    assert client.wait(fourth, timeout=60)["output"] == "10"
    with pytest.raises(StepwiseError) as gone:
        client.get_execution(third)
    assert gone.value.status == 404
    assert users(client, session) == ["steps: 1000", "3*3", "5+5"]
    assert [e["id"] for e in client.list_executions(session)] == [first, second, fourth]


def test_on_busy_is_checked_before_sending(client: Stepwise) -> None:
    with pytest.raises(ValueError, match="on_busy"):
        client.post_message("00000000-0000-0000-0000-000000000000", "hi", on_busy="later")  # type: ignore[arg-type]


def test_a_fork_at_a_step_restores_there_and_leaves_the_original(client: Stepwise) -> None:
    answer = client.send_message("steps: 2", session={"name": f"fork-{uuid.uuid4().hex[:10]}"})
    session, first = answer["session_id"], answer["execution"]["id"]
    client.wait(first, timeout=60)
    second = client.post_message(session, "steps: 3")["execution"]["id"]
    client.wait(second, timeout=60)
    original: list[dict[str, Any]] = list(client.list_messages(session))

    fork = client.fork_session(session, execution_id=second, step_number=1, name=f"f-{uuid.uuid4().hex[:8]}")
    assert fork["id"] != session
    executions = list(client.list_executions(fork["id"]))
    assert [e["status"] for e in executions] == ["completed", "cancelled"]
    memory = client.get_memory(fork["id"])
    numbers = [(s["execution_id"] == executions[1]["id"], s["step_number"]) for s in memory["steps"]]
    assert numbers[-1] == (True, 1), numbers
    assert users(client, fork["id"]) == ["steps: 2", "steps: 3"]

    whole = client.fork_session(session)
    assert [m["content"] for m in client.list_messages(whole["id"])] == [m["content"] for m in original]
    assert list(client.list_messages(session)) == original
    with pytest.raises(StepwiseError) as missing:
        client.fork_session(session, execution_id=second, step_number=99)
    assert (missing.value.status, missing.value.field) == (422, "step_number")
