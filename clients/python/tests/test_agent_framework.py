"""stepwise.agent_framework against a real server, with Agent Framework agents driven by an
offline scripted chat client (the framework's chat-client base class, as its own tests do)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator, MutableSequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent_framework")

from agent_framework import (  # noqa: E402
    Agent,
    AgentSession,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    Content,
    FunctionInvocationLayer,
    Message,
    tool,
)
from agent_framework._sessions import HistoryProvider, SessionStore  # noqa: E402

from stepwise import AsyncStepwise, Stepwise, StepwiseError  # noqa: E402
from stepwise.agent_framework import (  # noqa: E402
    StepwiseHistoryProvider,
    StepwiseSessionStore,
    _text_message,
    encode_message,
    stepwise_name,
)
from stepwise.testing import LocalServer, find_binary, local_server  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::agent_framework._feature_stage.ExperimentalWarning")

PYTHON_DIR = Path(__file__).resolve().parents[1]

# The scripted chat client, shared by these tests and the processes they start.
CLIENT_CODE = '''
from agent_framework import BaseChatClient, ChatMiddlewareLayer, ChatResponse, Content, FunctionInvocationLayer, Message

class ScriptedChatClient(FunctionInvocationLayer, ChatMiddlewareLayer, BaseChatClient):
    """Answers each model call with the next scripted response and records what it was sent."""

    def __init__(self, script):
        super().__init__(middleware=[])
        self.script = list(script)
        self.seen = []

    def _inner_get_response(self, *, messages, stream, options, **kwargs):
        async def answer():
            self.seen.append([m.to_dict() for m in messages])
            return self.script.pop(0)
        return answer()

def call(call_id, name, **arguments):
    return ChatResponse(messages=Message(role="assistant", contents=[
        Content.from_function_call(call_id=call_id, name=name, arguments=arguments)]))

def say(text):
    return ChatResponse(messages=Message(role="assistant", contents=[text]))
'''
exec(CLIENT_CODE)  # ScriptedChatClient, call, say


@tool(approval_mode="never_require")
def add(x: int, y: int) -> int:
    """Adds two numbers."""
    return x + y


def brief(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, what) of serialised messages: the text, or the tool calls and results."""
    out = []
    for m in messages:
        parts = []
        for c in m.get("contents", []):
            if c["type"] == "text":
                parts.append(c["text"])
            elif c["type"] == "function_call":
                parts.append(f"call {c['name']}({json.dumps(c['arguments'], sort_keys=True)})")
            elif c["type"] == "function_result":
                parts.append(f"result {c['result']}")
        out.append((m["role"], " ".join(parts)))
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def unique(prefix: str = "af") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def aclient(server: LocalServer) -> Iterator[AsyncStepwise]:
    yield AsyncStepwise(server.url)


