"""`StepwiseStore`: LangGraph's long-term memory (`langgraph.store.base.BaseStore`) kept by a
Stepwise server, per tenant, at ``/langgraph/store/...`` (the LangGraph Server's store API,
which `langgraph_sdk`'s ``client.store`` also speaks).

::

    from stepwise.langgraph import StepwiseStore

    store = StepwiseStore(base_url="http://127.0.0.1:7777", api_key="sk-...")
    graph = builder.compile(checkpointer=saver, store=store)

The store is the tenant's: an admin or worker key reaches it; an end user's token is refused
(403). Items may carry a time to live in minutes (``ttl=``); reads start it again unless asked
not to (``refresh_ttl=False``). Searches take a namespace prefix, a ``filter`` on the value's
top-level fields (equality, or ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``) and
``limit``/``offset``. A search ``query`` ranks the items by meaning (``score``) when the server
has an embedding model (``stepwise serve --store-embed-model MODEL``; the fields embedded are the
server's ``--store-index-fields`` or a put's ``index=[...]``, none with ``index=False``); without
one it raises.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .._async_client import AsyncStepwise
from .._client import Stepwise

__all__ = ["StepwiseStore"]

_ITEMS = "/langgraph/store/items"
_SEARCH = "/langgraph/store/items/search"
_NAMESPACES = "/langgraph/store/namespaces"


def _when(text: str) -> datetime:
    """An RFC 3339 time of the server (``...Z``) as an aware `datetime`."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _item(body: Mapping[str, Any]) -> Item:
    return Item(
        value=dict(body["value"]),
        key=str(body["key"]),
        namespace=tuple(body["namespace"]),
        created_at=_when(body["created_at"]),
        updated_at=_when(body["updated_at"]),
    )


def _search_item(body: Mapping[str, Any]) -> SearchItem:
    return SearchItem(
        namespace=tuple(body["namespace"]),
        key=str(body["key"]),
        value=dict(body["value"]),
        created_at=_when(body["created_at"]),
        updated_at=_when(body["updated_at"]),
        score=body.get("score"),
    )


_Request = tuple[str, str, "dict[str, Any] | None", "dict[str, str] | None", str]


def _request(op: Op) -> _Request:
    """The request for one op: (method, path, JSON body, query, how to read the answer)."""
    if isinstance(op, GetOp):
        params = {
            "namespace": ".".join(op.namespace),
            "key": str(op.key),
            "refresh_ttl": "true" if op.refresh_ttl else "false",
        }
        return "GET", _ITEMS, None, params, "item"
    if isinstance(op, PutOp):
        if op.value is None:
            return "DELETE", _ITEMS, {"namespace": list(op.namespace), "key": op.key}, None, "none"
        body: dict[str, Any] = {"namespace": list(op.namespace), "key": op.key, "value": dict(op.value)}
        if op.ttl is not None:
            body["ttl"] = op.ttl
        if op.index is not None:  # False, or the fields to embed
            body["index"] = op.index if op.index is False else list(op.index)
        return "PUT", _ITEMS, body, None, "none"
    if isinstance(op, SearchOp):
        body = {
            "namespace_prefix": list(op.namespace_prefix),
            "limit": op.limit,
            "offset": op.offset,
            "refresh_ttl": op.refresh_ttl,
        }
        if op.filter:
            body["filter"] = dict(op.filter)
        if op.query:
            body["query"] = op.query
        return "POST", _SEARCH, body, None, "search"
    if isinstance(op, ListNamespacesOp):
        body = {"limit": op.limit, "offset": op.offset}
        for condition in op.match_conditions or ():
            if condition.match_type in body:
                raise ValueError(f"one {condition.match_type} condition at most, got several")
            body[condition.match_type] = list(condition.path)
        if op.max_depth is not None:
            body["max_depth"] = op.max_depth
        return "POST", _NAMESPACES, body, None, "namespaces"
    raise TypeError(f"unknown store operation: {op!r}")


def _result(kind: str, answer: Any) -> Result:
    if kind == "item":
        return None if answer is None else _item(answer)
    if kind == "search":
        return [_search_item(item) for item in answer["items"]]
    if kind == "namespaces":
        return [tuple(namespace) for namespace in answer["namespaces"]]
    return None


class StepwiseStore(BaseStore):
    """A LangGraph `BaseStore` whose items a Stepwise server keeps (see the module's docs).

    `client` is a `Stepwise` or an `AsyncStepwise` (closed by you); without one the store
    opens a `Stepwise` from `base_url` / `api_key` (defaults: env ``STEPWISE_URL`` and
    ``STEPWISE_API_KEY``) and closes it in `close()`. `batch` sends each op with a
    synchronous client and `abatch` with an asynchronous one when it was given one (else it
    runs `batch` in a worker thread); the other kind is opened on first use, to the same
    server with the same key. Errors are the client's `StepwiseError`.
    """

    supports_ttl = True

    def __init__(
        self,
        client: Stepwise | AsyncStepwise | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
    ) -> None:
        self._owns_client = client is None
        self._sync: Stepwise | None = None
        self._async: AsyncStepwise | None = None
        if isinstance(client, AsyncStepwise):
            self._async = client
        else:
            self._sync = Stepwise(base_url, api_key) if client is None else client
        self._opened_sync = False
        self._lock = threading.Lock()

    def _sync_client(self) -> Stepwise:
        with self._lock:
            if self._sync is None:
                source = self._async
                assert source is not None
                self._sync = Stepwise(source.base_url, source.api_key, timeout=source.timeout)
                self._opened_sync = True
            return self._sync

    def close(self) -> None:
        """Closes the synchronous client the store opened itself (not one you passed)."""
        if self._sync is not None and (self._owns_client or self._opened_sync):
            self._sync.close()

    def __enter__(self) -> "StepwiseStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the ops in order, one request each, and returns their results."""
        client = self._sync_client()
        results: list[Result] = []
        for op in ops:
            method, path, body, params, kind = _request(op)
            answer = client.request(method, path, json=body, params=params, idempotent=True)
            results.append(_result(kind, answer))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch`, awaited: over the `AsyncStepwise` client when the store has one."""
        if self._async is None:
            return await asyncio.to_thread(self.batch, list(ops))
        results: list[Result] = []
        for op in ops:
            method, path, body, params, kind = _request(op)
            answer = await self._async.request(method, path, json=body, params=params, idempotent=True)
            results.append(_result(kind, answer))
        return results
