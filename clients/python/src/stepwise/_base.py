"""What both clients share: every endpoint, written once.

Each public method builds a `Call` (see `_calls`: method, path, body, query, whether a retry
is safe) or a small generator ("flow") that yields `Call`s and `Sleep`s and receives the
answers. The sync client runs them with `httpx.Client`, the async one with
`httpx.AsyncClient`; the generic parameters only say what each method returns in each of
them (a value, or an awaitable of it).
"""

from __future__ import annotations

import os
import time
from typing import Any, Generic, Iterable, Literal, Mapping, Sequence, TypeVar, cast, overload
from urllib.parse import urlsplit

import httpx

from ._errors import StepwiseError
from ._calls import (
    UNSET,
    Call,
    EventStreamState,
    Flow,
    Sleep,
    body,
    csv,
    looks_like_uuid,
    query,
    seg,
)
from ._leases import RecorderLeases
from ._local import EmbeddedServer
from ._transport.endpoint import DirectTarget, endpoint, proxied
from ._transport.retry import RetryPolicy
from ._version import __version__

DEFAULT_URL = "http://127.0.0.1:7777"

# Execution statuses `wait()` keeps waiting on.
_UNFINISHED = frozenset({"pending", "running"})
# Most steps one `append_steps` request takes.
MAX_BATCH_STEPS = 1_000
# Methods retried by default with `request()`.
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


# --- the client surface ---------------------------------------------------------------

_D = TypeVar("_D")  # a dict answer: dict, or Awaitable[dict]

OnBusy = Literal["enqueue", "reject", "interrupt", "rollback"]
"""What a message does to its session's queued or running executions (`post_message`)."""
ON_BUSY: tuple[str, ...] = ("enqueue", "reject", "interrupt", "rollback")
_OptD = TypeVar("_OptD")  # dict | None, or Awaitable[dict | None]
_None = TypeVar("_None")  # None, or Awaitable[None]
_Raw = TypeVar("_Raw")  # Any, or Awaitable[Any]
_Items = TypeVar("_Items")  # Iterator[dict], or AsyncIterator[dict]
_Events = TypeVar("_Events")  # Iterator[Event], or AsyncIterator[Event]
_Client = TypeVar("_Client", bound="BaseClient[Any, Any, Any, Any, Any, Any]")  # Stepwise or AsyncStepwise


