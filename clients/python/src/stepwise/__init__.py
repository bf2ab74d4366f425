"""Stepwise Python client: durable sessions for AI agents.

>>> from stepwise import Stepwise
>>> client = Stepwise("http://127.0.0.1:7777")          # doctest: +SKIP
>>> session = client.session("support-42")               # doctest: +SKIP
>>> answer = client.post_message(session["id"], "2+3")   # doctest: +SKIP
>>> client.wait(answer["execution"]["id"])["output"]     # doctest: +SKIP
"""

from ._async_client import AsyncStepwise
from ._client import Stepwise
from ._errors import ForbiddenError, StepwiseError
from ._sse import Event
from ._version import __version__

__all__ = ["Stepwise", "AsyncStepwise", "StepwiseError", "ForbiddenError", "Event", "__version__"]
