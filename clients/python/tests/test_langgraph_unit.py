"""stepwise.langgraph without a server: versions, the flat-storage delta, encoding, mirror."""

from __future__ import annotations

import base64
import json
import os
import threading
import time

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT, RESUME, SCHEDULED

from stepwise import Stepwise, StepwiseError
from stepwise.langgraph._wire import _Written, _WrittenLists
from stepwise.langgraph import AsyncStepwiseSaver, StepwiseSaver, mirror_message


@pytest.fixture
def saver():
    # Nothing is sent: these tests only build requests and read answers.
    with Stepwise("http://127.0.0.1:9") as client:
        yield StepwiseSaver(client)


def config(thread="t", ns="", checkpoint_id=None):
    conf = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint_with(saver, values, versions):
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def put_body(saver, values, versions, new_versions=None, conf=None):
    cp = checkpoint_with(saver, values, versions)
    path, body, updates, result = saver._wire.put_request(
        conf or config(), cp, {"source": "loop", "step": 1}, new_versions or versions
    )
    saver._wire.commit(updates)
    return cp, path, body, result


def decode(saver, typed):
    return saver._wire.load(typed)


def test_next_version_is_a_zero_padded_counter_that_sorts_as_text(saver):
    v1 = saver.get_next_version(None, None)
    assert v1.split(".")[0] == "1".zfill(12)
    versions = [v1]
    for _ in range(120):
        versions.append(saver.get_next_version(versions[-1], None))
    assert versions == sorted(versions)
    assert [int(v.split(".")[0]) for v in versions] == list(range(1, 122))
    assert len(set(versions)) == len(versions)
    assert saver.get_next_version(7, None).startswith("8".zfill(12) + ".")
    assert AsyncStepwiseSaver(client=None, base_url="http://127.0.0.1:9").get_next_version(v1, None) > v1


def test_a_thread_with_langgraphs_long_versions_keeps_their_width(saver):
    """Versions are compared as text: a thread written with 32-digit counters (LangGraph's own
    savers, earlier clients) must not get shorter ones, which would sort before them."""
    old = "9".zfill(32) + ".0.41724145132718515"
    new = saver.get_next_version(old, None)
    assert new.split(".")[0] == "10".zfill(32)
    assert new > old


def test_a_list_that_grew_is_sent_as_an_append_of_the_new_items_only(saver):
    msgs = [HumanMessage("hi", id="1"), AIMessage("hello", id="2")]
    v1 = saver.get_next_version(None, None)
    _, _, body, _ = put_body(saver, {"messages": list(msgs)}, {"messages": v1})
    [blob] = body["blobs"]
    assert "base_version" not in blob
    assert decode(saver, blob) == msgs

    grown = msgs + [HumanMessage("again", id="3")]
    v2 = saver.get_next_version(v1, None)
    _, _, body, _ = put_body(saver, {"messages": grown}, {"messages": v2})
    [blob] = body["blobs"]
    assert blob["base_version"] == v1 and blob["version"] == v2
    assert [decode(saver, i) for i in blob["items"]] == [HumanMessage("again", id="3")]

    # Equal (not identical) items count as unchanged too; several new items each on their own.
    copy = [HumanMessage("hi", id="1"), AIMessage("hello", id="2"), HumanMessage("again", id="3")]
    more = copy + [AIMessage("a", id="4"), AIMessage("b", id="5")]
    v3 = saver.get_next_version(v2, None)
    _, _, body, _ = put_body(saver, {"messages": more}, {"messages": v3})
    [blob] = body["blobs"]
    assert blob["base_version"] == v2
    assert [decode(saver, i).content for i in blob["items"]] == ["a", "b"]


