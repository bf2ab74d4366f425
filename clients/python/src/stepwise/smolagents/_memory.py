"""`StepwiseMemory` and `import_legacy` (see the package's docstring)."""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import io
import logging
import pickle
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from smolagents.memory import (
    ActionStep,
    FinalAnswerStep,
    MemoryStep,
    PlanningStep,
    SystemPromptStep,
    TaskStep,
)
from smolagents.utils import AgentError, AgentMaxStepsError

from .._errors import StepwiseError
from ._codec import answer_text, encode_step, encode_value, memory_steps
from ._sender import (
    COMPLETE,
    FAIL,
    LIVE,
    OPEN,
    STEP,
    Run,
    Sender,
    TaskWatch,
)

__all__ = ["StepwiseMemory", "import_legacy", "ImportReport"]

logger = logging.getLogger("stepwise.smolagents")

# --- the public class ---------------------------------------------------------------------


class StepwiseMemory:
    """A Stepwise session as the memory of smolagents agents.

    Args:
        client: a ``stepwise.Stepwise`` client.
        session: a session name or id; a missing session is created with that name.
        save_model_input: also save each step's ``model_input_messages`` (off by default:
            they repeat the whole conversation at every step).
        restore_all_runs: ``restore`` rebuilds the steps of every run of the session. By
            default it rebuilds what the agent had in memory: the steps from the last run
            started with ``reset=True`` (smolagents' default, which empties the memory) on.
        max_restore_steps: ``restore`` puts only the last N steps in the agent's memory, after
            a ``TaskStep`` summing up the earlier ones (for long sessions); ``None`` restores
            them all.
        retry_for: how long (seconds) the background sender keeps retrying a save while
            the server cannot be reached or answers 5xx/429; then the save is given up
            (logged, counted in ``errors``).
        session_kwargs: fields for a session created here (``title``, ``metadata``, ...).
    """

    def __init__(
        self,
        client: Any,
        session: str,
        *,
        save_model_input: bool = False,
        restore_all_runs: bool = False,
        max_restore_steps: int | None = None,
        retry_for: float = 60.0,
        **session_kwargs: Any,
    ) -> None:
        if max_restore_steps is not None and (
            isinstance(max_restore_steps, bool) or not isinstance(max_restore_steps, int) or max_restore_steps < 1
        ):
            raise ValueError(f"max_restore_steps must be a positive integer or None, got {max_restore_steps!r}")
        self.max_restore_steps = max_restore_steps
        self.client = client
        self.retry_for = retry_for
        self.save_model_input = save_model_input
        self.restore_all_runs = restore_all_runs
        self._session_kwargs = session_kwargs
        self.session: dict = client.session(session, **session_kwargs)
        self._agent: Any = None
        self._original_run: Any = None
        self._run: Run | None = None
        self._sender = Sender(client, self)
        # A memory dropped without close(): its thread sends what is queued, then ends.
        # (Not at interpreter exit: `_flush_at_exit` waits for the queue then.)
        weakref.finalize(self, self._sender.stop_soon).atexit = False
        LIVE.add(self)

    @property
    def session_id(self) -> str:
        return self.session["id"]

    @property
    def errors(self) -> int:
        """How many saves failed (each is logged on ``stepwise.smolagents``)."""
        return self._sender.errors

    # -- attaching --------------------------------------------------------------------------

    def attach(self, agent: Any, *, restore: bool = True) -> StepwiseMemory:
        """Saves the agent's steps to this session from now on; restores the session's
        memory into the agent first (``restore=False`` to keep the agent's memory)."""
        if self._agent is agent:
            return self
        if self._agent is not None:
            raise RuntimeError("this StepwiseMemory is attached to another agent; detach() it first")
        if getattr(agent, "_stepwise_memory", None) is not None:
            raise RuntimeError("this agent is attached to another StepwiseMemory; detach() it first")
        registry = agent.step_callbacks
        for cls in (ActionStep, PlanningStep, FinalAnswerStep):
            registry.register(cls, self._on_step)
        self._original_run = agent.__dict__.get("run")
        agent.run = self._wrap_run(agent, agent.run)
        agent._stepwise_memory = self
        self._agent = agent
        if restore:
            self.restore(agent)
        return self

    def detach(self) -> None:
        """Stops saving the agent's steps (what is queued is still sent)."""
        agent = self._agent
        if agent is None:
            return
        callbacks = getattr(agent.step_callbacks, "_callbacks", {})
        for cls in (ActionStep, PlanningStep, FinalAnswerStep):
            entries = callbacks.get(cls, [])
            for cb in list(entries):
                if getattr(cb, "__self__", None) is self and getattr(cb, "__func__", None) is StepwiseMemory._on_step:
                    entries.remove(cb)
        if self._original_run is None:
            agent.__dict__.pop("run", None)
        else:
            agent.run = self._original_run
        agent._stepwise_memory = None
        self._agent = None
        self._original_run = None

    # -- sessions ---------------------------------------------------------------------------

    def restore(self, agent: Any | None = None) -> list[MemoryStep]:
        """Replaces ``agent.memory.steps`` with the steps saved in this session.

        Steps whose smolagents payload cannot be decoded are skipped (a warning is logged).
        When the server could restore only part of the session (``restored: "summary"``),
        its context summary comes first, as a ``TaskStep``. Returns the steps.
        """
        agent = agent if agent is not None else self._agent
        if agent is None:
            raise RuntimeError("restore() needs an agent: pass one or attach() first")
        if self._run is not None and not self._run.finished and self._run.agent_ref() is agent:
            raise RuntimeError("cannot restore while the agent is running")
        steps = self.load()
        agent.memory.system_prompt = SystemPromptStep(system_prompt=agent.system_prompt)
        agent.memory.steps = steps
        return steps

    def load(self) -> list[MemoryStep]:
        """The smolagents steps saved in this session (what ``restore`` puts in memory)."""
        return memory_steps(
            self.client.get_memory(self.session_id),
            restore_all_runs=self.restore_all_runs,
            where=f"session {self.session_id}",
            max_restore_steps=self.max_restore_steps,
        )

    def switch(self, agent: Any, session: str, **session_kwargs: Any) -> StepwiseMemory:
        """Makes ``session`` (a name or id; created when missing) this memory's session and
        restores it into the agent: ``agent.memory`` then holds that session's steps only."""
        if self._run is not None and not self._run.finished:
            raise RuntimeError("cannot switch sessions while the agent is running")
        self.session = self.client.session(session, **(session_kwargs or self._session_kwargs))
        if self._agent is None:
            self.attach(agent)
        elif self._agent is not agent:
            raise RuntimeError("this StepwiseMemory is attached to another agent")
        else:
            self.restore(agent)
        return self

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Waits until every step queued so far is sent (saved, or given up on and logged).
        Returns False when ``timeout`` seconds passed first."""
        return self._sender.flush(timeout)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flushes, detaches and stops the sender thread."""
        self.flush(timeout)
        self.detach()
        self._sender.stop(timeout)
        LIVE.discard(self)

    def __enter__(self) -> StepwiseMemory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- hooks ------------------------------------------------------------------------------

    def _wrap_run(self, agent: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        memory = self

        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)  # let smolagents say what is wrong
            bound.apply_defaults()
            arguments = bound.arguments
            reset = bool(arguments.get("reset", True))
            try:
                state = memory._begin(agent, arguments.get("task"), reset)
            except Exception:  # saving must never break the agent
                logger.exception("stepwise: could not start saving a run")
                return original(*args, **kwargs)
            if reset and "reset" in arguments:
                # Done by _begin already (so that the step list it watches is the one
                # `run` appends the task to).
                arguments["reset"] = False
                args, kwargs = bound.args, bound.kwargs
            try:
                result = original(*args, **kwargs)
            except BaseException as e:
                memory._end(state, error=e)
                raise
            if arguments.get("stream"):
                return memory._wrap_stream(state, result)
            memory._end(state)
            return result

        run.__wrapped__ = original  # type: ignore[attr-defined]
        run.__doc__ = getattr(original, "__doc__", None)
        run.__name__ = "run"
        return run

    def _wrap_stream(self, state: Run, stream: Iterator[Any]) -> Iterator[Any]:
        try:
            yield from stream
        except GeneratorExit:
            self._end(state, error="the run's stream was closed before its final answer")
            raise
        except BaseException as e:
            self._end(state, error=e)
            raise
        self._end(state)

    def _begin(self, agent: Any, task: Any, reset: bool) -> Run:
        previous = self._run
        if previous is not None and not previous.finished:
            self._end(previous, error="a new run started before this one ended")
        state = Run(self.session_id, task, reset, agent)
        self._run = state
        self._sender.put((OPEN, state, type(agent).__name__))
        if reset:  # what `run(reset=True)` does first
            agent.memory.reset()
            monitor = getattr(agent, "monitor", None)
            if monitor is not None:
                monitor.reset()
        watch = TaskWatch(agent.memory.steps, lambda step: self._task_appended(state, step))
        agent.memory.steps = watch
        state.steps_ref = watch
        state.steps_base = len(watch)
        return state

    def _end(self, state: Run, *, error: Any = None) -> None:
        if state.finished:
            return
        try:
            self._save_task(state)
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a run's task")
        state.finished = True
        if error is None:
            error = "the run ended without a final answer"
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        self._sender.put((FAIL, state, error))

    def _task_appended(self, state: Run, task: TaskStep) -> None:
        try:
            self._save_task(state, task)
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a run's task")

    def _save_task(self, state: Run, task: TaskStep | None = None) -> None:
        """Queues the run's TaskStep: given by the watched step list as `run` appends it,
        else (a run that replaced the list) looked for in the memory's new steps."""
        if state.task_saved or state.finished:
            return
        state.task_saved = True
        if task is None:
            agent = state.agent_ref()
            if agent is None:
                return
            steps = agent.memory.steps
            start = state.steps_base if steps is state.steps_ref else 0
            task = next((s for s in steps[start:] if isinstance(s, TaskStep)), None)
            if task is None:
                return
        number = state.next_number
        state.next_number += 1
        state.task_images = task.task_images
        self._sender.put((STEP, state, number, copy.copy(task), state.agent_ref, {"reset": state.reset}))

    def _on_step(self, memory_step: MemoryStep, agent: Any = None) -> None:
        state = self._run
        if state is None or state.finished or (agent is not None and agent is not self._agent):
            return
        try:
            if not state.task_saved:
                self._save_task(state)
            number = state.next_number
            state.next_number += 1
            # A shallow copy: the step's fields as they are now; converting and sending
            # happen on the sender thread.
            self._sender.put((STEP, state, number, copy.copy(memory_step), state.agent_ref))
            if isinstance(memory_step, FinalAnswerStep):
                state.finished = True
                self._sender.put((COMPLETE, state, memory_step.output))
        except Exception:  # saving must never break the agent
            logger.exception("stepwise: could not queue a smolagents step")