def run_script(server: LocalServer, code: str, *args: str, api_key: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_")}
    env["STEPWISE_URL"] = server.url
    if api_key:
        env["STEPWISE_API_KEY"] = api_key
    full = CLIENT_CODE + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", full, *args], capture_output=True, text=True, env=env, timeout=120)


# --------------------------------------------------------------------------- the framework's types


def test_provider_and_store_are_the_frameworks_types() -> None:
    assert issubclass(StepwiseHistoryProvider, HistoryProvider)
    assert issubclass(StepwiseSessionStore, SessionStore)
    provider = StepwiseHistoryProvider(client=Stepwise("http://127.0.0.1:1"))
    assert provider.source_id == "stepwise" and provider.load_messages and provider.store_outputs
    with pytest.raises(ValueError, match="max_messages"):
        StepwiseHistoryProvider(max_messages=0)
    with pytest.raises(TypeError, match="client"):
        StepwiseHistoryProvider(client="http://x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either"):
        StepwiseSessionStore(client=Stepwise("http://127.0.0.1:1"), base_url="http://127.0.0.1:2")


def test_session_ids_map_to_stepwise_names() -> None:
    assert stepwise_name("ticket-7") == "ticket-7"
    odd = stepwise_name("tenant/user 42")
    assert re.fullmatch(r"af-tenant-user-42-[0-9a-f]{16}", odd)
    assert stepwise_name("tenant/user 42") == odd != stepwise_name("tenant/user 43")
    assert re.fullmatch(r"af-[0-9a-f]{16}", stepwise_name("..."))


def test_text_messages_decode_as_the_framework_decodes_them() -> None:
    for message in [
        Message(role="user", contents=["hi"]),
        Message(role="assistant", contents=["a", "b"], author_name="bot", message_id="m-1",
                additional_properties={"k": [1, 2]}),
        Message(role="system", contents=[]),
    ]:
        payload = message.to_dict()
        fast = _text_message(payload)
        assert fast is not None
        assert fast.to_dict() == Message.from_dict(dict(payload)).to_dict() == payload
    with_call = Message(role="assistant", contents=[Content.from_function_call(call_id="c", name="f", arguments={})])
    assert _text_message(with_call.to_dict()) is None  # other shapes go through Message.from_dict


# --------------------------------------------------------------------------- an agent over several turns


def test_an_agent_with_tools_over_several_turns_is_restored_in_a_new_process(server: LocalServer) -> None:
    session_id = unique("ticket")

    async def first_process() -> dict[str, Any]:
        async with AsyncStepwise(server.url) as client:
            chat = ScriptedChatClient([  # noqa: F821
                call("c1", "add", x=1, y=2), say("1+2 is 3"),  # noqa: F821
                call("c2", "add", x=3, y=4), say("3+4 is 7"),  # noqa: F821
            ])
            agent = Agent(chat, "Be brief.", tools=[add], context_providers=[StepwiseHistoryProvider(client=client)])
            session = agent.create_session(session_id=session_id)
            assert (await agent.run("What is 1+2?", session=session)).text == "1+2 is 3"
            assert (await agent.run("And 3+4?", session=session)).text == "3+4 is 7"
            # The second turn's first model call saw the whole first turn.
            assert brief(chat.seen[2]) == [
                ("user", "What is 1+2?"),
                ("assistant", 'call add({"x": 1, "y": 2})'),
                ("tool", "result 3"),
                ("assistant", "1+2 is 3"),
                ("user", "And 3+4?"),
            ]
            await StepwiseSessionStore(client=client).set(session_id, session)
            return session.to_dict()

    stored = run(first_process())
    assert stored["state"]["stepwise"]["stepwise_name"] == session_id

    restored = run_script(server, """
        import asyncio, json, sys
        from agent_framework import Agent
        from stepwise.agent_framework import StepwiseHistoryProvider, StepwiseSessionStore

        async def main():
            session = await StepwiseSessionStore().get(sys.argv[1])
            chat = ScriptedChatClient([say("Yes: 3 and 7.")])
            agent = Agent(chat, "Be brief.", context_providers=[StepwiseHistoryProvider()])
            answer = await agent.run("Did you add twice?", session=session)
            print(json.dumps({"seen": chat.seen, "answer": answer.text, "state": session.to_dict()["state"]}))

        asyncio.run(main())
    """, session_id)
    assert restored.returncode == 0, restored.stderr
    out = json.loads(restored.stdout.strip().splitlines()[-1])
    assert out["answer"] == "Yes: 3 and 7."
    assert out["state"]["stepwise"] == stored["state"]["stepwise"]
    assert brief(out["seen"][0]) == [
        ("user", "What is 1+2?"),
        ("assistant", 'call add({"x": 1, "y": 2})'),
        ("tool", "result 3"),
        ("assistant", "1+2 is 3"),
        ("user", "And 3+4?"),
        ("assistant", 'call add({"x": 3, "y": 4})'),
        ("tool", "result 7"),
        ("assistant", "3+4 is 7"),
        ("user", "Did you add twice?"),
    ]


def test_every_message_is_a_stepwise_message_and_tool_calls_are_steps(server: LocalServer, client: Stepwise) -> None:
    session_id = unique()

    async def main() -> None:
        chat = ScriptedChatClient([call("c1", "add", x=20, y=22), say("It is 42.")])  # noqa: F821
        agent = Agent(chat, tools=[add], context_providers=[StepwiseHistoryProvider(client=AsyncStepwise(server.url))],
                      require_per_service_call_history_persistence=True)
        await agent.run("What is 20+22?", session=agent.create_session(session_id=session_id))

    run(main())
    session = client.find_session(session_id)
    assert session is not None
    messages = [(m["role"], m["content"]) for m in client.list_messages(session["id"], roles=["user", "assistant"])]
    assert messages == [("user", "What is 20+22?"), ("assistant", "It is 42.")]
    (execution,) = client.list_executions(session["id"])
    steps = list(client.list_steps(execution["id"]))
    assert [s["kind"] for s in steps] == ["action", "action"]  # one step per model call
    assert steps[0]["tool_calls"] == [{"id": "c1", "name": "add", "arguments": {"x": 20, "y": 22}}]
    assert steps[1]["observations"] == "42" and steps[1]["model_output"] == "It is 42."


# --------------------------------------------------------------------------- a crash in the tool loop


def test_per_call_persistence_keeps_what_was_saved_before_a_crash_in_the_tool_loop(
    server: LocalServer, client: Stepwise
) -> None:
    session_id = unique("crash")
    crashed = run_script(server, """
        import asyncio, os, signal, sys
        from agent_framework import Agent, tool
        from stepwise.agent_framework import StepwiseHistoryProvider

        @tool(approval_mode="never_require")
        def add(x: int, y: int) -> int:
            "Adds."
            return x + y

        @tool(approval_mode="never_require")
        def deploy(target: str) -> str:
            "Deploys; this process dies in it."
            os.kill(os.getpid(), signal.SIGKILL)
            return "unreachable"

        async def main():
            chat = ScriptedChatClient([call("c1", "add", x=2, y=3), call("c2", "deploy", target="prod"), say("never")])
            agent = Agent(chat, tools=[add, deploy], context_providers=[StepwiseHistoryProvider()],
                          require_per_service_call_history_persistence=True)
            await agent.run("Add 2 and 3, then deploy.", session=agent.create_session(session_id=sys.argv[1]))

        asyncio.run(main())
    """, session_id)
    assert crashed.returncode == -9, crashed.stderr  # killed in the middle of the tool loop

    async def history() -> list[tuple[str, str]]:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        return brief([m.to_dict() for m in await provider.get_messages(session_id)])

    # Both model calls were saved as they ended, each message once; the deploy result never came.
    before = [
        ("user", "Add 2 and 3, then deploy."),
        ("assistant", 'call add({"x": 2, "y": 3})'),
        ("tool", "result 5"),
        ("assistant", 'call deploy({"target": "prod"})'),
    ]
    assert run(history()) == before

    # A new process goes on with the same session: what was saved is there, exactly once.
    resumed = run_script(server, """
        import asyncio, json, sys
        from agent_framework import Agent
        from stepwise.agent_framework import StepwiseHistoryProvider

        async def main():
            chat = ScriptedChatClient([say("Deploy was interrupted; 2+3 is 5.")])
            agent = Agent(chat, context_providers=[StepwiseHistoryProvider()],
                          require_per_service_call_history_persistence=True)
            await agent.run("What happened?", session=agent.create_session(session_id=sys.argv[1]))
            print(json.dumps(chat.seen))

        asyncio.run(main())
    """, session_id)
    assert resumed.returncode == 0, resumed.stderr
    seen = brief(json.loads(resumed.stdout.strip().splitlines()[-1])[0])
    assert seen == [*before, ("user", "What happened?")]
    assert run(history()) == [*before, ("user", "What happened?"), ("assistant", "Deploy was interrupted; 2+3 is 5.")]
    session = client.find_session(session_id)
    assert session is not None
    users = [m["content"] for m in client.list_messages(session["id"], roles=["user"])]
    assert users == ["Add 2 and 3, then deploy.", "What happened?"]


# --------------------------------------------------------------------------- saves are appends, never twice


def test_the_same_save_again_is_stored_once(server: LocalServer) -> None:
    session_id = unique()
    turn = [Message(role="user", contents=["hello"]), Message(role="assistant", contents=["hi there"])]

    async def main() -> None:
        first = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await first.save_messages(session_id, turn)
        await first.save_messages(session_id, turn)  # a caller's retry
        # Another process that sends the same save (e.g. a retried job) stores nothing either.
        second = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await second.save_messages(session_id, turn)
        # A transcript replayed in full adds only what is new.
        await second.save_messages(session_id, [*turn, Message(role="user", contents=["next"])])
        texts = [m.text for m in await first.get_messages(session_id)]
        assert texts == ["hello", "hi there", "next"]
        # A new user turn with the same words is a new message (the framework's own rule).
        await first.save_messages(session_id, [Message(role="user", contents=["next"])])
        assert [m.text for m in await second.get_messages(session_id)] == ["hello", "hi there", "next", "next"]

    run(main())


def test_a_description_is_the_title_of_the_sessions_the_provider_creates(server: LocalServer, client: Stepwise) -> None:
    session_id = unique()
    plain_id = unique()

    async def main() -> None:
        described = StepwiseHistoryProvider(client=AsyncStepwise(server.url), description="Trip to Lisbon")
        await described.save_messages(session_id, [Message(role="user", contents=["plan my trip"])])
        plain = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await plain.save_messages(plain_id, [Message(role="user", contents=["hello"])])

    run(main())
    assert client.find_session(stepwise_name(session_id))["title"] == "Trip to Lisbon"
    assert client.find_session(stepwise_name(plain_id))["title"] == plain_id
    for bad in ("", "   ", 3):
        with pytest.raises(ValueError):
            StepwiseHistoryProvider(client=Stepwise("http://127.0.0.1:1"), description=bad)  # type: ignore[arg-type]


def test_a_save_whose_answer_was_lost_is_not_stored_twice_when_sent_again(server: LocalServer) -> None:
    session_id = unique()

    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await provider.save_messages(session_id, [Message(role="user", contents=["first"])])
        sent = provider._connections.call
        lost = []

        async def answer_lost(method: str, path: str, **kwargs: Any) -> Any:
            answer = await sent(method, path, **kwargs)
            if method == "POST" and not lost:
                lost.append(answer)  # the server stored it; the answer never arrives
                raise StepwiseError("connection_error", "the connection dropped before the answer")
            return answer

        provider._connections.call = answer_lost  # type: ignore[method-assign]
        turn = [Message(role="assistant", contents=["second"]), Message(role="user", contents=["third"])]
        with pytest.raises(StepwiseError):
            await provider.save_messages(session_id, turn)
        await provider.save_messages(session_id, turn)  # the caller sends it again
        assert lost
        fresh = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        assert [m.text for m in await fresh.get_messages(session_id)] == ["first", "second", "third"]

    run(main())


def test_two_writers_sending_the_same_save_at_once_store_it_once(server: LocalServer) -> None:
    session_id = unique()

    async def main() -> None:
        a = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        b = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await a.save_messages(session_id, [Message(role="user", contents=["start"])])
        assert len(await b.get_messages(session_id)) == 1  # b knows the history as of now
        answer = Message(role="assistant", contents=["the answer"], message_id="resp-1")
        await asyncio.gather(a.save_messages(session_id, [answer]), b.save_messages(session_id, [answer]))
        assert [m.text for m in await a.get_messages(session_id)] == ["start", "the answer"]

    run(main())


# --------------------------------------------------------------------------- undecodable history


def test_a_history_that_cannot_be_decoded_comes_back_as_the_context_summary(
    server: LocalServer, client: Stepwise
) -> None:
    session_id = unique()

    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await provider.save_messages(session_id, [
            Message(role="user", contents=["Book a flight to Oslo"]),
            Message(role="assistant", contents=["Booked."]),
        ])
        sid = await provider.stepwise_session_id(session_id)
        # Messages written by an older framework version that this one cannot read.
        client.request("POST", f"/v1/sessions/{sid}/items", json={"items": [
            {"type": "message", "role": "user", "content": "And a hotel near the fjord",
             "agent_framework": {"type": "message", "role": {"value": "user"}, "contents": 5}},
            {"type": "function_call", "call_id": "h1", "name": "book_hotel", "arguments": "{}",
             "agent_framework": {"contents": "?"}},
        ]})
        fresh = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        messages = await fresh.get_messages(session_id)  # never an error
        summary, *rest = messages
        assert summary.role == "system" and summary.additional_properties["stepwise_summary"] is True
        assert summary.text.startswith("Previous conversation summary")
        assert "1. Book a flight to Oslo" in summary.text and "2. And a hotel near the fjord" in summary.text
        assert "Tools used: book_hotel" in summary.text
        assert summary.text.endswith("Continue the conversation from here, using this context.")
        assert [m.text for m in rest] == ["Book a flight to Oslo", "Booked."]

        # An agent on that history runs, and its model gets the summary.
        chat = ScriptedChatClient([say("Looking for hotels.")])  # noqa: F821
        agent = Agent(chat, context_providers=[fresh])
        await agent.run("Any news?", session=agent.create_session(session_id=session_id))
        assert brief(chat.seen[0])[0] == ("system", summary.text)
        # The summary is context, not history: it is not stored.
        texts = [m.text for m in await fresh.get_messages(session_id)][1:]
        assert texts == ["Book a flight to Oslo", "Booked.", "Any news?", "Looking for hotels."]

    run(main())


# --------------------------------------------------------------------------- settings kept by the session


def test_the_providers_settings_survive_a_restored_session(server: LocalServer) -> None:
    session_id = unique()

    async def main() -> None:
        chat = ScriptedChatClient([say(f"answer {i}") for i in range(4)])  # noqa: F821
        agent = Agent(chat, context_providers=[StepwiseHistoryProvider(client=AsyncStepwise(server.url),
                                                                       max_messages=2)])
        session = agent.create_session(session_id=session_id)
        for i in range(3):
            await agent.run(f"question {i}", session=session)
        payload = json.loads(json.dumps(session.to_dict()))
        assert payload["state"]["stepwise"]["max_messages"] == 2

        # A provider configured without the setting, on the restored session, keeps it.
        chat2 = ScriptedChatClient([say("ok")])  # noqa: F821
        agent2 = Agent(chat2, context_providers=[StepwiseHistoryProvider(client=AsyncStepwise(server.url))])
        await agent2.run("question 3", session=AgentSession.from_dict(payload))
        assert brief(chat2.seen[0]) == [("user", "question 2"), ("assistant", "answer 2"), ("user", "question 3")]
        # A provider that sets it again wins.
        chat3 = ScriptedChatClient([say("ok")])  # noqa: F821
        agent3 = Agent(chat3, context_providers=[StepwiseHistoryProvider(client=AsyncStepwise(server.url),
                                                                         max_messages=1)])
        await agent3.run("question 4", session=AgentSession.from_dict(payload))
        assert brief(chat3.seen[0]) == [("assistant", "ok"), ("user", "question 4")]

    run(main())


def test_a_restored_session_finds_its_stepwise_session_by_the_recorded_id(server: LocalServer, client: Stepwise) -> None:
    session_id = unique()

    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        state: dict[str, Any] = {}
        await provider.save_messages(session_id, [Message(role="user", contents=["kept"])], state=state)
        recorded = state["stepwise_session_id"]
        # The session renamed in Stepwise (its name no longer matches): the recorded id still reaches it.
        client.request("PATCH", f"/v1/sessions/{recorded}", json={"title": "renamed"})
        other = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        assert [m.text for m in await other.get_messages("some-other-id", state=dict(state))] == ["kept"]
        by_name = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        assert [m.text for m in await by_name.get_messages("some-other-id")] == []

    run(main())


def test_a_kept_history_answers_like_a_fresh_read_and_sees_other_writers(server: LocalServer, client: Stepwise) -> None:
    session_id = unique()

    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        chat = ScriptedChatClient([call("c1", "add", x=1, y=1), say("2"), say("bye")])  # noqa: F821
        agent = Agent(chat, tools=[add], context_providers=[provider], require_per_service_call_history_persistence=True)
        session = agent.create_session(session_id=session_id)
        await agent.run("1+1?", session=session)
        await agent.run("thanks", session=session)

        async def fresh_read() -> list[dict[str, Any]]:
            return [m.to_dict() for m in await StepwiseHistoryProvider(client=AsyncStepwise(server.url))
                    .get_messages(session_id)]

        kept = [m.to_dict() for m in await provider.get_messages(session_id)]
        assert kept == await fresh_read() and len(kept) == 6
        # Another writer appends: the next load sees it.
        other = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        await other.save_messages(session_id, [Message(role="user", contents=["from elsewhere"])])
        assert [m.to_dict() for m in await provider.get_messages(session_id)] == await fresh_read()
        assert (await provider.get_messages(session_id))[-1].text == "from elsewhere"

    run(main())


# --------------------------------------------------------------------------- the provider's hooks


def test_the_frameworks_hooks_store_and_load_through_the_provider(server: LocalServer) -> None:
    """What the framework's own provider tests check, on Stepwise: after_run stores the inputs and
    the response, the next before_run loads them under the provider's source id."""
    from agent_framework import AgentResponse, SessionContext

    session_id = unique()

    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url), source_id="custom-source")
        session = AgentSession(session_id=session_id)
        state = session.state.setdefault(provider.source_id, {})
        first = SessionContext(session_id=session_id, input_messages=[Message(role="user", contents=["hello"])])
        await provider.before_run(agent=None, session=session, context=first, state=state)  # type: ignore[arg-type]
        assert first.context_messages.get("custom-source", []) == []
        first._response = AgentResponse(messages=[Message(role="assistant", contents=["hi there"])])
        await provider.after_run(agent=None, session=session, context=first, state=state)  # type: ignore[arg-type]
        second = SessionContext(session_id=session_id, input_messages=[Message(role="user", contents=["again"])])
        await provider.before_run(agent=None, session=session, context=second, state=state)  # type: ignore[arg-type]
        assert [m.text for m in second.context_messages["custom-source"]] == ["hello", "hi there"]
        # The session's state is JSON and names the Stepwise session (not the messages).
        assert json.loads(json.dumps(session.to_dict()))["state"]["custom-source"]["stepwise_name"] == session_id

    run(main())


