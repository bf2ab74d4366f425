"""`StepwiseSession`: the OpenAI Agents SDK's session protocol over a real Stepwise server."""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from typing import Any

import httpx
import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, SessionSettings, function_tool  # noqa: E402
from agents.memory.session import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from stepwise import AsyncStepwise, Stepwise, StepwiseError  # noqa: E402
from stepwise.openai_agents import METADATA_KEY, StepwiseSession, stepwise_name  # noqa: E402
from stepwise.testing import LocalServer  # noqa: E402


def unique(prefix: str = "oa") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def new_session(server: LocalServer):
    made: list[StepwiseSession] = []

    def make(session_id: str | None = None, **kwargs: Any) -> StepwiseSession:
        session = StepwiseSession(session_id or unique(), base_url=server.url, **kwargs)
        made.append(session)
        return session

    yield make


def realistic_turn() -> list[dict[str, Any]]:
    """The items one agent turn with a tool call saves (Responses API input items)."""
    return [
        {"role": "user", "content": "What's the weather in Paris? Use the tool."},
        {
            "id": "rs_68a1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "Call get_weather for Paris."}],
            "encrypted_content": None,
        },
        {
            "id": "fc_68a1",
            "type": "function_call",
            "call_id": "call_Zx9",
            "name": "get_weather",
            "arguments": '{"city": "Paris", "units": "metric"}',
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_Zx9", "output": "18 °C, light rain"},
        {
            "id": "msg_68a1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": "It's 18 °C with light rain in Paris.",
                 "annotations": [], "logprobs": []}
            ],
            # Keys the SDK or an application may add: kept as they are.
            "provider_data": {"model": "gpt-x", "latency_ms": 412.5, "flags": [True, False, None]},
            "extra": {"emoji": "🌧", "big": 2**53 - 1, "negative": -7, "nested": [[[{"k": "v"}]]]},
        },
    ]


async def test_implements_the_sdk_session_protocol(new_session) -> None:
    session = new_session()
    assert isinstance(session, Session)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([])  # nothing to do
    await session.add_items([{"role": "user", "content": "one"}])
    await session.add_items([{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}])
    contents = [item["content"] for item in await session.get_items()]
    assert contents == ["one", "two", "three"]
    assert [i["content"] for i in await session.get_items(limit=2)] == ["two", "three"]
    assert [i["content"] for i in await session.get_items(limit=10)] == ["one", "two", "three"]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == []

    # pop removes the latest item, whatever batch it came in.
    assert (await session.pop_item()) == {"role": "user", "content": "three"}
    assert (await session.pop_item()) == {"role": "assistant", "content": "two"}
    assert [i["content"] for i in await session.get_items()] == ["one"]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([{"role": "user", "content": "again"}])
    assert await session.get_items() == [{"role": "user", "content": "again"}]


async def test_session_settings_limit_is_the_default_of_get_items(new_session) -> None:
    session = new_session(session_settings=SessionSettings(limit=2))
    await session.add_items([{"role": "user", "content": str(i)} for i in range(5)])
    assert [i["content"] for i in await session.get_items()] == ["3", "4"]
    assert [i["content"] for i in await session.get_items(limit=4)] == ["1", "2", "3", "4"]
    as_dict = new_session(session.session_id, session_settings={"limit": 1})
    assert [i["content"] for i in await as_dict.get_items()] == ["4"]


async def test_realistic_items_round_trip_exactly(new_session) -> None:
    session = new_session()
    turn = realistic_turn()
    sent = copy.deepcopy(turn)
    await session.add_items(turn[:1])
    await session.add_items(turn[1:])
    assert turn == sent, "the caller's items are not changed"
    back = await session.get_items()
    assert back == sent
    assert json.dumps(back, sort_keys=True) == json.dumps(sent, sort_keys=True)
    # No backend id is added to the items.
    assert all(set(b) == set(s) for b, s in zip(back, sent))
    # Another instance (another process, in effect) reads the same.
    assert await new_session(session.session_id).get_items() == sent