# --- importing a legacy store of pickled memories ----------------------------------------

_NAME_OK = re.compile(r"[A-Za-z0-9._-]{1,64}")
# The final message of an execution is cut here (as StepwiseMemory's sender does).
_FINAL_MESSAGE_MAX = 100_000


@dataclass
class ImportReport:
    """What `import_legacy` did, row by row (keys are the rows' ids, as the database gives them).

    Attributes:
        imported: legacy id -> Stepwise session id, for the rows written by this call.
        skipped_existing: legacy id -> Stepwise session id, for the rows an earlier call
            had imported already (nothing written).
        skipped_empty: legacy ids whose blob is NULL, empty, or an empty list of steps.
        failed: ``(legacy id, reason)`` for the rows not imported: a blob that does not
            unpickle, that is not a list of smolagents memory steps, a step that cannot be
            converted, or a write the server refused. Running `import_legacy` again retries
            them.
    """

    imported: dict[Any, str] = field(default_factory=dict)
    skipped_existing: dict[Any, str] = field(default_factory=dict)
    skipped_empty: list[Any] = field(default_factory=list)
    failed: list[tuple[Any, str]] = field(default_factory=list)

    @property
    def sessions(self) -> dict[Any, str]:
        """legacy id -> Stepwise session id, for every row that is in Stepwise now."""
        return {**self.skipped_existing, **self.imported}

    def __str__(self) -> str:
        return (
            f"{len(self.imported)} imported, {len(self.skipped_existing)} already imported, "
            f"{len(self.skipped_empty)} empty, {len(self.failed)} failed"
        )