class BaseClient(Generic[_D, _OptD, _None, _Raw, _Items, _Events]):
    """The endpoints of the Stepwise API; `Stepwise` and `AsyncStepwise` run them."""

    base_url: str

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        token: str | None = None,
        timeout: float | httpx.Timeout = 30.0,
        max_retries: int = 3,
        headers: Mapping[str, str] | None = None,
        backoff: float = 0.25,
    ) -> None:
        self._endpoint = endpoint(base_url or os.environ.get("STEPWISE_URL") or DEFAULT_URL)
        self.base_url = self._endpoint.base_url
        # An API key and an end user's token are both the bearer credential: one of them.
        self.api_key = credential(api_key, token)
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        # An event stream is idle between events; the server sends a keep-alive comment at
        # least every 15 s, so a read that waits longer than this means a dead connection.
        self._stream_timeout = httpx.Timeout(
            connect=self.timeout.connect, read=60.0, write=self.timeout.write, pool=self.timeout.pool
        )
        self.max_retries = max_retries
        self._retry = RetryPolicy(max_retries, backoff=backoff)
        self._headers: dict[str, str] = {
            "User-Agent": f"stepwise-python/{__version__}",
            "Accept": "application/json",
        }
        if self.api_key:
            self._headers["Authorization"] = f"Bearer {self.api_key}"
        if headers:
            self._headers.update(headers)
        # The leases of the external executions this client opens (see `open_execution`).
        self._leases = RecorderLeases(self.base_url, self._headers, self.timeout)
        # The embedded server this client started or attached to (`Stepwise.local`).
        self._local: Any = None
        # The class of httpx's transport (set by each client): only its default one lets the
        # adapters' hot calls go direct (see `direct_target`).
        self._transport_type: type | None = None
        self.tokens: Tokens[_D] = Tokens(self)
        self.keys: Keys[_D, _Items, _None] = Keys(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r})"

    @classmethod
    def local(
        cls: type[_Client],
        database: str | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> _Client:
        """A client of an embedded server, started in one call: ``stepwise serve`` as a child
        process on a Unix socket (mode 0600) in `data_dir`, over `database`, which this client
        owns: `close()` (``await aclose()`` for `AsyncStepwise`), ``with`` (``async with``) and
        the interpreter's exit stop it (SIGTERM, then a kill after 10 s). A second call, or
        another process, on the same database attaches to the running server instead of
        starting one; when the owner goes, an attached client's next call starts a server of
        its own (nothing is lost).

        Args:
            database: ``sqlite://PATH`` (default ``sqlite://<data_dir>/stepwise.db``),
                ``files://DIR`` (a folder of JSON files: no database at all) or
                ``postgres://...``.
            data_dir: where the socket, the state file and the server's log go (default: the
                server's, ``$STEPWISE_DATA_DIR``, else ``~/.local/share/stepwise``).
            args: more ``stepwise serve`` options, e.g. ``("--workers", "2")``.
            env: more environment for the server (e.g. ``STEPWISE_LLM_BASE_URL``).
            binary: the server binary (default: ``$STEPWISE_BIN``, else the installed
                wheel's, else ``stepwise`` on ``PATH``).
            **options: the client's own options (``timeout``, ``max_retries``, ``api_key``...).

        ``client.local_server`` tells the socket, whether this client owns the server, and
        its log file.
        """
        server = EmbeddedServer(database, data_dir=data_dir, args=args, env=env, binary=binary)
        try:
            client = cls(server.base_url, **options)
        except BaseException:
            server.close()
            raise
        client._local = server
        return client

    @property
    def local_server(self) -> Any:
        """The embedded server of a `local()` client (its ``socket``, ``owner``, ``pid``,
        ``log_path``), or ``None``."""
        return self._local

    # Implemented by each client.
    def _run(self, flow: Flow | Call) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _items(self, call: Call) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _event_stream(self, state: EventStreamState) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    # Typed views of the above, one per kind of answer.
    def _dict(self, op: Flow | Call) -> _D:
        return cast(_D, self._run(op))

    def _opt(self, op: Flow | Call) -> _OptD:
        return cast(_OptD, self._run(op))

    def _none(self, op: Flow | Call) -> _None:
        return cast(_None, self._run(op))

    def _raw(self, op: Flow | Call) -> _Raw:
        return cast(_Raw, self._run(op))

    def _list(self, call: Call) -> _Items:
        return cast(_Items, self._items(call))

    def _stream(self, state: EventStreamState) -> _Events:
        return cast(_Events, self._event_stream(state))

    # --- low level --------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        idempotent: bool | None = None,
    ) -> _Raw:
        """Sends one request to any path of the API and returns its parsed JSON body.

        The escape hatch for endpoints this client has no method for. `path` starts with
        ``/`` (e.g. ``/v1/sessions/ID/items``). Returns ``None`` for an empty answer
        (204). `idempotent` says whether a retry is safe; by default GET, HEAD, OPTIONS,
        PUT and DELETE are, POST and PATCH are not. Raises `StepwiseError`.
        """
        method = method.upper()
        if not path.startswith("/"):
            raise ValueError(f"path must start with '/', got {path!r}")
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS
        return self._raw(
            Call(
                method,
                path,
                json=UNSET if json is None else json,
                params=query(**params) if params else None,
                idempotent=idempotent,
                expect="raw",
            )
        )

    # --- operations -------------------------------------------------------------------

    def health(self) -> _D:
        """``GET /healthz``: whether the server process is up."""
        return self._dict(Call("GET", "/healthz", idempotent=True))

    def ready(self) -> _D:
        """``GET /readyz``: whether the server can serve (database reachable, migrated)."""
        return self._dict(Call("GET", "/readyz", idempotent=True))

    # --- sessions ---------------------------------------------------------------------

    def create_session(
        self,
        *,
        name: str | None = None,
        title: str | None = None,
        related_type: str | None = None,
        related_id: str | None = None,
        initial_context_url: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _D:
        """Creates a session (``POST /v1/sessions``) and returns it.

        `name` is unique within the tenant (a second session with the same name is a
        ``conflict``). Not retried (it could create two sessions), except when the
        connection could not be opened at all.
        """
        return self._dict(
            Call(
                "POST",
                "/v1/sessions",
                json=body(
                    name=name,
                    title=title,
                    related_type=related_type,
                    related_id=related_id,
                    initial_context_url=initial_context_url,
                    metadata=dict(metadata) if metadata is not None else None,
                ),
            )
        )

    def get_session(self, session_id: str) -> _D:
        """Returns the session with this id (``GET /v1/sessions/{id}``); ``not_found`` otherwise.

        A soft-deleted session is still returned, with ``status: "deleted"``.
        """
        return self._dict(Call("GET", f"/v1/sessions/{seg(session_id, 'session_id')}", idempotent=True))

    def find_session(self, name: str) -> _OptD:
        """Returns the session with this name in the caller's tenant, or ``None``.

        Deleted sessions are not found (``GET /v1/sessions?name=NAME``).
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        return self._opt(_find_session_flow(name))

    def session(self, name_or_id: str, **create_kwargs: Any) -> _D:
        """Returns a session by id or name, creating it (with that name) when missing.

        An argument that parses as a UUID is looked up as an id first. Otherwise (or when no
        session has that id) the session with that name is returned; when there is none,
        one is created with ``name=name_or_id`` and `create_kwargs` (the keyword arguments
        of `create_session`: ``title``, ``metadata``, ...). Safe against a concurrent
        creation of the same name.
        """
        if not isinstance(name_or_id, str) or not name_or_id:
            raise ValueError(f"name_or_id must be a non-empty string, got {name_or_id!r}")
        unknown = set(create_kwargs) - {
            "title",
            "related_type",
            "related_id",
            "initial_context_url",
            "metadata",
        }
        if unknown:
            raise TypeError(f"session() got unexpected keyword arguments: {sorted(unknown)}")
        return self._dict(_session_flow(name_or_id, create_kwargs))

    def list_sessions(
        self,
        *,
        status: str | Iterable[str] | None = None,
        related_type: str | None = None,
        related_id: str | None = None,
        name: str | None = None,
        user_id: str | None = None,
        page_size: int | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> _Items:
        """Iterates over the sessions the caller may see, most recently updated first.

        An admin credential sees the whole tenant (`user_id` keeps one end user's sessions),
        an end user's token or ``user`` key only that user's own. Follows ``next_cursor``
        page after page (`page_size` items per request, 1-500). `status` is one status or
        several (default: all but ``deleted``). `metadata` keeps the sessions whose
        top-level metadata key ``KEY`` equals ``VALUE`` for every item (sent as
        ``metadata.KEY=VALUE`` query parameters). Lazy: nothing is requested until the
        iteration starts.
        """
        params = query(
            status=csv(status),
            related_type=related_type,
            related_id=related_id,
            name=name,
            user_id=user_id,
            limit=page_size,
        )
        for meta_key, meta_value in (metadata or {}).items():
            if not isinstance(meta_key, str) or not meta_key:
                raise ValueError(f"metadata filter keys must be non-empty strings, got {meta_key!r}")
            params[f"metadata.{meta_key}"] = str(meta_value)
        return self._list(Call("GET", "/v1/sessions", params=params, idempotent=True))

    def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _D:
        """Changes a session's title, status (active, completed, archived, closed) or metadata.

        Fields left at ``None`` are unchanged. Returns the updated session. Retried like a
        read: sending the same values twice has the same effect as once.
        """
        return self._dict(
            Call(
                "PATCH",
                f"/v1/sessions/{seg(session_id, 'session_id')}",
                json=body(
                    title=title,
                    status=status,
                    metadata=dict(metadata) if metadata is not None else None,
                ),
                idempotent=True,
            )
        )

    def delete_session(self, session_id: str) -> _None:
        """Soft-deletes a session (its status becomes ``deleted``)."""
        return self._none(
            Call(
                "DELETE",
                f"/v1/sessions/{seg(session_id, 'session_id')}",
                idempotent=True,
                expect="none",
            )
        )

    # --- messages ---------------------------------------------------------------------

    def list_messages(
        self,
        session_id: str,
        *,
        after: str | None = None,
        roles: str | Iterable[str] | None = None,
        page_size: int | None = None,
    ) -> _Items:
        """Iterates over a session's messages, oldest first, following ``next_cursor``.

        `after` is a message id (only later messages); `roles` one role or several
        (``user``, ``assistant``, ``info``, ...).
        """
        return self._list(
            Call(
                "GET",
                f"/v1/sessions/{seg(session_id, 'session_id')}/messages",
                params=query(after=after, roles=csv(roles), limit=page_size),
                idempotent=True,
            )
        )

    def post_message(
        self,
        session_id: str,
        content: str,
        *,
        agent: str | Mapping[str, Any] | None = None,
        related_type: str | None = None,
        related_id: str | None = None,
        context_url: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        on_busy: OnBusy | None = None,
    ) -> _D:
        """Posts a user message to a session; the server's agent answers it.

        Returns the 202 answer ``{session_id, message, execution}``; use
        ``wait(answer["execution"]["id"])`` for the result. `agent` is an agent type
        (``"demo"``) or ``{"type": ..., "config": {...}}``. On a session whose latest
        execution is paused, the message is the answer that resumes it.

        `on_busy` says what happens while an execution of the session is queued or
        running: ``"enqueue"`` (the server's default) queues behind it; ``"reject"`` raises
        `StepwiseError` with status 409 and code ``session_busy``; ``"interrupt"`` cancels it (kept) and runs
        this one next; ``"rollback"`` cancels it and removes it with everything it wrote.
        Not retried.
        """
        body = _message_body(content, agent, related_type, related_id, context_url, metadata)
        if on_busy is not None:
            if on_busy not in ON_BUSY:
                raise ValueError(f"on_busy must be one of {', '.join(ON_BUSY)}, got {on_busy!r}")
            body["on_busy"] = on_busy
        return self._dict(
            Call("POST", f"/v1/sessions/{seg(session_id, 'session_id')}/messages", json=body)
        )

    def send_message(
        self,
        content: str,
        *,
        session: Mapping[str, Any] | None = None,
        agent: str | Mapping[str, Any] | None = None,
        related_type: str | None = None,
        related_id: str | None = None,
        context_url: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> _D:
        """Creates a session and posts its first message in one call (``POST /v1/messages``).

        `session` holds the new session's fields (``name``, ``title``, ``metadata``, ...).
        Returns ``{session_id, message, execution}``. Not retried.
        """
        payload = _message_body(content, agent, related_type, related_id, context_url, metadata)
        if session is not None:
            payload["session"] = dict(session)
        return self._dict(Call("POST", "/v1/messages", json=payload))

    # --- memory, executions, export -----------------------------------------------------

    def get_memory(self, session_id: str) -> _D:
        """The session's agent memory: ``{restored, steps, summary}``.

        ``restored`` is ``"full"``, ``"summary"`` or ``"empty"``.
        """
        return self._dict(
            Call("GET", f"/v1/sessions/{seg(session_id, 'session_id')}/memory", idempotent=True)
        )

    def list_executions(self, session_id: str, *, page_size: int | None = None) -> _Items:
        """Iterates over a session's executions (subagents' included)."""
        return self._list(
            Call(
                "GET",
                f"/v1/sessions/{seg(session_id, 'session_id')}/executions",
                params=query(limit=page_size),
                idempotent=True,
            )
        )

    def export_session(self, session_id: str) -> _D:
        """The whole session as one JSON document (``format_version``, ``session``,
        ``messages``, ``executions``, ``steps``, ``snapshots``), importable as it is."""
        return self._dict(
            Call("GET", f"/v1/sessions/{seg(session_id, 'session_id')}/export", idempotent=True)
        )

    def fork_session(
        self,
        session_id: str,
        *,
        execution_id: str | None = None,
        step_number: int | None = None,
        name: str | None = None,
    ) -> _D:
        """Forks a session: a new session (returned) holding its messages, executions, steps
        and snapshots up to a point, with its agent memory restoring exactly there; the
        original is untouched.

        The point is after the root execution `execution_id` (the latest when ``None``) or,
        with `step_number`, at that step of it. `name` names the new session. Not retried
        (it could fork twice).
        """
        body: dict[str, Any] = {}
        if execution_id is not None:
            body["execution_id"] = execution_id
        if step_number is not None:
            body["step_number"] = step_number
        if name is not None:
            body["name"] = name
        return self._dict(
            Call("POST", f"/v1/sessions/{seg(session_id, 'session_id')}/fork", json=body)
        )

    def import_session(self, document: Mapping[str, Any]) -> _D:
        """Imports a session document (from `export_session`) as a new session; returns it.

        Ids that already exist get new ones. Not retried (it could import twice).
        """
        if not isinstance(document, Mapping):
            raise TypeError(f"document must be a dict, got {type(document).__name__}")
        return self._dict(Call("POST", "/v1/sessions/import", json=dict(document)))

    def list_agents(self) -> _D:
        """The agent types messages can name: ``{"items": [{type, description, builtin,
        workers_online, last_seen_at, config_schema}]}`` — the server's built-in agents and
        those the tenant's workers announced (``stepwise.worker``; ``workers_online`` counts
        the workers seen in the last minute)."""
        return self._dict(Call("GET", "/v1/agents", idempotent=True))

    def get_execution(self, execution_id: str) -> _D:
        """Returns the execution with this id."""
        return self._dict(
            Call("GET", f"/v1/executions/{seg(execution_id, 'execution_id')}", idempotent=True)
        )

    def cancel_execution(self, execution_id: str) -> _D:
        """Cancels a pending, running or paused execution; returns it.

        A ``conflict`` error when it has already finished.
        """
        return self._dict(
            Call("POST", f"/v1/executions/{seg(execution_id, 'execution_id')}/cancel")
        )

    def list_steps(self, execution_id: str, *, page_size: int | None = None) -> _Items:
        """Iterates over an execution's steps by ``step_number``."""
        return self._list(
            Call(
                "GET",
                f"/v1/executions/{seg(execution_id, 'execution_id')}/steps",
                params=query(limit=page_size),
                idempotent=True,
            )
        )

    def list_snapshots(self, execution_id: str, *, page_size: int | None = None) -> _Items:
        """Iterates over an execution's snapshots (without their ``state``)."""
        return self._list(
            Call(
                "GET",
                f"/v1/executions/{seg(execution_id, 'execution_id')}/snapshots",
                params=query(limit=page_size),
                idempotent=True,
            )
        )

    def get_snapshot(self, snapshot_id: str) -> _D:
        """Returns one snapshot, with its ``state``."""
        return self._dict(
            Call("GET", f"/v1/snapshots/{seg(snapshot_id, 'snapshot_id')}", idempotent=True)
        )

    # --- external agents --------------------------------------------------------------

    def open_execution(
        self,
        session_id: str,
        *,
        input: Any = None,
        agent_config: Any = None,
        parent_execution_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        lease: bool = True,
    ) -> _D:
        """Opens an execution for an agent that runs outside the server (``agent_type: external``).

        Returns the execution, ``running``. Record its steps with `append_step` (several at
        once with `append_steps`), its state with `save_snapshot`, and end it with
        `complete_execution`, `fail_execution` or `pause_execution`. Not retried.

        The server holds it under a lease (``lease``, ``heartbeat_interval_s`` in the answer):
        this client sends the lease with the execution's writes and renews it from a
        background thread while the process lives, so when the process dies the server fails
        the execution ("its recorder stopped") and the session's queue moves on. A write
        after that raises `StepwiseError` with code ``lease_lost`` (see `lease_lost`). With
        ``lease=False`` the execution has no lease and stays ``running`` until ended, as
        before leases.
        """
        payload: dict[str, Any] = {"agent_type": "external", "input": input}
        payload.update(
            body(
                agent_config=agent_config,
                parent_execution_id=parent_execution_id,
                metadata=dict(metadata) if metadata is not None else None,
            )
        )
        if not lease:
            payload["lease"] = False
        call = Call("POST", f"/v1/sessions/{seg(session_id, 'session_id')}/executions", json=payload)
        return self._dict(_open_flow(call, self._leases))

    def lease_lost(self, execution_id: str) -> bool:
        """Whether the server said this client's lease on an external execution is gone (409
        ``lease_lost``: it was silent longer than the lease and the server failed the
        execution, or the execution was cancelled). Its recorder opens a new execution for
        what it still has to record."""
        return self._leases.is_lost(execution_id)

    def _write(self, call: Call, execution_id: str, *, ends: bool = False) -> Flow:
        """A write to an execution with its lease, when this client holds one."""
        return _leased_flow(call, execution_id, self._leases, ends=ends)

    def append_step(
        self,
        execution_id: str,
        step: Mapping[str, Any],
        *,
        step_number: int | None = None,
    ) -> _D:
        """Records one step of an external execution; returns the stored step.

        `step` holds the Step fields without ids: ``kind`` (default ``action``),
        ``model_output``, ``tool_calls`` (``[{id, name, arguments}]``), ``code``,
        ``observations``, ``error`` (``{kind, message}``), ``output``, ``token_usage``,
        ``started_at``, ``ended_at``. With `step_number` (or a ``step_number`` in `step`)
        the write is idempotent, since the same number with the same body is accepted again,
        so it is retried on connection failures, 5xx and 429; without it the server
        numbers the step and the call is never retried.
        """
        if not isinstance(step, Mapping):
            raise TypeError(f"step must be a dict, got {type(step).__name__}")
        payload = dict(step)
        if step_number is not None:
            if "step_number" in payload and payload["step_number"] != step_number:
                raise ValueError(
                    f"step_number={step_number} differs from step['step_number']={payload['step_number']}"
                )
            payload["step_number"] = step_number
        numbered = payload.get("step_number") is not None
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/steps",
            json=payload,
            idempotent=numbered,
            headers=self._leases.header(execution_id),
        )
        return self._dict(self._write(call, execution_id))

    @overload
    def append_steps(
        self,
        execution_id: str,
        steps: Iterable[Mapping[str, Any]],
        *,
        first_step_number: int | None = None,
        return_items: Literal[True] = True,
    ) -> _D: ...

    @overload
    def append_steps(
        self,
        execution_id: str,
        steps: Iterable[Mapping[str, Any]],
        *,
        first_step_number: int | None = None,
        return_items: Literal[False],
    ) -> _None: ...

    def append_steps(
        self,
        execution_id: str,
        steps: Iterable[Mapping[str, Any]],
        *,
        first_step_number: int | None = None,
        return_items: bool = True,
    ) -> Any:
        """Records several steps of an external execution in one request
        (``POST /v1/executions/{id}/steps/batch``); returns ``{items, created}``: the stored
        steps in order, and how many of them were new. With ``return_items=False`` it returns
        ``None``, and the server leaves the stored steps out of its answer (``?items=false``:
        writing them back costs about as much as reading them).

        Each of `steps` holds the fields `append_step` takes; there are 1 to 1,000 of them.
        A step without a ``step_number`` takes the number after the step before it (the
        first: after the execution's last step). With `first_step_number` the steps are
        numbered from it: ``first_step_number``, ``first_step_number + 1``, ... The server
        saves them in order with one durable commit. Each step is idempotent as with
        `append_step`: one already stored with the same body is not written again, one
        stored with another body is a ``conflict`` (409) that stops the batch there (the
        steps before it are saved). When the first step has a number, every number is
        known, so the call is retried on connection failures, 5xx and 429; otherwise it is
        never retried.
        """
        if isinstance(steps, Mapping) or not isinstance(steps, Iterable):
            raise TypeError(f"steps must be a list of dicts, got {type(steps).__name__}")
        payload: list[dict[str, Any]] = []
        for n, step in enumerate(steps):
            if not isinstance(step, Mapping):
                raise TypeError(f"steps[{n}] must be a dict, got {type(step).__name__}")
            item = dict(step)
            if first_step_number is not None:
                number = first_step_number + n
                if item.get("step_number") is not None and item["step_number"] != number:
                    raise ValueError(
                        f"steps[{n}]['step_number']={item['step_number']} differs from "
                        f"first_step_number + {n} = {number}"
                    )
                item["step_number"] = number
            payload.append(item)
        if not 1 <= len(payload) <= MAX_BATCH_STEPS:
            raise ValueError(f"a batch holds 1 to {MAX_BATCH_STEPS} steps, got {len(payload)}")
        numbered = payload[0].get("step_number") is not None
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/steps/batch",
            json={"steps": payload},
            params=None if return_items else {"items": "false"},
            idempotent=numbered,
            expect="json" if return_items else "none",
            headers=self._leases.header(execution_id),
        )
        return self._run(self._write(call, execution_id))

    def save_snapshot(
        self,
        execution_id: str,
        state: Any,
        *,
        step_number: int | None = None,
        is_final: bool | None = None,
        parent_snapshot_id: str | None = None,
        agent_id: str | None = None,
        agent_name: str | None = None,
        debug_mode: bool | None = None,
        replace: bool = False,
    ) -> _D:
        """Saves a snapshot of an execution's state (any JSON); returns it. Not retried.

        With ``replace=True`` the execution's earlier snapshots are deleted in the same write:
        a state saved over and over keeps one row."""
        payload: dict[str, Any] = {"state": state}
        payload.update(
            body(
                step_number=step_number,
                is_final=is_final,
                parent_snapshot_id=parent_snapshot_id,
                agent_id=agent_id,
                agent_name=agent_name,
                debug_mode=debug_mode,
                replace=True if replace else None,
            )
        )
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/snapshots",
            json=payload,
            headers=self._leases.header(execution_id),
        )
        return self._dict(self._write(call, execution_id))

    def complete_execution(
        self, execution_id: str, *, output: Any = None, final_message: str | None = None
    ) -> _D:
        """Marks an external execution ``completed`` with its `output` (any JSON).

        `final_message` becomes the session's assistant message. Returns the execution.
        """
        payload: dict[str, Any] = {"output": output}
        if final_message is not None:
            payload["final_message"] = final_message
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/complete",
            json=payload,
            headers=self._leases.header(execution_id),
        )
        return self._dict(self._write(call, execution_id, ends=True))

    def fail_execution(self, execution_id: str, error_message: str) -> _D:
        """Marks an external execution ``failed`` with a message. Returns the execution."""
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/fail",
            json={"error_message": error_message},
            headers=self._leases.header(execution_id),
        )
        return self._dict(self._write(call, execution_id, ends=True))

    def pause_execution(self, execution_id: str, question: str) -> _D:
        """Pauses an external execution with a question for the user.

        The user's next message on the session answers it. Returns the execution.
        """
        call = Call(
            "POST",
            f"/v1/executions/{seg(execution_id, 'execution_id')}/pause",
            json={"question": question},
            headers=self._leases.header(execution_id),
        )
        return self._dict(self._write(call, execution_id, ends=True))

    def wait(
        self, execution_id: str, *, timeout: float | None = None, poll_interval: float = 0.05
    ) -> _D:
        """Waits until an execution is no longer ``pending`` or ``running``; returns it.

        The returned execution is ``completed``, ``failed``, ``cancelled`` or ``paused``.
        Raises `TimeoutError` when `timeout` seconds pass first.
        """
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        return self._dict(_wait_flow(seg(execution_id, "execution_id"), timeout, poll_interval))

    # --- retention --------------------------------------------------------------------

    def get_retention(self) -> _D:
        """The tenant's retention (an admin's call): ``{completed_days, abandoned_days,
        deleted_days, mark_abandoned_days}`` the cleaner applies to its sessions, with
        ``server`` (the server's policy) and ``own`` (what the tenant set, ``None`` where it
        keeps the server's)."""
        return self._dict(Call("GET", "/v1/retention", idempotent=True))

    def set_retention(
        self,
        *,
        completed_days: int | None = None,
        abandoned_days: int | None = None,
        deleted_days: int | None = None,
        mark_abandoned_days: int | None = None,
    ) -> _D:
        """Sets the tenant's own retention (an admin's call): each count given (1-36500 days)
        overrides the server's for this tenant's sessions; one left ``None`` keeps the
        server's; all ``None``: the server's policy again. Returns what `get_retention`
        returns. Retried (a PUT)."""
        payload = {
            "completed_days": completed_days,
            "abandoned_days": abandoned_days,
            "deleted_days": deleted_days,
            "mark_abandoned_days": mark_abandoned_days,
        }
        return self._dict(Call("PUT", "/v1/retention", json=payload, idempotent=True))

    # --- events -----------------------------------------------------------------------

    def events(self, session_id: str, *, after: int | str | None = None) -> _Events:
        """Iterates over a session's events (server-sent events), live, without end.

        Starts with the stored events after event id `after` (all of them when ``None``),
        then yields new ones as they happen. When the connection drops (server restart,
        network, proxy timeout) it reconnects by itself with ``Last-Event-ID``, so nothing
        is missed and nothing is yielded twice. ``message.delta`` events (streamed tokens)
        are live only: their ``id`` is ``None`` and they are not replayed. Stop by
        breaking out of the loop or closing the iterator. Raises `StepwiseError` when the
        server refuses the stream (e.g. ``not_found``).
        """
        return self._stream(EventStreamState(session_id, after))


