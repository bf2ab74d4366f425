"""The worker `bench_worker.py` runs in its own process: `bench-echo` saves one step and
answers (`STEPWISE_BENCH_CONCURRENCY` runs at a time, default 16); `bench-echo-last` does the
same with its step marked `last=True`, sent with the completion in one request."""

import os

from stepwise import Stepwise
from stepwise.worker import Worker

worker = Worker(Stepwise(), concurrency=int(os.environ.get("STEPWISE_BENCH_CONCURRENCY", "16")))


@worker.agent("bench-echo", description="Saves one step and answers")
def echo(run):  # noqa: ANN001, ANN201
    run.step(model_output="Echoing", observations=run.input_text)
    return f"Echo: {run.input_text}"


@worker.agent("bench-echo-last", description="Saves one step with its answer, in one request")
def echo_last(run):  # noqa: ANN001, ANN201
    run.step(model_output="Echoing", observations=run.input_text, last=True)
    return f"Echo: {run.input_text}"
