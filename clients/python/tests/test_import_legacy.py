"""`stepwise.smolagents.import_legacy` against a real `stepwise serve`: a SQLite file of an app
that kept `pickle.dumps(agent.memory.steps)` in a `sessions.agent_steps` BLOB column, made
with real smolagents agents run offline (scripted models, as in test_smolagents.py)."""

from __future__ import annotations

import logging
import pickle
import sqlite3
import uuid
from pathlib import Path

import pytest

pytest.importorskip("smolagents")
pytest.importorskip("sqlalchemy")

from smolagents.memory import ActionStep, TaskStep  # noqa: E402
from smolagents.utils import AgentToolExecutionError  # noqa: E402

from stepwise.smolagents import ImportReport, StepwiseMemory, import_legacy  # noqa: E402
from test_smolagents import (  # noqa: E402
    code_agent,
    code_script,
    executions,
    steps_of,
    tool_agent,
    tool_script,
)


def _dump(agent) -> bytes:
    return pickle.dumps(list(agent.memory.steps))


@pytest.fixture
def prefix() -> str:
    """Session names of their own: the server is shared by the whole test run."""
    return f"legacy-{uuid.uuid4().hex[:8]}-"


@pytest.fixture
def legacy_db(tmp_path: Path):
    """The app's database: two memories, a corrupt blob, a NULL one, a pickle of a dict."""
    # Row 1: a ToolCallingAgent, two runs (the second with reset=False), a tool error.
    tools = tool_agent(tool_script("42") + tool_script("43"))
    tools.run("Find cats")
    tools.run("And now dogs?", reset=False)
    # Row 2: a CodeAgent with a failing code step.
    coder = code_agent(code_script("done"))
    coder.run("Compute 6 * 7")

    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE sessions (id INTEGER PRIMARY KEY, name TEXT, created_at TEXT, agent_steps BLOB)"
    )
    db.executemany(
        "INSERT INTO sessions (id, name, created_at, agent_steps) VALUES (?, ?, ?, ?)",
        [
            (1, "Animals", "2025-01-01", _dump(tools)),
            (2, "Maths", "2025-01-02", _dump(coder)),
            (3, "Broken", "2025-01-03", b"\x80\x04not a pickle at all"),
            (4, "Empty", "2025-01-04", None),
            (5, "Dict", "2025-01-05", pickle.dumps({"steps": []})),
        ],
    )
    db.commit()
    db.close()
    return f"sqlite:///{path}", {1: tools, 2: coder}


def _same_memory(fresh, original) -> None:
    """The restored memory is the legacy one: the same steps, tasks, calls, observations,
    errors, and the same messages for the model."""
    assert [type(s) for s in fresh.memory.steps] == [type(s) for s in original.memory.steps]
    for a, b in zip(original.memory.steps, fresh.memory.steps, strict=True):
        if isinstance(a, TaskStep):
            assert b.task == a.task
        if isinstance(a, ActionStep):
            assert b.observations == a.observations
            assert b.code_action == a.code_action
            assert [(c.name, c.arguments, c.id) for c in b.tool_calls or []] == [
                (c.name, c.arguments, c.id) for c in a.tool_calls or []
            ]
            assert type(b.error) is type(a.error)
            assert str(b.error or "") == str(a.error or "")
    assert fresh.write_memory_to_messages() == original.write_memory_to_messages()


def test_import_writes_each_memory_once_and_reports_the_bad_rows(client, legacy_db, prefix, caplog):
    url, agents = legacy_db
    caplog.set_level(logging.INFO, logger="stepwise.smolagents")
    report = import_legacy(url, client=client, name_prefix=prefix)

    assert isinstance(report, ImportReport)
    assert sorted(report.imported) == [1, 2]
    assert report.skipped_existing == {}
    assert report.skipped_empty == [4]
    assert [legacy_id for legacy_id, _ in report.failed] == [3, 5]
    assert "does not unpickle" in dict(report.failed)[3]
    assert "dict" in dict(report.failed)[5]
    assert "row 3 of sessions not imported" in caplog.text

    # The sessions: named after the row, titled after its `name` column.
    session = client.get_session(report.imported[1])
    assert session["name"] == f"{prefix}1"
    assert session["title"] == "Animals"
    assert session["metadata"]["legacy_id"] == "1"
    assert session["metadata"]["legacy_import"] == "complete"

    # Row 1: one execution per run, ended with its answer, readable steps.
    runs = executions(client, report.imported[1])
    assert [e["input"] for e in runs] == [
        {"task": "Find cats", "reset": True},
        {"task": "And now dogs?", "reset": False},
    ]
    assert [e["status"] for e in runs] == ["completed", "completed"]
    assert [e["output"] for e in runs] == [{"final_answer": "42"}, {"final_answer": "43"}]
    steps = steps_of(client, runs[0]["id"])
    assert [s["kind"] for s in steps] == ["task", "action", "action", "action"]
    assert steps[1]["tool_calls"][0]["name"] == "lookup"
    assert steps[1]["observations"] == "2 results for cats"
    assert steps[2]["error"]["kind"] == "AgentToolExecutionError"

    # StepwiseMemory restores each memory into a new agent, as the app had it.
    for legacy_id, original in agents.items():
        fresh = (tool_agent if legacy_id == 1 else code_agent)([])
        StepwiseMemory(client, session=report.imported[legacy_id]).attach(fresh)
        _same_memory(fresh, original)
    fresh = tool_agent([])
    StepwiseMemory(client, session=f"{prefix}1").attach(fresh)
    assert isinstance(fresh.memory.steps[2].error, AgentToolExecutionError)

    # A second import writes nothing.
    before = {i: [(e["id"], e["step_count"]) for e in executions(client, s)] for i, s in report.imported.items()}
    again = import_legacy(url, client=client, name_prefix=prefix)
    assert again.imported == {}
    assert again.skipped_existing == report.imported
    assert again.sessions == report.imported
    assert [legacy_id for legacy_id, _ in again.failed] == [3, 5]
    assert again.skipped_empty == [4]
    after = {i: [(e["id"], e["step_count"]) for e in executions(client, s)] for i, s in report.imported.items()}
    assert after == before
    for legacy_id in (1, 2, 3, 4, 5):
        found = list(client.list_sessions(name=f"{prefix}{legacy_id}"))
        assert len(found) == (1 if legacy_id in (1, 2) else 0)
    assert str(again) == "0 imported, 2 already imported, 1 empty, 2 failed"