def test_skip_excluded_and_the_default_session(server: LocalServer) -> None:
    async def main() -> None:
        provider = StepwiseHistoryProvider(client=AsyncStepwise(server.url), skip_excluded=True)
        key = unique()
        await provider.save_messages(key, [
            Message(role="user", contents=["kept"]),
            Message(role="user", contents=["hidden"], additional_properties={"_excluded": True}),
        ])
        assert [m.text for m in await provider.get_messages(key)] == ["kept"]
        everything = StepwiseHistoryProvider(client=AsyncStepwise(server.url))
        assert [m.text for m in await everything.get_messages(key)] == ["kept", "hidden"]
        # No session id: the session named "default", as the framework's file provider does.
        await everything.save_messages(None, [Message(role="user", contents=[key])])
        assert (await everything.get_messages(None))[-1].text == key
        # NaN and infinity (which JSON has not) come back as they were, like the framework's file provider.
        odd = unique()
        await everything.save_messages(odd, [Message(role="user", contents=["x"], additional_properties={
            "v": [float("nan"), float("inf"), -float("inf"), 1.5], "s": {"$stepwise_float": "text"}})])
        (back,) = await StepwiseHistoryProvider(client=AsyncStepwise(server.url)).get_messages(odd)
        v = back.additional_properties["v"]
        assert v[0] != v[0] and v[1:] == [float("inf"), -float("inf"), 1.5]
        assert back.additional_properties["s"] == {"$stepwise_float": "text"}

    run(main())