async def test_odd_session_ids_map_to_stable_names_and_the_same_session(
    new_session, client: Stepwise
) -> None:
    suffix = uuid.uuid4().hex[:8]
    for raw in [
        f"user 42 / {suffix}",
        f"ünïcødé-{suffix}",
        f"../../etc/passwd-{suffix}",
        f"a..b-{suffix}",
        "x" * 100 + suffix,
        f"tab\tand\nnewline-{suffix}",
        f"{suffix}:{{json}}",
        f"🙂{suffix}",
    ]:
        name = stepwise_name(raw)
        assert name != raw and name.startswith("oa-"), raw
        assert stepwise_name(raw) == name, "stable"
        assert len(name) <= 64
        first, second = new_session(raw), new_session(raw)
        assert first.stepwise_name == name
        await first.add_items([{"role": "user", "content": raw}])
        assert await second.get_items() == [{"role": "user", "content": raw}], raw
        found = client.find_session(name)
        assert found is not None and found["metadata"][METADATA_KEY] == raw
        assert await first.stepwise_session_id() == await second.stepwise_session_id() == found["id"]
    # Reserved names and other ids that are not names are mapped; valid names are kept.
    for reserved in ["CON", "nul.txt", "index", "Metadata", "."]:
        assert stepwise_name(reserved).startswith("oa-")
    for valid in ["user-42", "a.b_c-D", "x" * 64, "550e8400-e29b-41d4-a716-446655440000"]:
        assert stepwise_name(valid) == valid
    assert stepwise_name("user 42") != stepwise_name("user_42") != stepwise_name("user-42")
    assert stepwise_name("user 42") == "oa-user-42-" + __import__("hashlib").sha256(
        b"user 42"
    ).hexdigest()[:16]
    with pytest.raises(ValueError):
        StepwiseSession("")


async def test_two_instances_share_one_conversation_and_interleave(new_session) -> None:
    sid = unique()
    a, b = new_session(sid), new_session(sid)
    await a.add_items([{"role": "user", "content": "a1"}])
    await b.add_items([{"role": "user", "content": "b1"}])  # b learns the version here
    await a.add_items([{"role": "user", "content": "a2"}])  # a's version is stale: 409, retried
    # Concurrent writers: every batch lands once.
    await asyncio.gather(*(x.add_items([{"role": "user", "content": f"c{i}"}])
                           for i, x in enumerate([a, b, a, b])))
    contents = [i["content"] for i in await a.get_items()]
    assert contents[:3] == ["a1", "b1", "a2"]
    assert sorted(contents[3:]) == ["c0", "c1", "c2", "c3"]
    assert (await b.pop_item())["content"] == contents[-1]
    assert len(await a.get_items()) == 6


async def test_the_same_add_sent_twice_at_one_version_is_stored_once(
    new_session, server: LocalServer
) -> None:
    session = new_session()
    await session.add_items([{"role": "user", "content": "hi"}])
    sid = await session.stepwise_session_id()
    path = f"/v1/sessions/{sid}/items"
    body = {"items": [{"role": "assistant", "content": "hello"}], "version": 1, "op_id": "retry-1"}
    async with server.async_client() as client:
        first = await client.request("POST", path, json=body, idempotent=True)
        again = await client.request("POST", path, json=body, idempotent=True)
    assert first == again == {"added": 1, "version": 2}
    assert await session.get_items() == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


