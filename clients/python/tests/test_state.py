"""stepwise.state against a real server: seed 003's ConversationContext, one scenario a test."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import threading
import uuid
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import pytest
from pydantic import BaseModel, Field

from stepwise import AsyncStepwise, Stepwise, StepwiseError
from stepwise.state import METADATA_KEY, StateSaveError, StepwiseState, state_session_name
from stepwise.testing import LocalServer, find_binary, local_server

PYTHON_DIR = Path(__file__).resolve().parents[1]


class ConversationState(str, Enum):
    IDLE = "idle"
    GATHERING_PURPOSE = "gathering_purpose"
    GATHERING_DETAILS = "gathering_details"
    GENERATING = "generating"
    COMPLETED = "completed"
    ERROR = "error"


class ConversationContext(BaseModel):
    """Seed 003's context: the FSM state and the LLM's whole message history."""

    session_id: str
    state: ConversationState = ConversationState.IDLE
    skill_name: Optional[str] = None
    skill_purpose: Optional[str] = None
    message_history: list[dict[str, str]] = Field(default_factory=list)


def status_of(ctx: ConversationContext) -> str:
    """Seed 003's lifecycle: a completed conversation is kept 90 days, others go by idleness."""
    return "completed" if ctx.state == ConversationState.COMPLETED else "active"


class SkillCreationAgent:
    """A stand-in for seed 003's agent: one FSM step per message, persisted after each."""

    def __init__(self, store: StepwiseState[ConversationContext]) -> None:
        self.store = store

    def get_session_context(self, session_id: str) -> ConversationContext:
        return self.store.load(session_id) or ConversationContext(session_id=session_id)

    def handle_message(self, message: str, session_id: str) -> str:
        ctx = self.get_session_context(session_id)
        with self.store.saving(session_id, ctx):  # saved after the message, error or not
            ctx.message_history.append({"role": "user", "content": message})
            if "explode" in message:
                ctx.state = ConversationState.GATHERING_DETAILS
                raise RuntimeError("the LLM call failed")
            if ctx.state == ConversationState.IDLE:
                ctx.state, ctx.skill_purpose = ConversationState.GATHERING_PURPOSE, message
            elif "done" in message:
                ctx.state = ConversationState.COMPLETED
            else:
                ctx.state, ctx.skill_name = ConversationState.GATHERING_DETAILS, message.split()[-1]
            reply = f"({ctx.state.value}) noted: {message}"
            ctx.message_history.append({"role": "assistant", "content": reply})
        return reply


def unique(prefix: str = "skill") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(server: LocalServer) -> Any:
    with StepwiseState(ConversationContext, Stepwise(server.url), status=status_of) as s:
        yield s


def fresh(server: LocalServer, **options: Any) -> StepwiseState[ConversationContext]:
    """Another store on the same server, with an empty cache (a restarted process)."""
    return StepwiseState(ConversationContext, Stepwise(server.url), status=status_of, **options)


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


# --------------------------------------------------------------------------- save and load


def test_save_and_load_keep_the_whole_context(server: LocalServer, store: Any) -> None:
    sid = unique()
    ctx = ConversationContext(session_id=sid, state=ConversationState.GATHERING_DETAILS, skill_purpose="Test skill",
                              message_history=[{"role": "user", "content": "Hello"}] * 3)
    store.save(sid, ctx)
    assert store.flush(timeout=60)
    with fresh(server) as other:
        loaded = other.load(sid)
    assert loaded is not None and loaded is not ctx
    assert loaded == ctx and loaded.state is ConversationState.GATHERING_DETAILS
    assert store.load(unique()) is None


def test_the_latest_save_wins(server: LocalServer, store: Any) -> None:
    sid = unique()
    ctx = ConversationContext(session_id=sid)
    store.save(sid, ctx)
    ctx.state, ctx.skill_name = ConversationState.GENERATING, "test-skill"
    store.save(sid, ctx)
    assert store.flush(timeout=60)
    with fresh(server) as other:
        loaded = other.load(sid)
    assert loaded is not None and loaded.state is ConversationState.GENERATING and loaded.skill_name == "test-skill"


