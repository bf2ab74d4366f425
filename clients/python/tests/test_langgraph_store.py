"""LangGraph's store served by Stepwise at ``/langgraph``: the unmodified `langgraph_sdk`
client (sync and async) and `StepwiseStore` inside a compiled graph, against the real binary."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, TypedDict

import httpx
import pytest

langgraph_sdk = pytest.importorskip("langgraph_sdk")
pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

from stepwise import AsyncStepwise, Stepwise, StepwiseError  # noqa: E402
from stepwise.langgraph import StepwiseStore  # noqa: E402
from stepwise.testing import LocalServer  # noqa: E402


def _ns() -> str:
    """A namespace label of its own for each test (the server is shared)."""
    return f"t{uuid.uuid4().hex[:12]}"


def test_the_sync_sdk_puts_gets_searches_lists_and_deletes(server: LocalServer) -> None:
    client = langgraph_sdk.get_sync_client(url=f"{server.url}/langgraph", api_key="unused-on-an-open-server")
    root = _ns()
    client.store.put_item([root, "u1"], key="prefs", value={"theme": "dark", "size": 3}, ttl=60)
    client.store.put_item([root, "u2"], key="a", value={"size": 1})
    client.store.put_item([root, "u2"], key="b", value={"size": 5}, index=False)

    item = client.store.get_item([root, "u1"], "prefs")
    assert item is not None
    assert item["namespace"] == [root, "u1"]
    assert item["key"] == "prefs"
    assert item["value"] == {"theme": "dark", "size": 3}
    assert item["created_at"] and item["updated_at"]
    assert client.store.get_item([root, "u1"], "prefs", refresh_ttl=False) is not None
    assert client.store.get_item([root, "u1"], "missing") is None

    found = client.store.search_items([root], filter={"size": {"$gte": 3}}, limit=10)
    assert [i["key"] for i in found["items"]] == ["b", "prefs"]
    assert all("score" in i for i in found["items"])
    exact = client.store.search_items([root, "u2"], filter={"size": 1})
    assert [i["key"] for i in exact["items"]] == ["a"]
    first = client.store.search_items([root], limit=2, offset=0)["items"]
    rest = client.store.search_items([root], limit=2, offset=2)["items"]
    assert len(first) == 2 and len(rest) == 1
    assert {i["key"] for i in first + rest} == {"prefs", "a", "b"}

    listed = client.store.list_namespaces(prefix=[root])
    assert listed == {"namespaces": [[root, "u1"], [root, "u2"]]}
    assert client.store.list_namespaces(prefix=[root], max_depth=1) == {"namespaces": [[root]]}
    assert client.store.list_namespaces(prefix=[root], suffix=["u2"]) == {"namespaces": [[root, "u2"]]}
    assert client.store.list_namespaces(prefix=[root], limit=1, offset=1) == {"namespaces": [[root, "u2"]]}

    client.store.delete_item([root, "u1"], "prefs")
    assert client.store.get_item([root, "u1"], "prefs") is None

    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.store.search_items([root], query="semantic search is not configured")
    assert refused.value.response.status_code == 400
    assert refused.value.response.json()["error"]["field"] == "query"
    with pytest.raises(ValueError):
        client.store.put_item(["a.b"], key="k", value={})


def test_the_async_sdk_speaks_the_same_store(server: LocalServer) -> None:
    async def scenario() -> None:
        client = langgraph_sdk.get_client(url=f"{server.url}/langgraph", api_key="unused")
        root = _ns()
        await client.store.put_item([root, "docs"], key="d1", value={"kind": "note", "n": 1}, ttl=5)
        await client.store.put_item([root, "docs"], key="d2", value={"kind": "todo", "n": 2})
        got = await client.store.get_item([root, "docs"], "d1")
        assert got is not None and got["value"] == {"kind": "note", "n": 1}
        found = await client.store.search_items([root], filter={"kind": "todo"})
        assert [i["key"] for i in found["items"]] == ["d2"]
        page = await client.store.search_items([root], limit=1, offset=1)
        assert len(page["items"]) == 1
        assert await client.store.list_namespaces(prefix=[root]) == {"namespaces": [[root, "docs"]]}
        await client.store.delete_item([root, "docs"], "d1")
        assert await client.store.get_item([root, "docs"], "d1") is None

    asyncio.run(scenario())


def test_stepwise_store_is_a_langgraph_store(server: LocalServer) -> None:
    root = _ns()
    with StepwiseStore(base_url=server.url) as store:
        store.put((root, "a"), "k1", {"n": 1})
        store.put((root, "a"), "k2", {"n": 2}, ttl=10)
        store.put((root, "b"), "k3", {"n": 3})
        item = store.get((root, "a"), "k1")
        assert item is not None and item.value == {"n": 1} and item.namespace == (root, "a")
        assert item.created_at.tzinfo is not None
        assert [i.key for i in store.search((root,), filter={"n": {"$gt": 1}})] == ["k3", "k2"]
        assert len(store.search((root,), limit=2, offset=2)) == 1
        assert store.list_namespaces(prefix=(root,)) == [(root, "a"), (root, "b")]
        assert store.list_namespaces(prefix=(root,), max_depth=1) == [(root,)]
        store.delete((root, "a"), "k1")
        assert store.get((root, "a"), "k1") is None
        with pytest.raises(StepwiseError):
            store.search((root,), query="no embeddings here")


def test_stepwise_store_async_with_an_async_client(server: LocalServer) -> None:
    async def scenario() -> None:
        root = _ns()
        client = AsyncStepwise(server.url)
        store = StepwiseStore(client)
        try:
            await store.aput((root,), "k", {"v": "x"})
            item = await store.aget((root,), "k")
            assert item is not None and item.value == {"v": "x"}
            assert [i.key for i in await store.asearch((root,))] == ["k"]
            assert await store.alist_namespaces(prefix=(root,)) == [(root,)]
            # The sync face of the same store, as a graph's sync nodes use it.
            assert store.get((root,), "k") is not None
            await store.adelete((root,), "k")
            assert await store.aget((root,), "k") is None
        finally:
            store.close()
            await client.aclose()

    asyncio.run(scenario())


class _State(TypedDict):
    user: str
    seen: int


def test_a_graph_compiled_with_the_store_remembers_across_threads(server: LocalServer) -> None:
    root = _ns()

    def remember(state: _State, *, store: BaseStore) -> dict[str, Any]:
        namespace = (root, state["user"])
        item = store.get(namespace, "visits")
        seen = (item.value["count"] if item else 0) + 1
        store.put(namespace, "visits", {"count": seen})
        return {"seen": seen}

    builder = StateGraph(_State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    with Stepwise(server.url) as client:
        store = StepwiseStore(client)
        graph = builder.compile(store=store)
        assert graph.invoke({"user": "ada", "seen": 0})["seen"] == 1
        assert graph.invoke({"user": "ada", "seen": 0})["seen"] == 2
        assert graph.invoke({"user": "bob", "seen": 0})["seen"] == 1
        # The SDK sees what the graph wrote.
        sdk = langgraph_sdk.get_sync_client(url=f"{server.url}/langgraph", api_key="unused")
        item = sdk.store.get_item([root, "ada"], "visits")
        assert item is not None and item["value"] == {"count": 2}


def test_an_end_users_token_is_refused_and_its_admin_reaches_the_store(tmp_path: Any) -> None:
    import subprocess

    from stepwise.testing import find_binary, local_server

    database = f"sqlite://{tmp_path / 'stepwise.db'}"
    made = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", "acme", "--user", "ops", "--role", "admin"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    admin_key = made.stdout.strip().splitlines()[-1].strip()
    with local_server(database=database) as running:
        with Stepwise(running.url, api_key=admin_key) as admin:
            token = admin.tokens.create("alice", ttl_s=600)["token"]
        url = f"{running.url}/langgraph"
        as_admin = langgraph_sdk.get_sync_client(url=url, api_key=admin_key)
        as_user = langgraph_sdk.get_sync_client(url=url, api_key=token)
        as_admin.store.put_item(["mem"], key="k", value={"n": 1})
        assert as_admin.store.get_item(["mem"], "k")["value"] == {"n": 1}
        for call in (
            lambda: as_user.store.put_item(["mem"], key="k", value={"n": 2}),
            lambda: as_user.store.get_item(["mem"], "k"),
            lambda: as_user.store.search_items(["mem"]),
            lambda: as_user.store.list_namespaces(),
            lambda: as_user.store.delete_item(["mem"], "k"),
        ):
            with pytest.raises(httpx.HTTPStatusError) as refused:
                call()
            assert refused.value.response.status_code == 403
            assert refused.value.response.json()["error"]["code"] == "forbidden"
        nobody = langgraph_sdk.get_sync_client(url=url, api_key="sk-not-a-key")
        with pytest.raises(httpx.HTTPStatusError) as unknown:
            nobody.store.get_item(["mem"], "k")
        assert unknown.value.response.status_code == 401
        assert as_admin.store.get_item(["mem"], "k")["value"] == {"n": 1}


# --- semantic search: an embedding model behind an OpenAI-compatible /embeddings -------------

import hashlib  # noqa: E402
import http.server  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import threading  # noqa: E402
from collections.abc import Iterator  # noqa: E402

from stepwise.testing import local_server  # noqa: E402

_DIMS = 256
_KEY = "sk-embed-secret-1234567890"
_STOP = {"a", "an", "the", "and", "at", "all", "of"}


def _embedding(text: str) -> list[float]:
    """A bag of words: each word but the stop words (its stem: its first 3 letters) adds 1 at
    its hash's place, so texts sharing stems are close."""
    vector = [0.0] * _DIMS
    for word in text.lower().replace(",", " ").split():
        if word not in _STOP:
            vector[int(hashlib.sha256(word[:3].encode()).hexdigest(), 16) % _DIMS] += 1.0
    return vector