# --- end users: tokens and keys --------------------------------------------------------

Role = Literal["admin", "user", "worker"]


def client_headers(client: Any) -> dict[str, str]:
    """The headers every request of a client carries (credential, user agent, the caller's)."""
    return dict(getattr(client, "_headers", None) or {})


def direct_target(client: Any, default_transport: type) -> DirectTarget | None:
    """Where the lean connections of the adapters' hot paths send a client's calls, or
    ``None`` when the client must be used: only when nothing it was configured with would be
    bypassed, a plain ``http://`` server (or a ``unix:`` socket) reached directly (no proxy in
    the environment) through httpx's `default_transport`."""
    server = getattr(client, "_endpoint", None)
    url = server.url if server is not None else client.base_url
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    if getattr(client, "_transport_type", None) is not default_transport:
        return None
    timeout = float(client.timeout.read if client.timeout.read is not None else 30.0)
    unix = server.socket if server is not None else None
    if unix is not None:
        local = getattr(client, "_local", None)
        revive = None if local is None else local.revive
        return DirectTarget(
            parts.hostname, 80, "", client_headers(client), timeout, client.max_retries, unix, revive
        )
    if proxied(url):
        return None
    return DirectTarget(
        parts.hostname,
        parts.port or 80,
        parts.path.rstrip("/"),
        client_headers(client),
        timeout,
        client.max_retries,
    )


