"""`Worker`: claims executions of its agent types from Stepwise's queue and runs them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import logging
import math
import os
import queue
import re
import secrets
import signal
import socket
import threading
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, Mapping, TypeVar

from .._calls import seg
from .._base import client_headers
from .._errors import StepwiseError
from .._transport.endpoint import endpoint
from ._http import CLAIM_PATH, Api, is_lease_lost, is_transient, worker_backoff
from ._run import Cancelled, Retry, Run, Paused

__all__ = ["Worker", "AgentSpec", "WorkerError"]

logger = logging.getLogger("stepwise.worker")

_AGENT_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_WORKER_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_MAX_SLOTS = 256
_MAX_WAIT_S = 25.0
_MAX_ERROR_CHARS = 2000

F = TypeVar("F", bound=Callable[..., Any])


class WorkerError(RuntimeError):
    """The worker stopped because the server refused it (a bad API key, an agent name it does
    not accept, a server without the worker endpoints); the cause is the `StepwiseError`."""


@dataclass
class AgentSpec:
    """One agent type a worker runs."""

    name: str
    handler: Callable[[Run], Any]
    description: str | None = None
    config_schema: Mapping[str, Any] | None = None
    is_async: bool = False

    def announce(self) -> dict[str, Any]:
        """The agent as the claim request names it."""
        return {
            "type": self.name,
            "description": self.description,
            "config_schema": dict(self.config_schema) if self.config_schema is not None else None,
        }


@dataclass
class _Active:
    run: Run
    spec: AgentSpec
    next_beat: float
    thread: threading.Thread | None = None
    released: bool = False
    ending: bool = False  # its complete/fail is being written
    beat_failures: int = 0


def default_worker_id() -> str:
    """``<host>-<pid>-<4 hex>``, in the characters a worker id may hold."""
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", socket.gethostname() or "worker").strip("-") or "worker"
    return f"{host[:100]}-{os.getpid()}-{secrets.token_hex(2)}"


def _jsonable(value: Any) -> Any:
    """`value` as JSON the server accepts (objects that are not JSON become text)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        pass
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return _jsonable(dump(mode="json"))
        except Exception:  # noqa: BLE001 - fall back to text below
            pass
    return json.loads(json.dumps(value, default=str, allow_nan=True).replace("NaN", "null"))


def completion(result: Any) -> dict[str, Any]:
    """The ``complete`` body for an agent function's return value."""
    if isinstance(result, str):
        return {"output": str(result), "final_message": str(result)}
    if result is None:
        return {"output": None}
    return {"output": _jsonable(result)}