# --------------------------------------------------------------------------- the session store


def test_the_session_store_keeps_agent_session_to_dict(server: LocalServer, client: Stepwise) -> None:
    key = unique("store")

    async def main() -> None:
        store = StepwiseSessionStore(client=AsyncStepwise(server.url))
        assert await store.get(key) is None
        session = AgentSession(session_id="framework-session", service_session_id={"response_id": "resp-1"})
        session.state["nested"] = {"messages": [Message(role="user", contents=["hello"])], "values": ["original"]}
        await store.set(key, session)
        session.state["nested"]["values"].append("changed")  # the stored one is a snapshot

        restored = await StepwiseSessionStore(client=Stepwise(server.url)).get(key)
        assert restored is not None and restored is not session
        assert restored.session_id == "framework-session"
        assert restored.service_session_id == {"response_id": "resp-1"}
        assert isinstance(restored.state["nested"]["messages"][0], Message)
        assert restored.state["nested"]["messages"][0].text == "hello"
        assert restored.state["nested"]["values"] == ["original"]

        await store.set(key, AgentSession(session_id="second"))  # replaces
        assert (await store.get(key)).session_id == "second"  # type: ignore[union-attr]
        await store.delete(key)
        assert await store.get(key) is None
        await store.delete(key)  # again: nothing to do
        await store.set(key, AgentSession(session_id="third"))  # a deleted key can be stored again
        assert (await store.get(key)).session_id == "third"  # type: ignore[union-attr]

        # Every state is a JSON snapshot of the Stepwise session of that name.
        sid = client.find_session(key)["id"]  # type: ignore[index]
        (execution,) = client.list_executions(sid)
        states = [client.get_snapshot(s["id"])["state"] for s in client.list_snapshots(execution["id"])]
        assert [s.get("deleted") or s["session"]["session_id"] for s in states] == [
            "framework-session", "second", True, "third"]

    run(main())


