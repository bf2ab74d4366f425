"""The lean HTTP connections of the hot paths (LangGraph saver calls, the conversation-items
calls of `StepwiseSession`) read answers the way the httpx client does: a 2xx that is not
JSON is an `invalid_response`, an API error body becomes its `StepwiseError`; and they read
every framing of an HTTP/1.1 answer (length, chunks, until close), however the reads split.

The server here is a small loopback HTTP server of the test's own that answers what each
case needs (a real Stepwise server never sends these answers)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from stepwise import StepwiseError
from stepwise._transport.aio import ItemsConnection, LeanPool
from stepwise._transport.sync import FastHTTP
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


# --------------------------------------------------------------------------- framing
#
# Both lean connections build requests and read answers with `stepwise._transport.wire`. A raw socket
# server of the test's own sends each answer as scripted bytes, in small pieces, so every way
# an HTTP/1.1 server may frame a body (and every way a read may split) is read back right.


class _RawServer:
    """Answers each request with the next scripted answer: (raw bytes, close the connection after
    it). Records the requests and counts connections."""

    def __init__(self, answers: list[tuple[bytes, bool]], piece: int = 0) -> None:
        self.answers = list(answers)
        self.piece = piece
        self.requests: list[bytes] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        with conn:
            while self.answers:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(data) < length:
                    data += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + data[:length])
                data = data[length:]
                answer, close = self.answers.pop(0)
                step = self.piece or len(answer)
                for i in range(0, len(answer), step):
                    conn.sendall(answer[i : i + step])
                    if self.piece:
                        time.sleep(0.0005)
                if close:
                    return

    def close(self) -> None:
        self.sock.close()


def _calls(port: int, count: int, *, lean: str) -> list[Any]:
    """`count` requests over one lean connection of the kind named."""
    headers = {"Authorization": "Bearer k", "User-Agent": "t"}
    if lean == "sync":
        fast = FastHTTP("127.0.0.1", port, "/api", headers, 5.0, 1)
        try:
            return [fast.request("PUT", "/v1/x", json_body={"n": n}) for n in range(count)]
        finally:
            fast.close()

    async def main() -> list[Any]:
        conn = ItemsConnection("127.0.0.1", port, "/api", headers, timeout=5.0, max_retries=1)
        try:
            return [await conn.request("PUT", "/v1/x", json_body={"n": n}, idempotent=True) for n in range(count)]
        finally:
            await conn.close()

    return asyncio.run(main())


def _ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


LEAN = ["sync", "async"]


@pytest.mark.parametrize("lean", LEAN)
def test_requests_carry_the_client_headers_and_a_json_body(lean: str) -> None:
    server = _RawServer([(_ok(b'{"a":1}'), False)])
    try:
        assert _calls(server.port, 1, lean=lean) == [{"a": 1}]
    finally:
        server.close()
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "PUT /api/v1/x HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "Authorization: Bearer k" in lines and "Content-Type: application/json" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert json.loads(body) == {"n": 0}


@pytest.mark.parametrize("lean", LEAN)
@pytest.mark.parametrize("piece", [0, 1, 7])
def test_chunked_answers_are_read_whole_and_the_connection_kept(lean: str, piece: int) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\n{\"a\":\r\n3\r\n[1]\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    server = _RawServer([(chunked, False), (_ok(b'{"b":2}'), False)], piece=piece)
    try:
        assert _calls(server.port, 2, lean=lean) == [{"a": [1]}, {"b": 2}]
    finally:
        server.close()
    assert server.connections == 1


@pytest.mark.parametrize("lean", LEAN)
def test_an_answer_that_closes_the_connection_is_followed_by_a_new_one(lean: str) -> None:
    server = _RawServer([(_ok(b'{"a":1}', "Connection: close"), True), (_ok(b'{"b":2}'), False)])
    try:
        assert _calls(server.port, 2, lean=lean) == [{"a": 1}, {"b": 2}]
    finally:
        server.close()
    assert server.connections == 2


@pytest.mark.parametrize("lean", LEAN)
def test_a_body_without_length_ends_where_the_server_closes(lean: str) -> None:
    server = _RawServer([(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":1}", True),
                         (_ok(b'{"b":2}'), False)], piece=3)
    try:
        assert _calls(server.port, 2, lean=lean) == [{"a": 1}, {"b": 2}]
    finally:
        server.close()


@pytest.mark.parametrize("lean", LEAN)
def test_a_kept_alive_connection_the_server_dropped_is_retried_on_a_new_one(lean: str) -> None:
    # The first answer says nothing of closing, then the server closes (an idle timeout).
    server = _RawServer([(_ok(b'{"a":1}'), True), (_ok(b'{"b":2}'), False)])
    try:
        assert _calls(server.port, 2, lean=lean) == [{"a": 1}, {"b": 2}]
    finally:
        server.close()
    assert server.connections == 2
    assert [json.loads(r.partition(b"\r\n\r\n")[2]) for r in server.requests] == [{"n": 0}, {"n": 1}]


@pytest.mark.parametrize("lean", LEAN)
def test_an_answer_that_is_not_http_is_a_connection_error(lean: str) -> None:
    garbage = (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", True)
    server = _RawServer([garbage, garbage, garbage])
    try:
        with pytest.raises(StepwiseError) as caught:
            _calls(server.port, 1, lean=lean)
    finally:
        server.close()
    assert caught.value.code == "connection_error"
    assert "not an HTTP/1.x answer" in caught.value.message


def test_a_request_target_with_control_characters_is_refused_before_sending() -> None:
    server = _RawServer([(_ok(b"{}"), False)])
    fast = FastHTTP("127.0.0.1", server.port, "", {}, 5.0, 1)
    try:
        with pytest.raises(ValueError, match="control characters"):
            fast.request("GET", "/v1/x\r\nX-Injected: 1")
    finally:
        fast.close()
        server.close()
    assert server.requests == []


def test_a_pool_gives_overlapping_requests_a_connection_each_and_keeps_them() -> None:
    server = _RawServer([(_ok(b'{"n":%d}' % n), False) for n in range(4)])

    async def main() -> list[Any]:
        pool = LeanPool(lambda: ItemsConnection("127.0.0.1", server.port, "", {}, timeout=5.0, max_retries=1))
        try:
            first = await asyncio.gather(*(pool.request("GET", "/v1/x") for _ in range(2)))
            second = await asyncio.gather(*(pool.request("GET", "/v1/x") for _ in range(2)))
            return sorted(a["n"] for a in first) + sorted(a["n"] for a in second)
        finally:
            await pool.close()

    try:
        assert sorted(asyncio.run(main())) == [0, 1, 2, 3]
    finally:
        server.close()
    assert server.connections == 2


@pytest.mark.parametrize("lean", LEAN)
def test_a_server_that_never_answers_is_a_connection_error_after_the_timeout(lean: str) -> None:
    # A frozen server: it accepts and reads, and answers nothing.
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(StepwiseError) as caught:
            if lean == "sync":
                FastHTTP("127.0.0.1", port, "", {}, 0.2, 0).request("GET", "/v1/x")
            else:

                async def main() -> None:
                    conn = ItemsConnection("127.0.0.1", port, "", {}, timeout=0.2, max_retries=0)
                    try:
                        await conn.request("GET", "/v1/x", idempotent=True)
                    finally:
                        await conn.close()

                asyncio.run(main())
    finally:
        listener.close()
        for conn in held:
            conn.close()
    assert caught.value.code == "connection_error"
    assert "TimeoutError" in caught.value.message or "timed out" in caught.value.message