def test_a_changed_or_shorter_list_is_sent_whole(saver):
    v1 = saver.get_next_version(None, None)
    put_body(saver, {"messages": ["a", "b", "c"]}, {"messages": v1})
    v2 = saver.get_next_version(v1, None)
    _, _, body, _ = put_body(saver, {"messages": ["a", "X", "c", "d"]}, {"messages": v2})
    assert "base_version" not in body["blobs"][0]
    assert decode(saver, body["blobs"][0]) == ["a", "X", "c", "d"]
    v3 = saver.get_next_version(v2, None)
    _, _, body, _ = put_body(saver, {"messages": ["a"]}, {"messages": v3})  # a fork from earlier
    assert "base_version" not in body["blobs"][0]
    # The same version again (a repeated put) never appends onto itself.
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": v3})
    assert "base_version" not in body["blobs"][0]


V1, V2, V3 = "1".zfill(32) + ".5", "2".zfill(32) + ".5", "3".zfill(32) + ".5"


def test_appends_are_per_thread_namespace_and_channel(saver):
    put_body(saver, {"messages": ["a"]}, {"messages": V1}, conf=config("t1"))
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": V2}, conf=config("t2"))
    assert "base_version" not in body["blobs"][0]
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": V2}, conf=config("t1", "sub:1"))
    assert "base_version" not in body["blobs"][0]
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": V2}, conf=config("t1"))
    assert body["blobs"][0]["base_version"] == V1


def test_integer_versions_are_never_appended_to(saver):
    # An int version may have been put before with another value; only LangGraph's
    # "counter.random" versions are remembered.
    put_body(saver, {"messages": ["a"]}, {"messages": 1})
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": 2})
    assert "base_version" not in body["blobs"][0]


def test_a_list_mutated_in_place_after_put_still_appends_correctly(saver):
    # A reducer that extends the list it was given: the cache keeps its own copy.
    value = ["a"]
    put_body(saver, {"messages": value}, {"messages": V1})
    value.append("b")
    _, _, body, _ = put_body(saver, {"messages": value}, {"messages": V2})
    assert [decode(saver, i) for i in body["blobs"][0]["items"]] == ["b"]


def test_the_cache_is_bounded():
    with Stepwise("http://127.0.0.1:9") as client:
        small = StepwiseSaver(client, cache_size=2)
        for t in ("t1", "t2", "t3"):
            put_body(small, {"messages": ["a"]}, {"messages": V1}, conf=config(t))
        _, _, body, _ = put_body(small, {"messages": ["a", "b"]}, {"messages": V2}, conf=config("t1"))
        assert "base_version" not in body["blobs"][0]  # t1 was evicted
        _, _, body, _ = put_body(small, {"messages": ["a", "b"]}, {"messages": V2}, conf=config("t3"))
        assert body["blobs"][0]["base_version"] == V1


def test_put_body_shape_and_returned_config(saver):
    values = {"messages": ["x"], "count": 3, "untouched": "old"}
    versions = {"messages": 1, "count": 1, "untouched": 1, "gone": 1}
    cp = checkpoint_with(saver, values, versions)
    conf = config("thread/with spaces", "child:1", checkpoint_id="parent-id")
    conf["configurable"]["user_id"] = "u-7"  # copied into the metadata, as LangGraph's savers do
    path, body, _, result = saver._wire.put_request(
        conf, cp, {"source": "loop", "step": 4, "writes": {"x": 1}}, {"messages": 1, "count": 1, "gone": 1}
    )
    assert path == f"/v1/threads/thread%2Fwith%20spaces/checkpoints/{cp['id']}"
    assert result == {"configurable": {"thread_id": "thread/with spaces", "checkpoint_ns": "child:1", "checkpoint_id": cp["id"]}}
    assert body["checkpoint_ns"] == "child:1" and body["parent_checkpoint_id"] == "parent-id"
    assert body["metadata"] == {"source": "loop", "step": 4, "user_id": "u-7"}
    assert body["channel_versions"] == {"messages": "1", "count": "1", "untouched": "1", "gone": "1"}
    stored = decode(saver, body["checkpoint"])
    assert "channel_values" not in stored and stored["id"] == cp["id"]
    blobs = {b["channel"]: b for b in body["blobs"]}
    assert set(blobs) == {"messages", "count", "gone"}  # only new versions
    assert blobs["gone"]["type"] == "empty"
    assert decode(saver, blobs["count"]) == 3


