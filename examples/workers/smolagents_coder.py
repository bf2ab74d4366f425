"""A smolagents CodeAgent as agent type `coder`.

    pip install "./clients/python[smolagents]" litellm   # from the repository root
    export OPENAI_API_KEY=...                 # or set CODER_MODEL to another LiteLLM model id
    stepwise-worker smolagents_coder:worker

Each message continues the session's conversation (the agent's memory is restored from
Stepwise), every step is saved as it finishes, the output streams live, the `user_input` tool
asks you (the execution pauses until you answer), cancel interrupts the agent, and if this
worker dies mid-run another one goes on from the last saved step.
"""

import os

from smolagents import CodeAgent, LiteLLMModel
from smolagents.default_tools import UserInputTool

from stepwise import Stepwise
from stepwise.worker import Worker

model = LiteLLMModel(model_id=os.environ.get("CODER_MODEL", "gpt-4o-mini"))


def make_agent():
    return CodeAgent(tools=[UserInputTool()], model=model, stream_outputs=True, max_steps=12)


worker = Worker(Stepwise(), concurrency=4)
worker.smolagents("coder", make_agent, description="Writes and runs Python to answer")

if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO)
    worker.run()
