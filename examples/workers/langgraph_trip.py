"""A LangGraph graph as agent type `trip`, with no LLM: it plans, asks which city (an
`interrupt()`, which pauses the execution until you answer), and books.

    pip install "./clients/python[langgraph]"   # from the repository root
    stepwise-worker langgraph_trip:worker
    # then, in the web UI or `stepwise chat`, send "Book me a trip" to agent `trip`, answer "Paris"
"""

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import interrupt

from stepwise import Stepwise
from stepwise.langgraph import StepwiseSaver
from stepwise.worker import Worker


def plan(state: MessagesState):
    return {"messages": [AIMessage("Planning the trip")]}


def book(state: MessagesState):
    city = interrupt("Which city?")
    return {"messages": [AIMessage(f"Booked a trip to {city}")]}


builder = StateGraph(MessagesState)
builder.add_node("plan", plan)
builder.add_node("book", book)
builder.add_edge(START, "plan")
builder.add_edge("plan", "book")
builder.add_edge("book", END)
graph = builder.compile(checkpointer=StepwiseSaver(Stepwise()))

worker = Worker(Stepwise(), concurrency=4)
worker.langgraph("trip", graph, description="Books trips (asks which city)")

if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO)
    worker.run()