def test_tuple_from_an_answer_rebuilds_lists_and_orders_writes(saver):
    cp = empty_checkpoint()
    cp["channel_versions"] = {"messages": "2", "n": "1", "e": "1"}
    d = saver._wire.dump
    answer = {
        "thread_id": "t",
        "checkpoint_ns": "",
        "checkpoint_id": cp["id"],
        "parent_checkpoint_id": "p",
        "checkpoint": d(cp),
        "metadata": {"step": 2},
        "channel_versions": cp["channel_versions"],
        "blobs": [
            {"channel": "messages", "version": "2", "type": "list", "base": d(["a", "b"]), "items": [d("c"), d("d")]},
            {"channel": "n", "version": "1", **d(5)},
            {"channel": "e", "version": "1", "type": "empty", "data": ""},
        ],
        "pending_writes": [
            {"task_id": "t2", "idx": 0, "channel": "x", "task_path": "b", **d(2)},
            {"task_id": "t1", "idx": 1, "channel": "y", "task_path": "a", **d(1)},
            {"task_id": "t1", "idx": -1, "channel": ERROR, "task_path": "a", **d("boom")},
        ],
    }
    tup = saver._wire.tuple_from(answer)
    assert tup.checkpoint["channel_values"] == {"messages": ["a", "b", "c", "d"], "n": 5}
    assert tup.config["configurable"] == {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cp["id"]}
    assert tup.parent_config["configurable"]["checkpoint_id"] == "p"
    assert tup.pending_writes == [("t1", ERROR, "boom"), ("t1", "y", 1), ("t2", "x", 2)]
    answer["blobs"][0] = {"channel": "messages", "version": "2", "type": "list", "base": None, "items": [d("z")]}
    answer["parent_checkpoint_id"] = None
    tup = saver._wire.tuple_from(answer)
    assert tup.checkpoint["channel_values"]["messages"] == ["z"] and tup.parent_config is None


def test_a_read_latest_value_is_the_base_of_the_next_append_and_read(saver):
    cp = empty_checkpoint()
    d = saver._wire.dump
    answer = {
        "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cp["id"], "parent_checkpoint_id": None,
        "checkpoint": d(cp), "metadata": {}, "channel_versions": {"messages": V1},
        "blobs": [{"channel": "messages", "version": V1, **d(["a"])}], "pending_writes": [],
    }
    path, params, held = saver._wire.get_request(config())
    assert path == "/v1/threads/t/checkpoints/latest" and params == {"checkpoint_ns": ""} and held == {}
    saver._wire.tuple_from(answer, remember=True, held=held)
    _, _, body, _ = put_body(saver, {"messages": ["a", "b"]}, {"messages": V2})
    assert body["blobs"][0]["base_version"] == V1

    # The next read says which list it holds; an answer "since" that version adds to it.
    path, params, held = saver._wire.get_request(config())
    assert params == {"checkpoint_ns": "", "have": '{"messages":"%s"}' % V2}
    answer["blobs"] = [{"channel": "messages", "version": V3, "type": "list", "since": V2, "items": [d("c")]}]
    tup = saver._wire.tuple_from(answer, remember=True, held=held)
    assert tup.checkpoint["channel_values"]["messages"] == ["a", "b", "c"]
    _, params, held = saver._wire.get_request(config())
    assert params["have"] == '{"messages":"%s"}' % V3
    # A server that ignores `have` answers the whole list, which is as good.
    answer["blobs"] = [{"channel": "messages", "version": V3, "type": "list", "base": d(["a"]), "items": [d("b"), d("c")]}]
    assert saver._wire.tuple_from(answer, held=held).checkpoint["channel_values"]["messages"] == ["a", "b", "c"]
    # An answer since a version this saver did not send is an error, not a wrong list.
    answer["blobs"] = [{"channel": "messages", "version": V3, "type": "list", "since": V1, "items": []}]
    with pytest.raises(StepwiseError):
        saver._wire.tuple_from(answer, held=held)