def test_an_interrupted_import_is_finished_without_duplicates(client, legacy_db, prefix):
    url, agents = legacy_db
    # What an import stopped after row 1's first step leaves behind.
    from stepwise.smolagents import encode_step

    session = client.create_session(
        name=f"{prefix}1", metadata={"legacy_id": "1", "legacy_table": "sessions", "legacy_import": "started"}
    )
    first = client.open_execution(
        session["id"],
        input={"task": "Find cats", "reset": True},
        metadata={"legacy_id": "1", "legacy_run": 0},
    )
    task = agents[1].memory.steps[0]
    client.append_step(first["id"], encode_step(task, extra={"reset": True}), step_number=1)

    # ... and an execution an import opened for row 2, then ended (a recorder gone away),
    # before it wrote a step.
    session2 = client.create_session(
        name=f"{prefix}2", metadata={"legacy_id": "2", "legacy_table": "sessions", "legacy_import": "started"}
    )
    dead = client.open_execution(session2["id"], input={}, metadata={"legacy_id": "2", "legacy_run": 0})
    client.fail_execution(dead["id"], "its recorder stopped")

    report = import_legacy(url, client=client, name_prefix=prefix)
    assert report.imported == {1: session["id"], 2: session2["id"]}
    runs2 = executions(client, session2["id"])
    assert [(e["id"] == dead["id"], e["status"], e["step_count"]) for e in runs2] == [
        (True, "failed", 0),
        (False, "completed", 4),
    ]
    fresh = code_agent([])
    StepwiseMemory(client, session=session2["id"]).attach(fresh)
    _same_memory(fresh, agents[2])
    runs = executions(client, session["id"])
    assert [e["id"] for e in runs][:1] == [first["id"]]
    assert [(e["status"], e["step_count"]) for e in runs] == [("completed", 4), ("completed", 4)]
    fresh = tool_agent([])
    StepwiseMemory(client, session=session["id"]).attach(fresh)
    _same_memory(fresh, agents[1])
    assert client.get_session(session["id"])["metadata"]["legacy_import"] == "complete"


def test_a_session_of_that_name_from_elsewhere_is_not_written_to(client, legacy_db, prefix):
    url, _ = legacy_db
    other = client.create_session(name=f"{prefix}2")
    report = import_legacy(url, client=client, name_prefix=prefix)
    assert sorted(report.imported) == [1]
    assert "not imported from this row" in dict(report.failed)[2]
    assert list(client.list_executions(other["id"])) == []


def test_other_table_and_column_names_and_no_title_column(client, tmp_path, prefix):
    agent = code_agent(code_script("7"))
    agent.run("Pick a number")
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chats (chat_key TEXT PRIMARY KEY, memory BLOB)")
    db.executemany(
        "INSERT INTO chats VALUES (?, ?)",
        [("a/b c", _dump(agent)), ("empty", pickle.dumps([])), ("zero", b"")],
    )
    db.commit()
    db.close()
    url = f"sqlite:///{path}"

    names = {"table": "chats", "steps_column": "memory", "id_column": "chat_key", "name_prefix": prefix}
    report = import_legacy(url, client=client, **names)
    assert list(report.imported) == ["a/b c"]
    assert sorted(report.skipped_empty) == ["empty", "zero"]
    session = client.get_session(report.imported["a/b c"])
    assert session["title"] is None
    assert session["name"].startswith(prefix) and "/" not in session["name"]
    assert session["metadata"]["legacy_id"] == "a/b c"
    fresh = code_agent([])
    StepwiseMemory(client, session=session["id"]).attach(fresh)
    _same_memory(fresh, agent)
    assert import_legacy(url, client=client, **names).skipped_existing == report.imported

    with pytest.raises(ValueError, match="no table 'sessions'"):
        import_legacy(url, client=client)
    with pytest.raises(ValueError, match="no column 'agent_steps'"):
        import_legacy(url, client=client, table="chats", id_column="chat_key")
