"""The lean HTTP connections of the hot paths (LangGraph saver calls, the conversation-items
calls of `StepwiseSession`) read answers the way the httpx client does: a 2xx that is not
JSON is an `invalid_response`, an API error body becomes its `StepwiseError`.

The server here is a small loopback HTTP server of the test's own that answers what each
case needs (a real Stepwise server never sends these answers)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator

import pytest

from stepwise import StepwiseError
from stepwise.langgraph import StepwiseSaver
from stepwise.openai_agents import StepwiseSession

SESSION_ID = "0190f3a6-8b1e-7000-8000-000000000001"


def _server(answer: tuple[int, bytes]) -> Iterator[str]:
    status, body = answer

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            payload = body
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def not_json() -> Iterator[str]:
    yield from _server((200, b"<html>a proxy's page</html>"))


@pytest.fixture
def api_error() -> Iterator[str]:
    body = json.dumps({"error": {"code": "not_found", "message": "no such thread"}}).encode()
    yield from _server((404, body))


def test_a_saver_call_answered_with_text_is_an_invalid_response(not_json: str) -> None:
    with StepwiseSaver(base_url=not_json) as saver:
        assert saver._fast is not None  # the lean connection is the one under test
        with pytest.raises(StepwiseError) as caught:
            saver.put_writes(
                {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}},
                [("turn", 1)],
                "task-1",
            )
    assert caught.value.code == "invalid_response"
    assert caught.value.status == 200
    assert "a proxy's page" in caught.value.message


def test_an_items_call_answered_with_text_is_an_invalid_response(not_json: str) -> None:
    async def main() -> None:
        session = StepwiseSession("s", base_url=not_json)
        session._stepwise_id = SESSION_ID  # found already: the items call is the one tested
        try:
            with pytest.raises(StepwiseError) as caught:
                await session.get_items()
        finally:
            await session.aclose()
        assert caught.value.code == "invalid_response"
        assert caught.value.status == 200

    asyncio.run(main())


def test_an_api_error_keeps_its_code_on_the_lean_connections(api_error: str) -> None:
    with StepwiseSaver(base_url=api_error) as saver:
        with pytest.raises(StepwiseError) as caught:
            saver.put_writes(
                {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}},
                [("turn", 1)],
                "task-1",
            )
    assert (caught.value.code, caught.value.status) == ("not_found", 404)
    assert caught.value.message == "no such thread"

    async def main() -> None:
        session = StepwiseSession("s", base_url=api_error)
        session._stepwise_id = SESSION_ID
        try:
            with pytest.raises(StepwiseError) as caught:
                await session.get_items()
        finally:
            await session.aclose()
        assert (caught.value.code, caught.value.status) == ("not_found", 404)

    asyncio.run(main())
