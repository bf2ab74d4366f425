"""AsyncStepwise against a real server (and, for retries, against counted mock transports)."""

from __future__ import annotations

import asyncio
import inspect
import socket
import uuid
from typing import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from stepwise import AsyncStepwise, Stepwise, StepwiseError
from stepwise.testing import LocalServer


@pytest.fixture
async def aclient(server: LocalServer) -> AsyncIterator[AsyncStepwise]:
    async with server.async_client() as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_every_sync_method_has_an_async_twin() -> None:
    for name, method in inspect.getmembers(Stepwise, callable):
        if name.startswith("_") or name in ("close",):
            continue
        twin = getattr(AsyncStepwise, name)
        assert inspect.signature(twin).parameters.keys() == inspect.signature(method).parameters.keys(), name


async def test_session_crud_and_lookup(aclient: AsyncStepwise) -> None:
    name = unique("async")
    assert await aclient.find_session(name) is None
    made = await aclient.session(name, title="async made")
    assert made["name"] == name
    assert (await aclient.session(name))["id"] == made["id"]
    assert (await aclient.get_session(made["id"]))["title"] == "async made"
    assert (await aclient.update_session(made["id"], status="archived"))["status"] == "archived"
    assert [s["id"] async for s in aclient.list_sessions(name=name, status="archived")] == [made["id"]]
    assert await aclient.delete_session(made["id"]) is None
    assert (await aclient.get_session(made["id"]))["status"] == "deleted"
    assert await aclient.find_session(name) is None
    assert (await aclient.health())["status"] == "ok"
    assert (await aclient.ready())["status"] == "ready"


async def test_lists_follow_cursors(aclient: AsyncStepwise) -> None:
    related_id = unique("apage")
    made = {
        (await aclient.create_session(related_type="apagination", related_id=related_id))["id"]
        for _ in range(5)
    }
    listed = [s["id"] async for s in aclient.list_sessions(related_id=related_id, related_type="apagination", page_size=2)]
    assert sorted(listed) == sorted(made)

    session = await aclient.create_session()
    execution = await aclient.open_execution(session["id"])
    for n in range(1, 5):
        await aclient.append_step(execution["id"], {"model_output": str(n)}, step_number=n)
    assert [s["step_number"] async for s in aclient.list_steps(execution["id"], page_size=3)] == [1, 2, 3, 4]


async def test_errors(aclient: AsyncStepwise) -> None:
    with pytest.raises(StepwiseError) as e:
        await aclient.get_execution(str(uuid.uuid4()))
    assert (e.value.status, e.value.code) == (404, "not_found")
    session = await aclient.create_session()
    with pytest.raises(StepwiseError) as e:
        await aclient.update_session(session["id"], status="deleted")
    assert (e.value.status, e.value.field) == (400, "status")


async def test_demo_agent_and_many_calls_at_once(aclient: AsyncStepwise) -> None:
    sessions = await asyncio.gather(*(aclient.create_session() for _ in range(5)))
    answers = await asyncio.gather(
        *(aclient.post_message(s["id"], f"{n}+{n}") for n, s in enumerate(sessions))
    )
    done = await asyncio.gather(*(aclient.wait(a["execution"]["id"], timeout=60) for a in answers))
    assert [str(d["output"]) for d in done] == [str(n + n) for n in range(5)]