def test_the_store_marks_its_session_used_and_takes_a_sync_client(server: LocalServer, client: Stepwise) -> None:
    key = unique()

    async def main() -> None:
        store = StepwiseSessionStore(client=Stepwise(server.url))  # a sync client: its settings are used
        await store.set(key, AgentSession(session_id="a"))
        session = client.find_session(key)
        assert session is not None
        before = session["updated_at"]
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # a later set marks the session used (retention counts from there)
            await store.set(key, AgentSession(session_id="b"))
            if client.get_session(session["id"])["updated_at"] > before:
                break
            assert asyncio.get_running_loop().time() < deadline
        provider = StepwiseHistoryProvider(client=Stepwise(server.url))
        await provider.save_messages(key, [Message(role="user", contents=["via a sync client"])])
        assert [m.text for m in await provider.get_messages(key)] == ["via a sync client"]
        await provider.aclose()

    run(main())


@pytest.mark.parametrize("key", ["two words", "tenant/user", "session.id", "café", "x" * 300])
def test_the_session_store_takes_opaque_keys(server: LocalServer, key: str) -> None:
    async def main() -> None:
        store = StepwiseSessionStore(client=AsyncStepwise(server.url))
        await store.set(key + "-" + unique(), AgentSession())
        own = key + "-" + unique()
        await store.set(own, AgentSession(session_id="s"))
        assert (await store.get(own)).session_id == "s"  # type: ignore[union-attr]
        await store.delete(own)
        assert await store.get(own) is None

    run(main())