def test_writes_use_negative_indexes_for_special_channels_and_are_chunked(saver):
    conf = config("t", "ns", checkpoint_id="c1")
    [(path, body)] = saver._wire.writes_requests(
        conf, [("a", 1), (ERROR, "e"), (INTERRUPT, "i"), (SCHEDULED, "s"), (RESUME, "r"), ("b", 2)], "task", "p"
    )
    assert path == "/v1/threads/t/checkpoints/c1/writes"
    assert body["checkpoint_ns"] == "ns" and body["task_id"] == "task" and body["task_path"] == "p"
    assert [w["idx"] for w in body["writes"]] == [0, WRITES_IDX_MAP[ERROR], -3, -2, -4, 5]
    assert decode(saver, body["writes"][1]) == "e"
    chunks = saver._wire.writes_requests(conf, [("c", i) for i in range(2500)], "task", "")
    assert [len(b["writes"]) for _, b in chunks] == [1000, 1000, 500]
    assert chunks[2][1]["writes"][0]["idx"] == 2000


def test_list_requests(saver):
    assert saver._wire.list_request(None, None, None) == ("/v1/checkpoints", {})
    path, params = saver._wire.list_request(
        {"configurable": {"thread_id": "t"}}, {"source": "input", "step": 1}, config(checkpoint_id="c9")
    )
    assert path == "/v1/threads/t/checkpoints"
    assert params == {"before": "c9", "filter": '{"source":"input","step":1}'}
    _, params = saver._wire.list_request(config(ns=""), None, None)
    assert params == {"checkpoint_ns": ""}  # the root namespace only
    assert saver._wire.list_page_params({}, 2500, None) == {"limit": "1000"}
    assert saver._wire.list_page_params({}, None, "cur") == {"cursor": "cur"}


def test_prune_refuses_unknown_strategies(saver):
    with pytest.raises(ValueError):
        saver.prune(["t"], strategy="everything")


def test_mirror_of_langchain_messages():
    assert mirror_message(HumanMessage("hi")) == {
        "role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None, "usage": None,
    }
    ai = AIMessage(
        "",
        tool_calls=[{"id": "c1", "name": "add", "args": {"a": 2, "b": 3}}],
        usage_metadata={"input_tokens": 10, "output_tokens": 4, "total_tokens": 14},
    )
    assert mirror_message(ai) == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}],
        "tool_call_id": None, "usage": {"input": 10, "output": 4},
    }
    assert mirror_message(ToolMessage("5", tool_call_id="c1"))["tool_call_id"] == "c1"
    assert mirror_message(ToolMessage("5", tool_call_id="c1"))["role"] == "tool"
    assert mirror_message(SystemMessage("be brief"))["role"] == "system"
    blocks = HumanMessage(content=[{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}])
    assert mirror_message(blocks)["content"] == "look"
    assert mirror_message({"role": "assistant", "content": "ok", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]})["tool_calls"] == [
        {"id": "c2", "name": "f", "arguments": {"x": 1}}]
    assert mirror_message({"role": "user", "content": "q"})["role"] == "user"
    assert mirror_message("not a message") is None
    assert mirror_message({"foo": 1}) is None


def test_only_new_messages_are_mirrored(saver):
    msgs = [HumanMessage("q1", id="1")]
    _, _, body, _ = put_body(saver, {"messages": msgs}, {"messages": V1})
    assert [m["content"] for m in body["mirror"]] == ["q1"]
    msgs = msgs + [AIMessage("a1", id="2")]
    _, _, body, _ = put_body(saver, {"messages": msgs}, {"messages": V2})
    assert [m["content"] for m in body["mirror"]] == ["a1"]
    _, _, body, _ = put_body(saver, {"messages": msgs, "other": 1}, {"messages": V2, "other": V1}, new_versions={"other": V1})
    assert "mirror" not in body
    with Stepwise("http://127.0.0.1:9") as client:
        quiet = StepwiseSaver(client, mirror_channels=())
        _, _, body, _ = put_body(quiet, {"messages": msgs}, {"messages": "1"})
        assert "mirror" not in body


