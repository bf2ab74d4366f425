"""The leases of the external executions a client opened (its recorders' leases).

The server holds an external execution under a lease: every write carrying it in the
``Stepwise-Lease`` header renews it, and so does ``POST /v1/executions/{id}/heartbeat``. When
none comes within the lease (the process died or froze), the server fails the execution ("its
recorder stopped") and the session's queue moves on. `RecorderLeases` keeps a client's leases:
each write to a leased execution carries its lease, and a daemon thread heartbeats every held
lease while the process lives, so a recorder waiting on a slow model call keeps its execution.
A lease the server says is gone (409 ``lease_lost``: the lease ran out and the execution was
failed, or it was cancelled) is dropped and remembered as lost; the adapters then open a new
execution for what they still have to record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from ._calls import seg
from ._tls import default_ssl_context
from ._transport.endpoint import endpoint

logger = logging.getLogger("stepwise")

LEASE_HEADER = "Stepwise-Lease"
# The server's default lease is 15 s, heartbeats a third of it.
_DEFAULT_INTERVAL = 5.0
_MIN_INTERVAL = 0.05
# Lost leases remembered (for `is_lost`), oldest forgotten first.
_MAX_LOST = 4096


class RecorderLeases:
    """The leases a client holds, sent with their executions' writes and renewed by a
    background thread (started with the first lease, a daemon: it never keeps a process
    alive)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: httpx.Timeout) -> None:
        self._base_url = base_url
        self._headers = dict(headers)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, float]] = {}  # execution id -> (lease, interval)
        # Lost leases, still sent with the execution's writes so the server answers each
        # with 409 ``lease_lost`` (not a plain refusal of a write to a failed execution).
        self._lost: dict[str, str] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._http: httpx.Client | None = None

    def hold(self, opened: Any) -> None:
        """Holds the lease of an execution just opened (an answer without one: nothing)."""
        if not isinstance(opened, Mapping):
            return
        execution_id, lease = opened.get("id"), opened.get("lease")
        if not isinstance(execution_id, str) or not isinstance(lease, str) or not lease:
            return
        interval = opened.get("heartbeat_interval_s")
        if not isinstance(interval, (int, float)) or interval <= 0:
            interval = _DEFAULT_INTERVAL
        with self._lock:
            if self._closed:
                return
            self._held[execution_id] = (lease, max(float(interval), _MIN_INTERVAL))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat_loop, name="stepwise-recorder-leases", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def header(self, execution_id: str) -> dict[str, str] | None:
        """The ``Stepwise-Lease`` header for a write to this execution, when a lease is held
        (or was, and is lost: the server then answers ``lease_lost``)."""
        with self._lock:
            held = self._held.get(execution_id)
            lease = held[0] if held is not None else self._lost.get(execution_id)
        return {LEASE_HEADER: lease} if lease is not None else None

    def release(self, execution_id: str) -> None:
        """The execution ends (complete, fail, pause): its lease is no longer renewed."""
        with self._lock:
            self._held.pop(execution_id, None)

    def mark_lost(self, execution_id: str) -> None:
        """The server said the execution's lease is gone (409 ``lease_lost``)."""
        with self._lock:
            held = self._held.pop(execution_id, None)
            if held is None:
                return  # lost already (or never held here)
            self._lost[execution_id] = held[0]
            while len(self._lost) > _MAX_LOST:
                self._lost.pop(next(iter(self._lost)))
        logger.warning(
            "stepwise: the lease of execution %s is gone (its recorder was silent longer than "
            "the lease, or it was cancelled): what is left is recorded in a new execution",
            execution_id,
        )

    def is_lost(self, execution_id: str) -> bool:
        """Whether the server said this execution's lease is gone."""
        with self._lock:
            return execution_id in self._lost

    def close(self) -> None:
        """Stops heartbeating (the client closes)."""
        with self._lock:
            self._closed = True
            self._held.clear()
            http, self._http = self._http, None
        self._wake.set()
        if http is not None:
            http.close()

    def _beat_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                interval = min((i for _, i in self._held.values()), default=_DEFAULT_INTERVAL)
            self._wake.wait(interval)
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                held = list(self._held.items())
            for execution_id, (lease, _) in held:
                try:
                    self._beat(execution_id, lease)
                except Exception as exc:  # never let the thread die: the next beat may pass
                    logger.debug("stepwise: heartbeat of execution %s failed: %s", execution_id, exc)

    def _beat(self, execution_id: str, lease: str) -> None:
        with self._lock:
            if self._closed or self._held.get(execution_id, (None,))[0] != lease:
                return  # released meanwhile
            if self._http is None:
                server = endpoint(self._base_url)
                self._http = httpx.Client(
                    base_url=server.url,
                    transport=server.transport(),
                    headers=self._headers,
                    timeout=self._timeout,
                    verify=default_ssl_context(),
                )
            http = self._http
        response = http.post(
            f"/v1/executions/{seg(execution_id, 'execution_id')}/heartbeat",
            json={"lease": lease},
            headers={LEASE_HEADER: lease},
        )
        if response.status_code == 409:
            with self._lock:
                still_held = self._held.get(execution_id, (None,))[0] == lease
            if still_held:
                self.mark_lost(execution_id)
        elif response.status_code >= 400:
            logger.debug(
                "stepwise: heartbeat of execution %s answered %d", execution_id, response.status_code
            )
