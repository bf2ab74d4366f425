"""LangGraph checkpointers backed by Stepwise: `StepwiseSaver` and `AsyncStepwiseSaver`; and
`StepwiseStore`, LangGraph's long-term memory store (``compile(store=...)``) kept by the server
at ``/langgraph/store/...`` (see `stepwise.langgraph._store`).

::

    from langgraph.graph import StateGraph
    from stepwise.langgraph import StepwiseSaver

    saver = StepwiseSaver(base_url="http://127.0.0.1:7777")   # or StepwiseSaver(client)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "support-42"}})

A LangGraph thread is a Stepwise session of the caller's tenant (named after the thread when
the name is free). Checkpoints, channel values ("blobs") and pending writes are stored by the
server's ``/v1/threads/...`` endpoints, serialized with LangGraph's own serializer
(``serde.dumps_typed``, base64 in JSON), so every value round-trips exactly.

Flat storage: when a list channel (``messages``) only grew since the version this saver last
wrote or read for that thread, namespace and channel, only the new items are sent, as an
``append`` blob on top of that version; the server rebuilds the list when it is read. A
thread of 1,000 steps does not send (or store) its history 1,000 times. New items that are
exactly what a node wrote (its pending write, sent just before by this saver) are sent as a
reference to that write, so a message is stored once. New messages of
the ``messages`` channel are also mirrored into the session (user and assistant messages,
tool calls and their results as steps), so the conversation shows in Stepwise's UI and API.

`StepwiseSaver`'s async methods run the sync calls in a worker thread; `AsyncStepwiseSaver`
uses `AsyncStepwise` for its async methods and a synchronous client to the same server for
its sync ones (e.g. ``graph.get_state``).

The requests both savers send are built in `_wire` (`Wire`); when the server is
reached over plain HTTP, the sync saver's calls go over the keep-alive pool of
`stepwise._transport.sync.FastHTTP` and the async saver's over a
`stepwise._transport.aio.LeanPool` per event loop.
"""

from ._savers import AsyncStepwiseSaver, StepwiseSaver
from ._store import StepwiseStore
from ._wire import mirror_message

__all__ = ["StepwiseSaver", "AsyncStepwiseSaver", "StepwiseStore", "mirror_message"]
