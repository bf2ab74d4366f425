"""`Run`: what an agent function gets for one claimed execution, and the exceptions it may
raise or meet."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn

from .._calls import seg
from .._errors import StepwiseError
from ._http import Api, is_lease_lost, retrying

if TYPE_CHECKING:  # pragma: no cover
    from ._worker import _Deltas

__all__ = ["Run", "Cancelled", "Retry", "SubagentError"]

logger = logging.getLogger("stepwise.worker")

# Execution statuses a subagent is still working in (paused: waiting for its user's answer).
_SUBAGENT_WAITING = frozenset({"pending", "running", "paused"})
_MAX_ERROR_CHARS = 4000


class Cancelled(BaseException):
    """The run must stop: the execution was cancelled, another worker holds it now (the lease
    was lost), or this worker is shutting down. `Run.check()` raises it; a write of a run whose
    lease is gone raises it too.

    Like ``asyncio.CancelledError`` it is a ``BaseException``, so that an agent's
    ``except Exception:`` blocks let it through. The worker catches it: the function just
    stops (a shutting-down worker hands the execution back to the queue).
    """

    def __init__(self, reason: str = "cancelled") -> None:
        super().__init__(reason)
        self.reason = reason


class _LeaseLost(Cancelled):
    """A write was refused with 409 `lease_lost`: nothing more may be written."""


class _Paused(BaseException):
    """Raised by `Run.pause` after the pause is recorded; the worker catches it."""


class Retry(Exception):
    """Raise it from an agent function to fail this attempt with ``retry: true``: the
    execution goes back to the queue (until the server's attempt limit)."""


class SubagentError(Exception):
    """A subagent started with `Run.subagent` failed or was cancelled.

    Attributes:
        execution: the subagent's execution (``status``, ``error_message``, ...).
    """

    def __init__(self, message: str, execution: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.execution = dict(execution)


def _text_of(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class Run:
    """One claimed execution, as an agent function sees it.

    The agent function takes a `Run` and returns the final answer (a string, any JSON value,
    or ``None``). Everything it writes (`step`, `delta`, `pause`, ...) carries the lease of
    this claim; once the lease is gone (the execution was cancelled, or taken over by another
    worker after this one froze past its lease), writes raise `Cancelled` and write nothing.

    Attributes:
        execution_id: the execution's id.
        session_id: its session's id (``None`` for an execution without a session).
        attempt: 1 for the first run, 2+ when an earlier worker was lost or an earlier attempt
            failed with `Retry` (then `steps` holds what it saved: continue after the last one).
        input: the execution's input as stored (``{"message": "..."}`` for a message).
        input_text: the input's text (the user's message).
        answer: the user's answer when this claim resumes a pause, else ``None``.
        memory: the session's agent memory before this execution,
            ``{"restored", "steps", "summary"}`` (as ``GET /v1/sessions/{id}/memory``, without
            this execution's own steps: those are `steps`).
        steps: this execution's saved steps so far (dicts, by ``step_number``); `step`
            appends to it.
        snapshot: this execution's latest snapshot, or ``None``.
        session: the session (a dict), or ``None``.
        execution: the execution (a dict) as claimed.
        agent_type: the agent type this run is for.
        agent_config: the message's ``agent.config`` (``None`` when it gave none).
        lease: the lease token (sent with every write as the ``Stepwise-Lease`` header).
        lease_s, heartbeat_interval_s: the lease's length and how often the worker renews it.
    """

    def __init__(
        self,
        claim: Mapping[str, Any],
        *,
        api: Api,
        deltas: "_Deltas | None" = None,
        retry_for: float = 60.0,
    ) -> None:
        execution = claim.get("execution") or {}
        self.execution: dict[str, Any] = dict(execution)
        self.execution_id: str = str(execution.get("id"))
        self.session_id: str | None = execution.get("session_id")
        self.session: dict[str, Any] | None = claim.get("session")
        self.agent_type: str = str(execution.get("agent_type"))
        self.agent_config: Any = execution.get("agent_config")
        self.attempt: int = int(claim.get("attempt") or 1)
        self.lease: str = str(claim.get("lease"))
        self.lease_expires_at: str | None = claim.get("lease_expires_at")
        self.lease_s: float = float(claim.get("lease_s") or 15)
        interval = claim.get("heartbeat_interval_s")
        self.heartbeat_interval_s: float = float(interval) if interval else self.lease_s / 3
        self.input: Any = claim.get("input", execution.get("input"))
        text = claim.get("input_text")
        if text is None:
            raw = self.input
            text = raw.get("message") if isinstance(raw, dict) and "message" in raw else raw
            text = _text_of(text)
        self.input_text: str = str(text)
        self.answer: Any = claim.get("resume_answer")
        memory = claim.get("memory")
        self.memory: dict[str, Any] = (
            dict(memory) if isinstance(memory, dict) else {"restored": "empty", "steps": [], "summary": None}
        )
        self.steps: list[dict[str, Any]] = sorted(
            (dict(s) for s in claim.get("steps") or []), key=lambda s: int(s.get("step_number") or 0)
        )
        self.snapshot: dict[str, Any] | None = claim.get("snapshot")
        self.claim: dict[str, Any] = dict(claim)

        self._api = api
        self._deltas = deltas
        self._retry_for = retry_for
        self._lock = threading.RLock()  # one write at a time, numbered in order
        self._cancel_reason: str | None = None
        self._dead = False  # the lease is gone: write nothing more
        self._paused = False  # the run asked the user and stopped
        self._on_cancel: list[Callable[[], Any]] = []
        self._asked = 0
        self._answers = [_answer_in(s) for s in self.steps if _is_answer(s)]

    def __repr__(self) -> str:
        return (
            f"Run(execution_id={self.execution_id!r}, agent_type={self.agent_type!r}, "
            f"attempt={self.attempt}, cancelled={self.cancelled})"
        )

    # --- cancellation -------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """Whether the run must stop: the execution was cancelled (the heartbeat said
        ``cancel_requested``), a write was refused with 409 ``lease_lost``, or the worker
        is shutting down."""
        return self._cancel_reason is not None

    @property
    def cancel_reason(self) -> str | None:
        """Why the run must stop: ``"cancelled"``, ``"lease_lost"``, ``"shutdown"``, or
        ``None`` while it may go on."""
        return self._cancel_reason

    def check(self) -> None:
        """Raises `Cancelled` when the run must stop; call it between units of work."""
        reason = self._cancel_reason
        if reason is not None:
            raise Cancelled(reason)

    def on_cancel(self, callback: Callable[[], Any]) -> None:
        """Calls `callback()` (from another thread) when the run is cancelled, loses its
        lease or the worker shuts down, e.g. ``run.on_cancel(agent.interrupt)``. Called at
        once when that happened already."""
        with self._lock:
            if self._cancel_reason is None:
                self._on_cancel.append(callback)
                return
        _call_quietly(callback)

    def _cancel(self, reason: str, *, dead: bool) -> None:
        """Marks the run cancelled (first reason wins) and runs the callbacks."""
        with self._lock:
            if dead:
                self._dead = True
            if self._cancel_reason is not None:
                return
            self._cancel_reason = reason
            callbacks, self._on_cancel = self._on_cancel, []
        if reason != "shutdown":
            logger.info("execution %s: %s; stopping its agent", self.execution_id,
                        "cancelled" if reason == "cancelled" else "lease lost (taken over)")
        for callback in callbacks:
            _call_quietly(callback)

    @property
    def lease_lost(self) -> bool:
        """Whether the lease is gone (cancelled or taken over): nothing more is written."""
        return self._dead

    # --- writes -------------------------------------------------------------------------

    def _write(self, method: str, suffix: str, body: Any, *, retry: bool = True) -> Any:
        if self._paused:
            raise _Paused("the run paused")
        if self._dead:
            raise _LeaseLost(self._cancel_reason or "lease_lost")
        path = f"/v1/executions/{seg(self.execution_id, 'execution_id')}{suffix}"

        def send() -> Any:
            return self._api.call(method, path, body, lease=self.lease)

        def on_retry(error: StepwiseError, attempt: int) -> None:
            if attempt == 0:
                logger.warning("execution %s: %s %s failed (%s); retrying", self.execution_id, method, suffix, error)

        try:
            if not retry:
                return send()
            return retrying(send, give_up_after=self._retry_for, should_stop=lambda: self._dead, on_retry=on_retry)
        except StepwiseError as error:
            if is_lease_lost(error) or error.code == "not_found":
                self._cancel("lease_lost", dead=True)
                raise _LeaseLost("lease_lost") from error
            raise

    def step(self, **fields: Any) -> dict[str, Any]:
        """Saves the next step of this execution and returns it as stored.

        `fields` are the Step fields of ``POST /v1/executions/{id}/steps``: ``kind``
        (``action`` by default; ``planning``, ``task``, ``user_input``, ``final_answer``),
        ``model_output``, ``tool_calls`` (``[{id, name, arguments}]``), ``code``,
        ``observations``, ``error`` (``{kind, message}``), ``output`` (any JSON),
        ``token_usage`` (``{input, output, total}``), ``started_at``, ``ended_at``. The step
        gets the number after the last saved one (numbering continues across attempts), and
        is retried while the server is away without being written twice. Raises `Cancelled`
        when the lease is gone.
        """
        with self._lock:
            body = {k: v for k, v in fields.items() if v is not None}
            body.setdefault("kind", "action")
            number = int(self.steps[-1].get("step_number") or 0) + 1 if self.steps else 1
            if "step_number" in body and body["step_number"] != number:
                raise ValueError(f"the next step is number {number}, not {body['step_number']}")
            body["step_number"] = number
            stored = self._write("POST", "/steps", body)
            self.steps.append(dict(stored) if isinstance(stored, dict) else body)
            return self.steps[-1]

    def delta(self, text: str) -> None:
        """Streams `text` (live tokens) to the session's watchers as ``message.delta`` events.

        Returns at once: deltas are sent in order from a background thread (consecutive ones
        merged), best effort; they are not stored.
        """
        if not text or self._dead or self._deltas is None:
            return
        self._deltas.put(self, str(text))

    def save_snapshot(self, state: Any, **fields: Any) -> dict[str, Any]:
        """Saves a snapshot of this execution's state (any JSON); `fields` as
        ``POST /v1/executions/{id}/snapshots`` (``step_number``, ``is_final``, ...)."""
        body = {"state": state, **{k: v for k, v in fields.items() if v is not None}}
        with self._lock:
            saved = self._write("POST", "/snapshots", body, retry=False)
        self.snapshot = saved
        return saved

    # --- asking the user ----------------------------------------------------------------

    def pause(self, question: str) -> NoReturn:
        """Asks the user `question` and stops this run: the execution pauses, and the user's
        answer queues it again; the next claim (on any worker) has it in `answer`.

        The question is saved as a ``user_input`` step first. Never returns.
        """
        question = _text_of(question).strip() or "?"
        with self._lock:
            self.step(
                kind="user_input",
                model_output=question,
                tool_calls=[{"id": f"ask-{len(self.steps) + 1}", "name": "user_input", "arguments": {"question": question}}],
                output={"question": question},
            )
            self._write("POST", "/pause", {"question": question})
            # The lease went with the pause: nothing more is written by this run.
            self._paused = True
            self._dead = True
        raise _Paused(question)

    def ask(self, question: str) -> str:
        """Asks the user `question`: the answer when this run has it, else it pauses.

        The first call pauses the execution (see `pause`). When the user answers, the agent
        function runs again from the start on a new claim, and this call, the same one of
        the run, returns the answer. A function asking several questions gets each answer
        from its own call, in order (the answers are kept as ``user_input`` steps).
        """
        with self._lock:
            if self._asked < len(self._answers):
                answer = self._answers[self._asked]
                self._asked += 1
                return _text_of(answer)
        self.pause(question)

    def _record_answer(self) -> None:
        """Makes sure the resume answer is the last step, a ``user_input`` step (the server
        saves it so; this covers one that does not), once, not again after a crash."""
        if self.answer is None:
            return
        last = self.steps[-1] if self.steps else None
        if last is not None and _is_answer(last):
            return
        self.step(kind="user_input", observations=_text_of(self.answer), output={"answer": self.answer})
        self._answers.append(self.answer)

    # --- subagents ----------------------------------------------------------------------

    def subagent(
        self,
        agent_type: str,
        input_text: str,
        *,
        config: Any = None,
        poll_interval: float = 0.25,
        timeout: float | None = None,
    ) -> str:
        """Runs another agent type on `input_text` as a child of this execution, in this
        session, and returns its answer (text).

        The child is queued (``POST /v1/sessions/{id}/executions``) and run by a worker of
        that type (or by the server for a built-in type); this waits for it, polling.
        Raises `SubagentError` when it fails or is cancelled, `Cancelled` when this run is
        cancelled meanwhile, `TimeoutError` after `timeout` seconds.
        """
        if not self.session_id:
            raise ValueError("this execution has no session to start a subagent in")
        body: dict[str, Any] = {
            "agent_type": agent_type,
            "input": {"message": input_text},
            "parent_execution_id": self.execution_id,
        }
        if config is not None:
            body["agent_config"] = config
        self.check()
        child = self._api.call(
            "POST", f"/v1/sessions/{seg(self.session_id, 'session_id')}/executions", body
        )
        child_id = str(child["id"])
        logger.info("execution %s: subagent %s (%s) started", self.execution_id, child_id, agent_type)
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = min(0.05, poll_interval)
        while True:
            status = child.get("status")
            if status not in _SUBAGENT_WAITING:
                break
            self.check()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"subagent {child_id} is still {status} after {timeout} s")
            time.sleep(delay)
            delay = min(delay * 2, poll_interval)
            child = retrying(
                lambda: self._api.call("GET", f"/v1/executions/{seg(child_id, 'execution_id')}"),
                give_up_after=self._retry_for,
            )
        if child.get("status") != "completed":
            raise SubagentError(
                f"subagent {agent_type} ({child_id}) {child.get('status')}: "
                f"{child.get('error_message') or 'no answer'}",
                child,
            )
        return _answer_of(child.get("output"))

    # --- async variants -----------------------------------------------------------------

    async def astep(self, **fields: Any) -> dict[str, Any]:
        """`step` for async agents (runs in a thread, so the event loop goes on)."""
        return await asyncio.to_thread(lambda: self.step(**fields))

    async def aask(self, question: str) -> str:
        """`ask` for async agents."""
        return await asyncio.to_thread(self.ask, question)

    async def apause(self, question: str) -> NoReturn:
        """`pause` for async agents."""
        await asyncio.to_thread(self.pause, question)
        raise AssertionError("unreachable")  # pragma: no cover

    async def asubagent(self, agent_type: str, input_text: str, **kwargs: Any) -> str:
        """`subagent` for async agents."""
        return await asyncio.to_thread(lambda: self.subagent(agent_type, input_text, **kwargs))

    async def asave_snapshot(self, state: Any, **fields: Any) -> dict[str, Any]:
        """`save_snapshot` for async agents."""
        return await asyncio.to_thread(lambda: self.save_snapshot(state, **fields))


def _is_question(step: Mapping[str, Any]) -> bool:
    output = step.get("output")
    return isinstance(output, dict) and "question" in output and "answer" not in output


def _is_answer(step: Mapping[str, Any]) -> bool:
    """A ``user_input`` step that holds the user's answer (not the question asked)."""
    return step.get("kind") == "user_input" and not _is_question(step)


def _answer_in(step: Mapping[str, Any]) -> Any:
    output = step.get("output")
    if isinstance(output, dict) and "answer" in output:
        return output["answer"]
    return step.get("observations")


def _answer_of(output: Any) -> str:
    """A finished execution's answer as text."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in ("final_message", "final_answer", "answer", "text", "output"):
            value = output.get(key)
            if isinstance(value, str):
                return value
    return _text_of(output)


def _call_quietly(callback: Callable[[], Any]) -> None:
    try:
        callback()
    except Exception:  # a cancel hook must not break the heartbeat
        logger.exception("a cancel callback failed")