def credential(api_key: str | None, token: str | None) -> str | None:
    """The bearer credential of a client: `api_key` or `token` (the same thing on the wire),
    else env ``STEPWISE_API_KEY``, else env ``STEPWISE_TOKEN``; ``None`` when there is none."""
    if api_key is not None and token is not None:
        raise TypeError(
            "give api_key or token, not both: each is the credential sent as "
            "'Authorization: Bearer ...' (an API key, or an end user's token)"
        )
    given = api_key if api_key is not None else token
    if given is None:
        given = os.environ.get("STEPWISE_API_KEY") or os.environ.get("STEPWISE_TOKEN")
    return given or None


def _user_id(user_id: Any) -> str:
    if not isinstance(user_id, str) or not user_id:
        raise ValueError(f"user_id must be a non-empty string, got {user_id!r}")
    return user_id


class Tokens(Generic[_D]):
    """End users' tokens (``client.tokens``): short-lived credentials an admin mints for one
    user of its tenant, to hand to that user's browser or app."""

    def __init__(self, client: "BaseClient[_D, Any, Any, Any, Any, Any]") -> None:
        self._client = client

    def create(self, user_id: str, ttl_s: int | None = None) -> _D:
        """Mints a token for end user `user_id` (``POST /v1/tokens``, admin only).

        Returns ``{token, user_id, expires_at}``. The token is a credential of role
        ``user``: ``Stepwise(token=...)`` (or any client's `api_key`) with it sees and
        changes only `user_id`'s own sessions. `ttl_s` is its lifetime in seconds, 60 to
        86,400 (the server's default: 3,600). A ``user`` credential gets `ForbiddenError`.
        Retried like a read: minting twice stores nothing and only makes another token.
        """
        return self._client._dict(
            Call(
                "POST",
                "/v1/tokens",
                json=body(user_id=_user_id(user_id), ttl_s=ttl_s),
                idempotent=True,
            )
        )


