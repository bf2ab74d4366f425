"""The background sender of `stepwise.smolagents.StepwiseMemory`: a thread that converts the
steps the agent's callback queued, and one that posts them (batches of one run merged, in
order, each step numbered so a retried send never writes twice)."""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from smolagents.memory import TaskStep

from .._errors import StepwiseError
from ._codec import answer_text, encode_value, tool_input_names, encode_step

if TYPE_CHECKING:
    from ._memory import StepwiseMemory

logger = logging.getLogger("stepwise.smolagents")


# --- the background sender ----------------------------------------------------------------


class Run:
    """One `agent.run`: one Stepwise execution."""

    __slots__ = (
        "session_id", "task", "reset", "execution_id", "next_number", "task_saved",
        "finished", "steps_ref", "steps_base", "open_failed", "agent_ref", "task_images",
        "agent_name",
    )

    def __init__(self, session_id: str, task: Any, reset: bool, agent: Any) -> None:
        self.session_id = session_id
        self.task = task
        self.reset = reset
        self.execution_id: str | None = None
        self.next_number = 1
        self.task_saved = False
        self.finished = False
        self.open_failed = False
        self.agent_ref = weakref.ref(agent)
        self.task_images: list | None = None
        self.agent_name: Any = None
        # To find the TaskStep `run` appends: the memory's step list before the run (a
        # reset run replaces the list) and its length.
        steps = agent.memory.steps
        self.steps_ref = steps
        self.steps_base = len(steps)


class TaskWatch(list):
    """``agent.memory.steps`` from a run's start: tells the memory about the TaskStep that
    ``run`` appends, once, so the task is saved before the model is first called."""

    __slots__ = ("_on_task",)

    def __init__(self, items: list, on_task: Callable[[TaskStep], None]) -> None:
        super().__init__(items)
        self._on_task: Callable[[TaskStep], None] | None = on_task

    def append(self, item: Any) -> None:
        super().append(item)
        on_task = self._on_task
        if on_task is not None and isinstance(item, TaskStep):
            self._on_task = None
            on_task(item)

    def __reduce_ex__(self, protocol: Any) -> Any:  # copies and pickles as a plain list
        return (list, (list(self),))


OPEN, STEP, COMPLETE, FAIL, _MARK, _STOP = range(6)

# The answers that mean the server has an operation already (a retried complete/fail).
_DONE_CODES = {"invalid_state", "conflict"}


class _LeaseLost(Exception):
    """The server failed the run's execution: its lease ran out (this process was silent
    longer than the lease) or it was cancelled."""

# Most steps converted in one go: the next ones are converted while these are on the wire.
_BATCH_MAX = 250
# Most steps sent in one request (what `POST .../steps/batch` takes): converted batches of
# one run that wait together for the sending thread go out as one.
_REQUEST_MAX = 1_000
# Requests converted ahead of the one being sent (then the converting thread waits).
_AHEAD = 4
# An item of the send queue: steps of a run, converted (numbered bodies).
_POST = -1