def test_the_session_store_refuses_what_it_cannot_keep(server: LocalServer) -> None:
    async def main() -> None:
        store = StepwiseSessionStore(client=AsyncStepwise(server.url))
        for call_ in (store.get(""), store.set("", AgentSession()), store.delete("")):
            with pytest.raises(ValueError, match="session_id"):
                await call_

        class NotJson:
            pass

        session = AgentSession()
        session.state["nested"] = [{"value": NotJson()}]
        with pytest.warns(RuntimeWarning), pytest.raises(TypeError, match=r"state\.nested\[0\]\.value.*NotJson"):
            await store.set(unique(), session)
        session.state = {"value": float("nan")}
        with pytest.raises(ValueError, match="finite float"):
            await store.set(unique(), session)

    run(main())


def test_a_stored_session_that_cannot_be_restored_whole_keeps_what_decodes(server: LocalServer, client: Stepwise) -> None:
    key = unique()

    async def main() -> None:
        store = StepwiseSessionStore(client=AsyncStepwise(server.url))
        session = AgentSession(session_id="s-1")
        session.state["ok"] = {"kept": True}
        await store.set(key, session)
        sid = client.find_session(key)["id"]  # type: ignore[index]
        (execution,) = client.list_executions(sid)
        # A state written by another version: one entry no longer decodes.
        client.save_snapshot(execution["id"], {"format": "agent_framework.AgentSession", "key": key, "session": {
            "type": "session", "session_id": "s-1", "service_session_id": None,
            "state": {"ok": {"kept": True}, "broken": {"type": "message", "role": "user", "contents": 5}},
        }})
        restored = await StepwiseSessionStore(client=AsyncStepwise(server.url)).get(key)
        assert restored is not None
        assert restored.session_id == "s-1" and restored.state == {"ok": {"kept": True}}

    run(main())


