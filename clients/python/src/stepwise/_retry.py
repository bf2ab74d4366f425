"""When to retry a request, and how long to wait first (shared by both clients)."""

from __future__ import annotations

import email.utils
import random
import time
from typing import Mapping

import httpx

__all__ = ["RetryPolicy", "RETRY_STATUSES"]

# Answers worth another try for an idempotent call. 429 is retried for every call: a
# refusal writes nothing.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

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

    An idempotent call is retried on any connection failure, on 5xx (500, 502, 503, 504)
    and on 429. A call that could write twice is retried only when it certainly wrote
    nothing: when the connection could not be opened (the request was never sent), or on
    429 (the server refused it before doing anything).
    """

    def __init__(
        self,
        max_retries: int = 3,
        *,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after

    def backoff_delay(self, attempt: int) -> float:
        """The wait before retry number `attempt + 1`: exponential, with jitter in [50%, 100%]."""
        delay = min(self.max_backoff, self.backoff * (2.0**attempt))
        return delay * (0.5 + random.random() / 2)

    def after_error(self, exc: Exception, *, idempotent: bool, attempt: int) -> float | None:
        """The wait before another try after a connection failure, or `None` to give up."""
        if attempt >= self.max_retries or isinstance(exc, _PERMANENT):
            return None
        if not idempotent and not isinstance(exc, _NOT_SENT):
            return None
        return self.backoff_delay(attempt)

    def after_answer(
        self, status: int, headers: Mapping[str, str], *, idempotent: bool, attempt: int
    ) -> float | None:
        """The wait before another try after an answer, or `None` to take the answer."""
        if status not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        if not idempotent and status != 429:
            return None
        after = retry_after_seconds(headers)
        if after is not None:
            return min(after, self.max_retry_after)
        return self.backoff_delay(attempt)