def test_saved_after_every_message_and_restored_on_reconnect(server: LocalServer, store: Any, client: Stepwise) -> None:
    sid = unique()
    agent = SkillCreationAgent(store)
    agent.handle_message("Create a skill to format names", sid)
    agent.handle_message("Use uppercase format", sid)
    assert store.flush(timeout=60)

    # A restart: a new store (empty cache) restores the full history.
    with fresh(server) as restarted:
        ctx = SkillCreationAgent(restarted).get_session_context(sid)
    assert [m["content"] for m in ctx.message_history] == [
        "Create a skill to format names", "(gathering_purpose) noted: Create a skill to format names",
        "Use uppercase format", "(gathering_details) noted: Use uppercase format",
    ]
    assert ctx.state is ConversationState.GATHERING_DETAILS and ctx.skill_name == "format"
    # Kept as snapshots of the Stepwise session of that name (saves that waited together are
    # sent as one: the latest), the latest being the context.
    session = client.find_session(state_session_name(sid))
    assert session is not None and session["status"] == "active"
    (execution,) = client.list_executions(session["id"])
    snapshots = list(client.list_snapshots(execution["id"]))
    assert 1 <= len(snapshots) <= 2
    assert client.get_snapshot(snapshots[-1]["id"])["state"]["value"] == ctx.model_dump(mode="json")


def test_restored_in_a_new_process(server: LocalServer, store: Any) -> None:
    sid = unique()
    SkillCreationAgent(store).handle_message("Create a skill", sid)
    assert store.flush(timeout=60)
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_state import ConversationContext
from stepwise import Stepwise
from stepwise.state import StepwiseState
with StepwiseState(ConversationContext, Stepwise({server.url!r})) as store:
    print(store.load(sys.argv[1]).model_dump_json())