class LoseFirstAnswer(httpx.AsyncBaseTransport):
    """Sends every request, but drops the answer to the first write to the items (as a
    connection that breaks after the server committed)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method != "GET" and "/items" in request.url.path and not self.lost:
            await response.aread()
            await response.aclose()
            self.lost += 1
            raise httpx.ReadError("connection lost after the request was sent", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_write_whose_answer_was_lost_is_retried_without_duplicating(
    server: LocalServer,
) -> None:
    for operation in ["add", "pop", "clear"]:
        transport = LoseFirstAnswer()
        client = AsyncStepwise(server.url, transport=transport, backoff=0.01)
        session = StepwiseSession(unique(), client=client)
        seed = StepwiseSession(session.session_id, base_url=server.url)
        await seed.add_items([{"role": "user", "content": "1"}, {"role": "user", "content": "2"}])
        if operation == "add":
            await session.add_items([{"role": "user", "content": "3"}])
            expected = ["1", "2", "3"]
        elif operation == "pop":
            assert (await session.pop_item()) == {"role": "user", "content": "2"}
            expected = ["1"]
        else:
            await session.clear_session()
            expected = []
        assert transport.lost == 1, operation
        assert [i["content"] for i in await seed.get_items()] == expected, operation
        await client.aclose()
        await seed.aclose()


async def test_a_cancelled_add_still_completes(new_session) -> None:
    session = new_session()
    task = asyncio.create_task(session.add_items([{"role": "user", "content": "kept"}]))
    await asyncio.sleep(0)  # the request is on its way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await session.get_items() == [{"role": "user", "content": "kept"}]
    await session.add_items([{"role": "user", "content": "next"}])
    assert len(await session.get_items()) == 2


async def test_clients_given_or_refused(server: LocalServer) -> None:
    sid = unique()
    with Stepwise(server.url) as sync_client:
        via_sync = StepwiseSession(sid, client=sync_client)
        await via_sync.add_items([{"role": "user", "content": "x"}])
    async with server.async_client() as async_client:
        via_async = StepwiseSession(sid, client=async_client)
        assert await via_async.get_items() == [{"role": "user", "content": "x"}]
        await via_async.aclose()  # a given client stays open
        assert await via_async.get_items() == [{"role": "user", "content": "x"}]
    with pytest.raises(TypeError):
        StepwiseSession(sid, client=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        StepwiseSession(sid, client=sync_client, base_url=server.url)


async def test_errors_are_stepwise_errors(server: LocalServer) -> None:
    session = StepwiseSession(unique(), base_url="http://127.0.0.1:9")
    with pytest.raises(StepwiseError) as caught:
        await session.get_items()
    assert caught.value.code == "connection_error"
    real = StepwiseSession(unique(), base_url=server.url)
    with pytest.raises(StepwiseError) as caught:
        await real.add_items([{"role": "user", "content": "x"}, "not an object"])  # type: ignore[list-item]
    assert caught.value.status == 400
    assert await real.get_items() == []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 °C and light rain in {city}"


async def test_a_runner_conversation_is_kept_in_stepwise(
    new_session, client: Stepwise
) -> None:
    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
            [assistant_message("It is 18 °C in Paris.", item_id="msg_1")],
            [assistant_message("You asked about Paris.", item_id="msg_2")],
        ]
    )
    agent = Agent(name="Assistant", instructions="Be brief.", model=model, tools=[get_weather])
    session = new_session()

    first = await Runner.run(agent, "Weather in Paris?", session=session)
    assert first.final_output == "It is 18 °C in Paris."
    second = await Runner.run(agent, "What did I ask about?", session=new_session(session.session_id))
    assert second.final_output == "You asked about Paris."

    # Turn 2's model call saw turn 1's history, read back from Stepwise.
    seen = model.last_call.input if model.last_call else []
    texts = json.dumps(seen, ensure_ascii=False)
    assert "Weather in Paris?" in texts and "call_1" in texts and "18 °C" in texts
    assert "What did I ask about?" in texts

    items = await session.get_items()
    kinds = [item.get("type", "message") for item in items]
    assert kinds == [
        "message", "function_call", "function_call_output", "message", "message", "message"
    ]

    # In Stepwise: the messages, and the tool call and its output as steps.
    sid = await session.stepwise_session_id()
    # The messages follow the steps by a moment.
    deadline = time.monotonic() + 30
    while True:
        messages = [(m["role"], m["content"]) for m in client.list_messages(sid)]
        if len(messages) >= 4 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.02)
    assert messages == [
        ("user", "Weather in Paris?"),
        ("assistant", "It is 18 °C in Paris."),
        ("user", "What did I ask about?"),
        ("assistant", "You asked about Paris."),
    ]
    (execution,) = list(client.list_executions(sid))
    assert execution["agent_type"] == "external" and execution["metadata"] == {"conversation": "items"}
    steps = list(client.list_steps(execution["id"]))
    calls = [call for step in steps for call in step["tool_calls"]]
    assert calls == [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert any(step["observations"] == "18 °C and light rain in Paris" for step in steps)
    assert all(step["output"]["items_op"] == "add" for step in steps)


async def test_calls_survive_a_server_restart_and_a_cancelled_read() -> None:
    from stepwise.testing import local_server

    with local_server() as own:
        session = StepwiseSession(unique(), base_url=own.url)
        await session.add_items([{"role": "user", "content": "before"}])
        own.restart()  # the kept-alive connection is gone
        await session.add_items([{"role": "user", "content": "after"}])
        assert [i["content"] for i in await session.get_items()] == ["before", "after"]
        read = asyncio.create_task(session.get_items())
        await asyncio.sleep(0)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        assert [i["content"] for i in await session.get_items(limit=1)] == ["after"]
        await session.aclose()
