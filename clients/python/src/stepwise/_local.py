"""`Stepwise.local()`: an embedded Stepwise server, started from Python in one call.

The first client on a database starts ``stepwise serve`` as a child process listening on a
Unix socket (mode 0600) inside the data directory and owns it: `close()`, ``with`` and the
interpreter's exit stop it (SIGTERM, then a kill after 10 s). Every other client on the same
database (in this process or another) *attaches* to it: a small state file beside the
database names the socket and the server's pid, and a lock file makes "look, then start" one
step, so two servers never run on one database. When the owner goes, an attached client's next
call that cannot connect starts a server of its own (under the same lock) and is sent again:
nothing is lost, every call still answers.

The server's log goes to a file beside the socket (``stepwise-<id>.log``); an error starting
it ends with the log's last lines.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

from ._errors import StepwiseError

__all__ = ["EmbeddedServer", "default_data_dir", "find_binary"]

# How long a new server may take to listen before starting it counts as failed.
START_TIMEOUT_S = 30.0
# How long a stopping server gets after SIGTERM before it is killed.
STOP_GRACE_S = 10.0
# Longest Unix socket path (sun_path is 108 bytes on Linux, 104 on macOS, with its NUL).
_MAX_SOCKET_PATH = 100
# Settings of the caller's environment the child must not take over from our arguments.
_OVERRIDDEN = ("STEPWISE_LISTEN", "STEPWISE_DATABASE_URL", "STEPWISE_DATA_DIR")


def find_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """The ``stepwise`` server binary: `binary` if given, else ``$STEPWISE_BIN``, else the one
    the installed wheel put beside this Python (``pip install .`` from a clone), else
    ``stepwise`` on ``PATH``."""
    for given, what in ((binary, "binary"), (os.environ.get("STEPWISE_BIN") or None, "STEPWISE_BIN")):
        if given is None:
            continue
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(
                f"{what}={str(given)!r} is not a file; build it with `cargo build -p stepwise` "
                "(target/debug/stepwise), install the wheel (`pip install .` from a clone), or unset it"
            )
        if not os.access(path, os.X_OK):
            raise PermissionError(f"{what}={str(given)!r} is not executable")
        return str(path.resolve())
    wheel = _wheel_binary()
    if wheel is not None:
        return wheel
    found = shutil.which("stepwise")
    if found:
        return found
    raise FileNotFoundError(
        "no Stepwise server binary: install the wheel that carries it (`pip install .` from a "
        "clone of the repository), set STEPWISE_BIN (e.g. target/debug/stepwise after "
        "`cargo build -p stepwise`), pass binary=, or put `stepwise` on PATH"
    )


def _wheel_binary() -> str | None:
    """Where the wheel's ``scripts`` install puts ``stepwise`` (as ruff and uv find theirs)."""
    name = "stepwise.exe" if sys.platform == "win32" else "stepwise"
    schemes = [None]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        schemes.append(user_scheme)
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:  # pragma: no cover - a scheme without scripts
            continue
        candidate = Path(scripts) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def default_data_dir() -> Path:
    """The server's own default: ``$STEPWISE_DATA_DIR``, else ``$XDG_DATA_HOME/stepwise``,
    else ``~/.local/share/stepwise``."""
    for var, suffix in (("STEPWISE_DATA_DIR", ""), ("XDG_DATA_HOME", "stepwise")):
        value = os.environ.get(var)
        if value:
            return Path(value) / suffix if suffix else Path(value)
    return Path.home() / ".local" / "share" / "stepwise"


class _Place:
    """Where a database's server lives: its database URL as given to ``serve``, the state
    file, the lock file, the socket and the log."""

    def __init__(self, database: str | None, data_dir: Path) -> None:
        self.data_dir = data_dir
        if database is None:
            database = f"sqlite://{data_dir / 'stepwise.db'}"
        if database.startswith("sqlite://"):
            path = Path(os.path.abspath(os.path.expanduser(database[len("sqlite://"):])))
            self.database = f"sqlite://{path}"
            self.state = Path(f"{path}.local.json")
        elif database.startswith("files://"):
            path = Path(os.path.abspath(os.path.expanduser(database[len("files://"):])))
            self.database = f"files://{path}"
            # Beside the folder of JSON files, not in it.
            self.state = path.parent / f"{path.name}.local.json"
        elif database.startswith(("postgres://", "postgresql://")):
            self.database = database
            self.state = None  # named from the id below, in the data directory
        else:
            raise ValueError(
                f"database must be sqlite://PATH, files://DIR or postgres://..., got {database!r}"
            )
        self.id = hashlib.sha256(self.database.encode()).hexdigest()[:12]
        if self.state is None:
            self.state = data_dir / f"local-{self.id}.json"
        self.lock = self.state.with_suffix(".lock")
        self.log = data_dir / f"stepwise-{self.id}.log"
        socket_path = data_dir / f"stepwise-{self.id}.sock"
        if len(str(socket_path)) > _MAX_SOCKET_PATH:
            # A deep data directory: the socket goes to a private folder under /tmp instead.
            private = Path(tempfile.gettempdir()) / f"stepwise-{os.getuid()}"
            private.mkdir(mode=0o700, exist_ok=True)
            os.chmod(private, 0o700)
            socket_path = private / f"{self.id}.sock"
        self.socket = str(socket_path)


