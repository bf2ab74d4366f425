"""Workers: run your own agents behind Stepwise's queue.

::

    from stepwise import Stepwise
    from stepwise.worker import Worker

    worker = Worker(Stepwise(), concurrency=4)

    @worker.agent("greeter", description="Says hello")
    def greeter(run):                        # run.input_text, run.memory, run.steps, run.answer
        run.step(model_output="Greeting the user", observations="said hello")
        return f"Hello, {run.input_text}"    # the final answer: the execution completes with it

    worker.run()                             # until SIGINT/SIGTERM

Run it with ``stepwise-worker myapp.agents:worker`` (or ``python -m stepwise.worker
myapp.agents:worker``). The protocol is in ``docs/workers.md``; the framework runners
(`Worker.smolagents`, `Worker.langgraph`, `Worker.openai_agents`) import their framework only
when used.
"""

from ._run import CallError, Cancelled, Retry, Run, SubagentError
from ._worker import AgentSpec, Worker, WorkerError

__all__ = ["Worker", "Run", "Cancelled", "Retry", "SubagentError", "CallError", "AgentSpec", "WorkerError"]