def import_legacy(
    database_url: Any,
    client: Any = None,
    *,
    table: str = "sessions",
    steps_column: str = "agent_steps",
    id_column: str = "id",
    title_columns: Sequence[str] = ("title", "name"),
    name_prefix: str = "legacy-",
) -> ImportReport:
    """Copies smolagents memories kept as pickles in a SQL table into Stepwise sessions.

    For apps that saved ``pickle.dumps(agent.memory.steps)`` in a BLOB column: every row of
    `table` becomes one Stepwise session holding the row's steps, written as
    `StepwiseMemory` writes them (each ``TaskStep`` starts a run: one ``external``
    execution with its ``task``, ``planning``, ``action`` and ``final_answer`` steps, the
    same JSON payload in each step's ``output.smolagents``). Afterwards
    ``StepwiseMemory(client, session=report.imported[legacy_id])`` (or the session's name,
    ``name_prefix + str(legacy_id)``) restores those steps into any agent
    (``attach``/``restore``/``switch``), and the agent goes on with ``run(..., reset=False)``.

    .. warning::
       Unpickling runs whatever code the pickle names. Run this only on your own app's
       database, whose blobs your own code wrote: never on data someone else could have
       written. The pickles need the smolagents version (and any custom classes) they were
       made with to be importable here.

    Idempotent: each row's session is named ``name_prefix + str(legacy_id)`` (a unique
    key of the tenant; an id that does not make a valid session name is hashed) and
    carries ``metadata = {"legacy_id", "legacy_table", "legacy_import": "complete"}``.
    A row whose session is marked complete is skipped (``skipped_existing``), so a second
    call writes nothing. A call interrupted halfway is finished by the next one: each run's
    execution is found again by its ``metadata.legacy_run``, and steps are written with
    their numbers, which the server stores once.

    Never raises for a row: a blob that does not unpickle or is not a list of smolagents
    memory steps, or a row the server refused, is logged and listed in ``failed`` (the
    other rows go on); NULL or empty blobs are listed in ``skipped_empty``. It raises for
    what concerns every row: SQLAlchemy missing, a database that cannot be opened, a
    missing table or column.

    Args:
        database_url: a SQLAlchemy URL (``"sqlite:///path/app.db"``,
            ``"postgresql+psycopg://..."``) or an SQLAlchemy ``Engine``. Only read.
        client: a sync ``stepwise.Stepwise`` client (default: ``Stepwise()``, from
            ``STEPWISE_URL``/``STEPWISE_API_KEY``).
        table: the table holding the memories.
        steps_column: its column of pickled ``agent.memory.steps``.
        id_column: its id column (the row's key in the report and in the session name).
        title_columns: columns whose first non-empty value becomes the session's title,
            when the table has them.
        name_prefix: the start of each session's name (change it to import two databases
            whose ids overlap into one tenant).

    Returns:
        An `ImportReport`. Progress is logged on the ``stepwise.smolagents`` logger.

    Needs SQLAlchemy (``pip install "stepwise-client[smolagents]"`` brings it).
    """
    try:
        import sqlalchemy as sa
    except ImportError as e:  # pragma: no cover - the extra installs it
        raise ImportError(
            "stepwise.smolagents.import_legacy needs SQLAlchemy: "
            'pip install "stepwise-client[smolagents]" (or pip install sqlalchemy)'
        ) from e

    own_client = client is None
    if own_client:
        from .._client import Stepwise

        client = Stepwise()
    engine = database_url if isinstance(database_url, sa.engine.Engine) else sa.create_engine(database_url)
    report = ImportReport()
    try:
        try:
            legacy = sa.Table(table, sa.MetaData(), autoload_with=engine)
        except sa.exc.NoSuchTableError:
            raise ValueError(f"the database has no table {table!r}") from None
        for column in (id_column, steps_column):
            if column not in legacy.c:
                raise ValueError(
                    f"table {table!r} has no column {column!r} (its columns: {sorted(legacy.c.keys())})"
                )
        titles = [legacy.c[c] for c in title_columns if c in legacy.c]
        id_col = legacy.c[id_column]
        # The ids (and titles) first, then one row's blob at a time: the memory holds one
        # blob, and no read transaction stays open while the server is written to.
        with engine.connect() as conn:
            rows = conn.execute(sa.select(id_col, *titles).order_by(id_col)).all()
        logger.info("stepwise: importing %d rows of %s.%s", len(rows), table, steps_column)
        for row in rows:
            legacy_id = row[0]
            title = next((str(v) for v in row[1:] if v not in (None, "")), None)
            with engine.connect() as conn:
                blob = conn.execute(sa.select(legacy.c[steps_column]).where(id_col == legacy_id)).scalar()
            _import_row(client, report, legacy_id, blob, title, table=table, name_prefix=name_prefix)
    finally:
        if not isinstance(database_url, sa.engine.Engine):
            engine.dispose()
        if own_client:
            client.close()
    logger.info("stepwise: import of %s done: %s", table, report)
    return report


