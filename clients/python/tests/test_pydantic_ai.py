"""`StepwiseMessageHistory`: pydantic-ai message histories over a real Stepwise server, driven
by pydantic-ai's offline `TestModel` and `FunctionModel`."""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from stepwise import AsyncStepwise, Stepwise, StepwiseError  # noqa: E402
from stepwise.pydantic_ai import StepwiseMessageHistory, stepwise_name  # noqa: E402
from stepwise.testing import LocalServer, find_binary, local_server  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "pydantic_ai.md"


def conversation() -> str:
    return f"conversation-{uuid.uuid4().hex[:10]}"


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


def remembering_model() -> FunctionModel:
    """Answers with every user prompt it was sent, so a continued run shows its history."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(" | ".join(prompts(messages)))])

    return FunctionModel(answer)


def tool_agent() -> Agent:
    agent = Agent(TestModel())

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    @agent.tool_plain
    def shout(text: str) -> str:
        """Upper case."""
        return text.upper()

    return agent


def test_a_conversation_is_saved_reloaded_equal_and_continued(server: LocalServer) -> None:
    name = conversation()
    agent = Agent(remembering_model())
    with StepwiseMessageHistory(name, base_url=server.url) as history:
        assert history.load() == []
        first = agent.run_sync("hi", message_history=history.load())
        history.append(first.new_messages())
    with StepwiseMessageHistory(name, base_url=server.url) as again:  # a new process
        loaded = again.load()
        assert loaded == first.all_messages()
        second = agent.run_sync("and now?", message_history=loaded)
        assert second.output == "hi | and now?"
        again.append(second.new_messages())
        assert again.load() == second.all_messages()
        assert again.load(limit=2) == second.all_messages()[-2:]


def test_tool_calls_and_answers_show_as_stepwise_messages_and_steps(server: LocalServer) -> None:
    history = StepwiseMessageHistory(conversation(), base_url=server.url)
    result = tool_agent().run_sync("use your tools", message_history=history.load())
    history.append(result.new_messages())
    assert history.load() == result.all_messages()
    # TestModel calls both tools in one response: a message with two tool calls.
    response = result.all_messages()[1]
    assert isinstance(response, ModelResponse) and len(response.parts) == 2
    assert history.load(limit=3) == result.all_messages()[-3:]

    client = server.client
    session = client.find_session(history.stepwise_name)
    messages = [(m["role"], m["content"]) for m in client.list_messages(session["id"], roles=["user", "assistant"])]
    assert messages == [("user", "use your tools"), ("assistant", result.output)]
    [execution] = client.list_executions(session["id"])
    steps = list(client.list_steps(execution["id"]))
    assert len(steps) == len(result.all_messages())  # one step per message
    assert sorted(call["name"] for call in steps[1]["tool_calls"]) == ["add", "shout"]
    assert steps[1]["tool_calls"][0]["arguments"] == {"a": 0, "b": 0}
    assert steps[2]["observations"]  # the tool results
    history.close()


def test_autosave_saves_every_request_and_response_as_the_run_goes(server: LocalServer) -> None:
    name = conversation()
    history = StepwiseMessageHistory(name, base_url=server.url)
    seen_during_run: list[int] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # What is stored while the run goes: everything before this request.
        seen_during_run.append(len(StepwiseMessageHistory(name, base_url=server.url).load()))
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"key": "tide"})])
        return ModelResponse(parts=[TextPart("high at noon")])

    agent = Agent(FunctionModel(answer))

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Looks a key up."""
        return f"{key}: high at noon"

    result = agent.run_sync("when is the tide?", message_history=history.load(), capabilities=[history.autosave()])
    assert seen_during_run == [0, 2]  # the first request and its tool call were saved before the second request
    assert history.load() == result.all_messages()
    again = history.run_sync(agent, "thanks")  # loads, runs with autosave
    assert StepwiseMessageHistory(name, base_url=server.url).load() == again.all_messages()
    assert prompts(again.all_messages()) == ["when is the tide?", "thanks"]
    history.close()