# --------------------------------------------------------------------------- tenants


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


def test_two_tenants_with_the_same_session_id_never_see_each_other(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_a, key_b = make_key(database, "acme"), make_key(database, "globex")

    async def main(url: str) -> None:
        a = StepwiseHistoryProvider(base_url=url, api_key=key_a)
        b = StepwiseHistoryProvider(base_url=url, api_key=key_b)
        await a.save_messages("shared", [Message(role="user", contents=["secret of acme"])])
        assert await b.get_messages("shared") == []
        await b.save_messages("shared", [Message(role="user", contents=["globex here"])])
        assert [m.text for m in await a.get_messages("shared")] == ["secret of acme"]
        assert [m.text for m in await b.get_messages("shared")] == ["globex here"]
        # A recorded Stepwise session id of the other tenant is not reachable: looked up by name.
        state_a: dict[str, Any] = {}
        await a.get_messages("shared", state=state_a)
        assert [m.text for m in await b.get_messages("shared", state=dict(state_a))] == ["globex here"]
        store_a = StepwiseSessionStore(base_url=url, api_key=key_a)
        await store_a.set("shared", AgentSession(session_id="acme-session"))
        assert await StepwiseSessionStore(base_url=url, api_key=key_b).get("shared") is None
        for p in (a, b, store_a):
            await p.aclose()

    with local_server(database=database) as srv:
        run(main(srv.url))


# --------------------------------------------------------------------------- PostgreSQL


def postgres_database(name: str) -> str:
    """A fresh database on the PostgreSQL of $STEPWISE_TEST_POSTGRES_URL (default the local one,
    user postgres); the test is skipped when there is none."""
    import shutil
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("STEPWISE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    made = subprocess.run(["psql", base, "-qc", f"CREATE DATABASE {name}"], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"no PostgreSQL at {base}: {made.stderr.strip()[:200]}")
    return urlunsplit(urlsplit(base)._replace(path=f"/{name}"))


def test_history_and_store_on_postgresql() -> None:
    name = f"af_{uuid.uuid4().hex[:12]}"
    database = postgres_database(name)

    async def main(url: str) -> None:
        chat = ScriptedChatClient([call("c1", "add", x=4, y=5), say("9")])  # noqa: F821
        provider = StepwiseHistoryProvider(base_url=url)
        agent = Agent(chat, tools=[add], context_providers=[provider], require_per_service_call_history_persistence=True)
        session = agent.create_session(session_id="pg-ticket")
        await agent.run("4+5?", session=session)
        await StepwiseSessionStore(base_url=url).set("pg-ticket", session)
        restored = await StepwiseSessionStore(base_url=url).get("pg-ticket")
        assert restored is not None and restored.to_dict() == session.to_dict()
        again = StepwiseHistoryProvider(base_url=url)
        history = [m.to_dict() for m in await again.get_messages("pg-ticket", state=restored.state["stepwise"])]
        assert brief(history) == [("user", "4+5?"), ("assistant", 'call add({"x": 4, "y": 5})'),
                                  ("tool", "result 9"), ("assistant", "9")]
        await again.save_messages("pg-ticket", [Message.from_dict(dict(history[-1]))])  # already stored
        assert len(await StepwiseHistoryProvider(base_url=url).get_messages("pg-ticket")) == 4

    try:
        with local_server(database=database) as srv:
            run(main(srv.url))
    finally:
        subprocess.run(["psql", database.rsplit("/", 1)[0] + "/postgres", "-qc", f"DROP DATABASE IF EXISTS {name}"],
                       capture_output=True, timeout=60)


# --------------------------------------------------------------------------- the docs


def doc_examples() -> list[str]:
    text = (PYTHON_DIR / "docs" / "agent_framework.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(doc_examples())))
def test_doc_examples_run(index: int, server: LocalServer, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STEPWISE_URL", server.url)
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    code = doc_examples()[index].replace('"ticket-7"', f'"{unique("ticket")}"')
    namespace: dict[str, Any] = {"__name__": f"agent_framework_doc_{index}"}
    exec(compile(code, f"docs/agent_framework.md example {index + 1}", "exec", dont_inherit=True), namespace)
    out = capsys.readouterr().out.splitlines()
    if index == 0:
        assert out == ["2+3 is 5.", "user What is 2+3?", "assistant ['function_call']", "tool ['function_result']",
                       "assistant 2+3 is 5."]
    else:
        assert out[-2:] == [out[-2].split()[0] + " {'customer': 'Ada'}", "None"]


def test_items_of_a_message_read_as_stepwise_messages_and_steps() -> None:
    mixed = Message(role="assistant", contents=[
        "Let me add.",
        Content.from_function_call(call_id="a", name="add", arguments={"x": 1}),
        Content.from_function_call(call_id="b", name="add", arguments='{"x": 2}'),
    ])
    head, *mirrors = encode_message(mixed)
    assert head["type"] == "message" and head["role"] == "assistant" and head["content"] == "Let me add."
    assert Message.from_dict(dict(head["agent_framework"])).to_dict() == mixed.to_dict()
    assert [(m["type"], m["call_id"], m["arguments"]) for m in mirrors] == [
        ("function_call", "a", '{"x": 1}'), ("function_call", "b", '{"x": 2}')]
    result = Message(role="tool", contents=[Content.from_function_result(call_id="a", result="2")])
    (only,) = encode_message(result)
    assert only["type"] == "function_call_output" and only["output"] == "2" and only["call_id"] == "a"


def test_errors_of_the_server_reach_the_caller(server: LocalServer) -> None:
    async def main() -> None:
        provider = StepwiseHistoryProvider(base_url="http://127.0.0.1:1")
        with pytest.raises(StepwiseError) as e:
            await provider.save_messages(unique(), [Message(role="user", contents=["lost?"])])
        assert e.value.code == "connection_error"
        await provider.aclose()

    run(main())