class Sender:
    """Two threads that send a memory's operations in order.

    The first takes operations off ``queue`` and converts steps to request bodies; the
    second takes what the first hands it (``outbox``, in the same order) and sends it.
    Steps of one run that are queued together (the agent went faster than the server)
    are converted ``_BATCH_MAX`` at a time, and the converted batches of a run that wait
    together go out in one ``append_steps`` request, up to ``_REQUEST_MAX`` steps; any other
    operation (open, complete, fail, a flush mark) waits until the steps queued before it
    are sent. A step found alone is sent with ``append_step``, as one request.
    """

    def __init__(self, client: Any, memory: StepwiseMemory) -> None:
        self.client = client
        self.memory_ref = weakref.ref(memory)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.Queue = queue.Queue(maxsize=_AHEAD)
        self.thread: threading.Thread | None = None  # converts
        self.poster: threading.Thread | None = None  # sends
        self.lock = threading.Lock()
        self.errors_lock = threading.Lock()
        self.errors = 0
        self.stopping = False
        # Only a client whose class has `append_steps` (`Stepwise`) gets batches: a stand-in
        # that forwards the client's other methods but has its own `append_step` keeps
        # getting every step through it. Turned off too when the server has no batch
        # endpoint (an older server).
        self.batching = callable(getattr(type(client), "append_steps", None))

    def put(self, item: tuple) -> None:
        if self.thread is None:
            self._start()
        self.queue.put(item)

    def _start(self) -> None:
        with self.lock:
            if self.thread is None:
                poster = threading.Thread(target=self._post_loop, name="stepwise-smolagents-sender", daemon=True)
                poster.start()
                self.poster = poster
                thread = threading.Thread(target=self._loop, name="stepwise-smolagents-converter", daemon=True)
                thread.start()
                self.thread = thread

    def lost(self, n: int) -> None:
        """Counts `n` operations given up on (from either thread)."""
        with self.errors_lock:
            self.errors += n

    def flush(self, timeout: float | None) -> bool:
        poster = self.poster
        if poster is None or not poster.is_alive():
            return True
        if self.stopping:  # no mark would be read after the stop: wait for the threads
            poster.join(timeout)
            return not poster.is_alive()
        done = threading.Event()
        self.queue.put((_MARK, done))
        return done.wait(timeout)

    def stop_soon(self) -> None:
        """The thread ends once it has sent everything queued before this call."""
        if not self.stopping:
            self.stopping = True
            self.queue.put((_STOP,))

    def stop(self, timeout: float | None) -> None:
        self.stop_soon()
        if self.poster is not None and self.poster.is_alive():
            self.poster.join(timeout)

    def _loop(self) -> None:
        """The converting thread: steps become numbered bodies; every operation goes on to
        the sending thread in the order it was queued."""
        after: tuple | None = None  # taken from the queue behind a batch: handled next
        while True:
            item = after if after is not None else self.queue.get()
            after = None
            if item[0] == STEP:
                batch, after = self._take_steps(item) if self.batching else ([item], None)
                try:
                    item = (_POST, item[1], self._encode_steps(batch))
                except Exception:  # never let the thread die
                    self.lost(len(batch))
                    logger.exception("stepwise: could not save a smolagents step")
                    continue
            self.outbox.put(item)
            if item[0] == _STOP:
                return

    def _post_loop(self) -> None:
        """The sending thread: sends what the converting thread hands it, in order."""
        after: tuple | None = None  # taken from the outbox behind a request: handled next
        while True:
            item = after if after is not None else self.outbox.get()
            after = None
            if item[0] == _POST:
                item, after = self._take_posts(item)
            op = item[0]
            if op == _STOP:
                return
            if op == _MARK:
                item[1].set()
                continue
            try:
                if op == _POST:
                    self._post_run_steps(item[1], item[2])
                else:
                    self._send(item)
            except Exception:  # never let the thread die
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")

    def _take_steps(self, first: tuple) -> tuple[list[tuple], tuple | None]:
        """``first`` and the steps of its run queued right behind it (up to ``_BATCH_MAX``),
        and the operation that stopped the batch, taken from the queue (or None)."""
        batch = [first]
        run = first[1]
        while len(batch) < _BATCH_MAX:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return batch, None
            if item[0] != STEP or item[1] is not run:
                return batch, item
            batch.append(item)
        return batch, None

    def _take_posts(self, first: tuple) -> tuple[tuple, tuple | None]:
        """``first`` joined by the converted steps of its run waiting right behind it (up to
        ``_REQUEST_MAX`` steps), and the item that stopped it, taken from the outbox (or
        None)."""
        run, numbered = first[1], first[2]
        while len(numbered) < _REQUEST_MAX:
            try:
                item = self.outbox.get_nowait()
            except queue.Empty:
                break
            if item[0] != _POST or item[1] is not run or len(numbered) + len(item[2]) > _REQUEST_MAX:
                return (_POST, run, numbered), item
            numbered = numbered + item[2]
        return (_POST, run, numbered), None

    def _encode_steps(self, batch: list[tuple]) -> list[tuple[int, dict]]:
        """Steps of one run as numbered request bodies (a step that cannot be converted is
        counted and logged; the others go on)."""
        run = batch[0][1]
        memory = self.memory_ref()
        save_model_input = memory.save_model_input if memory is not None else False
        tool_inputs: dict[Any, dict[str, str]] = {}  # per agent_ref: the same for a run's steps
        numbered: list[tuple[int, dict]] = []
        for item in batch:
            number, step, agent_ref = item[2], item[3], item[4]
            try:
                if agent_ref not in tool_inputs:
                    tool_inputs[agent_ref] = tool_input_names(agent_ref())
                body = encode_step(
                    step,
                    save_model_input=save_model_input,
                    tool_inputs=tool_inputs[agent_ref],
                    extra=item[5] if len(item) > 5 else None,
                    task_images=run.task_images,
                )
            except Exception:  # this one is lost, not the others
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")
                continue
            body["step_number"] = number
            numbered.append((number, body))
        return numbered

    def _post_run_steps(self, run: Run, numbered: list[tuple[int, dict]]) -> None:
        """Sends steps of one run, numbered, in as few requests as the server takes."""
        if run.execution_id is None:  # its execution could not be opened (logged then)
            if not run.open_failed:  # pragma: no cover - OPEN always comes first
                logger.error("stepwise: a step of a run without an execution was dropped")
            self.lost(len(numbered))
            return
        try:
            self._post_steps(run.execution_id, numbered)
        except _LeaseLost:
            if self._reopen(run):
                try:
                    self._post_steps(run.execution_id, numbered)
                except _LeaseLost:
                    self.lost(len(numbered))
                    logger.error("stepwise: the run's new execution %s lost its lease too", run.execution_id)
            else:
                self.lost(len(numbered))

    def _reopen(self, run: Run) -> bool:
        """The run's execution was failed by the server (its lease ran out): what the run
        still records goes to a new execution of the session, continuing it."""
        old = run.execution_id
        try:
            execution = self._call(
                lambda: self.client.open_execution(
                    run.session_id,
                    input={"task": answer_text(run.task), "reset": False, "continues": old},
                    agent_config={"framework": "smolagents", "agent": run.agent_name},
                ),
            )
        except StepwiseError as e:
            logger.error("stepwise: could not open a new execution after losing %s: %s", old, e)
            run.execution_id = None
            run.open_failed = True
            return False
        run.execution_id = execution["id"]
        logger.warning(
            "stepwise: execution %s lost its lease (this process was silent longer than the "
            "server's lease); the run goes on recording in execution %s",
            old,
            run.execution_id,
        )
        return True

    def _post_steps(self, eid: str, numbered: list[tuple[int, dict]]) -> None:
        if not numbered:
            return
        if len(numbered) == 1 or not self.batching:
            self._post_each(eid, numbered)
            return
        bodies = [body for _, body in numbered]
        try:
            self._call(lambda: self.client.append_steps(eid, bodies, return_items=False))
        except StepwiseError as e:
            if e.code == "lease_lost":
                raise _LeaseLost from e
            first, last = numbered[0][0], numbered[-1][0]
            if e.status == 413:  # over the server's body limit: in halves
                half = len(numbered) // 2
                self._post_steps(eid, numbered[:half])
                self._post_steps(eid, numbered[half:])
                return
            if e.status is None or e.status >= 500 or e.status == 429:  # retried for retry_for
                self.lost(len(numbered))
                logger.error(
                    "stepwise: steps %d to %d of execution %s were not saved: %s", first, last, eid, e
                )
                return
            # Any other answer concerns one step or the endpoint (a 409 at a number stored
            # with another body, a field the server refuses, a server without the batch
            # endpoint): each step is sent alone, so that each one fares as it would have.
            saved = self._post_each(eid, numbered)
            if e.status in (404, 405) and saved:
                self.batching = False
                logger.info("stepwise: the server has no batch endpoint for steps: one request per step")
        except Exception:  # not sent (a value the client cannot send?): each step alone too
            self._post_each(eid, numbered)

    def _post_each(self, eid: str, numbered: list[tuple[int, dict]]) -> int:
        """Sends the steps one request each; returns how many were saved."""
        saved = 0
        for number, body in numbered:
            try:
                saved += self._post_step(eid, number, body)
            except _LeaseLost:
                if saved:  # what was sent is saved; the rest goes to a new execution
                    self.lost(len(numbered) - saved)
                raise
            except Exception:  # as the thread's loop does for a step sent alone
                self.lost(1)
                logger.exception("stepwise: could not save a smolagents step")
        return saved

    def _post_step(self, eid: str, number: int, body: dict) -> bool:
        try:
            self._call(lambda: self.client.append_step(eid, body, step_number=number))
        except StepwiseError as e:
            if e.code == "lease_lost":
                raise _LeaseLost from e
            self.lost(1)
            logger.error("stepwise: step %d of execution %s was not saved: %s", number, eid, e)
            return False
        return True

    def _send(self, item: tuple) -> None:
        op, run = item[0], item[1]
        if op == OPEN:
            try:
                execution = self._call(
                    lambda: self.client.open_execution(
                        run.session_id,
                        input={"task": answer_text(run.task), "reset": run.reset},
                        agent_config={"framework": "smolagents", "agent": item[2]},
                    ),
                )
            except StepwiseError as e:
                run.open_failed = True
                self.lost(1)
                logger.error("stepwise: could not open an execution for the run: %s", e)
                return
            run.execution_id = execution["id"]
            run.agent_name = item[2]
            return
        if run.execution_id is None:  # its execution could not be opened (logged then)
            self.lost(1)
            return
        if op == COMPLETE:
            answer = item[2]
            text = answer_text(answer)
            if len(text) > 100_000:
                text = text[:99_999] + "…"
            output = {"final_answer": encode_value(answer)}
            self._finish(
                run, lambda eid: self.client.complete_execution(eid, output=output, final_message=text)
            )
            return
        if op == FAIL:
            message = str(item[2]).strip() or "the run failed"
            if len(message) > 65_536:
                message = message[:65_535] + "…"
            self._finish(run, lambda eid: self.client.fail_execution(eid, message))
            return

    def _finish(self, run: Run, call: Callable[[str], Any]) -> None:
        """Ends the run's execution (in a new one when the server failed it meanwhile)."""
        for _ in range(2):
            eid = run.execution_id
            if eid is None:
                self.lost(1)
                return
            try:
                self._call(lambda: call(eid), done_codes=_DONE_CODES)
                return
            except StepwiseError as e:
                if e.code == "lease_lost" and self._reopen(run):
                    continue
                self.lost(1)
                logger.error("stepwise: could not end execution %s: %s", eid, e)
                return

    def _call(
        self,
        call: Callable[[], Any],
        *,
        done_codes: set[str] | frozenset = frozenset(),
    ) -> Any:
        """Calls again, backing off, while the server cannot be reached or answers 5xx/429,
        for up to ``retry_for`` seconds of the memory (a server restarting).

        Steps carry their number, so a step sent twice is saved once; a complete/fail whose
        earlier attempt got through answers 409/422 the next time, which counts as done.
        """
        memory = self.memory_ref()
        deadline = time.monotonic() + (memory.retry_for if memory is not None else 0.0)
        delay = 0.05
        attempt = 0
        while True:
            try:
                return call()
            except StepwiseError as e:
                if attempt > 0 and e.code in done_codes:
                    return None
                transient = e.status is None or e.status >= 500 or e.status == 429
                if not transient or time.monotonic() + delay > deadline:
                    raise
                if attempt == 0:
                    logger.warning("stepwise: the server is not answering (%s); retrying", e)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
                attempt += 1


LIVE: weakref.WeakSet[StepwiseMemory] = weakref.WeakSet()
_EXIT_TIMEOUT = 10.0


@atexit.register
def _flush_at_exit() -> None:
    for memory in list(LIVE):
        try:
            memory.flush(timeout=_EXIT_TIMEOUT)
        except Exception:  # pragma: no cover
            logger.exception("stepwise: flush at exit failed")