def test_large_values_are_compressed_and_small_ones_not(saver):
    big = {"text": "lorem ipsum dolor " * 100}
    typed = saver._wire.dump(big)
    assert typed["type"] == "msgpack+zlib"
    assert len(base64.b64decode(typed["data"])) < len(saver.serde.dumps_typed(big)[1]) / 3
    assert saver._wire.load(typed) == big
    assert saver._wire.dump("short")["type"] == "msgpack"
    noise = os.urandom(600)  # does not compress: stored as it is
    assert saver._wire.dump(noise)["type"] == "bytes"
    with Stepwise("http://127.0.0.1:9") as client:
        plain = StepwiseSaver(client, compress=False)
        assert plain._wire.dump(big)["type"] == "msgpack"
        assert plain._wire.load(typed) == big  # reads compressed values all the same


def test_string_channel_versions_travel_once(saver):
    versions = {"messages": V1, "turn": V2}
    cp, _, body, _ = put_body(saver, {"messages": ["a"], "turn": 1}, versions)
    assert "channel_versions" not in decode(saver, body["checkpoint"])
    assert body["channel_versions"] == versions
    answer = {
        "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cp["id"], "parent_checkpoint_id": None,
        "checkpoint": body["checkpoint"], "metadata": body["metadata"], "channel_versions": body["channel_versions"],
        "blobs": [{"channel": b["channel"], "version": b["version"], "type": b["type"], "data": b["data"]} for b in body["blobs"]],
        "pending_writes": [],
    }
    tup = saver._wire.tuple_from(answer)
    assert tup.checkpoint["channel_versions"] == versions
    assert {k: v for k, v in tup.checkpoint.items() if k != "channel_values"} == {k: v for k, v in cp.items() if k != "channel_values"}
    assert tup.checkpoint["channel_values"] == {"messages": ["a"], "turn": 1}


def test_other_values_are_held_too_and_an_unchanged_one_is_not_sent_back(saver):
    cp, _, body, _ = put_body(saver, {"turn": {"n": 1}, "messages": ["a"]}, {"turn": V1, "messages": V1, "gone": V1})
    path, params, held = saver._wire.get_request(config())
    assert json.loads(params["have"]) == {"turn": V1, "messages": V1, "gone": V1}
    d = saver._wire.dump
    answer = {
        "thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cp["id"], "parent_checkpoint_id": None,
        "checkpoint": body["checkpoint"], "metadata": {}, "channel_versions": {"turn": V1, "messages": V1, "gone": V1},
        "blobs": [
            {"channel": "turn", "version": V1, "type": "list", "since": V1, "items": []},
            {"channel": "messages", "version": V1, "type": "list", "since": V1, "items": []},
            {"channel": "gone", "version": V1, "type": "list", "since": V1, "items": []},
        ],
        "pending_writes": [],
    }
    tup = saver._wire.tuple_from(answer, remember=True, held=held)
    assert tup.checkpoint["channel_values"] == {"turn": {"n": 1}, "messages": ["a"]}
    tup.checkpoint["channel_values"]["turn"]["n"] = 99  # a mutated result does not change what is held
    assert saver._wire.tuple_from(answer, held=held).checkpoint["channel_values"]["turn"] == {"n": 1}
    # A changed value comes whole and is held from then on.
    answer["blobs"][0] = {"channel": "turn", "version": V2, **d({"n": 2})}
    assert saver._wire.tuple_from(answer, remember=True, held=held).checkpoint["channel_values"]["turn"] == {"n": 2}
    _, params, _ = saver._wire.get_request(config())
    assert json.loads(params["have"])["turn"] == V2
    # Items "since" a value that is not a list make no sense: an error, not a wrong value.
    _, _, held = saver._wire.get_request(config())
    answer["blobs"][0] = {"channel": "turn", "version": V3, "type": "list", "since": V2, "items": [d(1)]}
    with pytest.raises(StepwiseError):
        saver._wire.tuple_from(answer, held=held)