def error_summary(error: BaseException) -> str:
    """``Type: first line of the message``, short enough for ``error_message``."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    summary = f"{type(error).__name__}: {first}" if first else type(error).__name__
    if len(summary) > _MAX_ERROR_CHARS:
        summary = summary[: _MAX_ERROR_CHARS - 1] + "…"
    return summary


# --- deltas ---------------------------------------------------------------------------------

# The most one delta request carries (the server takes up to 64 KiB of text).
_MAX_DELTA_BYTES = 60_000
#: The stream chunks of one delta request, in bytes of JSON (the server takes 2 MiB).
_MAX_DELTA_ITEMS_BYTES = 1_500_000


def _chunks(text: str) -> list[str]:
    """`text` in pieces of at most `_MAX_DELTA_BYTES` bytes of UTF-8."""
    if len(text.encode()) <= _MAX_DELTA_BYTES:
        return [text]
    out: list[str] = []
    piece: list[str] = []
    size = 0
    for ch in text:
        n = len(ch.encode())
        if size + n > _MAX_DELTA_BYTES:
            out.append("".join(piece))
            piece, size = [], 0
        piece.append(ch)
        size += n
    if piece:
        out.append("".join(piece))
    return out


class Deltas:
    """Sends live tokens from one background thread, in order; consecutive texts of the same
    run are merged into one request."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def put(self, run: Run, text: str, items: list[Any] | None = None, size: int = 0) -> None:
        """Queues `text` for `run`; `items` (with their JSON `size`) go in the delta's
        ``metadata.langgraph`` (a LangGraph graph's stream chunks)."""
        if self.thread is None:
            with self.lock:
                if self.thread is None:
                    self.thread = threading.Thread(target=self._loop, name="stepwise-worker-deltas", daemon=True)
                    self.thread.start()
        self.queue.put((run, text, items, size))

    def flush(self, timeout: float = 5.0) -> bool:
        """Waits until everything queued so far is sent (or dropped)."""
        if self.thread is None or not self.thread.is_alive():
            return True
        done = threading.Event()
        self.queue.put(done)
        return done.wait(timeout)

    def stop(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(5.0)

    def _loop(self) -> None:
        pending: Any = None
        while True:
            item = pending if pending is not None else self.queue.get()
            pending = None
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            run, text, items, size = item
            # Merge what is queued behind it for the same run (up to what one request takes):
            # texts with texts, stream chunks with stream chunks.
            parts = [text]
            text_size = len(text.encode())
            merged = list(items) if items is not None else None
            while text_size < _MAX_DELTA_BYTES and size < _MAX_DELTA_ITEMS_BYTES:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    break
                if (
                    isinstance(nxt, tuple)
                    and nxt[0] is run
                    and (nxt[2] is None) == (merged is None)
                    and text_size + len(nxt[1].encode()) <= _MAX_DELTA_BYTES
                    and (merged is None or size + nxt[3] <= _MAX_DELTA_ITEMS_BYTES)
                ):
                    parts.append(nxt[1])
                    text_size += len(nxt[1].encode())
                    if merged is not None:
                        merged.extend(nxt[2])
                        size += nxt[3]
                    continue
                pending = nxt
                break
            if merged is not None:
                self._send(run, "".join(parts), merged)
                continue
            for chunk in _chunks("".join(parts)):
                self._send(run, chunk)

    def _send(self, run: Run, text: str, items: list[Any] | None = None) -> None:
        if run.lease_lost:
            return
        body: dict[str, Any] = {"text": text}
        if items is not None:
            body["metadata"] = {"langgraph": items}
        try:
            self.api.call(
                "POST",
                f"/v1/executions/{seg(run.execution_id, 'execution_id')}/deltas",
                body,
                lease=run.lease,
                timeout=10.0,
            )
        except StepwiseError as error:
            if is_lease_lost(error):
                run._cancel("lease_lost", dead=True)
            else:
                logger.debug("execution %s: a delta was not sent: %s", run.execution_id, error)


# --- async agents -----------------------------------------------------------------------------


class _Loop:
    """One event loop thread for the async agents of a worker."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self.thread = threading.Thread(target=serve, name="stepwise-worker-asyncio", daemon=True)
                self.thread.start()
                ready.wait()
                self.loop = loop
            return self.loop

    def run(self, awaitable: Any, run: Run) -> Any:
        """Runs the awaitable on the loop and waits for it; the run's cancel cancels it."""
        loop = self._ensure()

        async def main() -> Any:
            return await awaitable

        future = asyncio.run_coroutine_threadsafe(main(), loop)
        run.on_cancel(future.cancel)
        return future.result()

    def stop(self) -> None:
        with self.lock:
            loop, self.loop = self.loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)


# --- the worker -------------------------------------------------------------------------------