class Keys(Generic[_D, _Items, _None]):
    """The tenant's API keys (``client.keys``), managed by an admin credential."""

    def __init__(self, client: "BaseClient[_D, Any, _None, Any, _Items, Any]") -> None:
        self._client = client

    def create(self, user_id: str, role: Role = "user", name: str | None = None) -> _D:
        """Creates an API key for `user_id` with `role` (``POST /v1/keys``, admin only).

        `role` is ``admin`` (the whole tenant), ``user`` (only `user_id`'s own sessions)
        or ``worker``. Returns ``{id, key, user_id, role, name, created_at}``: ``key`` is
        the secret, in this answer only. Not retried (it could create two keys), except
        when the connection could not be opened at all.
        """
        return self._client._dict(
            Call("POST", "/v1/keys", json=body(user_id=_user_id(user_id), role=role, name=name))
        )

    def list(self) -> _Items:
        """Iterates over the tenant's keys (``GET /v1/keys``, admin only): each
        ``{id, user_id, role, name, created_at}``, never the secret."""
        return self._client._list(Call("GET", "/v1/keys", idempotent=True))

    def delete(self, key_id: str) -> _None:
        """Revokes a key (``DELETE /v1/keys/{id}``, admin only); ``not_found`` when the tenant
        has no such key. A server refuses the key (401) within seconds."""
        return self._client._none(
            Call("DELETE", f"/v1/keys/{seg(key_id, 'key_id')}", idempotent=True, expect="none")
        )


