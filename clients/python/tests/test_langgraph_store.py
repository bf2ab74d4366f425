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
