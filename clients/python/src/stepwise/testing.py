"""Run a real Stepwise server in tests: `local_server()`.

::

    from stepwise.testing import local_server

    with local_server() as server:
        session = server.client.create_session(name="demo")
        answer = server.client.post_message(session["id"], "2+3")
        print(server.client.wait(answer["execution"]["id"])["output"])

A pytest fixture::

    @pytest.fixture(scope="session")
    def stepwise_server():
        with local_server() as server:
            yield server

The binary is ``$STEPWISE_BIN``, else the installed wheel's, else ``stepwise`` on ``PATH``. Each server gets a free
loopback port, its own temporary directory (working directory, data directory and, unless
`database` is given, a SQLite database), no rate limit, and no limit on open event streams.
Settings of the surrounding environment (``STEPWISE_*`` variables other than
``STEPWISE_LOG``, a ``stepwise.toml`` in the current directory) do not leak into it; pass
`env` to set some.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Mapping, Sequence

import httpx

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._local import find_binary as _find_binary

__all__ = ["LocalServer", "local_server", "find_binary", "ServerStartError"]

# Variables of the caller's environment a test server keeps.
_KEPT_STEPWISE_VARS = frozenset({"STEPWISE_LOG"})


class ServerStartError(RuntimeError):
    """The server did not start (or become ready); the message ends with its log."""


def find_binary() -> str:
    """The `stepwise` binary: ``$STEPWISE_BIN``, else the installed wheel's, else ``stepwise``
    on ``PATH``."""
    return _find_binary()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _has_flag(args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


class LocalServer:
    """A `stepwise serve` process on loopback, for tests. Use it as a context manager.

    Attributes:
        url: the server's base URL (``http://127.0.0.1:PORT``).
        port: its port, kept across `restart()`.
        database: the database URL (a temporary SQLite file unless one was given).
        client: a `Stepwise` client for it (closed on exit).
        log_path: the file receiving the server's stdout and stderr.
    """

    def __init__(
        self,
        *,
        database: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
        binary: str | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.binary = str(Path(binary).resolve()) if binary else find_binary()
        self._dir = Path(tempfile.mkdtemp(prefix="stepwise-test-"))
        self.database = database or f"sqlite://{self._dir / 'stepwise.db'}"
        self.log_path = self._dir / "server.log"
        self.extra_env = dict(env or {})
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.port = 0
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._client: Stepwise | None = None
        self._closed = False

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> "LocalServer":
        """Starts the server (on a new free port the first time) and waits until it is ready."""
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("the server is already running")
        pick_port = self.port == 0
        attempts = 3 if pick_port else 1
        last_error: ServerStartError | None = None
        for _ in range(attempts):
            if pick_port:
                self.port = _free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            try:
                self._launch_and_wait()
                return self
            except ServerStartError as e:
                last_error = e
                # Another process may have taken the port between our probe and the bind.
                if not pick_port or "in use" not in str(e).lower():
                    raise
        assert last_error is not None
        raise last_error

    def _environment(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("STEPWISE_") or k in _KEPT_STEPWISE_VARS
        }
        env.setdefault("NO_COLOR", "1")
        env.update(self.extra_env)
        return env

    def _command(self) -> list[str]:
        cmd = [
            self.binary,
            "serve",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--database",
            self.database,
            "--data-dir",
            str(self._dir),
        ]
        if not _has_flag(self.args, "--rate-limit-per-sec"):
            cmd += ["--rate-limit-per-sec", "0"]
        if not _has_flag(self.args, "--max-sse-per-tenant"):
            cmd += ["--max-sse-per-tenant", "0"]
        if not _has_flag(self.args, "--max-sse-per-session"):
            cmd += ["--max-sse-per-session", "0"]
        return cmd + self.args

    def _launch_and_wait(self) -> None:
        log = open(self.log_path, "ab")
        try:
            log.write(f"--- {' '.join(self._command())}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                env=self._environment(),
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.01
        with httpx.Client(timeout=2.0) as http:
            while True:
                code = self._process.poll()
                if code is not None:
                    raise ServerStartError(
                        f"stepwise serve exited with status {code} before it was ready"
                        f"{self._log_tail()}"
                    )
                try:
                    if http.get(f"{self.url}/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    self._terminate(signal.SIGKILL)
                    raise ServerStartError(
                        f"stepwise serve was not ready at {self.url}/readyz within "
                        f"{self.startup_timeout} s{self._log_tail()}"
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        tail = "\n".join(text.splitlines()[-lines:])
        return f"\n--- server log ({self.log_path}), last lines:\n{tail}" if tail else ""

    def log(self) -> str:
        """Everything the server has written to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _terminate(self, sig: int, timeout: float = 15.0) -> int | None:
        process = self._process
        if process is None or process.poll() is not None:
            return process.returncode if process else None
        process.send_signal(sig)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id (``None`` before the first start)."""
        return self._process.pid if self._process else None

    def kill(self) -> None:
        """Kills the server at once (SIGKILL), like a crash."""
        self._terminate(signal.SIGKILL)

    def stop(self, timeout: float = 15.0) -> int | None:
        """Stops the server gracefully (SIGTERM) and waits; returns its exit status."""
        return self._terminate(signal.SIGTERM, timeout)

    def restart(self) -> "LocalServer":
        """Starts the server again on the same port and database (stopping it first if it runs)."""
        if self.running:
            self.stop()
        return self.start()

    # --- clients ----------------------------------------------------------------------

    @property
    def client(self) -> Stepwise:
        """A `Stepwise` client for this server (one per server, closed with it)."""
        if self._client is None:
            self._client = Stepwise(self.url)
        return self._client

    def async_client(self, **kwargs: object) -> AsyncStepwise:
        """A new `AsyncStepwise` client for this server; close it yourself (``async with``)."""
        return AsyncStepwise(self.url, **kwargs)  # type: ignore[arg-type]

    def new_client(self, **kwargs: object) -> Stepwise:
        """A new `Stepwise` client for this server with its own options; close it yourself."""
        return Stepwise(self.url, **kwargs)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stops the server and removes its temporary directory."""
        if self._closed:
            return
        self._closed = True
        if self._client is not None:
            self._client.close()
        try:
            self.stop()
        finally:
            if self.running:
                self.kill()
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> "LocalServer":
        if not self.running:
            try:
                self.start()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalServer(url={self.url!r}, database={self.database!r}, running={self.running})"


def local_server(
    *,
    database: str | None = None,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    binary: str | None = None,
    startup_timeout: float = 60.0,
) -> LocalServer:
    """A Stepwise server for tests, started when the ``with`` block begins, stopped at its end.

    `database` is a database URL (default: a temporary SQLite file), `env` extra
    environment variables for the server (e.g. ``{"STEPWISE_DEMO_STEP_MS": "20"}``), `args`
    extra ``stepwise serve`` flags. ``with local_server() as server:`` gives a running
    `LocalServer` (``server.url``, ``server.client``, ``server.kill()``,
    ``server.restart()``, ``server.stop()``). Raises `ServerStartError`, with the end of
    the server's log, when it does not become ready within `startup_timeout` seconds, and
    `FileNotFoundError` when there is no binary.
    """
    return LocalServer(
        database=database, env=env, args=args, binary=binary, startup_timeout=startup_timeout
    )
