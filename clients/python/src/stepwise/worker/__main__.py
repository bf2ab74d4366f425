"""``stepwise-worker module:attr``: runs a `Worker` defined in your code until SIGINT/SIGTERM.

Also ``python -m stepwise.worker module:attr``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
import os
import sys
from typing import Any, Sequence

from .._version import __version__

DESCRIPTION = """\
Runs a Stepwise worker: claims executions of its agent types from the server's queue and
runs them, until SIGINT or SIGTERM (running executions then go back to the queue; a second
signal exits at once).

TARGET is MODULE:ATTRIBUTE, e.g. myapp.agents:worker, naming a stepwise.worker.Worker, or a
function without arguments that returns one. The current directory is on the import path.
"""

EPILOG = """\
environment:
  STEPWISE_URL       the server (default http://127.0.0.1:7777), unless --url is given
  STEPWISE_API_KEY   its API key, unless --api-key is given
  STEPWISE_TOKEN     the credential when STEPWISE_API_KEY is not set (a key or a token)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stepwise-worker",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", metavar="TARGET", help="MODULE:ATTRIBUTE of the worker")
    parser.add_argument("--url", help="the Stepwise server (default: $STEPWISE_URL, else http://127.0.0.1:7777)")
    parser.add_argument("--api-key", metavar="KEY", help="the API key, or any credential of the server (default: $STEPWISE_API_KEY, else $STEPWISE_TOKEN)")
    parser.add_argument("--concurrency", type=int, metavar="N", help="executions run at once (1-256), instead of the worker's own")
    parser.add_argument("--worker-id", metavar="ID", help="this worker's name (default: <host>-<pid>-<4 hex>)")
    parser.add_argument("--wait-s", type=float, metavar="S", help="how long one claim waits for work (0-25 s)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-v: debug of the worker, -vv: of everything)")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    parser.add_argument("--version", action="version", version=f"stepwise-worker {__version__}")
    return parser


def load_worker(target: str) -> Any:
    """The worker `MODULE:ATTRIBUTE` names (a function returning one is called)."""
    from ._worker import Worker

    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"stepwise-worker: TARGET must be MODULE:ATTRIBUTE (e.g. myapp.agents:worker), got {target!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if getattr(e, "name", None) == module_name:
            raise SystemExit(f"stepwise-worker: cannot import module {module_name!r}: {e}") from e
        raise
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SystemExit(f"stepwise-worker: module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(value, Worker) and inspect.isfunction(value):
        try:
            inspect.signature(value).bind()
        except TypeError:
            raise SystemExit(
                f"stepwise-worker: {target} is a function that takes arguments, "
                "not a stepwise.worker.Worker (or a function without arguments returning one)"
            ) from None
        value = value()
    if not isinstance(value, Worker):
        raise SystemExit(
            f"stepwise-worker: {target} is a {type(value).__name__}, not a stepwise.worker.Worker"
        )
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    level = logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(
        level=logging.DEBUG if args.verbose >= 2 else level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.verbose == 1:
        logging.getLogger("stepwise").setLevel(logging.DEBUG)
    if args.verbose < 2:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    # Clients the module makes at import (Stepwise(), a StepwiseSaver) read these.
    if args.url:
        os.environ["STEPWISE_URL"] = args.url
    if args.api_key:
        os.environ["STEPWISE_API_KEY"] = args.api_key
    worker = load_worker(args.target)
    if worker.stopped:
        # The module ran the worker itself while it was imported (`worker.run()` at its end)
        # and it has stopped: on a signal, as it should; not a second start.
        return 1 if worker._fatal is not None else 0
    try:
        worker.connect(base_url=args.url, api_key=args.api_key)
        if args.concurrency is not None:
            worker.concurrency = args.concurrency
        if args.worker_id is not None:
            worker.worker_id = args.worker_id
        if args.wait_s is not None:
            worker.wait_s = args.wait_s
        worker._validate()
    except (ValueError, RuntimeError) as e:
        print(f"stepwise-worker: {e}", file=sys.stderr)
        return 2
    from ._worker import WorkerError

    try:
        worker.run()
    except WorkerError as e:
        print(f"stepwise-worker: {e}", file=sys.stderr)
        return 1
    except RuntimeError as e:  # e.g. a worker without agents
        print(f"stepwise-worker: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