# --- flows ----------------------------------------------------------------------------


def _message_body(
    content: str,
    agent: str | Mapping[str, Any] | None,
    related_type: str | None,
    related_id: str | None,
    context_url: str | None,
    metadata: Mapping[str, Any] | None,
) -> dict[str, Any]:
    if not isinstance(content, str):
        raise TypeError(f"content must be a string, got {type(content).__name__}")
    agent_body: Any = None
    if isinstance(agent, str):
        agent_body = {"type": agent}
    elif agent is not None:
        agent_body = dict(agent)
    payload: dict[str, Any] = {"content": content}
    payload.update(
        body(
            agent=agent_body,
            related_type=related_type,
            related_id=related_id,
            context_url=context_url,
            metadata=dict(metadata) if metadata is not None else None,
        )
    )
    return payload


def _find_call(name: str) -> Call:
    return Call("GET", "/v1/sessions", params={"name": name}, idempotent=True)


def _named(answer: Any, name: str) -> Any:
    """The session called `name` in a list answer (a server without the `name` filter
    answers with other sessions: none of them is taken for it)."""
    items = answer.get("items") if isinstance(answer, dict) else None
    for item in items or ():
        if isinstance(item, dict) and item.get("name") == name:
            return item
    return None


def _find_session_flow(name: str) -> Flow:
    return _named((yield _find_call(name)), name)


