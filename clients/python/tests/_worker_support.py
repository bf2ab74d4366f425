"""What the worker tests share: worker processes (``python -m stepwise.worker`` or the
``stepwise-worker`` script, with an app of ``worker_apps/``), a server with a short lease, and
waiting helpers. Nothing here asserts on durations: waits have generous limits only so that a
broken build fails instead of hanging."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from stepwise.testing import LocalServer, find_binary, local_server

TESTS = Path(__file__).resolve().parent
# A short lease, so that lost and frozen workers are taken over soon (heartbeats every 2/3 s).
LEASE_S = 2
DEMO_ENV = {"STEPWISE_DEMO_STEP_MS": "20"}
# How long any wait may take before the test fails (never a measure of speed).
PATIENCE = 90.0


def short_lease_server(**kwargs: Any) -> LocalServer:
    args = list(kwargs.pop("args", ()))
    return local_server(args=["--lease-secs", str(LEASE_S), *args], env=DEMO_ENV, **kwargs)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = PATIENCE) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def make_key(database: str, tenant: str) -> str:
    out = subprocess.run(
        [find_binary(), "keys", "create", "--database", database, "--tenant", tenant, "--user", f"{tenant}-user"],
        capture_output=True, text=True, check=True, timeout=60,
    )
    return out.stdout.strip().splitlines()[-1].strip()


def worker_script() -> str | None:
    """The installed ``stepwise-worker`` console script, next to this Python (or on PATH)."""
    beside = Path(sys.executable).with_name("stepwise-worker")
    if beside.is_file():
        return str(beside)
    return shutil.which("stepwise-worker")


class WorkerProcess:
    """A worker app of ``worker_apps/`` running as its own process."""

    def __init__(
        self,
        server: LocalServer,
        target: str,
        workdir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        script: bool = False,
        name: str = "w",
        api_key: str | None = None,
    ) -> None:
        self.target = target
        self.log_path = workdir / f"worker-{name}-{time.monotonic_ns()}.log"
        if script:
            found = worker_script()
            if found is None:
                pytest.skip("the stepwise-worker script is not installed (pip install -e clients/python)")
            command = [found]
        else:
            command = [sys.executable, "-m", "stepwise.worker"]
        command += [target, "--url", server.url, "--wait-s", "1", *args]
        if api_key:
            command += ["--api-key", api_key]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_")}
        environment.update(
            {
                "WORKER_DIR": str(workdir),
                "WORKER_NAME": name,
                "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "PYTHONUNBUFFERED": "1",
            }
        )
        environment.update(env or {})
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            command,
            cwd=TESTS,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        # As a user starts a worker and then sends it work: wait until it has told the server
        # its agent types (it logs "serving" once it has tried), or has exited.
        wait_for(lambda: "serving" in self.log() or not self.alive(), "the worker to start", PATIENCE)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_log(self, text: str, timeout: float = PATIENCE) -> None:
        """Waits until the worker's log holds `text` (fails if the worker exits first)."""
        wait_for(lambda: text in self.log() or not self.alive(), f"{text!r} in the worker log", timeout)
        if text not in self.log():
            raise AssertionError(f"the worker exited without logging {text!r}:\n{self.log()[-3000:]}")

    def signal(self, sig: int) -> None:
        if self.alive():
            self.process.send_signal(sig)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (a graceful stop) and wait; its exit status."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the worker did not stop on SIGTERM:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = PATIENCE) -> int:
        return self.process.wait(timeout)

    def close(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()
        self._log.close()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """``start_worker(server, "worker_apps.basic:worker", *cli_args, env=..., script=...)``;
    every worker still running at the end is killed."""
    started: list[WorkerProcess] = []

    def start(server: LocalServer, target: str, *args: str, **kwargs: Any) -> WorkerProcess:
        worker = WorkerProcess(server, target, tmp_path, *args, **kwargs)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        code = worker.process.poll()
        if code is not None and code > 0:
            # Shown with a failing test's output: a worker that died on its own (an import
            # error, say) otherwise only shows as an execution nobody claimed.
            print(f"worker {worker.target} exited with status {code}; its log ends:\n{worker.log()[-3000:]}")
        worker.close()


def steps_of(client: Any, execution_id: str) -> list[dict[str, Any]]:
    return list(client.list_steps(execution_id))


def wait_status(client: Any, execution_id: str, *statuses: str, timeout: float = PATIENCE) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        execution = client.get_execution(execution_id)
        return execution if execution["status"] in statuses else None

    return wait_for(reached, f"execution {execution_id} to be {'/'.join(statuses)}", timeout)
