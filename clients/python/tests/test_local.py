"""`Stepwise.local()` and ``unix:`` base URLs: an embedded server started from Python, attached
to by other clients and processes, restarted by an attached client when its owner goes; the
adapters, the worker and the event stream over the Unix socket.

The server binary is found as users' code finds it: ``$STEPWISE_BIN``, else the installed
wheel's, else ``stepwise`` on ``PATH`` (CI runs this file once more in a virtualenv holding
only the wheel, with no ``STEPWISE_BIN`` and no Rust toolchain: ``STEPWISE_REQUIRE_WHEEL=1``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from stepwise import AsyncStepwise, Stepwise, StepwiseError
from stepwise._local import _redacted, _wheel_binary, find_binary
from stepwise.worker import Run, Worker

PATIENCE = 60.0


def wait_until(check: Any, what: str, timeout: float = PATIENCE) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own child not reaped yet) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def python(script: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """Runs `script` in another Python process of this interpreter (this test's environment)."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def answer_of(client: Stepwise, text: str, session: str | None = None) -> Any:
    if session is None:
        posted = client.send_message(text, session={"name": f"local-{uuid.uuid4().hex[:8]}"})
    else:
        posted = client.post_message(session, text)
    return client.wait(posted["execution"]["id"], timeout=PATIENCE)


def test_one_call_starts_a_private_server_that_answers_and_close_stops_it(tmp_path: Path) -> None:
    with Stepwise.local(data_dir=tmp_path) as client:
        server = client.local_server
        assert server.owner and server.pid and alive(server.pid)
        assert client.base_url == f"unix:{server.socket}"
        assert Path(server.socket).parent == tmp_path.resolve()
        mode = stat.S_IMODE(os.stat(server.socket).st_mode)
        assert mode == 0o600, oct(mode)
        assert server.database == f"sqlite://{tmp_path.resolve() / 'stepwise.db'}"
        done = answer_of(client, "2+3")
        assert done["status"] == "completed" and done["output"] == "5", done
        pid = server.pid
    # close(): the server is stopped, its socket and state file gone.
    wait_until(lambda: not alive(pid), "the server to stop")
    assert not Path(server.socket).exists()
    assert not (tmp_path / "stepwise.db.local.json").exists()
    # The database stays: a new server finds the conversation.
    with Stepwise.local(data_dir=tmp_path) as again:
        assert len(list(again.list_sessions())) == 1 and again.local_server.pid != pid


def test_a_second_client_and_another_process_attach_instead_of_starting_a_server(tmp_path: Path) -> None:
    owner = Stepwise.local(data_dir=tmp_path)
    try:
        session = owner.create_session(name="shared")
        second = Stepwise.local(data_dir=tmp_path)
        assert not second.local_server.owner
        assert second.local_server.pid == owner.local_server.pid
        assert second.get_session(session["id"])["name"] == "shared"
        second.close()  # an attached client's close leaves the owner's server running
        assert alive(owner.local_server.pid)
        other = python(
            """
            import json, sys
            from stepwise import Stepwise
            with Stepwise.local(data_dir=sys.argv[1]) as client:
                names = [s["name"] for s in client.list_sessions()]
                print(json.dumps({"pid": client.local_server.pid, "owner": client.local_server.owner, "names": names}))
            """,
            str(tmp_path),
        )
        out, err = other.communicate(timeout=PATIENCE)
        assert other.returncode == 0, err
        seen = json.loads(out)
        assert seen == {"pid": owner.local_server.pid, "owner": False, "names": ["shared"]}
        assert alive(owner.local_server.pid), "the other process's exit left the owner's server running"
    finally:
        owner.close()


OWNER_SCRIPT = """
    import sys
    from stepwise import Stepwise
    client = Stepwise.local(data_dir=sys.argv[1])
    session = client.create_session(name="before")
    print(client.local_server.pid, session["id"], flush=True)
    sys.stdin.readline()
    {ending}
"""


@pytest.mark.parametrize("ending", ["client.close()", "sys.exit(0)", "killed"])
def test_when_the_owner_goes_an_attached_client_starts_its_own_server_and_loses_nothing(
    tmp_path: Path, ending: str
) -> None:
    owner = python(OWNER_SCRIPT.format(ending="" if ending == "killed" else ending), str(tmp_path))
    try:
        first = owner.stdout.readline().split()
        assert len(first) == 2, owner.stderr.read()
        old_pid, session_id = int(first[0]), first[1]
        attached = Stepwise.local(data_dir=tmp_path)
        assert not attached.local_server.owner and attached.local_server.pid == old_pid
        if ending == "killed":
            owner.kill()  # SIGKILL: no atexit; the server notices its parent is gone and stops
        else:
            owner.stdin.write("\n")
            owner.stdin.flush()
        owner.wait(timeout=PATIENCE)
        wait_until(lambda: not alive(old_pid), "the owner's server to stop")
        # The next call starts a server of its own and answers, with what the old one saved.
        assert attached.get_session(session_id)["name"] == "before"
        assert attached.local_server.owner and attached.local_server.pid != old_pid
        done = answer_of(attached, "6*7", session=session_id)
        assert done["output"] == "42", done
        attached.close()
    finally:
        if owner.poll() is None:
            owner.kill()


def test_calls_of_the_fast_paths_and_the_event_stream_survive_an_owner_that_goes(tmp_path: Path) -> None:
    owner = python(OWNER_SCRIPT.format(ending="client.close()"), str(tmp_path))
    old_pid, session_id = owner.stdout.readline().split()
    attached = Stepwise.local(data_dir=tmp_path)
    events = attached.events(session_id)
    owner.stdin.write("\n")
    owner.stdin.flush()
    owner.wait(timeout=PATIENCE)
    wait_until(lambda: not alive(int(old_pid)), "the owner's server to stop")
    # The event stream reconnects to the new server (started by the stream itself or the post).
    posted = attached.post_message(session_id, "1+1")
    names = []
    for event in events:
        names.append(event.type)
        if event.type == "execution.completed":
            break
    assert "message.created" in names, names
    assert attached.wait(posted["execution"]["id"], timeout=PATIENCE)["output"] == "2"
    attached.close()


def test_files_database_keeps_sessions_as_json_files(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    with Stepwise.local(f"files://{folder}", data_dir=tmp_path / "data") as client:
        done = answer_of(client, "10-4")
        assert done["output"] == "6"
        assert client.local_server.database == f"files://{folder.resolve()}"
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files, "the sessions are files in the folder"
    assert not any(p.suffix == ".db" for p in files)
    assert not (tmp_path / "sessions.local.json").exists(), "the state file goes with its server"


def test_a_server_that_cannot_start_says_why_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(StepwiseError) as failed:
        Stepwise.local(data_dir=tmp_path, args=("--workers", "not-a-number"))
    assert failed.value.code == "local_server_failed"
    assert "not-a-number" in str(failed.value)
    with pytest.raises(ValueError, match="sqlite://"):
        Stepwise.local("mysql://nope", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="not a file"):
        Stepwise.local(data_dir=tmp_path, binary=tmp_path / "no-such-binary")


def test_a_worker_and_the_adapters_take_a_local_client(tmp_path: Path) -> None:
    client = Stepwise.local(data_dir=tmp_path)
    try:
        worker = Worker(Stepwise.local(data_dir=tmp_path), wait_s=1)
        agent_type = f"local-{uuid.uuid4().hex[:8]}"

        @worker.agent(agent_type)
        def shout(run: Run) -> str:
            run.step(model_output="shouting")
            return run.input_text.upper()

        with worker:
            posted = client.send_message("hello", agent=agent_type, session={"name": "w"})
            done = client.wait(posted["execution"]["id"], timeout=PATIENCE)
        assert done["status"] == "completed" and done["output"] == "HELLO", done
        steps = list(client.list_steps(posted["execution"]["id"]))
        assert [s["model_output"] for s in steps] == ["shouting"]

        from stepwise.openai_agents import StepwiseSession

        async def items() -> list[Any]:
            async_client = AsyncStepwise.local(data_dir=tmp_path)
            try:
                session = StepwiseSession(f"oa-{uuid.uuid4().hex[:8]}", client=async_client)
                await session.add_items([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}])
                popped = await session.pop_item()
                return [popped, await session.get_items()]
            finally:
                await async_client.aclose()

        popped, left = asyncio.run(items())
        assert popped["content"] == "two" and [i["content"] for i in left] == ["one"]
    finally:
        client.close()


def test_a_plain_client_takes_a_unix_base_url(tmp_path: Path) -> None:
    with Stepwise.local(data_dir=tmp_path) as owner:
        with Stepwise(f"unix:{owner.local_server.socket}") as client:
            assert answer_of(client, "3*3")["output"] == "9"
            with pytest.raises(StepwiseError) as missing:
                client.get_session("00000000-0000-0000-0000-000000000000")
            assert missing.value.status == 404 and missing.value.code == "not_found"
    with pytest.raises(ValueError, match="unix:"):
        Stepwise("127.0.0.1:7777")
    with pytest.raises(ValueError, match="socket's path"):
        Stepwise("unix:")
    # No server on the socket: a clear connection error naming it.
    with Stepwise(f"unix:{tmp_path / 'none.sock'}", max_retries=0) as client:
        with pytest.raises(StepwiseError) as refused:
            client.create_session(name="nowhere")
        assert refused.value.code == "connection_error"
        assert "none.sock" in str(refused.value)


def test_the_installed_wheel_s_binary_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _wheel_binary()
    if wheel is None:
        if os.environ.get("STEPWISE_REQUIRE_WHEEL") == "1":
            pytest.fail("the wheel's stepwise binary is not installed beside this Python")
        pytest.skip("no wheel installed here (pip install . from a clone)")
    monkeypatch.delenv("STEPWISE_BIN", raising=False)
    assert find_binary() == wheel
    assert find_binary(wheel) == str(Path(wheel).resolve())
    version = subprocess.run([wheel, "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and "stepwise" in version.stdout.lower(), version


def test_a_database_password_stays_out_of_messages() -> None:
    assert _redacted("postgres://app:s3cr3t@db:5432/stepwise") == "postgres://app:***@db:5432/stepwise"
    assert _redacted("postgres://app:a:b@c@db/stepwise") == "postgres://app:***@db/stepwise"
    assert _redacted("sqlite:///srv/app/chat.db") == "sqlite:///srv/app/chat.db"