def test_a_failed_run_keeps_what_it_had(server: LocalServer) -> None:
    name = conversation()
    history = StepwiseMessageHistory(name, base_url=server.url)

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("explode", {})])

    agent = Agent(FunctionModel(answer))

    @agent.tool_plain
    def explode() -> str:
        """Fails."""
        raise RuntimeError("the tool broke")

    with pytest.raises(RuntimeError, match="the tool broke"):
        agent.run_sync("go", capabilities=[history.autosave()])
    kept = StepwiseMessageHistory(name, base_url=server.url).load()
    assert prompts(kept) == ["go"]
    assert isinstance(kept[-1], ModelResponse) and kept[-1].parts[0].tool_name == "explode"
    history.close()


def test_two_conversations_are_never_mixed(server: LocalServer) -> None:
    agent = Agent(remembering_model())
    a = StepwiseMessageHistory(conversation(), base_url=server.url)
    b = StepwiseMessageHistory(conversation(), base_url=server.url)
    ra = rb = None
    for turn in range(3):
        ra = a.run_sync(agent, f"a{turn}")
        rb = b.run_sync(agent, f"b{turn}")
    assert ra.output == "a0 | a1 | a2" and rb.output == "b0 | b1 | b2"
    assert a.load() == ra.all_messages() and b.load() == rb.all_messages()
    a.delete()
    assert a.load() == [] and b.load() == rb.all_messages()
    assert a.run_sync(agent, "fresh").output == "fresh"
    a.close()
    b.close()


async def test_async_writers_of_one_conversation_lose_nothing(server: LocalServer) -> None:
    name = conversation()
    async with AsyncStepwise(server.url) as client:
        writers = [StepwiseMessageHistory(name, client) for _ in range(3)]
        batches = [
            [ModelRequest(parts=[UserPromptPart(f"w{w}-m{m}")]) for m in range(4)] for w in range(3)
        ]
        await asyncio.gather(*[w.aappend(batch) for w, batch in zip(writers, batches, strict=True)])
        stored = await StepwiseMessageHistory(name, client).aload()
        assert sorted(prompts(stored)) == sorted(f"w{w}-m{m}" for w in range(3) for m in range(4))
        for w in range(3):  # each writer's messages in its order
            assert [p for p in prompts(stored) if p.startswith(f"w{w}-")] == [f"w{w}-m{m}" for m in range(4)]
        result = await Agent(remembering_model()).run("last", message_history=stored)
        history = StepwiseMessageHistory(name, client)
        await history.aappend(result.new_messages())
        assert await history.aload() == stored + result.new_messages()


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


def test_another_tenant_never_sees_the_history(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_a, key_b = make_key(database, "acme"), make_key(database, "globex")
    agent = Agent(remembering_model())
    with local_server(database=database) as srv:
        a = StepwiseMessageHistory("support-42", base_url=srv.url, api_key=key_a)
        b = StepwiseMessageHistory("support-42", base_url=srv.url, api_key=key_b)
        secret = a.run_sync(agent, "acme's secret")
        assert b.load() == []
        assert b.run_sync(agent, "globex here").output == "globex here"
        assert a.load() == secret.all_messages()
        with pytest.raises(StepwiseError) as refused:
            StepwiseMessageHistory("support-42", base_url=srv.url, api_key="not-a-key").load()
        assert refused.value.status == 401
        a.close()
        b.close()


def test_names_clients_and_bad_arguments(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stepwise_name("conversation-9") == "conversation-9"
    odd = stepwise_name("user 7 / chat é")
    assert re.fullmatch(r"pa-user-7-chat-[0-9a-f]{16}", odd)
    assert stepwise_name("index") != "index"
    agent = Agent(remembering_model())
    name = conversation()
    with Stepwise(server.url) as client:
        result = StepwiseMessageHistory(name, client).run_sync(agent, "one")
        monkeypatch.setenv("STEPWISE_URL", server.url)
        assert StepwiseMessageHistory(name).load() == result.all_messages()
        assert not client._http.is_closed
    with pytest.raises(ValueError):
        StepwiseMessageHistory("")
    with pytest.raises(TypeError):
        StepwiseMessageHistory("x", "http://localhost")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        StepwiseMessageHistory(name).load(limit=-1)


def doc_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(doc_examples())))
def test_docs_examples_run(index: int, server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_URL", server.url)
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    namespace: dict[str, Any] = {"__name__": f"pydantic_ai_doc_example_{index}"}
    exec(compile(doc_examples()[index], f"docs/pydantic_ai.md example {index + 1}", "exec"), namespace)
