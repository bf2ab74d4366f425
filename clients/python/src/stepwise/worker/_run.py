"""`Run`: what an agent function gets for one claimed execution, and the exceptions it may
raise or meet."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, NoReturn, ParamSpec, TypeVar, cast

from .._calls import seg
from .._errors import StepwiseError
from ._http import Api, is_lease_lost, retrying

if TYPE_CHECKING:  # pragma: no cover
    from ._worker import Deltas

__all__ = ["Run", "Cancelled", "Retry", "SubagentError", "CallError"]

logger = logging.getLogger("stepwise.worker")

# Execution statuses a subagent is still working in (paused: waiting for its user's answer).
_SUBAGENT_WAITING = frozenset({"pending", "running", "paused"})
_MAX_ERROR_CHARS = 4000
# Step fields that differ from one attempt to the next by nature: not compared on replay.
_NOT_COMPARED = frozenset({"step_number", "started_at", "ended_at"})

P = ParamSpec("P")
T = TypeVar("T")


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


class Paused(BaseException):
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


class CallError(Exception):
    """The saved error of a `Run.call` replayed on a later claim, when its exception type
    cannot be raised again (it is not loaded in this process, or does not take its message
    as its one argument).

    Attributes:
        name: the call's name.
        error_type: the name of the exception's type when it was raised.
        message: its message.
    """

    def __init__(self, name: str, error_type: str, message: str) -> None:
        super().__init__(f"{name}: {error_type}: {message}" if message else f"{name}: {error_type}")
        self.name = name
        self.error_type = error_type
        self.message = message


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

    On a new claim (a lost worker, a `Retry`, the user's answer to a question) the function
    runs again from its start, and *replays*: the k-th `step` or `call` of the run returns
    the k-th saved step without writing it (a `call` returns its saved result without calling
    its function), the k-th `ask` its saved answer; steps are written again only past the
    saved ones. So a function that does its work through `call` does each piece once.

    Attributes:
        execution_id: the execution's id.
        session_id: its session's id (``None`` for an execution without a session).
        attempt: 1 for the first run, 2+ when an earlier worker was lost or an earlier attempt
            failed with `Retry` (then `steps` holds what it saved: continue after the last one).
        input: the execution's input as stored (``{"message": "..."}`` for a message, with
            ``"context"`` when the message said where it came from).
        input_text: the input's text (the user's message).
        context: where the user's message came from, ``{"related_type", "related_id",
            "context_url", "metadata"}`` (parts it did not say are ``None``), or ``None``.
        answer: the user's answer when this claim resumes a pause, else ``None``.
        memory: the session's agent memory before this execution,
            ``{"restored", "steps", "summary"}`` (as ``GET /v1/sessions/{id}/memory``, without
            this execution's own steps: those are `steps`).
        steps: this execution's saved steps so far (dicts, by ``step_number``); `step`
            appends to it. `step` and `call` replay them in order (see `replaying`).
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
        deltas: "Deltas | None" = None,
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
        context = self.input.get("context") if isinstance(self.input, Mapping) else None
        self.context: dict[str, Any] | None = dict(context) if isinstance(context, Mapping) else None
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
        self._answers = [_answer_in(s) for s in self.steps if is_answer(s)]
        self._answer_at = [i for i, s in enumerate(self.steps) if is_answer(s)]  # their indexes in `steps`
        self._cursor = 0  # the index in `steps` of the next saved step `step` or `call` replays
        # A `step(last=True)` held back to go with the completion (`complete` with `steps`,
        # when the server takes it): written first by any other write.
        self._held: dict[str, Any] | None = None
        self._complete_takes_steps = claim.get("complete_takes_steps") is True
        # When the lease was last renewed (the claim, a heartbeat or a write answered), on
        # this process's monotonic clock; and how to renew it now (the worker's heartbeat).
        self._renewed_at = time.monotonic()
        self._renew: Callable[[], None] | None = None

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
            raise Paused("the run paused")
        if self._dead:
            raise _LeaseLost(self._cancel_reason or "lease_lost")
        if self._held is not None and suffix != "/complete":
            self._write_held()
        path = f"/v1/executions/{seg(self.execution_id, 'execution_id')}{suffix}"

        def send() -> Any:
            sent = time.monotonic()
            answer = self._api.call(method, path, body, lease=self.lease)
            self._lease_renewed(sent)  # (every write with the lease renews it)
            return answer

        def on_retry(error: StepwiseError, attempt: int) -> None:
            if attempt == 0:
                logger.warning("execution %s: %s %s failed (%s); retrying", self.execution_id, method, suffix, error)

        try:
            if not retry:
                return send()
            return retrying(send, give_up_after=self._retry_for, should_stop=lambda: self._dead, on_retry=on_retry)
        except StepwiseError as error:
            if is_lease_lost(error) or error.code == "not_found":
                # (The server says which: a cancel, or another worker's lease.)
                reason = "cancelled" if error.message.startswith("the execution was cancelled") else "lease_lost"
                self._cancel(reason, dead=True)
                raise _LeaseLost(reason) from error
            raise

    def _lease_renewed(self, at: float) -> None:
        """The lease was renewed by a request sent at `at` (monotonic)."""
        self._renewed_at = max(self._renewed_at, at)

    def _confirm_lease(self) -> None:
        """Before a tool runs: when the lease may have run out since it was last renewed (the
        process was frozen or starved for two heartbeats), renews it first, so that a lease
        another worker took over meanwhile stops the run here (`check` raises) instead of
        running the tool a second time beside that worker."""
        renew = self._renew
        if renew is None or self._dead:
            return
        if time.monotonic() - self._renewed_at < self.lease_s * 2 / 3:
            return
        renew()

    def _write_held(self) -> None:
        """Writes the step `step(last=True)` held back, as any step is written (before
        another write, or when the run does not complete after all)."""
        with self._lock:
            held, self._held = self._held, None
            if held is None:
                return
            try:
                stored = self._write("POST", "/steps", held)
            except BaseException:
                if not self._dead:
                    self._held = held  # written by the next write, or the completion
                raise
            for index in range(len(self.steps) - 1, -1, -1):
                if self.steps[index] is held:
                    self.steps[index] = dict(stored) if isinstance(stored, dict) else held
                    break

    def _complete(self, body: dict[str, Any]) -> Any:
        """Completes the execution (``POST .../complete``) with the held step, if any, in
        the same request. When that request is refused for its step (400, 413, 422), the
        step is written alone, which raises its error, and the completion follows it."""
        with self._lock:
            held = self._held
            if held is None:
                return self._write("POST", "/complete", body)
            try:
                answer = self._write("POST", "/complete", {**body, "steps": [held]})
            except StepwiseError as error:
                if error.status not in (400, 413, 422):
                    raise
                self._write_held()
                return self._write("POST", "/complete", body)
            self._held = None
            return answer

    def step(self, *, last: bool = False, **fields: Any) -> dict[str, Any]:
        """Saves the next step of this execution and returns it as stored, or replays it.

        `fields` are the Step fields of ``POST /v1/executions/{id}/steps``: ``kind``
        (``action`` by default; ``planning``, ``task``, ``user_input``, ``final_answer``),
        ``model_output``, ``tool_calls`` (``[{id, name, arguments}]``), ``code``,
        ``observations``, ``error`` (``{kind, message}``), ``output`` (any JSON),
        ``token_usage`` (``{input, output, total}``), ``started_at``, ``ended_at``. The step
        gets the number after the last saved one (numbering continues across attempts), and
        is retried while the server is away without being written twice. Raises `Cancelled`
        when the lease is gone.

        Replay: while this claim has saved steps not replayed yet (`replaying`), the call
        returns the next one as stored and writes nothing; when `fields` differ from it, a
        warning names both. The ``user_input`` steps of questions and answers are left to
        `ask` (a ``user_input`` step of your own is replayed by a call of that kind).

        ``last=True`` says it is the run's last step: it is held back and sent with the
        completion, in one request, when the function returns right after it (any other
        write first writes it alone, as does a function that raises). It returns the step
        as sent (``step_number``, ``kind`` and the fields; no ``id`` or ``created_at``).
        Until the function returns, the step is neither saved nor shown: a worker lost
        meanwhile runs the function again from the steps saved before it.
        """
        with self._lock:
            body = {k: v for k, v in fields.items() if v is not None}
            body.setdefault("kind", "action")
            saved = self._take_saved(user_input=body["kind"] == "user_input")
            if saved is not None:
                if "step_number" in body and body["step_number"] != saved.get("step_number"):
                    raise ValueError(
                        f"this call replays step {saved.get('step_number')}, not {body['step_number']}"
                    )
                called, stored = _differences(body, saved)
                if called:
                    logger.warning(
                        "execution %s: replaying step %s, which differs from this call: called with %s, saved %s",
                        self.execution_id, saved.get("step_number"), _short(called), _short(stored),
                    )
                return saved
            if last and self._complete_takes_steps and not self._dead and not self._paused:
                if self._held is not None:
                    self._write_held()
                number = self._next_number()
                if "step_number" in body and body["step_number"] != number:
                    raise ValueError(f"the next step is number {number}, not {body['step_number']}")
                body["step_number"] = number
                self._held = body
                self.steps.append(body)
                self._cursor = len(self.steps)
                return dict(body)
            stored_step = self._append(body)
            self._cursor = len(self.steps)
            return stored_step

    def _append(self, body: dict[str, Any]) -> dict[str, Any]:
        """Writes `body` as the step after the last saved one (no replay)."""
        with self._lock:
            number = self._next_number()
            if "step_number" in body and body["step_number"] != number:
                raise ValueError(f"the next step is number {number}, not {body['step_number']}")
            body["step_number"] = number
            stored = self._write("POST", "/steps", body)
            self.steps.append(dict(stored) if isinstance(stored, dict) else body)
            return self.steps[-1]

    def _next_number(self) -> int:
        return int(self.steps[-1].get("step_number") or 0) + 1 if self.steps else 1

    def _take_saved(self, *, user_input: bool) -> dict[str, Any] | None:
        """The next saved step to replay (past the questions and answers, which `ask`
        replays, unless `user_input`), or ``None`` when all are replayed."""
        with self._lock:
            index = self._cursor
            while index < len(self.steps):
                saved = self.steps[index]
                index += 1
                if user_input or saved.get("kind") != "user_input":
                    self._cursor = index
                    return saved
            self._cursor = index
            return None

    @property
    def replaying(self) -> bool:
        """Whether the next `step` or `call` replays a saved step (``True`` on a resumed
        claim until the function has gone past the steps saved before it)."""
        with self._lock:
            return any(s.get("kind") != "user_input" for s in self.steps[self._cursor:])

    def skip_replay(self) -> None:
        """Leaves the saved steps as they are: the next `step` or `call` writes the step after
        the last saved one. For an agent that goes on from `steps` by itself (the framework
        runners do), not one that runs again from its start."""
        with self._lock:
            self._cursor = len(self.steps)

    # --- durable calls ------------------------------------------------------------------

    def call(self, name: str, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Runs ``fn(*args, **kwargs)`` once for this position of the run and saves its result
        as a step: a tool call `name` with the arguments, and the result JSON-encoded in its
        ``observations``. On a later claim (a lost worker, a retry, the user's answer) the
        same call of the run returns the saved result without calling `fn`, like Temporal's
        activities.

        The result comes back equal when it is JSON (``str``, numbers, ``bool``, ``None``,
        lists and dicts with string keys of those); anything else is kept as JSON: a pydantic
        model as its ``model_dump(mode="json")``, a tuple as a list, any other object as its
        ``str()`` - the first run returns `fn`'s own value, a replay the kept one.

        An exception of `fn` is saved as the step's ``error`` (``{kind: type name,
        message}``) and raised; a replay raises it again: the same exception type with the
        saved message when that type is loaded in this process and takes the message as its
        one argument, else a `CallError`. `Retry`, `Cancelled` and other ``BaseException``
        are not saved: the next attempt calls `fn` again.

        Calls are matched by their order in the run (make them one after another); a
        replayed call with another `name` or other arguments than the saved one logs a
        warning naming both and returns the saved result. `fn` runs again when the worker
        was lost after it returned but before its step was saved (at least once, as an
        activity). An ``async def`` function needs `acall`.
        """
        arguments = _call_arguments(args, kwargs)
        with self._lock:
            saved = self._take_saved(user_input=False)
        if saved is not None:
            replayed = self._replay_call(name, arguments, saved)
            if replayed is not _NOT_A_CALL:
                return cast(T, replayed)
        self._confirm_lease()
        self.check()
        try:
            result = fn(*args, **kwargs)
        except Retry:
            raise
        except Exception as error:
            if saved is None:
                self._save_call(name, arguments, error=error)
            raise
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if callable(close):
                close()  # never awaited: no "coroutine was never awaited" warning
            raise TypeError(f"{name}: run.call got an async function; use `await run.acall(...)`")
        if saved is None:
            self._save_call(name, arguments, result=result)
        return result

    async def acall(
        self, name: str, fn: Callable[P, Awaitable[T]] | Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`call` for async agents: `fn` is an ``async def`` function (awaited) or a plain one
        (run in a thread); its result is saved and replayed as `call` does."""
        arguments = _call_arguments(args, kwargs)
        saved = await asyncio.to_thread(lambda: self._take_saved(user_input=False))
        if saved is not None:
            replayed = self._replay_call(name, arguments, saved)
            if replayed is not _NOT_A_CALL:
                return cast(T, replayed)
        await asyncio.to_thread(self._confirm_lease)
        self.check()
        try:
            if inspect.iscoroutinefunction(fn):
                result: Any = await fn(*args, **kwargs)
            else:
                result = await asyncio.to_thread(lambda: fn(*args, **kwargs))
                if inspect.isawaitable(result):
                    result = await result
        except Retry:
            raise
        except Exception as error:
            if saved is None:
                await asyncio.to_thread(lambda: self._save_call(name, arguments, error=error))
            raise
        if saved is None:
            await asyncio.to_thread(lambda: self._save_call(name, arguments, result=result))
        return cast(T, result)

    def _save_call(
        self, name: str, arguments: dict[str, Any], *, result: Any = None, error: BaseException | None = None
    ) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {
                "kind": "action",
                "tool_calls": [{"id": f"call-{self._next_number()}", "name": name, "arguments": arguments}],
            }
            if error is None:
                body["observations"] = _encode_result(result)
                body["output"] = {"call": name}
            else:
                cls = type(error)
                body["error"] = {"kind": cls.__name__, "message": _error_message(error)[:_MAX_ERROR_CHARS]}
                body["output"] = {"call": name, "raised": f"{cls.__module__}:{cls.__qualname__}"}
            stored = self._append(body)
            self._cursor = len(self.steps)
            return stored

    def _replay_call(self, name: str, arguments: dict[str, Any], saved: Mapping[str, Any]) -> Any:
        """The saved result of a call (or raises its saved error); `_NOT_A_CALL` when the
        saved step is not a call's."""
        output = saved.get("output")
        mark = output.get("call") if isinstance(output, Mapping) else None
        if not isinstance(mark, str) or not isinstance(output, Mapping):
            logger.warning(
                "execution %s: call %r replays step %s, which holds no call's result (saved %s); "
                "calling it again without saving it",
                self.execution_id, name, saved.get("step_number"),
                _short({k: saved.get(k) for k in ("kind", "model_output", "tool_calls") if saved.get(k)}),
            )
            return _NOT_A_CALL
        calls = saved.get("tool_calls") or []
        saved_arguments = calls[0].get("arguments") if calls and isinstance(calls[0], Mapping) else None
        if mark != name or _comparable(saved_arguments) != _comparable(arguments):
            logger.warning(
                "execution %s: replaying step %s, which differs from this call: called %s %s, saved %s %s",
                self.execution_id, saved.get("step_number"), name, _short(arguments), mark, _short(saved_arguments),
            )
        raised = output.get("raised")
        if isinstance(raised, str) or saved.get("error"):
            saved_error = saved.get("error")
            error: Mapping[str, Any] = saved_error if isinstance(saved_error, Mapping) else {}
            raise _rebuilt_error(
                mark, str(raised or ""), str(error.get("kind") or "Exception"), str(error.get("message") or "")
            )
        text = saved.get("observations")
        if not isinstance(text, str):
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text

    def info(self, text: str, *, notification: bool = False) -> dict[str, Any] | None:
        """Posts a line of the agent's to its session (``POST /v1/executions/{id}/messages``):
        an ``info`` line, shown and streamed like the server's own status lines ("Searching
        the docs…"), or with `notification=True` a ``notification`` for the user. Returns the
        stored Message. While a resumed run replays its saved steps the line was posted by the
        attempt that saved them: it is not sent again (``None``)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("an info line needs some text")
        if self.replaying:
            return None
        role = "notification" if notification else "info"
        return self._write("POST", "/messages", {"role": role, "content": text})

    def delta(self, text: str) -> None:
        """Streams `text` (live tokens) to the session's watchers as ``message.delta`` events.

        Returns at once: deltas are sent in order from a background thread (consecutive ones
        merged), best effort; they are not stored.
        """
        if not text or self._dead or self._deltas is None:
            return
        self._deltas.put(self, str(text))

    def _stream(self, items: list[Any], size: int, text: str = "") -> None:
        """Sends a LangGraph graph's stream chunks live (``metadata.langgraph`` of a delta,
        in order with the tokens); `size` is their JSON size, `text` the tokens among them."""
        if self._dead or self._deltas is None:
            return
        self._deltas.put(self, text, items, size)

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

        The question is saved as a ``user_input`` step first (not again when a lost worker
        saved this question as the last step and did not pause). Never returns.
        """
        question = _text_of(question).strip() or "?"
        with self._lock:
            last = self.steps[-1] if self.steps else None
            asked_already = (
                last is not None and len(self.steps) > self._cursor and last.get("kind") == "user_input"
                and _is_question(last) and last.get("model_output") == question
            )
            if not asked_already:
                self._append({
                    "kind": "user_input",
                    "model_output": question,
                    "tool_calls": [{"id": f"ask-{self._next_number()}", "name": "user_input",
                                    "arguments": {"question": question}}],
                    "output": {"question": question},
                })
            self._cursor = len(self.steps)
            self._write("POST", "/pause", {"question": question})
            # The lease went with the pause: nothing more is written by this run.
            self._paused = True
            self._dead = True
        raise Paused(question)

    def ask(self, question: str) -> str:
        """Asks the user `question`: the answer when this run has it, else it pauses.

        The first call pauses the execution (see `pause`). When the user answers, the agent
        function runs again from the start on a new claim, and this call, the same one of
        the run, returns the answer. A function asking several questions gets each answer
        from its own call, in order (the answers are kept as ``user_input`` steps); the
        `step` and `call` after it replay the steps saved after that answer.
        """
        with self._lock:
            if self._asked < len(self._answers):
                answer = self._answers[self._asked]
                at = self._answer_at[self._asked] if self._asked < len(self._answer_at) else None
                self._asked += 1
                if at is not None and at >= self._cursor:
                    skipped = [s.get("step_number") for s in self.steps[self._cursor:at] if s.get("kind") != "user_input"]
                    if skipped:
                        logger.warning("execution %s: asked before replaying saved steps %s; they are skipped",
                                       self.execution_id, skipped)
                    self._cursor = at + 1
                return _text_of(answer)
        self.pause(question)

    def _record_answer(self) -> None:
        """Makes sure the resume answer is the last step, a ``user_input`` step (the server
        saves it so; this covers one that does not), once, not again after a crash."""
        if self.answer is None:
            return
        last = self.steps[-1] if self.steps else None
        if last is not None and is_answer(last):
            return
        self._append({"kind": "user_input", "observations": _text_of(self.answer), "output": {"answer": self.answer}})
        self._answers.append(self.answer)
        self._answer_at.append(len(self.steps) - 1)

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
        if self._held is not None:
            self._write_held()
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


