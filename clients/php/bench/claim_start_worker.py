"""The Python worker's side of claim_start.php: the same `bench-echo` agent as the PHP one
(and as clients/python/bench/worker_echo.py), printing `started <execution id> <unix time>` the
moment its function starts. Env: STEPWISE_URL, STEPWISE_API_KEY.

    PYTHONPATH=clients/python/src php clients/php/bench/claim_start.php \
        --worker-cmd "python3 clients/php/bench/claim_start_worker.py"
"""

import sys
import time

from stepwise import Stepwise
from stepwise.worker import Worker

worker = Worker(Stepwise(), concurrency=1)


@worker.agent("bench-echo", description="Saves one step and answers")
def echo(run):  # noqa: ANN001, ANN201
    started = time.time()
    sys.stdout.write(f"started {run.execution_id} {started:.6f}\n")
    sys.stdout.flush()
    run.step(model_output="Echoing", observations=run.input_text)
    return f"Echo: {run.input_text}"


worker.start()
sys.stdout.write("ready\n")
sys.stdout.flush()
worker.wait()  # until the benchmark ends it (SIGTERM)
