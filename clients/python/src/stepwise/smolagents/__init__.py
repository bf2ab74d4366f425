"""Stepwise as the session store of smolagents agents.

```python
from stepwise import Stepwise
from stepwise.smolagents import StepwiseMemory

client = Stepwise()
memory = StepwiseMemory(client, session="alpha")   # a session name or id; created if missing
memory.attach(agent)                                # any MultiStepAgent: CodeAgent, ToolCallingAgent
agent.run("...")                                    # every step saved as it finishes
memory.switch(agent, "beta")                        # agent.memory now holds beta's steps only
agent.run("...", reset=False)                       # continues beta's conversation
```

How it hooks into smolagents (1.26):

* ``attach`` registers one callback in the agent's ``step_callbacks`` registry for
  ``ActionStep``, ``PlanningStep`` and ``FinalAnswerStep``, and wraps the agent's ``run``
  method on the instance (``agent.run``), so it learns when a run starts, ends with its
  final answer, or raises. ``run(stream=True)`` keeps working: the generator it returns is
  wrapped, and a stream closed before its final answer ends the execution as failed. The
  run's TaskStep is queued as ``run`` appends it to ``agent.memory.steps`` (the wrapper
  puts a list there that reports it; for ``reset=True`` it empties the memory itself and
  calls ``run`` with ``reset=False``, which does the same), before the model is called.
  ``detach`` undoes the callback and the wrapper.
* Each ``agent.run`` is one Stepwise execution of agent type ``external``
  (``input = {"task": ..., "reset": ...}``). Its steps are numbered 1, 2, 3, ... in the
  order they finished: the run's ``task`` step first, then ``planning`` and ``action``
  steps, and a ``final_answer`` step; the execution then ends ``completed`` (its
  ``final_message`` is the answer as text) or ``failed`` with the error.
* Nothing in the agent's thread waits for the network: the callback takes a shallow copy
  of the finished step and puts it on a queue; a background thread converts it to JSON
  and a second one sends it (``append_step(..., step_number=n)``, so a retried send never
  writes twice), so converting the next steps overlaps sending the last ones. Steps of a
  run that queued up while the threads were busy go out together, numbered, in one
  ``append_steps`` request (up to 1,000); the run's open, complete and fail still come in
  order, after the steps queued before them.
  ``flush()`` waits until everything queued so far is saved; interpreter exit flushes too.
* A saved step is readable in Stepwise's terms (``kind``, ``model_output``, ``tool_calls``,
  ``code``, ``observations``, ``error``, ``token_usage``, ``started_at``/``ended_at``) and
  its ``output`` holds the whole smolagents step as JSON
  (``{"smolagents": {"version": 1, "type": "ActionStep", "data": {...}}}``), from which
  ``restore`` rebuilds it. Images are kept as base64 PNG (with Pillow). Not kept: a chat
  message's ``raw`` provider answer; the steps' ``model_input_messages`` unless
  ``save_model_input=True`` (each step's prompt is the system prompt plus every step
  before it, so keeping them grows with the square of the session's length); an
  ``action_output`` that is not JSON comes back in smolagents' JSON form.

The memory is in `_memory`, the conversion in `_codec`, the two threads in `_sender`.

``import_legacy(database_url, client=...)`` moves memories an app kept as pickles of
``agent.memory.steps`` in a SQL table into Stepwise sessions, once (see its docstring).
"""

from ._codec import PAYLOAD_VERSION, decode_step, encode_step, memory_steps
from ._memory import ImportReport, StepwiseMemory, import_legacy

__all__ = [
    "StepwiseMemory",
    "import_legacy",
    "ImportReport",
    "PAYLOAD_VERSION",
    "encode_step",
    "decode_step",
    "memory_steps",
]