def _import_row(
    client: Any,
    report: ImportReport,
    legacy_id: Any,
    blob: Any,
    title: str | None,
    *,
    table: str,
    name_prefix: str,
) -> None:
    """One row: unpickled, converted, written (or reported)."""

    def fail(reason: str) -> None:
        logger.warning("stepwise: row %r of %s not imported: %s", legacy_id, table, reason)
        report.failed.append((legacy_id, reason))

    if isinstance(blob, memoryview):
        blob = blob.tobytes()
    if blob is None or len(blob) == 0:
        logger.info("stepwise: row %r of %s has no steps; skipped", legacy_id, table)
        report.skipped_empty.append(legacy_id)
        return
    if not isinstance(blob, (bytes, bytearray)):
        fail(f"the blob is a {type(blob).__name__}, not bytes")
        return
    try:
        steps = _LegacyUnpickler(io.BytesIO(blob)).load()
    except Exception as e:  # any error unpickling: a corrupt or foreign blob
        fail(f"the blob does not unpickle: {type(e).__name__}: {e}")
        return
    if not isinstance(steps, (list, tuple)):
        fail(f"the blob holds a {type(steps).__name__}, not a list of smolagents steps")
        return
    for n, step in enumerate(steps):
        if not isinstance(step, MemoryStep):
            fail(f"item {n} of the list is a {type(step).__name__}, not a smolagents memory step")
            return
    try:
        runs = _legacy_runs(list(steps))
    except Exception as e:  # a step the codec cannot convert: nothing written
        fail(f"a step cannot be converted: {type(e).__name__}: {e}")
        return
    if not runs:
        logger.info("stepwise: row %r of %s has no steps; skipped", legacy_id, table)
        report.skipped_empty.append(legacy_id)
        return

    name = _legacy_name(name_prefix, legacy_id)
    key = str(legacy_id)
    try:
        session = client.find_session(name)
        if session is not None and (session.get("metadata") or {}).get("legacy_id") != key:
            fail(f"a session named {name!r} exists that was not imported from this row")
            return
        if session is not None and (session.get("metadata") or {}).get("legacy_import") == "complete":
            logger.info("stepwise: row %r of %s was imported already: session %s", legacy_id, table, session["id"])
            report.skipped_existing[legacy_id] = session["id"]
            return
        metadata = {"legacy_id": key, "legacy_table": table, "legacy_import": "started"}
        if session is None:
            try:
                session = client.create_session(name=name, title=title, metadata=metadata)
            except StepwiseError as e:
                if e.code != "conflict":
                    raise
                session = client.find_session(name)  # created in between
                if session is None or (session.get("metadata") or {}).get("legacy_id") != key:
                    raise
        _write_runs(client, session["id"], key, runs, table)
        client.update_session(session["id"], metadata={**metadata, "legacy_import": "complete"})
    except Exception as e:  # the server refused or could not be reached: the next call retries
        logger.debug("stepwise: row %r of %s", legacy_id, table, exc_info=True)
        fail(f"{type(e).__name__}: {e}")
        return
    count = sum(len(bodies) for _, bodies, _ in runs)
    logger.info(
        "stepwise: row %r of %s imported: %d steps in %d runs, session %s",
        legacy_id, table, count, len(runs), session["id"],
    )
    report.imported[legacy_id] = session["id"]