def test_a_put_waits_for_writes_handed_to_a_thread_that_has_not_begun():
    # LangGraph hands a task's writes and the next checkpoint to two threads at once: the put's
    # may run first, and still refers to the writes once their thread begins.
    lists = _WrittenLists()
    key = ("t", "", "c1")
    written = _Written("task", 0, "messages", ("m",), {"type": "json", "data": ""})

    def late() -> None:
        time.sleep(0.05)
        lists.start(key)
        lists.finish(key, [written])

    sender = threading.Thread(target=late)
    sender.start()
    assert lists.of(key, "messages", wait=5.0, expect=5.0) == [written]
    sender.join()


def test_a_thread_whose_writes_do_not_come_is_not_waited_for_again():
    # durability="exit" sends no pending writes: after one wait in vain, puts of that thread
    # stop waiting, until its writes come again.
    lists = _WrittenLists()
    assert lists.of(("t", "", "c1"), "messages", expect=0.01) == []
    started = time.monotonic()
    assert lists.of(("t", "", "c2"), "messages", expect=60.0) == []
    assert time.monotonic() - started < 60.0
    lists.start(("t", "", "c3"))
    lists.finish(("t", "", "c3"), [])
    assert lists.of(("t", "", "c4"), "messages", expect=0.01) == []  # waits again: no hang, no writes
    assert lists.of(("other", "", "c1"), "messages", expect=0.01) == []


def _mock_saver(handler):
    import httpx

    from stepwise import AsyncStepwise

    return AsyncStepwiseSaver(AsyncStepwise("http://127.0.0.1:9", transport=httpx.MockTransport(handler)))


def test_both_savers_send_the_same_requests_for_each_operation():
    import asyncio

    import httpx

    seen: dict[str, list[tuple[str, str, object]]] = {"sync": [], "async": []}

    def answer(kind):
        def handler(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content) if request.content else None
            seen[kind].append((request.method, request.url.path, body))
            if request.method == "DELETE" or request.url.path.endswith("/copy"):
                return httpx.Response(404, json={"error": {"code": "not_found", "message": "no"}})
            if request.method == "GET":
                return httpx.Response(200, json={"items": [], "next_cursor": None})
            return httpx.Response(200, json={})

        return handler

    conf = config(checkpoint_id="c1")
    cp = empty_checkpoint()
    with StepwiseSaver(Stepwise("http://127.0.0.1:9", transport=httpx.MockTransport(answer("sync")))) as sync:
        sync.put_writes(conf, [("turn", 1)], "task")
        sync.put(config(), cp, {"source": "input", "step": -1}, {})
        assert list(sync.list(config(), limit=3)) == []
        sync.delete_thread("t")  # not found: nothing to delete
        sync.copy_thread("t", "u")
        sync.delete_for_runs(["r"])
        sync.prune(["t"])

    async def main() -> None:
        saver = _mock_saver(answer("async"))
        await saver.aput_writes(conf, [("turn", 1)], "task")
        await saver.aput(config(), cp, {"source": "input", "step": -1}, {})
        assert [t async for t in saver.alist(config(), limit=3)] == []
        await saver.adelete_thread("t")
        await saver.acopy_thread("t", "u")
        await saver.adelete_for_runs(["r"])
        await saver.aprune(["t"])
        await saver.aclose()

    asyncio.run(main())
    assert [(m, p) for m, p, _ in seen["async"]] == [(m, p) for m, p, _ in seen["sync"]]
    assert len(seen["sync"]) == 7


def test_a_cancelled_put_writes_is_no_longer_waited_for():
    import asyncio

    import httpx

    async def never(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(60)
        return httpx.Response(200, json={})

    async def main() -> None:
        saver = _mock_saver(never)
        conf = config(checkpoint_id="c1")
        task = asyncio.create_task(saver.aput_writes(conf, [("messages", ["a"])], "task"))
        await asyncio.sleep(0.05)
        assert saver._wire.written.sending(saver._wire.writes_key(conf))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # At once, not when the flow is collected: the next put does not wait for these writes.
        assert not saver._wire.written.sending(saver._wire.writes_key(conf))
        await saver.aclose()

    asyncio.run(main())