class _NotACall:
    """What `Run._replay_call` gives for a saved step that holds no call's result."""


_NOT_A_CALL = _NotACall()


def _json_default(value: Any) -> Any:
    """How `call` keeps a result that is not JSON: a pydantic model as its dump, else text."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # noqa: BLE001 - then as text
            pass
    return str(value)


def _encode_result(value: Any) -> str:
    """A call's result as the JSON text its step keeps (NaN and infinities included)."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _comparable(value: Any) -> Any:
    """`value` as JSON would give it back (tuples as lists, objects as text), to compare."""
    try:
        return json.loads(_encode_result(value))
    except ValueError:  # pragma: no cover - _encode_result always writes JSON
        return value


def _call_arguments(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as its tool call keeps them: ``{"args": [...], "kwargs": {...}}``,
    each only when given."""
    arguments: dict[str, Any] = {}
    if args:
        arguments["args"] = list(args)
    if kwargs:
        arguments["kwargs"] = dict(kwargs)
    comparable = _comparable(arguments)
    return comparable if isinstance(comparable, dict) else {}


def _differences(called: Mapping[str, Any], saved: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of a `step` call that differ from the saved step it replays: (as called,
    as saved)."""
    mine: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for key, value in called.items():
        if key in _NOT_COMPARED:
            continue
        if _comparable(value) != _comparable(saved.get(key)):
            mine[key] = value
            theirs[key] = saved.get(key)
    return mine, theirs


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error_message(error: BaseException) -> str:
    """The message an exception was made with (``KeyError("x")``: ``x``, not ``'x'``)."""
    if len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)


def _rebuilt_error(name: str, raised: str, kind: str, message: str) -> Exception:
    """The exception a replayed call raises: `raised` (``module:qualname``) made again with
    `message` when that type is loaded and takes it, else a `CallError`."""
    module, _, qualname = raised.partition(":")
    found: Any = sys.modules.get(module) if module and qualname else None
    for part in qualname.split(".") if found is not None else ():
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Exception) and not issubclass(found, Retry):
        try:
            error = found(message)
        except Exception:  # noqa: BLE001 - a type that wants other arguments
            pass
        else:
            if isinstance(error, Exception):
                return error
    return CallError(name, kind, message)


def _is_question(step: Mapping[str, Any]) -> bool:
    output = step.get("output")
    return isinstance(output, dict) and "question" in output and "answer" not in output


def is_answer(step: Mapping[str, Any]) -> bool:
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
