"""An OpenAI Agents SDK agent with a tool as agent type `assistant`.

    pip install "./clients/python[openai-agents]"   # from the repository root
    export OPENAI_API_KEY=...
    stepwise-worker openai_assistant:worker

The conversation is kept by `StepwiseSession`, streamed text goes out live, each tool call and
result is a step, and cancel stops the run.
"""

from agents import Agent, function_tool

from stepwise import Stepwise
from stepwise.worker import Worker


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 °C and light rain in {city}"


agent = Agent(name="Assistant", instructions="Reply very concisely.", tools=[get_weather])

worker = Worker(Stepwise(), concurrency=4)
worker.openai_agents("assistant", agent, description="A concise assistant that knows the weather")

if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO)
    worker.run()