class EmbeddedServer:
    """The embedded server of one database, as one client sees it: started by it (`owner`)
    or attached to. Made by `Stepwise.local`; ``client.local_server`` gives it."""

    def __init__(
        self,
        database: str | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        binary: str | os.PathLike[str] | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        directory = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._place = _Place(database, directory.resolve())
        self._args = [str(a) for a in args]
        self._env = dict(env or {})
        self._binary = binary
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.pid: int | None = None
        self.ensure()

    # --- what a client uses ---------------------------------------------------------------

    @property
    def socket(self) -> str:
        """The Unix socket the server listens on."""
        return self._place.socket

    @property
    def base_url(self) -> str:
        """``unix:`` and `socket`: what a client is given."""
        return "unix:" + self._place.socket

    @property
    def database(self) -> str:
        return self._place.database

    @property
    def owner(self) -> bool:
        """Whether this process started the server (and stops it on `close`)."""
        return self._process is not None and self._owner_pid == os.getpid()

    @property
    def log_path(self) -> Path:
        """The server's log file (written by the server its owner started)."""
        return self._place.log

    def ensure(self) -> None:
        """Attaches to the database's running server, or starts one (under the lock)."""
        with self._lock:
            if self._closed:
                raise StepwiseError("connection_error", "this client was closed")
            if self.owner and self._process is not None and self._process.poll() is None:
                return
            with _FileLock(self._place.lock):
                if _answers(self._place.socket):
                    state = self._read_state() or {}
                    self.pid = int(state.get("pid") or 0) or None
                    return
                self._start()

    def revive(self) -> bool:
        """After a call could not connect: makes sure a server runs again (the owner may have
        gone); ``True`` when one answers now, so the call can be sent again."""
        if self._closed:
            return False
        if _answers(self._place.socket):
            return True
        try:
            self.ensure()
        except (OSError, StepwiseError):
            return False
        return _answers(self._place.socket)

    def close(self) -> None:
        """Stops the server if this client started it (SIGTERM, then a kill after 10 s)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            process, owned = self._process, self.owner
            self._process = None
        if not owned or process is None:
            return
        atexit.unregister(self._stop_at_exit)
        with _FileLock(self._place.lock):
            _stop(process)
            state = self._read_state()
            if state is not None and state.get("pid") == process.pid:
                _remove(self._place.state)

    # --- inside ---------------------------------------------------------------------------

    def _read_state(self) -> dict | None:
        try:
            text = self._place.state.read_text()
            state = json.loads(text)
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def _start(self) -> None:
        binary = find_binary(self._binary)
        env = {k: v for k, v in os.environ.items() if k not in _OVERRIDDEN}
        env.update(self._env)
        # The server stops by itself when this process goes, even killed (it watches its parent).
        env["STEPWISE_EXIT_WITH_PARENT"] = "1"
        # In the environment, not on the command line: a PostgreSQL URL's password would be
        # visible to every user in the process list.
        env["STEPWISE_DATABASE_URL"] = self._place.database
        command = [
            binary,
            "--data-dir",
            str(self._place.data_dir),
            "serve",
            "--listen",
            self.base_url,
            *self._args,
        ]
        log = open(self._place.log, "ab")
        try:
            os.chmod(self._place.log, 0o600)
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd=str(self._place.data_dir),
                start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + self._start_timeout
        while not _answers(self._place.socket):
            code = process.poll()
            if code is not None:
                raise StepwiseError(
                    "local_server_failed",
                    f"`stepwise serve` on {_redacted(self._place.database)} exited with status {code} before it "
                    f"listened; the end of its log ({self._place.log}):\n{_tail(self._place.log)}",
                )
            if time.monotonic() > deadline:
                _stop(process)
                raise StepwiseError(
                    "local_server_failed",
                    f"`stepwise serve` on {_redacted(self._place.database)} did not listen within "
                    f"{self._start_timeout:g} s; the end of its log ({self._place.log}):\n"
                    f"{_tail(self._place.log)}",
                )
            time.sleep(0.002)
        self._process = process
        self._owner_pid = os.getpid()
        self.pid = process.pid
        state = {"pid": process.pid, "socket": self._place.socket, "started_at": time.time()}
        _write_private(self._place.state, json.dumps(state))
        atexit.register(self._stop_at_exit)

    def _stop_at_exit(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - nothing to report to at exit
            pass


def _redacted(database: str) -> str:
    """The database URL for messages: a password in it replaced by ``***``."""
    return re.sub(r"^([a-z]+://[^:/@]*):[^/]*@", r"\1:***@", database)


def _answers(path: str) -> bool:
    """Whether a server accepts connections on the socket."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(path)
        return True
    except OSError:
        return False
    finally:
        sock.close()


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGTERM)
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    except ProcessLookupError:  # pragma: no cover - gone meanwhile
        pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(temporary, path)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


class _FileLock:
    """An exclusive ``flock`` on a file (between processes), held inside ``with``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> "_FileLock":
        import fcntl

        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        import fcntl

        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
