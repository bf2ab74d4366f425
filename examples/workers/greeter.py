"""A worker with three plain-function agents: `greeter`, `counter` and `asker`.

    stepwise serve &                                   # a server on http://127.0.0.1:7777
    stepwise-worker greeter:worker                     # from this directory
    curl -s -X POST http://127.0.0.1:7777/v1/messages -H 'Content-Type: application/json' \
         -d '{"content": "Ada", "agent": {"type": "greeter"}}'

Or run this file: `python greeter.py` (the same as `stepwise-worker greeter:worker`).
"""

import time

from stepwise import Stepwise
from stepwise.worker import Worker

worker = Worker(Stepwise(), concurrency=4)


@worker.agent("greeter", description="Says hello")
def greeter(run):
    run.step(model_output="Greeting the user", observations="said hello")
    for word in ("Hello", ", ", run.input_text):
        run.delta(word)  # live tokens for the web UI and `stepwise chat`
    return f"Hello, {run.input_text}"


def count(n):
    time.sleep(1)  # a slow tool: after a lost worker it is not called again for a saved step
    return n


@worker.agent("counter", description="Counts to ten, one step a second; survives a restart of this worker")
def counter(run):
    for n in range(1, 11):  # after a lost worker the saved steps replay: tools run once per run
        run.check()  # stops here when the execution is cancelled or the worker shuts down
        run.call("count", count, n)
    return "counted to 10"


@worker.agent("asker", description="Asks for your name")
def asker(run):
    name = run.ask("What is your name?")  # pauses; your next message in the session answers
    return f"Nice to meet you, {name}"


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    worker.run()
