"""The client's exception type, `StepwiseError`, and its one subclass, `ForbiddenError`."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StepwiseError", "ForbiddenError"]

# The code used when an answer carries no error body of the API's shape.
_CODES_BY_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_state",
    429: "rate_limited",
}


class StepwiseError(Exception):
    """An error answer of the Stepwise API, or no answer at all.

    Attributes:
        status: the HTTP status (``None`` when no answer arrived, e.g. connection refused).
        code: the API's snake_case error code (``not_found``, ``conflict``,
            ``invalid_request``, ``invalid_state``, ``rate_limited``, ...), or
            ``connection_error`` when the server could not be reached or did not answer.
        message: the server's human sentence (or what went wrong on the way).
        field: the request field at fault, when the server names one.
        method, url: the request that failed, when known.
        body: the parsed error body (``None`` when it was not JSON).

    ``str(error)`` reads like ``404 not_found: session not found``.
    """

    status: int | None
    code: str
    message: str
    field: str | None
    method: str | None
    url: str | None
    body: Any

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        method: str | None = None,
        url: str | None = None,
        body: Any = None,
    ) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.method = method
        self.url = url
        self.body = body
        super().__init__(self.__str__())

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.status is not None:
            text = f"{self.status} {text}"
        if self.field:
            text += f" (field: {self.field})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, field={self.field!r})"
        )

    def __reduce__(self) -> Any:
        # Picklable (pytest-xdist, multiprocessing) despite the keyword-only arguments.
        return (
            _rebuild,
            (self.code, self.message, self.status, self.field, self.method, self.url, self.body, type(self)),
        )


class ForbiddenError(StepwiseError):
    """A ``403 forbidden`` answer: the credential is valid, but its role may not do this.

    A ``user`` credential (an end user's token or key) calling an admin operation, such as
    minting tokens or managing keys, gets it. It is a `StepwiseError` with code ``forbidden``;
    another user's session is not forbidden but ``not_found`` (a plain `StepwiseError`).
    """


def _error(code: str, message: str, **fields: Any) -> StepwiseError:
    """The error for an answer's code: `ForbiddenError` for ``forbidden``."""
    cls = ForbiddenError if code == "forbidden" else StepwiseError
    return cls(code, message, **fields)


def _rebuild(
    code: str,
    message: str,
    status: int | None,
    field: str | None,
    method: str | None,
    url: str | None,
    body: Any,
    cls: type[StepwiseError] = StepwiseError,
) -> StepwiseError:
    return cls(code, message, status=status, field=field, method=method, url=url, body=body)


def error_from_answer(
    status: int,
    body: Any,
    text: str,
    *,
    method: str | None = None,
    url: str | None = None,
    reason: str = "",
) -> StepwiseError:
    """Builds the error for a non-2xx answer, from the API's error shape when it has one."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        field = error.get("field")
        return _error(
            error["code"],
            str(error.get("message") or reason or "error"),
            status=status,
            field=field if isinstance(field, str) else None,
            method=method,
            url=url,
            body=body,
        )
    code = _CODES_BY_STATUS.get(status, "server_error" if status >= 500 else "http_error")
    snippet = " ".join(text.split())[:200]
    message = f"{reason or 'HTTP error'}" + (f": {snippet}" if snippet else "")
    if method and url:
        message += f" ({method} {url})"
    return _error(code, message, status=status, method=method, url=url, body=body)


def parse_answer(status: int, content: bytes, *, method: str, path: str, url: str) -> Any:
    """The parsed JSON of an answer read off a lean connection (``None`` when empty): the
    API's error for a non-2xx status, ``invalid_response`` for a 2xx one that is not JSON."""
    parsed: Any = None
    text = ""
    if content:
        try:
            parsed = json.loads(content)
        except ValueError:
            text = content[:2000].decode("utf-8", "replace")
    if not 200 <= status < 300:
        raise error_from_answer(status, parsed, text, method=method, url=url)
    if text:
        raise StepwiseError(
            "invalid_response",
            f"the answer to {method} {path} is not JSON: {text[:200]!r}",
            status=status,
            method=method,
            url=url,
        )
    return parsed