def _session_flow(name_or_id: str, create_kwargs: dict[str, Any]) -> Flow:
    if looks_like_uuid(name_or_id):
        try:
            return (yield Call("GET", f"/v1/sessions/{seg(name_or_id, 'name_or_id')}", idempotent=True))
        except StepwiseError as e:
            if e.code != "not_found":
                raise
    found = _named((yield _find_call(name_or_id)), name_or_id)
    if found is not None:
        return found
    create = Call(
        "POST",
        "/v1/sessions",
        json=body(name=name_or_id, **create_kwargs),
    )
    try:
        return (yield create)
    except StepwiseError as e:
        if e.code != "conflict":
            raise
        # Someone else created it in between.
        found = _named((yield _find_call(name_or_id)), name_or_id)
        if found is None:
            raise
        return found


def _open_flow(call: Call, leases: RecorderLeases) -> Flow:
    """Opens an external execution and holds its lease."""
    opened = yield call
    leases.hold(opened)
    return opened


def _leased_flow(call: Call, execution_id: str, leases: RecorderLeases, *, ends: bool) -> Flow:
    """A write to an execution: a ``lease_lost`` answer marks its lease lost; a write that
    `ends` it (complete, fail, pause) lets the lease go."""
    try:
        answer = yield call
    except StepwiseError as e:
        if e.code == "lease_lost":
            leases.mark_lost(execution_id)
        elif ends and e.code in ("conflict", "invalid_state"):
            leases.release(execution_id)  # ended already
        raise
    if ends:
        leases.release(execution_id)
    return answer


def _wait_flow(execution_path_id: str, timeout: float | None, poll_interval: float) -> Flow:
    deadline = None if timeout is None else time.monotonic() + timeout
    call = Call("GET", f"/v1/executions/{execution_path_id}", idempotent=True)
    while True:
        execution = yield call
        status = execution.get("status")
        if status not in _UNFINISHED:
            return execution
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"execution {execution.get('id')} is still {status} after {timeout} s"
                )
            yield Sleep(min(poll_interval, left))
        else:
            yield Sleep(poll_interval)