"""
    done = subprocess.run([sys.executable, "-c", code, sid], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = ConversationContext.model_validate_json(done.stdout.strip().splitlines()[-1])
    assert loaded.state is ConversationState.GATHERING_PURPOSE and len(loaded.message_history) == 2


def test_a_save_never_blocks_or_fails_while_the_server_is_down() -> None:
    with local_server() as srv:
        with StepwiseState(ConversationContext, Stepwise(srv.url, max_retries=0), status=status_of) as store:
            sid = unique()
            agent = SkillCreationAgent(store)
            agent.handle_message("Create a skill", sid)
            assert store.flush(timeout=60)
            srv.kill()
            # The user still gets answers; the context lives in memory and waits to be sent.
            reply = agent.handle_message("Make it fast", sid)
            assert reply == "(gathering_details) noted: Make it fast"
            assert store.unsent == [sid]
            assert len(store.load(sid).message_history) == 4  # type: ignore[union-attr]
            assert not store.flush(timeout=0.2)
            # A session that is not in memory cannot be read: an error, not a fresh context that
            # would then replace the stored one.
            with pytest.raises(StepwiseError) as e:
                store.load(unique())
            assert e.value.code == "connection_error"
            srv.restart()
            assert store.flush(timeout=60)  # retried until it went through
            assert store.unsent == [] and store.last_error is not None
        with StepwiseState(ConversationContext, Stepwise(srv.url)) as restarted:
            assert len(restarted.load(sid).message_history) == 4  # type: ignore[union-attr]


def test_the_error_path_saves_the_context_too(server: LocalServer, store: Any) -> None:
    sid = unique()
    agent = SkillCreationAgent(store)
    agent.handle_message("Create a skill", sid)
    with pytest.raises(RuntimeError, match="LLM call failed"):
        agent.handle_message("now explode", sid)
    assert store.flush(timeout=60)
    with fresh(server) as restarted:
        ctx = restarted.load(sid)
    assert ctx is not None and ctx.state is ConversationState.GATHERING_DETAILS
    assert ctx.message_history[-1] == {"role": "user", "content": "now explode"}


# --------------------------------------------------------------------------- tenants


def test_tenants_never_see_each_other(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'tenants.db'}"
    key_1, key_2 = make_key(database, "tenant-1"), make_key(database, "tenant-2")
    with local_server(database=database) as srv:
        with StepwiseState(ConversationContext, base_url=srv.url, api_key=key_1) as one, \
                StepwiseState(ConversationContext, base_url=srv.url, api_key=key_2) as two:
            SkillCreationAgent(one).handle_message("Create a skill", "shared-id")
            assert one.flush(timeout=60)
            assert two.load("shared-id") is None  # the same id in another tenant: a new session
            SkillCreationAgent(two).handle_message("Something else", "shared-id")
            assert two.flush(timeout=60)
        with StepwiseState(ConversationContext, base_url=srv.url, api_key=key_1) as one:
            assert one.load("shared-id").skill_purpose == "Create a skill"  # type: ignore[union-attr]
        with StepwiseState(ConversationContext, base_url=srv.url, api_key=key_2) as two:
            assert two.load("shared-id").skill_purpose == "Something else"  # type: ignore[union-attr]


def test_bad_input_is_refused_at_once(store: Any) -> None:
    with pytest.raises(ValueError, match="session"):
        store.save("", ConversationContext(session_id="x"))
    with pytest.raises(ValueError, match="session"):
        store.load("  ")

    class Other(BaseModel):
        x: int = 1

    with pytest.raises(TypeError, match="ConversationContext"):
        store.save("s", Other())
    with pytest.raises(ValueError, match="status"):
        store.save("s", ConversationContext(session_id="s"), status="abandoned")  # only the cleaner sets it
    with pytest.raises(TypeError, match="BaseModel"):
        StepwiseState(dict)  # type: ignore[type-var]
    assert store.unsent == []


# --------------------------------------------------------------------------- retention by status


def test_retention_keeps_sessions_by_status(tmp_path: Path) -> None:
    database = f"sqlite://{tmp_path / 'retention.db'}"

    def cleanup(*days: str) -> dict[str, Any]:
        out = subprocess.run([find_binary(), "cleanup", "--database", database, "--json", *days],
                             capture_output=True, text=True, check=True, timeout=60)
        return json.loads(out.stdout)

    with local_server(database=database) as srv:
        with StepwiseState(ConversationContext, Stepwise(srv.url), status=status_of) as store:
            agent = SkillCreationAgent(store)
            agent.handle_message("Create a skill", "done-one")
            agent.handle_message("all done", "done-one")  # COMPLETED: kept 90 days
            agent.handle_message("Create a skill", "open-one")  # in progress: active
            assert store.flush(timeout=60)
        statuses = {s["name"]: s["status"] for s in srv.client.list_sessions()}
        assert statuses == {"done-one": "completed", "open-one": "active"}
        srv.stop()

        # With the default days (90 for completed, 30 idle days for active) nothing goes now.
        cleanup()
        # Completed sessions go after `completed_days`; an active one is not touched by it.
        cleanup("--completed-days", "0", "--abandon-after-days", "1000")
        srv.restart()
        with StepwiseState(ConversationContext, Stepwise(srv.url), status=status_of) as store:
            assert store.load("done-one") is None
            assert store.load("open-one") is not None
        srv.stop()
        # An active session idle for `abandon_after_days` becomes abandoned (deleted 30 days later).
        cleanup("--abandon-after-days", "0")
        srv.restart()
        assert srv.client.find_session("open-one")["status"] == "abandoned"  # type: ignore[index]
        with StepwiseState(ConversationContext, Stepwise(srv.url)) as store:
            ctx = store.load("open-one")
            assert ctx is not None  # the user comes back: restored, and active again
            SkillCreationAgent(store).handle_message("Use uppercase", "open-one")
            assert store.flush(timeout=60)
        assert srv.client.find_session("open-one")["status"] == "active"  # type: ignore[index]


# --------------------------------------------------------------------------- the hybrid cache


def test_the_cache_answers_first_and_the_server_after_a_restart(server: LocalServer) -> None:
    with local_server() as srv:
        with StepwiseState(ConversationContext, Stepwise(srv.url, max_retries=0), cache_size=2) as store:
            ids = [unique() for _ in range(3)]
            contexts = [ConversationContext(session_id=i) for i in ids]
            for i, ctx in zip(ids, contexts):
                store.save(i, ctx)
            assert store.flush(timeout=60)
            assert store.load(ids[2]) is contexts[2]  # the very object, from memory
            assert store.cached(ids[0]) is None  # the least recently used went first
            srv.kill()
            assert store.load(ids[1]) is contexts[1]  # no server needed for a cached session
            srv.restart()
            loaded = store.load(ids[0])  # read from the server, then cached
            assert loaded == contexts[0] and loaded is not contexts[0]
            assert store.load(ids[0]) is loaded
            store.forget()
            assert store.cached(ids[1]) is None and store.load(ids[1]) == contexts[1]
        with StepwiseState(ConversationContext, Stepwise(srv.url), cache_size=0) as uncached:
            ctx = ConversationContext(session_id="x")
            uncached.save(ids[0], ctx)
            assert uncached.load(ids[0]) is ctx  # a save not sent yet is answered from the queue
            assert uncached.flush(timeout=60)
            assert uncached.load(ids[0]) == ctx and uncached.load(ids[0]) is not ctx


# --------------------------------------------------------------------------- errors of stored data


def test_a_stored_state_that_no_longer_validates_loads_as_none(
    server: LocalServer, store: Any, client: Stepwise, caplog: pytest.LogCaptureFixture
) -> None:
    sid = unique()
    store.save(sid, ConversationContext(session_id=sid))
    assert store.flush(timeout=60)
    session = client.find_session(sid)
    (execution,) = client.list_executions(session["id"])  # type: ignore[index]
    client.save_snapshot(execution["id"], {"format": "stepwise.state/1", "value": {"state": "no-such-state"}})
    with fresh(server) as other, caplog.at_level(logging.WARNING, logger="stepwise.state"):
        assert other.load(sid) is None
        assert "is not a valid ConversationContext" in caplog.text
        other.save(sid, ConversationContext(session_id=sid, skill_name="again"))  # saving again works
        assert other.flush(timeout=60)
    with fresh(server) as third:
        assert third.load(sid).skill_name == "again"  # type: ignore[union-attr]


def test_a_model_moved_or_renamed_still_loads_its_state(server: LocalServer) -> None:
    sid = unique()
    with fresh(server) as store:
        SkillCreationAgent(store).handle_message("Create a skill", sid)

    class RenamedContext(ConversationContext):  # another name, another module path
        pass

    with StepwiseState(RenamedContext, Stepwise(server.url)) as renamed:
        ctx = renamed.load(sid)
        assert isinstance(ctx, RenamedContext) and ctx.skill_purpose == "Create a skill"
        ctx.skill_name = "renamed"
        renamed.save(sid, ctx)
    with StepwiseState(RenamedContext, Stepwise(server.url)) as again:
        assert again.load(sid).skill_name == "renamed"  # type: ignore[union-attr]


def test_concurrent_saves_last_write_wins(server: LocalServer) -> None:
    sid = unique()
    first = ConversationContext(session_id=sid, state=ConversationState.GATHERING_PURPOSE, skill_purpose="First update")
    second = ConversationContext(session_id=sid, state=ConversationState.GENERATING, skill_purpose="Second update")
    stores = [fresh(server), fresh(server)]
    threads = [threading.Thread(target=s.save, args=(sid, c)) for s, c in zip(stores, (first, second))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        assert s.close()
    with fresh(server) as reader:
        loaded = reader.load(sid)
    assert loaded in (first, second)


def test_delete_is_a_soft_delete_and_keys_list_by_status(tmp_path: Path) -> None:
    with local_server(database=f"sqlite://{tmp_path / 'keys.db'}") as srv:
        with StepwiseState(ConversationContext, Stepwise(srv.url), status=status_of) as store:
            agent = SkillCreationAgent(store)
            for key in ("test-0", "test-1", "test 2"):
                agent.handle_message("Create a skill", key)
            agent.handle_message("all done", "test-1")
            assert store.flush(timeout=60)
            srv.client.create_session(name="not-a-state")  # other sessions of the tenant are not listed
            assert sorted(store.keys()) == ["test 2", "test-0", "test-1"]
            assert store.keys(status="completed") == ["test-1"]

            session_id = srv.client.find_session("test-0")["id"]  # type: ignore[index]
            assert store.delete("test-0") is True
            assert store.load("test-0") is None
            assert srv.client.get_session(session_id)["status"] == "deleted"  # removed for good by retention
            assert sorted(store.keys()) == ["test 2", "test-1"]
            assert store.keys(status="deleted") == ["test-0"]
            assert store.delete("never-saved") is False


# --------------------------------------------------------------------------- saves the server refuses


def too_large(sid: str) -> ConversationContext:
    """A context over the server's default 4 MiB body limit: answered 413."""
    return ConversationContext(session_id=sid, skill_purpose="too large",
                               message_history=[{"role": "user", "content": "secret-" + "x" * (5 * 1024 * 1024)}])