# One legacy run: the execution's input, its numbered step bodies, its final answer
# (a 1-tuple, or None when the run has none).
_LegacyRun = tuple[dict, list[dict], tuple[Any] | None]


class _LegacyUnpickler(pickle.Unpickler):
    """``pickle.loads`` (the app's own data: see `import_legacy`), except that smolagents'
    errors come back: an ``AgentError`` pickles as ``(cls, (message,))``, and calling
    ``cls(message)`` fails, since its ``__init__`` also wants a logger."""

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        if isinstance(found, type) and issubclass(found, AgentError):
            return functools.partial(_agent_error, found)
        return found


def _agent_error(cls: type[AgentError], *args: Any) -> AgentError:
    error = cls.__new__(cls, *args)  # sets `args`; the pickled state sets the rest
    error.message = args[0] if args else ""
    return error


def _legacy_runs(steps: list[MemoryStep]) -> list[_LegacyRun]:
    """A memory's steps as runs (each ``TaskStep`` starts one), converted by the codec.

    The first run has ``reset: True`` (the memory began there), the others ``reset: False``
    (they were added to it), so that ``restore`` brings back the whole memory.
    """
    runs: list[_LegacyRun] = []
    task: TaskStep | None = None
    bodies: list[dict] = []
    answer: tuple[Any] | None = None

    def close() -> None:
        if bodies:
            text = None if task is None else answer_text(task.task)
            runs.append(({"task": text, "reset": not runs}, list(bodies), answer))

    for step in steps:
        if isinstance(step, SystemPromptStep):
            continue  # the agent's own system prompt comes back with `restore`
        if isinstance(step, TaskStep):
            close()
            task, bodies, answer = step, [], None
            body = encode_step(step, extra={"reset": not runs})
        else:
            body = encode_step(step, task_images=task.task_images if task is not None else None)
            if isinstance(step, FinalAnswerStep):
                answer = (step.output,)
            elif isinstance(step, ActionStep):
                answer = _final_answer(step) or answer
        body["step_number"] = len(bodies) + 1
        bodies.append(body)
    close()
    return runs