async def test_external_execution_end_to_end(aclient: AsyncStepwise) -> None:
    session = await aclient.create_session()
    execution = await aclient.open_execution(session["id"], input={"q": "2+3"})
    step = {"kind": "action", "model_output": "adding", "observations": "5"}
    first = await aclient.append_step(execution["id"], step, step_number=1)
    assert (await aclient.append_step(execution["id"], step, step_number=1))["id"] == first["id"]
    snapshot = await aclient.save_snapshot(execution["id"], {"k": [1]}, step_number=1)
    assert (await aclient.get_snapshot(snapshot["id"]))["state"] == {"k": [1]}
    assert [s["id"] async for s in aclient.list_snapshots(execution["id"])] == [snapshot["id"]]
    with pytest.raises(TimeoutError):
        await aclient.wait(execution["id"], timeout=0.1)
    await aclient.complete_execution(execution["id"], output=5, final_message="5")
    finished = await aclient.wait(execution["id"])
    assert (finished["status"], finished["output"], finished["step_count"]) == ("completed", 5, 1)
    assert [e["id"] async for e in aclient.list_executions(session["id"])] == [execution["id"]]
    memory = await aclient.get_memory(session["id"])
    assert [s["step_number"] for s in memory["steps"]] == [1]

    document = await aclient.export_session(session["id"])
    copy = await aclient.import_session(document)
    assert copy["id"] != session["id"]
    assert [m["content"] async for m in aclient.list_messages(copy["id"])] == ["5"]


async def test_append_steps(aclient: AsyncStepwise) -> None:
    session = await aclient.create_session()
    execution = await aclient.open_execution(session["id"], input={"q": "count"})
    steps = [{"kind": "action", "model_output": str(n)} for n in range(1, 4)]
    batch = await aclient.append_steps(execution["id"], steps, first_step_number=1)
    assert ([s["step_number"] for s in batch["items"]], batch["created"]) == ([1, 2, 3], 3)
    again = await aclient.append_steps(execution["id"], steps, first_step_number=1, return_items=False)
    assert again is None
    assert [s["model_output"] async for s in aclient.list_steps(execution["id"])] == ["1", "2", "3"]


async def test_send_message_and_request(aclient: AsyncStepwise) -> None:
    answer = await aclient.send_message("6*7", session={"title": "async send"})
    assert str((await aclient.wait(answer["execution"]["id"], timeout=60))["output"]) == "42"
    got = await aclient.request("GET", f"/v1/sessions/{answer['session_id']}")
    assert got["title"] == "async send"
    fail = await aclient.open_execution(answer["session_id"])
    assert (await aclient.fail_execution(fail["id"], "no"))["status"] == "failed"
    ask = await aclient.open_execution(answer["session_id"])
    assert (await aclient.pause_execution(ask["id"], "which?"))["status"] == "paused"
    cancel = await aclient.open_execution(answer["session_id"])
    await aclient.cancel_execution(cancel["id"])
    assert (await aclient.wait(cancel["id"], timeout=60))["status"] == "cancelled"


# --- retries --------------------------------------------------------------------------


def counted(answer: Callable[[httpx.Request], httpx.Response]) -> tuple[list[httpx.Request], httpx.MockTransport]:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer(request)

    return seen, httpx.MockTransport(handler)


def unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, headers={"Retry-After": "0"})


async def test_async_retries_reads_and_not_writes() -> None:
    seen, transport = counted(unavailable)
    async with AsyncStepwise("http://x.test", max_retries=2, backoff=0.001, transport=transport) as c:
        with pytest.raises(StepwiseError) as e:
            await c.get_session("s1")
        assert (e.value.status, e.value.code) == (503, "server_error")
        assert len(seen) == 3
        writes: list[Callable[[], Awaitable[object]]] = [
            lambda: c.post_message("s1", "hi"),
            lambda: c.open_execution("s1"),
            lambda: c.append_step("e1", {}),
            lambda: c.import_session({}),
        ]
        for write in writes:
            seen.clear()
            with pytest.raises(StepwiseError):
                await write()
            assert len(seen) == 1
        seen.clear()
        with pytest.raises(StepwiseError):
            await c.append_step("e1", {}, step_number=1)
        assert len(seen) == 3


async def test_async_connection_refused_is_retried_then_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    sent = 0

    class Counting(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            nonlocal sent
            sent += 1
            return await super().handle_async_request(request)

    async with AsyncStepwise(f"http://127.0.0.1:{port}", max_retries=2, backoff=0.001, transport=Counting()) as c:
        with pytest.raises(StepwiseError) as e:
            await c.health()
    assert (e.value.code, e.value.status) == ("connection_error", None)
    assert sent == 3
