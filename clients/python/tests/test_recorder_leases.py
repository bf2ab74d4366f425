"""Recorder leases: an app recording its own agent (`StepwiseMemory`) that dies or freezes no
longer blocks its session. A real `stepwise serve` with a 2-second lease, real child processes
killed with SIGKILL and frozen with SIGSTOP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("smolagents")

from smolagents.memory import ActionStep, TaskStep  # noqa: E402

from stepwise import Stepwise, StepwiseError  # noqa: E402
from stepwise.smolagents import StepwiseMemory  # noqa: E402
from stepwise.testing import LocalServer, local_server  # noqa: E402
from test_smolagents import code_agent, wait_for  # noqa: E402

TESTS = str(Path(__file__).parent)
LEASE_S = 2


@pytest.fixture(scope="module")
def leased() -> Iterator[LocalServer]:
    with local_server(env={"STEPWISE_DEMO_STEP_MS": "20"}, args=["--lease-secs", str(LEASE_S)]) as s:
        yield s


@pytest.fixture
def client(leased: LocalServer) -> Iterator[Stepwise]:
    with Stepwise(leased.url) as c:
        yield c


def executions(client: Stepwise, session_id: str) -> list[dict]:
    return list(client.list_executions(session_id))


def test_an_opened_execution_carries_its_lease_and_a_write_renews_it(client):
    session = client.create_session()
    opened = client.open_execution(session["id"], input={"task": "x"})
    assert isinstance(opened["lease"], str) and opened["lease"]
    assert 0 < opened["heartbeat_interval_s"] < LEASE_S
    # Silent for three leases: the client's background heartbeats keep it.
    time.sleep(3 * LEASE_S)
    assert client.get_execution(opened["id"])["status"] == "running"
    client.append_step(opened["id"], {"kind": "action", "model_output": "late"}, step_number=1)
    done = client.complete_execution(opened["id"], output="ok")
    assert done["status"] == "completed"
    # Without a lease: no token, held running as before leases.
    plain = client.open_execution(session["id"], lease=False)
    assert plain["lease"] is None and plain["heartbeat_interval_s"] is None
    client.fail_execution(plain["id"], "done with it")


def test_a_closed_client_stops_renewing_and_the_server_fails_the_execution(leased, client):
    session = client.create_session()
    recorder = Stepwise(leased.url)
    opened = recorder.open_execution(session["id"])
    recorder.append_step(opened["id"], {"kind": "action", "model_output": "one"}, step_number=1)
    recorder.close()  # as if its process were gone: no heartbeat any more
    failed = wait_for(
        lambda: (e := client.get_execution(opened["id"]))["status"] == "failed" and e,
        what="the silent recorder's execution failed",
    )
    assert "recorder stopped" in failed["error_message"]
    assert [s["step_number"] for s in client.list_steps(opened["id"])] == [1]
    # A recorder that comes back is told so.
    with Stepwise(leased.url) as late:
        late._leases.hold({"id": opened["id"], "lease": opened["lease"]})
        with pytest.raises(StepwiseError) as caught:
            late.append_step(opened["id"], {"kind": "action"}, step_number=2)
        assert caught.value.code == "lease_lost"
        assert late.lease_lost(opened["id"])


KILLED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from stepwise import Stepwise
    from stepwise.smolagents import StepwiseMemory
    sys.path.insert(0, {tests!r})
    from test_smolagents import code_agent, code
    from smolagents.memory import ActionStep

    memory = StepwiseMemory(Stepwise({url!r}), session={session!r})

    def die(step, agent):
        if step.step_number == 3:
            memory.flush()  # steps 1-2 are stored
            os.kill(os.getpid(), signal.SIGKILL)

    agent = code_agent(
        [code("s%d" % i, "v%d = %d" % (i, i)) for i in range(1, 8)],
        step_callbacks={{ActionStep: die}},
    )
    memory.attach(agent)
    agent.run("A long task")
    """
)


def test_a_message_queued_behind_a_killed_recorder_runs(leased, client):
    name = f"killed-{uuid.uuid4().hex[:8]}"
    script = KILLED_CHILD.format(tests=TESTS, url=leased.url, session=name)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]
    session = client.session(name)
    (recorded,) = executions(client, session["id"])

    # The next message of the session, to the built-in demo agent, waits behind it...
    queued = client.post_message(session["id"], "hello after the crash")
    execution_id = queued["execution"]["id"]
    # ...and runs once the dead recorder's lease runs out.
    done = client.wait(execution_id, timeout=60)
    assert done["status"] == "completed", done
    recorded = client.get_execution(recorded["id"])
    assert recorded["status"] == "failed"
    assert "recorder stopped" in recorded["error_message"]
    # The steps the recorder saved are kept, and a new agent restores them.
    assert [s["step_number"] for s in client.list_steps(recorded["id"])][:3] == [1, 2, 3]
    agent = code_agent([])
    StepwiseMemory(client, session=name).attach(agent)
    actions = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert [s.step_number for s in actions][:2] == [1, 2]
    assert isinstance(agent.memory.steps[0], TaskStep)


FROZEN_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from stepwise import Stepwise
    from stepwise.smolagents import StepwiseMemory
    sys.path.insert(0, {tests!r})
    from test_smolagents import code_agent, code
    from smolagents.memory import ActionStep

    memory = StepwiseMemory(Stepwise({url!r}), session={session!r})

    def pause_here(step, agent):
        if step.step_number == 2:
            memory.flush()  # steps 1-2 are stored
            with open({ready!r}, "w") as f:
                f.write("frozen next")
            time.sleep(1.0)  # the test freezes the process meanwhile

    script = [code("s%d" % i, "v%d = %d" % (i, i)) for i in range(1, 4)]
    script.append(code("answer", "final_answer('thawed')"))
    agent = code_agent(script, step_callbacks={{ActionStep: pause_here}})
    memory.attach(agent)
    print(json.dumps(agent.run("A task that gets frozen")))
    assert memory.flush()
    print(json.dumps({{"errors": memory.errors if hasattr(memory, "errors") else 0}}))
    """
)


def test_a_frozen_recorder_that_thaws_goes_on_in_a_new_execution(leased, client, tmp_path):
    name = f"frozen-{uuid.uuid4().hex[:8]}"
    ready = tmp_path / "ready"
    script = FROZEN_CHILD.format(tests=TESTS, url=leased.url, session=name, ready=str(ready))
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for(ready.exists, timeout=60, what="the child reached step 2")
        os.kill(child.pid, signal.SIGSTOP)
        session = client.session(name)
        (first,) = executions(client, session["id"])
        wait_for(
            lambda: client.get_execution(first["id"])["status"] == "failed",
            what="the frozen recorder's execution failed",
        )
        os.kill(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 0, err.decode()[-3000:]
    assert json.loads(out.decode().splitlines()[0]) == "thawed", "the agent never saw an error"
    assert b"lost its lease" in err, err.decode()[-3000:]
    first, second = sorted(executions(client, session["id"]), key=lambda e: e["created_at"])
    assert first["status"] == "failed" and "recorder stopped" in first["error_message"]
    assert second["status"] == "completed"
    assert second["input"]["continues"] == first["id"]
    kept = [s["step_number"] for s in client.list_steps(first["id"])]
    went_on = [s["step_number"] for s in client.list_steps(second["id"])]
    assert kept[:3] == [1, 2, 3][: len(kept)] and went_on, (kept, went_on)
    assert "final_answer" in [s["kind"] for s in client.list_steps(second["id"])]