def _final_answer(step: ActionStep) -> tuple[Any] | None:
    """The run's answer when this step gave it: a final answer (a ``ToolCallingAgent``'s
    step keeps it in its ``final_answer`` call and its observations, not in
    ``action_output``), or the answer written after the last step was reached."""
    if step.is_final_answer:
        if step.action_output is not None:
            return (step.action_output,)
        for call in step.tool_calls or ():
            if call.name == "final_answer":
                arguments = call.arguments
                if isinstance(arguments, dict) and "answer" in arguments:
                    return (arguments["answer"],)
                return (arguments,)
        return (step.observations,)
    if isinstance(step.error, AgentMaxStepsError) and step.action_output is not None:
        return (step.action_output,)
    return None


def _legacy_name(prefix: str, legacy_id: Any) -> str:
    name = f"{prefix}{legacy_id}"
    if _NAME_OK.fullmatch(name) and ".." not in name:
        return name
    digest = hashlib.sha256(repr(legacy_id).encode()).hexdigest()[:24]
    return f"{prefix}{digest}"[:64]


def _write_runs(client: Any, session_id: str, key: str, runs: list[_LegacyRun], table: str) -> None:
    """Writes the runs into the session as executions. The ones an interrupted earlier
    call opened (found by ``metadata.legacy_run``) get their missing steps and their end,
    and are not opened again; one it left without a step, and that has ended since (the
    server ends an execution whose recorder went away), is passed over."""
    existing: dict[int, dict] = {}
    for execution in client.list_executions(session_id):
        number = (execution.get("metadata") or {}).get("legacy_run")
        if not isinstance(number, int) or number in existing:
            continue
        if execution.get("status") != "running" and not execution.get("step_count"):
            continue
        existing[number] = execution
    for number, (input_, bodies, answer) in enumerate(runs):
        execution = existing.get(number)
        if execution is None:
            execution = client.open_execution(
                session_id,
                input=input_,
                agent_config={"framework": "smolagents", "imported_from": table},
                metadata={"legacy_id": key, "legacy_run": number},
            )
        eid = execution["id"]
        if (execution.get("step_count") or 0) < len(bodies):
            _append_all(client, eid, bodies)
        if execution.get("status") != "running":
            continue  # ended already: by the earlier call, or by the server
        if answer is not None:
            text = answer_text(answer[0])
            if len(text) > _FINAL_MESSAGE_MAX:
                text = text[: _FINAL_MESSAGE_MAX - 1] + "…"
            client.complete_execution(eid, output={"final_answer": encode_value(answer[0])}, final_message=text)
        else:
            client.fail_execution(eid, "imported from a legacy store: the run has no final answer")


def _append_all(client: Any, eid: str, bodies: list[dict]) -> None:
    """Numbered steps in batches of up to 1,000 (halved while over the server's body limit)."""
    for start in range(0, len(bodies), 1000):
        _append_batch(client, eid, bodies[start : start + 1000])


def _append_batch(client: Any, eid: str, bodies: list[dict]) -> None:
    try:
        client.append_steps(eid, bodies, return_items=False)
    except StepwiseError as e:
        if e.status != 413 or len(bodies) == 1:
            raise
        half = len(bodies) // 2
        _append_batch(client, eid, bodies[:half])
        _append_batch(client, eid, bodies[half:])