class _Embeddings(http.server.BaseHTTPRequestHandler):
    """OpenAI's `POST /v1/embeddings`; `fail` set answers 500."""

    seen: list[dict[str, Any]] = []
    fail = False

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Embeddings.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if _Embeddings.fail or self.path != "/v1/embeddings":
            answer, status = {"error": {"message": "the model is down"}}, 500
        else:
            data = [{"object": "embedding", "index": i, "embedding": _embedding(t)} for i, t in enumerate(body["input"])]
            answer, status = {"object": "list", "data": data, "model": body["model"]}, 200
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def indexed() -> Iterator[LocalServer]:
    """A server whose store embeds the `text` field with an in-test OpenAI-style model."""
    model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{model.server_address[1]}/v1"
    args = ["--store-embed-model", "fake-embed", "--store-embed-url", url, "--store-embed-dims", str(_DIMS),
            "--store-index-fields", "text"]
    try:
        with local_server(args=args, env={"STEPWISE_STORE_EMBED_API_KEY": _KEY}) as running:
            yield running
    finally:
        model.shutdown()


def test_a_query_ranks_the_items_by_meaning_when_an_embedding_model_is_configured(indexed: LocalServer) -> None:
    client = langgraph_sdk.get_sync_client(url=f"{indexed.url}/langgraph", api_key="unused")
    root = _ns()
    client.store.put_item([root, "notes"], key="cats", value={"text": "cats purr and sleep all day", "n": 1})
    client.store.put_item([root, "notes"], key="dogs", value={"text": "dogs bark at the mailman", "n": 2})
    client.store.put_item([root, "notes"], key="stocks", value={"text": "stock markets fell sharply", "n": 3})
    client.store.put_item([root, "notes"], key="plain", value={"text": "cats sleep", "n": 4}, index=False)
    client.store.put_item([root, "notes"], key="fields", value={"title": "dogs bark", "text": "nothing"},
                          index=["title"])
    sent = _Embeddings.seen[-1]
    assert sent["model"] == "fake-embed" and sent["input"] == ["dogs bark"]
    assert sent["auth"] == f"Bearer {_KEY}"

    found = client.store.search_items([root], query="a sleeping cat", limit=10)["items"]
    keys = [i["key"] for i in found]
    assert keys[0] == "cats"
    scores = [i["score"] for i in found if i["score"] is not None]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1.0
    # An item put with index=False has no vectors: it comes last, without a score.
    assert keys[-1] == "plain" and found[-1]["score"] is None
    # The put's own index fields were embedded, not the server's.
    assert client.store.search_items([root], query="barking dogs", limit=2)["items"][0]["key"] in ("dogs", "fields")
    # The filter and paging apply; the vectors are never in an answer.
    only = client.store.search_items([root], query="cats", filter={"n": {"$gte": 2}}, limit=1, offset=0)["items"]
    assert len(only) == 1 and only[0]["key"] != "cats"
    assert all("__stepwise_index__" not in i["value"] for i in found)
    assert client.store.get_item([root, "notes"], "cats")["value"] == {"text": "cats purr and sleep all day", "n": 1}

    # StepwiseStore (a LangGraph BaseStore) searches the same way.
    with Stepwise(indexed.url) as stepwise:
        store = StepwiseStore(stepwise)
        best = store.search((root,), query="cats sleeping", limit=1)
        assert best[0].key == "cats" and best[0].score is not None
        store.put((root, "more"), "birds", {"text": "birds sing at dawn"}, index=False)
        assert store.search((root, "more"), query="birds")[0].score is None

    # The key is never in the server's log.
    assert _KEY not in indexed.log()


def test_a_put_the_embedding_model_refuses_writes_nothing(indexed: LocalServer) -> None:
    client = langgraph_sdk.get_sync_client(url=f"{indexed.url}/langgraph", api_key="unused")
    root = _ns()
    _Embeddings.fail = True
    try:
        with pytest.raises(httpx.HTTPStatusError) as down:
            client.store.put_item([root], key="k", value={"text": "lost?"})
        assert down.value.response.status_code == 503
        assert down.value.response.json()["error"]["code"] == "unavailable"
        assert "the model is down" in down.value.response.json()["error"]["message"]
        assert client.store.get_item([root], "k") is None
        # A put that embeds nothing does not need the model.
        client.store.put_item([root], key="quiet", value={"text": "kept"}, index=False)
        assert client.store.get_item([root], "quiet")["value"] == {"text": "kept"}
    finally:
        _Embeddings.fail = False
    assert _KEY not in indexed.log()
