"""`StepwiseSessionService`: Google ADK's session service over a real Stepwise server.

Each test uses app names of its own on the shared server; the tenant test runs a server with
API keys.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.cli.agent_test_runner import MockModel  # noqa: E402
from google.adk.errors import StaleSessionError  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.errors.session_not_found_error import SessionNotFoundError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402

from stepwise import AsyncStepwise, Stepwise  # noqa: E402
from stepwise.adk import SNAPSHOT_EVERY, StepwiseSessionService, _Wire, session_name  # noqa: E402
from stepwise.testing import LocalServer, find_binary, local_server  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "adk.md"


def app() -> str:
    return f"app-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def service(server: LocalServer):
    svc = StepwiseSessionService(base_url=server.url)
    yield svc
    await svc.close()


async def fresh(server: LocalServer) -> StepwiseSessionService:
    """A second service, as another process would have: nothing cached."""
    return StepwiseSessionService(base_url=server.url)


def user_text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part.from_text(text=text)])


def get_weather(city: str) -> dict:
    """The weather of a city."""
    return {"city": city, "forecast": "sunny", "celsius": 21.5}


# --- a real agent turn ---------------------------------------------------------------------------


async def test_a_runner_turn_is_stored_exactly_and_shown_as_messages_and_steps(
    service: StepwiseSessionService, server: LocalServer
) -> None:
    name = app()
    model = MockModel.create([
        types.Content(role="model", parts=[types.Part.from_function_call(name="get_weather", args={"city": "Paris"})]),
        types.Content(role="model", parts=[types.Part.from_text(text="It is sunny in Paris.")]),
    ])
    agent = LlmAgent(name="helper", model=model, tools=[get_weather], output_key="last_answer")
    runner = Runner(agent=agent, app_name=name, session_service=service)
    await service.create_session(app_name=name, user_id="ann", session_id="ticket-7")
    produced = [
        e async for e in runner.run_async(user_id="ann", session_id="ticket-7", new_message=user_text("Weather in Paris?"))
    ]
    assert [e.author for e in produced] == ["helper", "helper", "helper"]

    other = await fresh(server)
    restored = await other.get_session(app_name=name, user_id="ann", session_id="ticket-7")
    await other.close()
    assert restored is not None
    assert restored.state == {"last_answer": "It is sunny in Paris."}
    # The user's message and the three events, equal to what the runner produced.
    assert len(restored.events) == 4
    assert restored.events[0].content == user_text("Weather in Paris?")
    assert [e.model_dump() for e in restored.events[1:]] == [e.model_dump() for e in produced]

    # In Stepwise: messages for the texts, the tool call and its result as steps.
    client = server.client
    [found] = list(client.list_sessions(related_type=f"adk:{name}", related_id="ann"))
    assert found["name"] == session_name(name, "ann", "ticket-7")
    messages = [(m["role"], m["content"]) for m in client.list_messages(found["id"], roles=["user", "assistant"])]
    assert messages == [("user", "Weather in Paris?"), ("assistant", "It is sunny in Paris.")]
    [conversation] = [e for e in client.list_executions(found["id"]) if e["metadata"].get("conversation") == "items"]
    steps = list(client.list_steps(conversation["id"]))
    assert [s["kind"] for s in steps] == ["user_input", "action", "action", "action"]
    assert steps[1]["tool_calls"][0]["name"] == "get_weather"
    assert steps[1]["tool_calls"][0]["arguments"] == {"city": "Paris"}
    assert "sunny" in steps[2]["observations"]
    assert steps[3]["model_output"] == "It is sunny in Paris."


async def test_events_are_stored_exactly_as_adk_dumps_them(service: StepwiseSessionService, server: LocalServer) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u")
    event = Event(
        invocation_id="inv",
        author="user",
        timestamp=1700000000.123456,
        content=types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x00\xffimage", mime_type="image/png")]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=7, total_token_count=9),
        custom_metadata={"unicode": "é🌧", "big": 2**53 - 1, "nested": [[{"k": None}]]},
        actions=EventActions(state_delta={"note": "kept"}),
    )
    await service.append_event(session, event)
    other = await fresh(server)
    got = await other.get_session(app_name=name, user_id="u", session_id=session.id)
    await other.close()
    assert got == session
    assert got.events[0].timestamp == 1700000000.123456
    assert got.events[0].content.parts[0].inline_data.data == b"\x00\xffimage"
    # The stored item holds the event as ADK's database service dumps it.
    stepwise_id = server.client.find_session(session_name(name, "u", session.id))["id"]
    items = server.client.request("GET", f"/v1/sessions/{stepwise_id}/items")["items"]
    assert items[0]["adk_event"] == event.model_dump(exclude_none=True, mode="json")


async def test_an_event_with_parallel_calls_shows_every_call(service: StepwiseSessionService, server: LocalServer) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u")
    calls = Event(author="helper", timestamp=10.0, content=types.Content(role="model", parts=[
        types.Part.from_text(text="Checking both."),
        types.Part.from_function_call(name="get_weather", args={"city": "Paris"}),
        types.Part.from_function_call(name="get_weather", args={"city": "Oslo"}),
    ]))
    answers = Event(author="helper", timestamp=11.0, content=types.Content(role="user", parts=[
        types.Part.from_function_response(name="get_weather", response={"forecast": "sunny"}),
        types.Part.from_function_response(name="get_weather", response={"forecast": "snow"}),
    ]))
    await service.append_event(session, calls)
    await service.append_event(session, answers)
    other = StepwiseSessionService(base_url=server.url, cache_events=False)
    assert (await other.get_session(app_name=name, user_id="u", session_id=session.id)).events == [calls, answers]
    last = await other.get_session(app_name=name, user_id="u", session_id=session.id, config=GetSessionConfig(num_recent_events=1))
    assert last.events == [answers]
    since = await other.get_session(app_name=name, user_id="u", session_id=session.id, config=GetSessionConfig(after_timestamp=10.5))
    assert since.events == [answers]
    await other.close()
    stepwise_id = server.client.find_session(session_name(name, "u", session.id))["id"]
    [conversation] = [e for e in server.client.list_executions(stepwise_id) if e["metadata"].get("conversation") == "items"]
    first, second = server.client.list_steps(conversation["id"])
    assert [c["arguments"]["city"] for c in first["tool_calls"]] == ["Paris", "Oslo"]
    assert first["model_output"] == "Checking both."
    assert "sunny" in second["observations"] and "snow" in second["observations"]


# --- state scopes ---------------------------------------------------------------------------------


async def test_state_is_shared_by_scope_and_temp_is_never_stored(
    service: StepwiseSessionService, server: LocalServer
) -> None:
    name = app()
    s1 = await service.create_session(
        app_name=name, user_id="u1", session_id="s1",
        state={"app:plan": "pro", "user:lang": "fr", "draft": 1, "temp:scratch": "x"},
    )
    assert s1.state == {"app:plan": "pro", "user:lang": "fr", "draft": 1}
    await service.append_event(
        s1,
        Event(author="agent", actions=EventActions(state_delta={"app:k": "a", "user:k": "u", "draft": 2, "temp:t": 1})),
    )
    assert s1.state["temp:t"] == 1  # the running invocation sees temp: state

    other = await fresh(server)
    same_user = await other.create_session(app_name=name, user_id="u1", session_id="s2")
    other_user = await other.create_session(app_name=name, user_id="u2", session_id="s3")
    assert same_user.state == {"app:plan": "pro", "app:k": "a", "user:lang": "fr", "user:k": "u"}
    assert other_user.state == {"app:plan": "pro", "app:k": "a"}
    again = await other.get_session(app_name=name, user_id="u1", session_id="s1")
    assert again.state == {"app:plan": "pro", "app:k": "a", "user:lang": "fr", "user:k": "u", "draft": 2}
    assert "temp:t" not in again.events[0].actions.state_delta
    assert await other.get_user_state(app_name=name, user_id="u1") == {"lang": "fr", "k": "u"}
    assert await other.get_user_state(app_name=name, user_id="nobody") == {}
    # The state documents are archived: the retention cleaner leaves them alone.
    docs = list(server.client.list_sessions(related_type="adk-state"))
    assert docs and all(d["status"] == "archived" for d in docs)
    listed = await other.list_sessions(app_name=name)
    assert {s.id: s.state for s in listed.sessions} == {
        "s1": again.state, "s2": same_user.state, "s3": other_user.state,
    }
    await other.close()


async def test_concurrent_user_state_writes_are_all_kept(service: StepwiseSessionService) -> None:
    name = app()
    sessions = [await service.create_session(app_name=name, user_id="u") for _ in range(4)]
    await asyncio.gather(*[
        service.append_event(s, Event(author="agent", actions=EventActions(state_delta={f"user:k{i}": i})))
        for i, s in enumerate(sessions)
    ])
    assert await service.get_user_state(app_name=name, user_id="u") == {f"k{i}": i for i in range(4)}


async def test_session_state_survives_a_writer_that_stopped_before_its_snapshot(
    service: StepwiseSessionService, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u", state={"a": 1})
    await service.append_event(session, Event(author="agent", actions=EventActions(state_delta={"b": 2})))
    for _ in range(SNAPSHOT_EVERY - 2):
        await service.append_event(session, Event(author="agent"))
    crashed: list[int] = []

    async def crash(stepwise_id: str, state: Any, version: int) -> None:
        crashed.append(version)  # the event is stored, its snapshot never written

    monkeypatch.setattr(service, "_save_session_state", crash)
    await service.append_event(session, Event(author="agent", actions=EventActions(state_delta={"a": 3, "c": 4})))
    assert crashed == [SNAPSHOT_EVERY]
    other = await fresh(server)
    got = await other.get_session(app_name=name, user_id="u", session_id=session.id)
    recent = await other.get_session(
        app_name=name, user_id="u", session_id=session.id, config=GetSessionConfig(num_recent_events=0)
    )
    await other.close()
    assert got.state == {"a": 3, "b": 2, "c": 4}
    assert recent.state == {"a": 3, "b": 2, "c": 4}


async def test_the_state_snapshot_trails_the_latest_change_by_fewer_than_snapshot_every_events(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = app()
    service = StepwiseSessionService(base_url=server.url, cache_events=False)
    session = await service.create_session(app_name=name, user_id="u", state={"n": 0})
    saved: list[tuple[int, dict[str, Any]]] = []
    real_save = service._save_session_state

    async def save(stepwise_id: str, state: Any, version: int) -> None:
        saved.append((version, dict(state)))
        await real_save(stepwise_id, state, version)

    monkeypatch.setattr(service, "_save_session_state", save)
    changes = {3, 5, 20, 36}
    for i in range(1, 41):
        delta = {"n": i, "temp:t": i} if i in changes else {}
        await service.append_event(session, Event(author="agent", invocation_id=str(i), actions=EventActions(state_delta=delta)))
    # A snapshot once the state changed and the last one is SNAPSHOT_EVERY events old.
    assert SNAPSHOT_EVERY == 16
    assert saved == [(16, {"n": 5}), (32, {"n": 20})]
    limits: list[Any] = []
    real_raw = _Wire.raw

    async def spy(self: _Wire, path: str, params: Any = None) -> bytes:
        limits.append((params or {}).get("limit"))
        return await real_raw(self, path, params)

    monkeypatch.setattr(_Wire, "raw", spy)
    reader = await fresh(server)
    latest = await reader.get_session(
        app_name=name, user_id="u", session_id=session.id, config=GetSessionConfig(num_recent_events=0)
    )
    assert latest.state == {"n": 36}
    assert limits == [1, 8]  # the latest event, then the 8 events after the snapshot of 32
    whole = await reader.get_session(app_name=name, user_id="u", session_id=session.id)
    assert whole.state == {"n": 36} and len(whole.events) == 40
    # The reader's session knows which snapshot it folded from: its writes keep the bound.
    saved.clear()
    monkeypatch.setattr(reader, "_save_session_state", save)
    for i in range(41, 49):
        await reader.append_event(latest, Event(author="agent", invocation_id=str(i)))
    assert saved == [(48, {"n": 36})]
    await reader.close()
    await service.close()


async def test_an_event_delivered_again_is_stored_once(service: StepwiseSessionService, server: LocalServer) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u")
    first = Event(author="user", invocation_id="1", content=user_text("hi"))
    second = Event(author="agent", invocation_id="1", content=types.Content(role="model", parts=[types.Part.from_text(text="hello")]))
    await service.append_event(session, first)
    await service.append_event(session, second)
    assert await service.append_event(session, first) is first
    await service.append_event(session, first.model_copy(deep=True))  # an equal copy
    session.events = list(session.events)  # another list of the same events
    await service.append_event(session, second.model_copy(deep=True))
    assert len(session.events) == 2
    # The same id with other content is another event.
    await service.append_event(session, first.model_copy(update={"invocation_id": "2"}))
    other = await fresh(server)
    got = await other.get_session(app_name=name, user_id="u", session_id=session.id)
    await other.close()
    assert [(e.id, e.invocation_id) for e in got.events] == [(first.id, "1"), (second.id, "1"), (first.id, "2")]
    assert got.events == session.events


# --- concurrency ------------------------------------------------------------------------------------


async def test_a_stale_session_cannot_append(service: StepwiseSessionService) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u")
    stale = session.model_copy(deep=True)
    await service.append_event(session, Event(invocation_id="winner", author="user", actions=EventActions(state_delta={"w": 1})))
    with pytest.raises(StaleSessionError, match="modified in storage") as refused:
        await service.append_event(stale, Event(invocation_id="stale", author="user", actions=EventActions(state_delta={"s": 1})))
    assert isinstance(refused.value, ValueError)
    got = await service.get_session(app_name=name, user_id="u", session_id=session.id)
    assert [e.invocation_id for e in got.events] == ["winner"]
    assert got.state == {"w": 1}
    # A session object built by hand (no revision of ours) is current only if its events are.
    by_hand = Session(app_name=name, user_id="u", id=session.id, events=list(got.events))
    await service.append_event(by_hand, Event(invocation_id="by-hand", author="user"))
    with pytest.raises(StaleSessionError):
        await service.append_event(Session(app_name=name, user_id="u", id=session.id), Event(author="user"))


async def test_concurrent_stale_writers_one_wins(service: StepwiseSessionService) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u")
    for round_ in range(4):
        latest = await service.get_session(app_name=name, user_id="u", session_id=session.id)
        copies = [latest.model_copy(deep=True) for _ in range(2)]
        results = await asyncio.gather(
            *[service.append_event(c, Event(invocation_id=f"{round_}-{i}", author="user")) for i, c in enumerate(copies)],
            return_exceptions=True,
        )
        assert sum(isinstance(r, StaleSessionError) for r in results) == 1
        assert sum(isinstance(r, Event) for r in results) == 1
    final = await service.get_session(app_name=name, user_id="u", session_id=session.id)
    assert len(final.events) == 4


async def test_concurrent_creates_of_one_id_make_one_session(service: StepwiseSessionService, server: LocalServer) -> None:
    name = app()
    others = [await fresh(server) for _ in range(3)]
    results = await asyncio.gather(
        *[svc.create_session(app_name=name, user_id="u", session_id="same") for svc in [service, *others]],
        return_exceptions=True,
    )
    for svc in others:
        await svc.close()
    assert sum(isinstance(r, Session) for r in results) == 1
    assert all(isinstance(r, (Session, AlreadyExistsError)) for r in results)
    assert len((await service.list_sessions(app_name=name, user_id="u")).sessions) == 1


async def test_a_deleted_session_is_gone_and_its_id_can_be_used_again(service: StepwiseSessionService) -> None:
    name = app()
    session = await service.create_session(app_name=name, user_id="u", session_id="  s1 ", state={"old": True})
    assert session.id == "s1"
    await service.append_event(session, Event(author="user"))
    await service.delete_session(app_name=name, user_id="u", session_id="s1")
    assert await service.get_session(app_name=name, user_id="u", session_id="s1") is None
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, Event(author="user"))
    await service.delete_session(app_name=name, user_id="u", session_id="s1")  # nothing to delete: no error
    again = await service.create_session(app_name=name, user_id="u", session_id="s1")
    got = await service.get_session(app_name=name, user_id="u", session_id="s1")
    assert got == again and got.events == [] and got.state == {}
    with pytest.raises(SessionNotFoundError):
        await service.append_event(Session(app_name=name, user_id="u", id="never"), Event(author="user"))


# --- reads served by the server ------------------------------------------------------------------


async def test_recent_events_and_after_timestamp_read_only_the_tail(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = app()
    service = StepwiseSessionService(base_url=server.url, cache_events=False)
    session = await service.create_session(app_name=name, user_id="u")
    for i in range(120):
        await service.append_event(session, Event(author="user", invocation_id=str(i), timestamp=1000.0 + i))
    limits: list[Any] = []
    real_raw = _Wire.raw

    async def spy(self: _Wire, path: str, params: Any = None) -> bytes:
        limits.append((params or {}).get("limit"))
        return await real_raw(self, path, params)

    monkeypatch.setattr(_Wire, "raw", spy)

    async def read(**config: Any) -> list[str]:
        limits.clear()
        got = await service.get_session(app_name=name, user_id="u", session_id=session.id, config=GetSessionConfig(**config))
        assert got.last_update_time == 1119.0
        return [e.invocation_id for e in got.events]

    assert await read(num_recent_events=3) == ["117", "118", "119"]
    assert limits == [3]
    assert await read(num_recent_events=0) == []
    assert limits == [1]
    assert await read(after_timestamp=1100.0) == [str(i) for i in range(100, 120)]
    assert all(n is not None and n <= 40 for n in limits), limits
    assert await read(after_timestamp=1115.5, num_recent_events=2) == ["118", "119"]
    assert await read(after_timestamp=5000.0) == []
    assert limits == [16]
    assert await read(after_timestamp=0.0) == [str(i) for i in range(120)]
    assert await read() == [str(i) for i in range(120)]
    assert limits == [None]
    await service.close()


async def test_a_long_session_read_again_decodes_only_what_is_new(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = app()
    reader = StepwiseSessionService(base_url=server.url)
    writer = StepwiseSessionService(base_url=server.url, cache_events=False)  # another process
    session = await writer.create_session(app_name=name, user_id="u")
    for i in range(30):
        await writer.append_event(session, Event(author="user", invocation_id=str(i), timestamp=2000.0 + i))
    first = await reader.get_session(app_name=name, user_id="u", session_id=session.id)
    assert len(first.events) == 30
    limits: list[Any] = []
    real_raw = _Wire.raw

    async def spy(self: _Wire, path: str, params: Any = None) -> bytes:
        limits.append((params or {}).get("limit"))
        return await real_raw(self, path, params)

    monkeypatch.setattr(_Wire, "raw", spy)
    assert await reader.get_session(app_name=name, user_id="u", session_id=session.id) == first
    assert limits == [1]  # the latest event and the version: nothing new
    limits.clear()
    for i in range(30, 33):
        await writer.append_event(session, Event(author="user", invocation_id=str(i), timestamp=2000.0 + i))
    limits.clear()
    again = await reader.get_session(app_name=name, user_id="u", session_id=session.id)
    assert [e.invocation_id for e in again.events] == [str(i) for i in range(33)]
    assert limits == [1, 4]  # the three new events and the last one held, to check they join
    recent = await reader.get_session(
        app_name=name, user_id="u", session_id=session.id,
        config=GetSessionConfig(num_recent_events=2, after_timestamp=2031.5),
    )
    assert [e.invocation_id for e in recent.events] == ["32"]
    # The reader's own writes go through the same check.
    await reader.append_event(again, Event(author="user", invocation_id="33", timestamp=2033.0))
    final = await writer.get_session(app_name=name, user_id="u", session_id=session.id)
    assert [e.invocation_id for e in (await reader.get_session(app_name=name, user_id="u", session_id=session.id)).events] == [
        e.invocation_id for e in final.events
    ] == [str(i) for i in range(34)]
    await reader.close()
    await writer.close()


# --- tenants, clients -----------------------------------------------------------------------------


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


async def test_another_tenant_never_sees_the_sessions(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_a, key_b = make_key(database, "acme"), make_key(database, "globex")
    with local_server(database=database) as srv:
        a = StepwiseSessionService(base_url=srv.url, api_key=key_a)
        b = StepwiseSessionService(base_url=srv.url, api_key=key_b)
        session = await a.create_session(app_name="support", user_id="u", session_id="s", state={"user:k": 1, "app:k": 2})
        await a.append_event(session, Event(author="user", content=user_text("acme secret")))
        assert await b.get_session(app_name="support", user_id="u", session_id="s") is None
        assert (await b.list_sessions(app_name="support")).sessions == []
        assert await b.get_user_state(app_name="support", user_id="u") == {}
        own = await b.create_session(app_name="support", user_id="u", session_id="s")  # the same ids: its own
        assert own.state == {}
        with pytest.raises(SessionNotFoundError):  # the other tenant's session is not found
            await b.append_event(session.model_copy(deep=True), Event(author="user"))
        assert len((await a.get_session(app_name="support", user_id="u", session_id="s")).events) == 1
        await a.close()
        await b.close()


async def test_client_argument_and_the_environment_default(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    name = app()
    with Stepwise(server.url) as sync_client:
        svc = StepwiseSessionService(sync_client)
        made = await svc.create_session(app_name=name, user_id="u", session_id="x")
        await svc.close()
    async with AsyncStepwise(server.url) as async_client:
        svc = StepwiseSessionService(client=async_client)
        assert await svc.get_session(app_name=name, user_id="u", session_id="x") == made
        await svc.close()
        assert not async_client._http.is_closed  # a given client stays open
    monkeypatch.setenv("STEPWISE_URL", server.url)
    svc = StepwiseSessionService()
    assert await svc.get_session(app_name=name, user_id="u", session_id="x") == made
    await svc.close()
    with pytest.raises(TypeError, match="AsyncStepwise"):
        StepwiseSessionService(client="http://localhost")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either client"):
        StepwiseSessionService(Stepwise(server.url), base_url=server.url)


# --- PostgreSQL ---------------------------------------------------------------------------------------


def postgres_database(tmp_name: str) -> str:
    """A fresh database on the PostgreSQL of $STEPWISE_TEST_POSTGRES_URL (default the local one,
    user postgres); the test is skipped when there is none."""
    import os
    import shutil
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("STEPWISE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    made = subprocess.run(["psql", base, "-qc", f"CREATE DATABASE {tmp_name}"], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"no PostgreSQL at {base}: {made.stderr.strip()[:200]}")
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=f"/{tmp_name}"))


async def test_the_service_on_postgresql() -> None:
    name = f"adk_{uuid.uuid4().hex[:12]}"
    database = postgres_database(name)
    try:
        with local_server(database=database) as srv:
            service = StepwiseSessionService(base_url=srv.url)
            results = await asyncio.gather(
                *[service.create_session(app_name="pg", user_id="u", session_id="s", state={"user:k": 1, "n": 0})
                  for _ in range(3)],
                return_exceptions=True,
            )
            [session] = [r for r in results if isinstance(r, Session)]
            assert sum(isinstance(r, AlreadyExistsError) for r in results) == 2
            stale = session.model_copy(deep=True)
            for i in range(1, 21):
                await service.append_event(
                    session, Event(author="user", invocation_id=str(i), timestamp=3000.0 + i,
                                   actions=EventActions(state_delta={"n": i, "app:seen": i}))
                )
            with pytest.raises(StaleSessionError):
                await service.append_event(stale, Event(author="user"))
            other = StepwiseSessionService(base_url=srv.url, cache_events=False)
            got = await other.get_session(app_name="pg", user_id="u", session_id="s")
            assert got == session
            assert got.state == {"n": 20, "app:seen": 20, "user:k": 1}
            tail = await other.get_session(
                app_name="pg", user_id="u", session_id="s", config=GetSessionConfig(after_timestamp=3018.0)
            )
            assert [e.invocation_id for e in tail.events] == ["18", "19", "20"]
            await service.close()
            await other.close()
    finally:
        subprocess.run(["psql", database.rsplit("/", 1)[0] + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {name}"],
                       capture_output=True, timeout=60)


# --- the docs ---------------------------------------------------------------------------------------


def doc_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(doc_examples())))
def test_docs_examples_run(index: int, server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_URL", server.url)
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    namespace: dict[str, Any] = {"__name__": f"adk_doc_example_{index}"}
    exec(compile(doc_examples()[index], f"docs/adk.md example {index + 1}", "exec"), namespace)