class Worker:
    """Runs agent types of yours for Stepwise: claims their executions from the server's
    queue, runs each one, and writes its steps, live tokens, questions and answer back.

    ::

        from stepwise import Stepwise
        from stepwise.worker import Worker

        worker = Worker(Stepwise(), concurrency=4)

        @worker.agent("greeter", description="Says hello")
        def greeter(run):
            run.step(model_output="Greeting the user", observations="said hello")
            return f"Hello, {run.input_text}"

        worker.run()   # until SIGINT/SIGTERM

    Args:
        client: a `stepwise.Stepwise` (or `AsyncStepwise`) client: its URL, API key and
            headers are used; ``None`` for ``Stepwise()`` (``$STEPWISE_URL``,
            ``$STEPWISE_API_KEY``).
        concurrency: executions run at once (1-256).
        worker_id: this worker's name, ``[A-Za-z0-9._:-]``, 1-128 characters (default
            ``<host>-<pid>-<4 hex>``).
        wait_s: how long one claim waits for work (0-25 s).
        heartbeat_interval_s: how often leases are renewed (default: the server's
            ``heartbeat_interval_s``, a third of the lease).
        shutdown_timeout_s: how long a stopping worker waits for its running agents to stop
            before it hands their executions back anyway.
        presence_interval_s: while every slot is busy, how often the worker tells the server
            it is alive (a claim with ``slots: 0``).
        max_backoff_s: the longest wait between tries while the server cannot be reached.
        retry_for_s: how long a write is retried while the server is away.
    """

    def __init__(
        self,
        client: Any = None,
        concurrency: int = 1,
        worker_id: str | None = None,
        wait_s: float = 25.0,
        *,
        heartbeat_interval_s: float | None = None,
        shutdown_timeout_s: float = 10.0,
        presence_interval_s: float = 20.0,
        max_backoff_s: float = 10.0,
        retry_for_s: float = 60.0,
    ) -> None:
        if client is None:
            from .._client import Stepwise

            client = Stepwise()
        self.client = client
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.wait_s = wait_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.shutdown_timeout_s = shutdown_timeout_s
        self.presence_interval_s = presence_interval_s
        self.max_backoff_s = max_backoff_s
        self.retry_for_s = retry_for_s
        self._agents: dict[str, AgentSpec] = {}
        self._base_url: str = str(getattr(client, "base_url"))
        self._headers: dict[str, str] = client_headers(client)
        self._api: Api | None = None
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._active: dict[str, _Active] = {}
        # A new claim of an execution whose run here is still ending (its retry or release
        # answered, a waiting claim took it at once): started when that run is gone.
        self._next_claim: dict[str, Mapping[str, Any]] = {}
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self._started = False
        self._claim_thread: threading.Thread | None = None
        self._heartbeat_thread: threading.Thread | None = None
        self._deltas: Deltas | None = None
        self._loop = _Loop()
        self._fatal: BaseException | None = None
        # Called with the worker's `Api` once it starts (the LangGraph graphs' announcements).
        self._on_start: list[Callable[[Api], None]] = []
        self._signalled = 0
        self._closing = False
        self._validate()

    def __repr__(self) -> str:
        return (
            f"Worker(worker_id={self.worker_id!r}, agents={list(self._agents)!r}, "
            f"concurrency={self.concurrency}, url={self._base_url!r})"
        )

    def _validate(self) -> None:
        if not isinstance(self.concurrency, int) or not 1 <= self.concurrency <= _MAX_SLOTS:
            raise ValueError(f"concurrency must be an integer from 1 to {_MAX_SLOTS}, got {self.concurrency!r}")
        if not isinstance(self.worker_id, str) or not _WORKER_ID.match(self.worker_id):
            raise ValueError(
                f"worker_id must be 1-128 characters of [A-Za-z0-9._:-], got {self.worker_id!r}"
            )
        if not 0 <= float(self.wait_s) <= _MAX_WAIT_S:
            raise ValueError(f"wait_s must be from 0 to {_MAX_WAIT_S:g}, got {self.wait_s!r}")

    # --- configuration ------------------------------------------------------------------

    def connect(self, base_url: str | None = None, api_key: str | None = None) -> "Worker":
        """Points the worker at another server or key (before `start`)."""
        if self._started:
            raise RuntimeError("the worker is running; connect() it before start()")
        if base_url:
            self._base_url = endpoint(base_url).base_url
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        return self

    @property
    def url(self) -> str:
        """The server this worker claims from."""
        return self._base_url

    @property
    def agents(self) -> dict[str, AgentSpec]:
        """The agent types this worker runs, by name."""
        return dict(self._agents)

    def add_agent(
        self,
        name: str,
        handler: Callable[[Run], Any],
        *,
        description: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
    ) -> AgentSpec:
        """Runs `handler(run)` for each execution of agent type `name`.

        `handler` is a function or an ``async def`` function taking a `Run`; its return value
        is the final answer (a string, any JSON value, or ``None``); an exception fails the
        execution (`Retry` fails it with ``retry: true``). `name` is ``[A-Za-z0-9._-]``,
        1-64 characters, and not a built-in agent type of the server.
        """
        if not isinstance(name, str) or not _AGENT_NAME.match(name):
            raise ValueError(f"an agent name is 1-64 characters of [A-Za-z0-9._-], got {name!r}")
        if name in self._agents:
            raise ValueError(f"agent {name!r} is already registered on this worker")
        if not callable(handler):
            raise TypeError(f"the handler of agent {name!r} must be callable, got {type(handler).__name__}")
        if description is not None and len(description) > 1000:
            raise ValueError("description is at most 1,000 characters")
        if config_schema is not None and not isinstance(config_schema, Mapping):
            raise TypeError("config_schema must be a JSON object (a dict)")
        if len(self._agents) >= 64:
            raise ValueError("a worker runs at most 64 agent types")
        is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            getattr(handler, "__call__", None)
        )
        spec = AgentSpec(name, handler, description, config_schema, is_async)
        self._agents[name] = spec
        return spec

    def agent(
        self,
        name: str,
        *,
        description: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """A decorator: ``@worker.agent("greeter", description="Says hello")`` on a function
        (or ``async def`` function) taking a `Run`; see `add_agent`."""

        def register(fn: F) -> F:
            self.add_agent(name, fn, description=description, config_schema=config_schema)
            return fn

        return register

    def smolagents(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        description: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        max_steps: int | None = None,
        restore_all_runs: bool = False,
    ) -> AgentSpec:
        """Runs a smolagents agent (``CodeAgent``, ``ToolCallingAgent``, ...) as agent type
        `name`. `factory()` (or `factory(run)`) builds a new agent for each run; the
        session's memory is restored into it, each step is saved as it finishes, streamed
        output goes out as live tokens, a ``user_input`` tool asks the user (pausing the
        execution), cancel interrupts the agent, and after a lost worker the run goes on from
        its last saved step. Needs ``stepwise-client[smolagents]``."""
        from ._smolagents import smolagents_handler

        handler = smolagents_handler(factory, max_steps=max_steps, restore_all_runs=restore_all_runs)
        return self.add_agent(name, handler, description=description, config_schema=config_schema)

    def langgraph(
        self,
        name: str,
        graph: Any,
        *,
        description: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        input_fn: Callable[[Run], Any] | None = None,
        output_fn: Callable[[Any], Any] | None = None,
        thread_fn: Callable[[Run], str] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> AgentSpec:
        """Runs a compiled LangGraph graph (with a checkpointer, e.g. `StepwiseSaver`) as agent
        type `name`. The thread is the session (``thread_id`` = the session id, or
        `thread_fn(run)`); the input is ``{"messages": [("user", text)]}`` (or
        `input_fn(run)`); ``interrupt()`` pauses and the answer resumes with
        ``Command(resume=answer)``; each node's update is saved as a step once the checkpoint
        holding it is stored (the graph runs with ``durability="sync"``), and after a lost
        worker the graph goes on from its last stored checkpoint; the answer is the last AI
        message's text (or `output_fn(state)`).

        LangGraph's own clients (``langgraph-sdk`` on the server's ``/langgraph``) reach the
        graph too: when the worker starts it announces the graph once as the assistant `name`
        (its drawing and schemas, in the store namespace ``["stepwise", "assistants"]``; a
        failure is a warning), and their runs come with their input, command, config and
        context, and keep the chunks they stream.
        Needs ``stepwise-client[langgraph]``."""
        from ._langgraph import announce_assistant, langgraph_handler

        handler = langgraph_handler(
            graph, input_fn=input_fn, output_fn=output_fn, thread_fn=thread_fn, config=config
        )
        spec = self.add_agent(name, handler, description=description, config_schema=config_schema)
        self._on_start.append(
            lambda api: announce_assistant(api, name, graph, description, stopping=self._stopping)
        )
        return spec

    def openai_agents(
        self,
        name: str,
        agent: Any,
        *,
        description: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        session_fn: Callable[[Run], str] | None = None,
        max_turns: int | None = None,
        run_config: Any = None,
    ) -> AgentSpec:
        """Runs an OpenAI Agents SDK ``Agent`` as agent type `name` with
        ``Runner.run_streamed``, its conversation in a `StepwiseSession` (SDK session id: the
        session id, or `session_fn(run)`); streamed text goes out as live tokens, each item
        as a step, cancel stops the run, the final output is the answer. Needs
        ``stepwise-client[openai-agents]``."""
        from ._openai_agents import openai_agents_handler

        handler = openai_agents_handler(
            agent, client=self.client, session_fn=session_fn, max_turns=max_turns, run_config=run_config
        )
        return self.add_agent(name, handler, description=description, config_schema=config_schema)

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> "Worker":
        """Starts claiming and running in background threads. Returns once the server has
        heard of the worker (a first claim that takes nothing announces its agent types, so
        messages may name them at once), or after that call failed: the claim loop then
        retries as ever, and stops the worker on an error that is not transient."""
        if self._started:
            raise RuntimeError("the worker was started already (a Worker runs once)")
        if not self._agents:
            raise RuntimeError("the worker has no agents: register some with @worker.agent(...) first")
        self._validate()
        self._started = True
        timeout = getattr(getattr(self.client, "timeout", None), "read", None) or 30.0
        self._api = Api(self._base_url, self._headers, timeout=float(timeout))
        self._deltas = Deltas(self._api)
        self._announce()
        for hook in self._on_start:
            try:
                hook(self._api)
            except Exception:  # noqa: BLE001 - never keeps the worker from starting
                logger.exception("a start hook of the worker failed")
        logger.info(
            "worker %s serving %s at %s (concurrency %d)",
            self.worker_id, ", ".join(self._agents), self._base_url, self.concurrency,
        )
        self._heartbeat_thread = threading.Thread(
            target=self._heartbeat_loop, name="stepwise-worker-heartbeat", daemon=True
        )
        self._claim_thread = threading.Thread(target=self._claim_loop, name="stepwise-worker-claim", daemon=True)
        self._heartbeat_thread.start()
        self._claim_thread.start()
        return self

    def _announce(self) -> None:
        """Tells the server the agent types this worker runs, taking nothing."""
        assert self._api is not None
        try:
            self._api.call("POST", CLAIM_PATH, self._claim_body(0, 0.0), timeout=10.0)
        except StepwiseError as error:
            logger.debug("could not announce the worker yet (%s); the claim loop retries", error)

    def _say_stopped(self) -> None:
        """Tells the server this worker stopped: it is offline at once."""
        assert self._api is not None
        try:
            self._api.call("DELETE", f"/v1/workers/{seg(self.worker_id, 'worker_id')}", timeout=5.0)
        except StepwiseError as error:
            # An older server (404 not_found for the route), or one that went away: the
            # worker then counts as offline once its last claim has run out.
            logger.debug("could not say the worker stopped (%s)", error)

    def stop(self, timeout: float | None = None) -> bool:
        """Stops gracefully: no more claims, running agents are asked to stop, and the
        executions that did not finish go back to the queue (``release``). Waits up to
        `timeout` seconds (default: until done); returns whether the worker has stopped."""
        if not self._started:
            return True
        self._begin_stop()
        return self._stopped.wait(timeout)

    @property
    def stopped(self) -> bool:
        """Whether the worker has stopped (after `stop`, a signal, or a fatal error)."""
        return self._stopped.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the worker has stopped; returns whether it has."""
        return self._stopped.wait(timeout)

    def run(self) -> None:
        """Runs until SIGINT or SIGTERM (then stops gracefully; a second signal exits at
        once). Raises `WorkerError` when the server refused the worker."""
        self.start()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            while not self._stopped.wait(0.5):
                pass
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self._fatal is not None:
            raise WorkerError(str(self._fatal)) from self._fatal

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signalled += 1
        name = signal.Signals(signum).name
        if self._signalled > 1:
            logger.warning("%s again: exiting at once", name)
            os._exit(128 + signum)
        logger.info("%s: stopping (running executions go back to the queue; %s again exits at once)", name, name)
        threading.Thread(target=self._begin_stop, name="stepwise-worker-signal", daemon=True).start()

    # --- slots --------------------------------------------------------------------------

    def _free_slots(self) -> int:
        return max(0, self.concurrency - len(self._active) - len(self._next_claim))

    @property
    def running(self) -> list[Run]:
        """The runs in progress."""
        with self._lock:
            return [a.run for a in self._active.values()]

    # --- claiming -----------------------------------------------------------------------

    def _claim_body(self, slots: int, wait_s: float) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "agents": [spec.announce() for spec in self._agents.values()],
            "slots": slots,
            "wait_s": wait_s,
        }

    def _claim_loop(self) -> None:
        assert self._api is not None
        backoff = worker_backoff(0.5, self.max_backoff_s)
        failures = 0
        failing_since: float | None = None
        try:
            while not self._stopping.is_set():
                with self._cv:
                    free = self._free_slots()
                    if free == 0:
                        self._cv.wait_for(
                            lambda: self._stopping.is_set() or self._free_slots() > 0,
                            timeout=self.presence_interval_s,
                        )
                        if self._stopping.is_set():
                            break
                        free = self._free_slots()
                slots, wait = (free, float(self.wait_s)) if free > 0 else (0, 0.0)
                try:
                    answer = self._api.claim(self._claim_body(slots, wait), wait)
                except StepwiseError as error:
                    if self._stopping.is_set():
                        break
                    if is_transient(error):
                        local = getattr(self.client, "local_server", None)
                        if local is not None and error.code == "connection_error":
                            local.revive()  # an embedded server whose owner went: start one
                        delay = backoff.backoff_delay(failures)
                        failures += 1
                        if failing_since is None:
                            failing_since = time.monotonic()
                            logger.warning("cannot claim (%s); retrying", error)
                        else:
                            logger.debug("still cannot claim (%s); next try in %.1f s", error, delay)
                        self._stopping.wait(delay)
                        continue
                    self._fatal = error
                    if error.status == 404 and error.code in ("not_found", "http_error"):
                        logger.error("the server at %s has no worker endpoints (POST /v1/workers/claim: %s)", self._base_url, error)
                    else:
                        logger.error("the server refused this worker's claim: %s", error)
                    self._begin_stop()
                    break
                if failing_since is not None:
                    logger.info("reconnected to %s after %.1f s", self._base_url, time.monotonic() - failing_since)
                    failing_since = None
                failures = 0
                items = answer.get("items") if isinstance(answer, dict) else None
                for claim in items or []:
                    self._start_run(claim)
        except BaseException:  # pragma: no cover - never let the loop die silently
            logger.exception("the claim loop failed")
            self._fatal = self._fatal or RuntimeError("the claim loop failed")
            self._begin_stop()

    def _start_run(self, claim: Mapping[str, Any]) -> None:
        assert self._api is not None
        execution = claim.get("execution") or {}
        eid = str(execution.get("id"))
        spec = self._agents.get(str(execution.get("agent_type")))
        run = Run(claim, api=self._api, deltas=self._deltas, retry_for=self.retry_for_s)
        if spec is None or self._stopping.is_set():
            if spec is None:
                logger.error("claimed execution %s of agent type %r, which this worker does not run; handing it back",
                             eid, execution.get("agent_type"))
            self._release(run)
            return
        logger.info(
            "execution %s (%s) claimed%s%s", eid, spec.name,
            f", attempt {run.attempt}" if run.attempt > 1 else "",
            ", resuming with the user's answer" if run.answer is not None else "",
        )
        interval = self.heartbeat_interval_s or run.heartbeat_interval_s
        active = _Active(run, spec, next_beat=time.monotonic() + interval)
        run._renew = lambda: self._beat(active)
        thread = threading.Thread(
            target=self._execute, args=(active,), name=f"stepwise-run-{eid[:13]}", daemon=True
        )
        active.thread = thread
        with self._cv:
            if eid in self._active:
                if self._active[eid].run.lease != run.lease:
                    # Its run here handed it back (a retry, a release) and is still ending:
                    # the new claim starts when it is gone.
                    self._next_claim[eid] = claim
                    return
                logger.warning("execution %s was claimed again while it runs here; ignored", eid)
                return
            self._active[eid] = active
            self._cv.notify_all()
        thread.start()

    # --- running ------------------------------------------------------------------------

    def _execute(self, active: _Active) -> None:
        run, spec = active.run, active.spec
        outcome: tuple[str, Any] = ("stopped", None)
        try:
            try:
                run._record_answer()
                if spec.is_async:
                    result = self._loop.run(spec.handler(run), run)
                else:
                    result = spec.handler(run)
                    if inspect.isawaitable(result):
                        result = self._loop.run(result, run)
            except Paused as paused:
                outcome = ("paused", str(paused))
            except (Cancelled, concurrent.futures.CancelledError, asyncio.CancelledError) as stop:
                if isinstance(stop, Cancelled) and run.cancel_reason is None:
                    # Raised by the agent itself, not by a cancel: a failure like any other.
                    outcome = ("fail", (error_summary(stop), False))
                else:
                    outcome = ("stopped", None)
            except Retry as error:
                outcome = ("fail", (error_summary(error), True))
            except Exception as error:
                if run.cancelled:
                    outcome = ("stopped", None)  # e.g. an agent interrupted by the cancel
                else:
                    logger.exception("execution %s (%s) failed", run.execution_id, spec.name)
                    outcome = ("fail", (error_summary(error), False))
            except BaseException as error:  # SystemExit, KeyboardInterrupt in an agent thread
                outcome = ("fail", (error_summary(error), False))
            else:
                outcome = ("complete", result)
            if run._paused:  # whatever the agent did after its question: it is paused
                outcome = ("paused", "")
            self._finish(active, outcome)
        except BaseException:
            logger.exception("execution %s: the worker could not end it", run.execution_id)
        finally:
            with self._cv:
                self._active.pop(run.execution_id, None)
                next_claim = self._next_claim.pop(run.execution_id, None)
                self._cv.notify_all()
            if next_claim is not None:
                self._start_run(next_claim)

    def _finish(self, active: _Active, outcome: tuple[str, Any]) -> None:
        run = active.run
        kind, value = outcome
        if kind == "paused":
            logger.info("execution %s paused: waiting for the user's answer", run.execution_id)
            return
        if active.released or run.lease_lost:
            if run.cancel_reason == "cancelled":
                logger.info("execution %s cancelled; its agent has stopped", run.execution_id)
            elif not active.released:
                logger.info("execution %s: its agent ended after the lease was lost; nothing written",
                            run.execution_id)
            return
        if self._stopping.is_set() and (kind != "complete" or run.cancel_reason == "shutdown"):
            # Asked to stop: whatever it returned may be a bail-out, not its answer.
            self._release(run, active)
            return
        if kind == "stopped":
            # Cancelled while its lease still held (a write raced the cancel): nothing to end.
            logger.info("execution %s stopped", run.execution_id)
            return
        if self._deltas is not None:
            self._deltas.flush()
        active.ending = True
        try:
            if kind == "complete":
                try:
                    body = completion(value)
                except Exception as error:  # noqa: BLE001 - an answer that is not JSON
                    body = None
                    kind, value = "fail", (f"the answer is not JSON: {error_summary(error)}", False)
                if body is not None:
                    run._complete(body)
                    logger.info("execution %s completed", run.execution_id)
                    return
            message, retry = value
            fail_body: dict[str, Any] = {"error_message": message}
            if retry:
                fail_body["retry"] = True
            run._write("POST", "/fail", fail_body)
            logger.info("execution %s failed%s: %s", run.execution_id, " (retry)" if retry else "", message)
        except Cancelled:
            logger.info("execution %s: its lease was lost before it ended; nothing written", run.execution_id)
        except StepwiseError as error:
            logger.error("execution %s: could not end it (%s); its lease will run out and it runs again",
                         run.execution_id, error)

    def _release(self, run: Run, active: _Active | None = None) -> None:
        """Hands an execution back to the queue without spending an attempt."""
        assert self._api is not None
        if active is not None:
            if active.released:
                return
            active.released = True
        try:
            run._write_held()  # a step the run held back is saved before it goes back
        except (StepwiseError, Cancelled):
            pass
        try:
            self._api.call(
                "POST",
                f"/v1/executions/{seg(run.execution_id, 'execution_id')}/release",
                {},
                lease=run.lease,
                timeout=10.0,
            )
            logger.info("execution %s handed back to the queue", run.execution_id)
        except StepwiseError as error:
            if not is_lease_lost(error):
                logger.warning("execution %s could not be handed back (%s); it runs again when its lease ends",
                               run.execution_id, error)
        finally:
            run._cancel("shutdown", dead=True)

    # --- heartbeats ---------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while True:
            with self._cv:
                if self._closing:
                    return
                now = time.monotonic()
                due = [
                    a for a in self._active.values()
                    if a.next_beat <= now and not a.released and not a.run.lease_lost
                ]
                if not due:
                    upcoming = [a.next_beat for a in self._active.values() if not a.released and not a.run.lease_lost]
                    wait = min(upcoming) - now if upcoming else 1.0
                    self._cv.wait(timeout=max(0.01, min(wait, 1.0)))
                    continue
            for active in due:
                try:
                    self._beat(active)
                except Exception:  # pragma: no cover - never let the thread die
                    logger.exception("heartbeat of execution %s failed", active.run.execution_id)
                    active.next_beat = time.monotonic() + 1.0

    def _beat(self, active: _Active) -> None:
        assert self._api is not None
        run = active.run
        interval = self.heartbeat_interval_s or run.heartbeat_interval_s
        started = time.monotonic()
        try:
            answer = self._api.call(
                "POST",
                f"/v1/executions/{seg(run.execution_id, 'execution_id')}/heartbeat",
                {"lease": run.lease, "worker_id": self.worker_id},
                lease=run.lease,
                timeout=max(1.0, min(interval, 10.0)),
            )
        except StepwiseError as error:
            if is_lease_lost(error) or error.code == "not_found":
                active.next_beat = math.inf
                if not active.ending:  # else: the run has just ended, which ended the lease
                    run._cancel("lease_lost", dead=True)
                return
            active.beat_failures += 1
            if active.beat_failures == 1:
                logger.warning("heartbeat of execution %s failed (%s); retrying", run.execution_id, error)
            # Sooner than usual while it fails: the lease still has two intervals left.
            active.next_beat = time.monotonic() + (min(1.0, interval / 3) if is_transient(error) else interval)
            return
        if active.beat_failures:
            logger.info("heartbeat of execution %s works again", run.execution_id)
            active.beat_failures = 0
        run._lease_renewed(started)
        active.next_beat = started + interval
        if isinstance(answer, dict):
            run.lease_expires_at = answer.get("lease_expires_at", run.lease_expires_at)
            if answer.get("cancel_requested"):
                active.next_beat = math.inf
                run._cancel("cancelled", dead=True)

    # --- stopping -----------------------------------------------------------------------

    def _begin_stop(self) -> None:
        with self._cv:
            if self._stopping.is_set():
                return
            self._stopping.set()
            actives = list(self._active.values())
            self._cv.notify_all()
        if self._api is not None:
            self._api.abort_claim()
        for active in actives:
            active.run._cancel("shutdown", dead=False)
        threading.Thread(target=self._finish_stop, name="stepwise-worker-stop", daemon=True).start()

    def _finish_stop(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout_s
        with self._cv:
            self._cv.wait_for(lambda: not self._active, timeout=max(0.0, deadline - time.monotonic()))
            left = [a for a in self._active.values() if not a.released]
        for active in left:
            logger.warning("execution %s did not stop within %.0f s; handing it back",
                           active.run.execution_id, self.shutdown_timeout_s)
            self._release(active.run, active)
        claim_thread = self._claim_thread
        if claim_thread is not None and claim_thread is not threading.current_thread() and claim_thread.ident:
            claim_thread.join(float(self.wait_s) + 20.0)
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        heartbeat = self._heartbeat_thread
        if heartbeat is not None and heartbeat.ident:
            heartbeat.join(15.0)
        if self._deltas is not None:
            self._deltas.stop()
        self._loop.stop()
        if self._api is not None:
            if self._fatal is None:
                self._say_stopped()
            self._api.close()
        logger.info("worker %s stopped", self.worker_id)
        self._stopped.set()
        with self._cv:
            self._cv.notify_all()
