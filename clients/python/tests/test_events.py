"""events(): the SSE parser, live events of a real server, and reconnecting without gap or duplicate."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
import uuid
from typing import Any, AsyncIterator, Callable, Iterator

import httpx
import pytest

from stepwise import AsyncStepwise, Event, Stepwise, StepwiseError
from stepwise._sse import SSEDecoder, parse_events
from stepwise.testing import LocalServer, local_server

DEADLINE = 90.0  # seconds a test waits for events before it fails (never reached when it works)
FINISHED = ("execution.completed", "execution.failed", "execution.cancelled")


def take_until(
    events: Iterator[Event], stop: Callable[[Event], bool], timeout: float = DEADLINE
) -> list[Event]:
    """Reads events until `stop` says so, failing (rather than hanging) after `timeout`."""
    out: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        got: list[Event] = []
        try:
            for event in events:
                got.append(event)
                if stop(event):
                    break
            out.put(got)
        except BaseException as e:  # handed to the test
            out.put(e)

    threading.Thread(target=read, daemon=True).start()
    try:
        result = out.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"no matching event within {timeout} s")
    if isinstance(result, BaseException):
        raise result
    return result


async def atake_until(
    events: AsyncIterator[Event], stop: Callable[[Event], bool], timeout: float = DEADLINE
) -> list[Event]:
    async def read() -> list[Event]:
        got: list[Event] = []
        async for event in events:
            got.append(event)
            if stop(event):
                break
        return got

    return await asyncio.wait_for(read(), timeout)


def finished(execution_id: str) -> Callable[[Event], bool]:
    return lambda e: e.type in FINISHED and e.execution_id == execution_id


def ids(events: list[Event]) -> list[int]:
    return [e.id for e in events if e.id is not None]


# --- the parser -----------------------------------------------------------------------


def test_parser_reads_fields_comments_and_multiline_data() -> None:
    stream = (
        b": keep-alive\n\n"
        b"id: 1\nevent: step.completed\ndata: {\"content\": \"Completed step 1\",\n"
        b"data:  \"metadata\": {\"step_number\": 1}}\n\n"
        b"event: message.delta\ndata: {\"content\": \"tok\", \"execution_id\": \"e1\"}\n\n"
        b"retry: 2500\n"
        b"id: 2\ndata: {\"event_type\": \"execution.completed\"}\n\n"
        b"id: 3\nevent: x\n\n"  # no data: not an event
    )
    decoder = SSEDecoder()
    raw = decoder.feed(stream)
    assert [(r.id, r.type) for r in raw] == [("1", "step.completed"), (None, "message.delta"), ("2", "message")]
    assert raw[0].data == '{"content": "Completed step 1",\n "metadata": {"step_number": 1}}'
    assert decoder.retry == 2500

    events = parse_events([stream])
    assert events[0] == Event(1, "step.completed", {"content": "Completed step 1", "metadata": {"step_number": 1}})
    assert events[0].metadata == {"step_number": 1}
    assert (events[1].id, events[1].content, events[1].execution_id) == (None, "tok", "e1")
    # Without an `event:` line the type comes from the payload.
    assert events[2].type == "execution.completed"


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_parser_handles_every_line_ending_split_anywhere(newline: bytes) -> None:
    text = "\ufeffid: 7\nevent: message.created\ndata: {\"content\": \"h\u00e9llo\"}\n\n: c\n\nid: 8\ndata: {}\n\n"
    stream = text.encode("utf-8").replace(b"\n", newline)
    whole = parse_events([stream])
    assert [(e.id, e.type) for e in whole] == [(7, "message.created"), (8, "message")]
    assert whole[0].content == "h\u00e9llo"
    # Byte by byte: a line end or a UTF-8 character split over two chunks changes nothing.
    assert parse_events([stream[i : i + 1] for i in range(len(stream))]) == whole


def test_parser_keeps_text_that_is_not_json() -> None:
    assert parse_events([b"id: 1\ndata: plain text\n\n"]) == [Event(1, "message", {"content": "plain text"})]


# --- a real server --------------------------------------------------------------------


def test_events_arrive_while_the_demo_agent_runs(client: Stepwise) -> None:
    session = client.create_session()
    stream = client.events(session["id"])
    answer = client.post_message(session["id"], "steps: 3")
    execution_id = answer["execution"]["id"]
    got = take_until(stream, finished(execution_id))
    stream.close()

    types = [e.type for e in got]
    assert types[0] == "message.created"
    assert types[-1] == "execution.completed"
    assert types.count("step.completed") >= 3
    assert "execution.started" in types
    assert all(e.session_id == session["id"] for e in got)
    numbers = ids(got)
    assert numbers == sorted(set(numbers)) and numbers[0] == 1
    steps = [e.metadata.get("step_number") for e in got if e.type == "step.completed"]
    assert steps == sorted(steps)

    # `after` starts behind a known event; the stored ones are replayed in order.
    replay = client.events(session["id"], after=numbers[2])
    again = take_until(replay, finished(execution_id))
    replay.close()
    assert ids(again) == numbers[3:]


def test_events_of_an_unknown_session_raise_not_found(client: Stepwise) -> None:
    with pytest.raises(StepwiseError) as e:
        next(client.events(str(uuid.uuid4())))
    assert (e.value.status, e.value.code) == (404, "not_found")


def test_stream_resumes_after_a_server_crash_without_gap_or_duplicate() -> None:
    # Slow steps and a short lease, so the crash lands mid-run and the run resumes quickly.
    with local_server(env={"STEPWISE_DEMO_STEP_MS": "200"}, args=["--lease-secs", "1"]) as server:
        client = server.client
        session = client.create_session()
        execution_id = client.post_message(session["id"], "steps: 3")["execution"]["id"]
        stream = client.events(session["id"])
        before = take_until(stream, lambda e: e.type == "step.completed")

        server.kill()
        server.restart()
        # Written while no stream was connected: must arrive after the reconnect.
        other = client.send_message("2+3", session={"name": f"other-{uuid.uuid4().hex[:6]}"})
        after = take_until(stream, finished(execution_id))
        stream.close()

        seen = ids(before) + ids(after)
        assert len(seen) == len(set(seen)), "an event came twice"
        assert seen == sorted(seen)
        # Everything the server stored, read afresh in one go: the same ids, none missing.
        fresh = client.events(session["id"])
        stored = take_until(fresh, finished(execution_id))
        fresh.close()
        assert ids(stored) == seen
        assert after[-1].type == "execution.completed"
        assert client.wait(other["execution"]["id"], timeout=DEADLINE)["status"] == "completed"


def test_stream_resumes_after_a_graceful_restart() -> None:
    with local_server() as own:
        client = own.client
        session = client.create_session()
        first = client.post_message(session["id"], "2+3")["execution"]["id"]
        stream = client.events(session["id"])
        before = take_until(stream, finished(first))
        own.stop()
        own.restart()
        second = client.post_message(session["id"], "4+4")["execution"]["id"]
        after = take_until(stream, finished(second))
        stream.close()
        assert ids(after)[0] == ids(before)[-1] + 1
        assert [e.type for e in after][0] == "message.created"
        assert after[0].content == "4+4"


class ScriptedStreams:
    """A mock server whose event stream closes after a few events each time.

    It records the `Last-Event-ID` of every connection and, like a careless proxy, replays
    one event the client already has.
    """

    def __init__(self) -> None:
        self.last_event_ids: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        last = request.headers.get("last-event-id")
        self.last_event_ids.append(last)
        start = int(last) + 1 if last else 1
        lines: list[str] = [": hello"]
        for n in range(max(1, start - 1), start + 3):  # one already seen, then three new
            data = {"session_id": "s", "event_type": "step.completed", "content": str(n)}
            lines += [f"id: {n}", "event: step.completed", f"data: {json.dumps(data)}", ""]
            delta = {"session_id": "s", "event_type": "message.delta", "content": f"t{n}"}
            lines += ["event: message.delta", f"data: {json.dumps(delta)}", ""]
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content="\n".join(lines).encode() + b"\n"
        )


def test_reconnects_with_last_event_id_when_the_connection_closes() -> None:
    server = ScriptedStreams()
    with Stepwise("http://stepwise.test", transport=httpx.MockTransport(server)) as client:
        stream = client.events("s", after=0)
        got = [event for event, _ in zip(stream, range(20))]
        stream.close()
    numbered = ids(got)
    assert numbered == list(range(1, len(numbered) + 1))  # no gap, no duplicate
    assert [e.type for e in got if e.id is None] == ["message.delta"] * (len(got) - len(numbered))
    assert server.last_event_ids[:4] == ["0", "3", "6", "9"]


def test_a_refused_stream_is_retried_then_resumes() -> None:
    answers: list[httpx.Response] = [
        httpx.Response(503, headers={"Retry-After": "0"}),
        httpx.Response(429, json={"error": {"code": "rate_limited", "message": "too many streams"}}, headers={"Retry-After": "0"}),
    ]
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("last-event-id"))
        if answers:
            return answers.pop(0)
        body = 'id: 5\nevent: step.completed\ndata: {"content": "x"}\n\n'
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())

    with Stepwise("http://stepwise.test", transport=httpx.MockTransport(handler)) as client:
        stream = client.events("s", after=4)
        assert next(stream).id == 5
        stream.close()
    assert seen == ["4", "4", "4"]


# --- async ----------------------------------------------------------------------------


async def test_async_events_arrive_and_resume_after_a_crash() -> None:
    with local_server(env={"STEPWISE_DEMO_STEP_MS": "200"}, args=["--lease-secs", "1"]) as server:
        async with server.async_client() as client:
            session = await client.create_session()
            execution_id = (await client.post_message(session["id"], "steps: 3"))["execution"]["id"]
            async with contextlib.aclosing(client.events(session["id"])) as stream:
                before = await atake_until(stream, lambda e: e.type == "step.completed")
                server.kill()
                await asyncio.to_thread(server.restart)
                after = await atake_until(stream, finished(execution_id))
            seen = ids(before) + ids(after)
            assert len(seen) == len(set(seen)) and seen == sorted(seen)
            async with contextlib.aclosing(client.events(session["id"])) as fresh:
                stored = await atake_until(fresh, finished(execution_id))
            assert ids(stored) == seen


async def test_async_reconnects_with_last_event_id() -> None:
    server = ScriptedStreams()
    async with AsyncStepwise("http://stepwise.test", transport=httpx.MockTransport(server)) as client:
        got: list[Event] = []
        async with contextlib.aclosing(client.events("s")) as stream:
            async for event in stream:
                got.append(event)
                if len(got) == 20:
                    break
    numbered = ids(got)
    assert numbered == list(range(1, len(numbered) + 1))
    assert server.last_event_ids[:3] == [None, "3", "6"]


async def test_async_events_of_an_unknown_session_raise_not_found(server: LocalServer) -> None:
    async with server.async_client() as client:
        with pytest.raises(StepwiseError) as e:
            await client.events(str(uuid.uuid4())).__anext__()
    assert e.value.code == "not_found"
