"""When to retry a request, and how long to wait first: one policy for both clients, the lean
connections and the worker."""

from __future__ import annotations

import email.utils
import random
import time
from typing import Mapping

import httpx

__all__ = ["LEAN_RETRY_STATUSES", "RETRY_STATUSES", "RetryPolicy", "retry_after_seconds"]

# Answers worth another try for an idempotent call. 429 is retried for every call: a
# refusal writes nothing.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# What the lean connections of the adapters' hot paths retry: a 500 there is not a passing
# state of the server (a proxy's 502, an overload's 503 are).
LEAN_RETRY_STATUSES = frozenset({429, 502, 503, 504})

# Failures where the request never left this process: safe to retry whatever it does.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures no retry can fix.
_PERMANENT = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.ProxyError)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Reads `Retry-After` (seconds, or an HTTP date); `None` when absent or unreadable."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class RetryPolicy:
    """Exponential backoff with jitter, honouring `Retry-After`.

    An idempotent call is retried on any connection failure, on the answers of `statuses`
    (5xx: 500, 502, 503, 504; and 429). A call that could write twice is retried only when it
    certainly wrote nothing: when the connection could not be opened (the request was never
    sent), or on 429 (the server refused it before doing anything).

    The wait before retry number ``n + 1`` is ``backoff * 2**n`` seconds, at most
    `max_backoff`, of which the last `jitter` part is random (the first half by default).
    """

    def __init__(
        self,
        max_retries: int = 3,
        *,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
        jitter: float = 0.5,
        statuses: frozenset[int] = RETRY_STATUSES,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.max_retries = max_retries
        self.backoff, self.max_backoff, self.jitter = backoff, max_backoff, jitter
        self.max_retry_after = max_retry_after
        self.statuses = statuses

    def backoff_delay(self, attempt: int) -> float:
        """The wait before retry number `attempt + 1`: exponential, with jitter."""
        delay = min(self.max_backoff, self.backoff * (2.0**attempt))
        return delay * (1.0 - self.jitter + random.random() * self.jitter)

    def after_error(self, exc: Exception, *, idempotent: bool, attempt: int) -> float | None:
        """The wait before another try after httpx's connection failure, or `None` to give up."""
        if attempt >= self.max_retries or isinstance(exc, _PERMANENT):
            return None
        if not idempotent and not isinstance(exc, _NOT_SENT):
            return None
        return self.backoff_delay(attempt)

    def after_no_answer(self, *, idempotent: bool, attempt: int) -> float | None:
        """The wait before another try after a lean connection got no answer (it could not
        connect, or broke, or timed out), or `None` to give up: an idempotent call is tried
        again, at least once whatever `max_retries` says."""
        if not idempotent or attempt >= max(self.max_retries, 1):
            return None
        return self.backoff_delay(attempt)

    def after_answer(
        self, status: int, headers: Mapping[str, str], *, idempotent: bool, attempt: int
    ) -> float | None:
        """The wait before another try after an answer, or `None` to take the answer."""
        if status not in self.statuses or attempt >= self.max_retries:
            return None
        if not idempotent and status != 429:
            return None
        after = retry_after_seconds(headers)
        if after is not None:
            return min(after, self.max_retry_after)
        return self.backoff_delay(attempt)