def test_a_save_the_server_refuses_is_dropped_and_reported(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    sid, other = unique(), unique()
    reported: list[StateSaveError] = []
    with fresh(server, on_error=reported.append) as store, caplog.at_level(logging.INFO, logger="stepwise.state"):
        agent = SkillCreationAgent(store)
        agent.handle_message("Create a skill", sid)
        assert store.flush(timeout=60) is True and store.errors == []

        store.save(sid, too_large(sid))
        agent.handle_message("Create another skill", other)  # another key's save is not held up
        assert store.flush(timeout=60) is False  # a save was dropped since the last flush
        assert store.unsent == []  # dropped, not retried
        (error,) = store.errors
        assert (error.key, error.status, error.code) == (sid, 413, "payload_too_large")
        assert error.at.tzinfo is not None and "4194304" in error.message
        assert reported == [error]  # on_error once, with the same record
        assert "refused the state" in caplog.text and "payload_too_large" in caplog.text
        assert "secret-" not in caplog.text  # the log never carries the state
        assert store.flush(timeout=60) is True  # reported once: nothing dropped since

        # The next (normal) save of the same key goes through, and is what loads back.
        ctx = ConversationContext(session_id=sid, skill_name="small again")
        store.save(sid, ctx)
        assert store.flush(timeout=60) is True
        assert len(store.errors) == 1 and len(reported) == 1
    with fresh(server) as restarted:
        assert restarted.load(sid) == ctx
        assert restarted.load(other).skill_purpose == "Create another skill"  # type: ignore[union-attr]


def test_an_on_error_that_raises_is_logged_and_the_sender_goes_on(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    sid = unique()
    calls: list[StateSaveError] = []

    def on_error(error: StateSaveError) -> None:
        calls.append(error)
        raise RuntimeError("the alerting hook is broken")

    with fresh(server, on_error=on_error) as store, caplog.at_level(logging.INFO, logger="stepwise.state"):
        store.save(sid, too_large(sid))
        assert store.flush(timeout=60) is False
        assert len(calls) == 1 and "on_error callback raised" in caplog.text
        store.save(sid, ConversationContext(session_id=sid, skill_name="kept"))
        assert store.flush(timeout=60) is True
        assert store.close() is True  # nothing dropped since the last flush
    with fresh(server) as restarted:
        assert restarted.load(sid).skill_name == "kept"  # type: ignore[union-attr]


def test_errors_keep_the_latest_hundred(server: LocalServer) -> None:
    from stepwise.state import MAX_ERRORS

    with fresh(server) as store:
        big = too_large("x")
        for n in range(3):
            store.save(f"big-{n}-{uuid.uuid4().hex[:8]}", big)
        assert store.flush(timeout=120) is False
        assert [e.code for e in store.errors] == ["payload_too_large"] * 3
        store.errors.extend(store.errors * 60)  # a public list: trimmed at the next drop
        store.save(unique(), big)
        assert store.flush(timeout=60) is False
        assert len(store.errors) == MAX_ERRORS and store.errors[-1].status == 413


@pytest.mark.parametrize(
    ("status", "code", "relocate", "dropped"),
    [
        (413, "payload_too_large", False, True),
        (400, "invalid_request", False, True),
        (422, "invalid_request", False, True),
        (403, "forbidden", False, True),
        (409, "conflict", False, True),  # e.g. the session name belongs to another key
        (408, "request_timeout", False, False),
        (429, "rate_limited", False, False),
        (500, "internal", False, False),
        (503, "unavailable", False, False),
        (None, "connection_error", False, False),
        (409, "lease_lost", True, False),
        (422, "invalid_state", True, False),  # the execution finished meanwhile: a new one
        (404, "not_found", True, False),
    ],
)
def test_which_refusals_are_for_good(status: Optional[int], code: str, relocate: bool, dropped: bool) -> None:
    from stepwise.state import _Pending, _permanent

    error = StepwiseError(code, "refused", status=status)
    if relocate:
        error._state_relocate = True  # type: ignore[attr-defined]
    item = _Pending(ConversationContext(session_id="s"), {}, None, 1, relocations=1)
    assert _permanent(error, item) is dropped
    if relocate and code != "lease_lost":
        item.relocations = 4  # found again and again, refused each time: dropped after all
        assert _permanent(error, item) is True


# --------------------------------------------------------------------------- the index in the session's metadata


def index_of(ctx: ConversationContext) -> dict[str, Any]:
    """Seed 003's denormalised columns: the FSM state and the skill's name."""
    return {"state": ctx.state.value, "skill_name": ctx.skill_name}


def metadata_of(client: Stepwise, sid: str) -> dict[str, Any]:
    session = client.find_session(state_session_name(sid))
    assert session is not None
    return client.get_session(session["id"])["metadata"]  # type: ignore[no-any-return]


def test_index_puts_the_dict_in_the_session_metadata_and_updates_it_when_it_changes(
    server: LocalServer, client: Stepwise
) -> None:
    sid = unique()
    with fresh(server, index=index_of) as store:
        sent: list[Any] = []
        update = store.client.update_session

        def recording(session_id: str, **fields: Any) -> Any:
            sent.append(fields.get("metadata"))
            return update(session_id, **fields)

        store.client.update_session = recording  # type: ignore[method-assign]
        agent = SkillCreationAgent(store)
        agent.handle_message("Create a skill", sid)
        assert store.flush(timeout=60)
        assert metadata_of(client, sid) == {METADATA_KEY: sid, "state": "gathering_purpose", "skill_name": None}

        # Others' metadata keys are kept.
        session_id = client.find_session(state_session_name(sid))["id"]  # type: ignore[index]
        client.update_session(session_id, metadata={**metadata_of(client, sid), "team": "growth"})

        sent.clear()
        ctx = store.load(sid)
        assert ctx is not None
        ctx.message_history.append({"role": "user", "content": "same index"})
        store.save(sid, ctx)  # the indexed values did not change: no metadata sent
        assert store.flush(timeout=60)
        assert sent == [None]

        agent.handle_message("Call it formatter", sid)
        assert store.flush(timeout=60)
        assert metadata_of(client, sid) == {
            METADATA_KEY: sid, "state": "gathering_details", "skill_name": "formatter", "team": "growth",
        }
        agent.handle_message("all done", sid)
        assert store.flush(timeout=60)
        assert metadata_of(client, sid)["state"] == "completed"
        assert client.find_session(state_session_name(sid))["status"] == "completed"  # type: ignore[index]

    # A restarted process with the same index sends nothing when nothing changed.
    with fresh(server, index=index_of) as again:
        sent_again: list[Any] = []
        update_again = again.client.update_session

        def recording_again(session_id: str, **fields: Any) -> Any:
            sent_again.append(fields.get("metadata"))
            return update_again(session_id, **fields)

        again.client.update_session = recording_again  # type: ignore[method-assign]
        ctx = again.load(sid)
        assert ctx is not None
        again.save(sid, ctx)
        assert again.flush(timeout=60)
        assert sent_again == [None]
        assert again.load(sid) == ctx


@pytest.mark.parametrize(
    "bad",
    [
        lambda ctx: {"state": ctx.state.value, "history": ctx.message_history},  # not a scalar
        lambda ctx: ["not", "a", "dict"],
        lambda ctx: {1: "not a str key"},
        lambda ctx: {METADATA_KEY: "the store's own key"},
        lambda ctx: {"ratio": float("nan")},
        lambda ctx: 1 / 0,  # index= raised
    ],
    ids=["list-value", "not-a-dict", "int-key", "reserved-key", "nan", "raises"],
)
def test_a_bad_index_value_does_not_block_the_save(
    server: LocalServer, client: Stepwise, caplog: pytest.LogCaptureFixture, bad: Callable[[Any], Any]
) -> None:
    sid = unique()
    with fresh(server, index=bad) as store, caplog.at_level(logging.WARNING, logger="stepwise.state"):
        SkillCreationAgent(store).handle_message("Create a skill", sid)
        assert store.flush(timeout=60) is True and store.errors == []
        assert "not indexed" in caplog.text
    assert metadata_of(client, sid) == {METADATA_KEY: sid}  # the key kept, nothing else
    with fresh(server) as restarted:
        assert restarted.load(sid).skill_purpose == "Create a skill"  # type: ignore[union-attr]


def test_an_index_over_the_metadata_limit_does_not_block_the_save(server: LocalServer, client: Stepwise) -> None:
    sid = unique()
    with fresh(server, index=lambda ctx: {"blob": "x" * 20_000}) as store:
        SkillCreationAgent(store).handle_message("Create a skill", sid)
        assert store.flush(timeout=60) is True
    assert metadata_of(client, sid) == {METADATA_KEY: sid}
    with fresh(server) as restarted:
        assert restarted.load(sid) is not None


def metadata_filter_answer(client: Stepwise) -> Optional[bool]:
    """Whether the server filters `GET /v1/sessions?metadata.KEY=VALUE`: ``True``, ``False``
    (it ignores the parameter), ``None`` (it refuses it with a 400)."""
    mark = uuid.uuid4().hex
    client.create_session(name=unique("probe"), metadata={"probe": mark})
    client.create_session(name=unique("probe"), metadata={"probe": "other"})
    try:
        found = list(client.list_sessions(metadata={"probe": mark}))
    except StepwiseError as e:
        if e.status == 400:
            return None
        raise
    return [s["metadata"]["probe"] for s in found] == [mark]


def test_find_lists_the_keys_by_their_index(tmp_path: Path) -> None:
    with local_server(database=f"sqlite://{tmp_path / 'find.db'}") as srv:
        filtering = metadata_filter_answer(srv.client)
        if filtering is None:
            pytest.skip("this server refuses GET /v1/sessions?metadata.KEY=VALUE (400)")
        with StepwiseState(ConversationContext, Stepwise(srv.url), index=index_of) as store:
            agent = SkillCreationAgent(store)
            for key in ("chat-a", "chat b", "chat-c"):
                agent.handle_message("Create a skill", key)
            agent.handle_message("Call it formatter", "chat b")
            agent.handle_message("Call it formatter", "chat-c")
            agent.handle_message("all done", "chat-c")
            assert store.flush(timeout=60)
            assert store.find(state="gathering_purpose") == ["chat-a"]
            assert store.find(state="gathering_details", skill_name="formatter") == ["chat b"]
            assert sorted(store.find(skill_name="formatter")) == ["chat b", "chat-c"]
            assert store.find(state="completed", skill_name="other") == []
            if filtering:  # the server's own filter: only the matching sessions come back
                names = [s["name"] for s in srv.client.list_sessions(metadata={"state": "completed"})]
                assert names == [state_session_name("chat-c")]
            with pytest.raises(TypeError):
                store.find(state=["a", "list"])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- asyncio and clients


def test_async_code_and_an_async_client(server: LocalServer) -> None:
    sid = unique()

    async def main() -> None:
        async with AsyncStepwise(server.url) as aclient:
            store = StepwiseState(ConversationContext, aclient)
            ctx = await store.aload(sid) or ConversationContext(session_id=sid)
            ctx.message_history.append({"role": "user", "content": "hi"})
            store.save(sid, ctx)  # returns at once inside the event loop
            assert await store.aflush(timeout=60)
            store.close()
        with fresh(server) as other:
            assert (await other.aload(sid)).message_history == [{"role": "user", "content": "hi"}]  # type: ignore[union-attr]

    asyncio.run(main())


def test_keys_map_to_stepwise_names() -> None:
    assert state_session_name("chat-42") == "chat-42"
    assert re.fullmatch(r"st-tenant-1-chat-[0-9a-f]{16}", state_session_name("tenant 1/chat"))


# --------------------------------------------------------------------------- PostgreSQL


def test_save_load_and_tenants_on_postgresql() -> None:
    import os
    import shutil
    from urllib.parse import urlsplit, urlunsplit

    base = os.environ.get("STEPWISE_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    if shutil.which("psql") is None:
        pytest.skip("psql is not installed")
    name = f"state_{uuid.uuid4().hex[:12]}"
    made = subprocess.run(["psql", base, "-qc", f"CREATE DATABASE {name}"], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"no PostgreSQL at {base}: {made.stderr.strip()[:200]}")
    database = urlunsplit(urlsplit(base)._replace(path=f"/{name}"))
    try:
        key_1, key_2 = make_key(database, "tenant-1"), make_key(database, "tenant-2")
        with local_server(database=database) as srv:
            with StepwiseState(ConversationContext, base_url=srv.url, api_key=key_1, status=status_of) as one:
                agent = SkillCreationAgent(one)
                agent.handle_message("Create a skill", "pg-chat")
                agent.handle_message("all done", "pg-chat")
            with StepwiseState(ConversationContext, base_url=srv.url, api_key=key_1) as one, \
                    StepwiseState(ConversationContext, base_url=srv.url, api_key=key_2) as two:
                ctx = one.load("pg-chat")
                assert ctx is not None and ctx.state is ConversationState.COMPLETED and len(ctx.message_history) == 4
                assert one.keys(status="completed") == ["pg-chat"]
                assert two.load("pg-chat") is None and two.keys() == []
    finally:
        subprocess.run(["psql", base, "-qc", f"DROP DATABASE IF EXISTS {name}"], capture_output=True, timeout=60)


# --------------------------------------------------------------------------- the docs


def doc_examples() -> list[str]:
    text = (PYTHON_DIR / "docs" / "state.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("index", range(len(doc_examples())))
def test_doc_examples_run(index: int, server: LocalServer, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STEPWISE_URL", server.url)
    monkeypatch.delenv("STEPWISE_API_KEY", raising=False)
    code = doc_examples()[index].replace('"chat-42"', f'"{unique("chat")}"')
    namespace: dict[str, Any] = {"__name__": f"state_doc_{index}"}
    exec(compile(code, f"docs/state.md example {index + 1}", "exec", dont_inherit=True), namespace)
    out = capsys.readouterr().out
    if index == 0:
        assert out.splitlines()[-2:] == ["gathering 2", "gathering 2"]
    if index == 1:  # on_error, errors and find: nothing refused, the session found by its index
        assert out.splitlines() == ["True"]


# --------------------------------------------------------------------------- a flat database


def test_a_thousand_exchanges_keep_one_state_row(tmp_path: Path) -> None:
    """Seed 003's chat of 1,000 exchanges: one current state per session in the database, not
    one copy of the growing context per save."""
    import sqlite3

    db = tmp_path / "flat.db"
    with local_server(database=f"sqlite://{db}") as running:
        with StepwiseState(ConversationContext, Stepwise(running.url), status=status_of) as store:
            agent = SkillCreationAgent(store)
            key = unique()
            for n in range(1000):
                agent.handle_message(f"message {n} about skill_{n % 7}", key)
            assert store.flush(timeout=120)
            assert store.errors == []
            reloaded = fresh(running)
            ctx = reloaded.load(key)
            reloaded.close()
    assert ctx is not None and len(ctx.message_history) == 2000
    with sqlite3.connect(db) as conn:
        (rows,) = conn.execute("SELECT COUNT(*) FROM snapshots").fetchone()
    assert rows == 1, f"{rows} snapshot rows after 1,000 saves of one session"
