"""`stepwise._transport`: the retries of one request on the lean connections (`request_flow`,
driven here without I/O) and the one `RetryPolicy` behind every path."""

from __future__ import annotations

import pytest

from stepwise import StepwiseError
from stepwise._transport.retry import LEAN_RETRY_STATUSES, RetryPolicy
from stepwise._transport.wire import REVIVE, SEND, Failed, request_flow


def _flow(idempotent: bool = True, revive: bool = False, max_retries: int = 2):
    policy = RetryPolicy(max_retries, statuses=LEAN_RETRY_STATUSES)
    flow = request_flow(policy, "PUT", "/v1/x", "http://h:1", idempotent=idempotent, revive=revive)
    assert next(flow) is SEND
    return flow


def _ok(body: bytes = b'{"a":1}', status: int = 200, headers: dict[str, str] | None = None):
    return (status, headers or {}, body, False)


def _answer(flow, answer):
    with pytest.raises(StopIteration) as done:
        flow.send(answer)
    return done.value.value


def test_a_kept_alive_connection_that_failed_is_tried_again_at_once_and_not_counted() -> None:
    flow = _flow(max_retries=1)
    assert flow.send(Failed(ConnectionResetError(), reused=True)) is SEND
    assert flow.send(Failed(ConnectionResetError(), reused=True)) is SEND
    delay = flow.send(Failed(ConnectionRefusedError(), reused=False))
    assert isinstance(delay, float) and 0.125 <= delay <= 0.25  # the first backoff
    assert next(flow) is SEND
    assert _answer(flow, _ok()) == {"a": 1}


def test_a_refused_connection_revives_the_embedded_server_once() -> None:
    flow = _flow(revive=True)
    assert flow.send(Failed(FileNotFoundError(), reused=False)) is REVIVE
    assert flow.send(True) is SEND
    delay = flow.send(Failed(ConnectionRefusedError(), reused=False))  # revived already
    assert isinstance(delay, float)


def test_a_revive_that_fails_falls_back_to_the_backoff() -> None:
    flow = _flow(revive=True)
    assert flow.send(Failed(ConnectionRefusedError(), reused=False)) is REVIVE
    assert isinstance(flow.send(False), float)


def test_a_call_that_could_write_twice_is_not_retried() -> None:
    flow = _flow(idempotent=False)
    with pytest.raises(StepwiseError) as caught:
        flow.send(Failed(ConnectionResetError("reset"), reused=True))
    assert caught.value.code == "connection_error"
    assert caught.value.message == "no answer from http://h:1 to PUT /v1/x: reset (ConnectionResetError)"
    flow = _flow(idempotent=False)
    with pytest.raises(StepwiseError) as caught:
        flow.send(_ok(b"", 503))
    assert caught.value.status == 503


def test_the_lean_statuses_are_retried_honouring_retry_after_and_others_are_answers() -> None:
    flow = _flow()
    assert flow.send(_ok(b"", 503, {"retry-after": "2"})) == 2.0
    assert next(flow) is SEND
    with pytest.raises(StepwiseError) as caught:
        flow.send(_ok(b'{"error":{"code":"internal","message":"boom"}}', 500))
    assert (caught.value.status, caught.value.message) == (500, "boom")


def test_retries_stop_after_max_retries() -> None:
    flow = _flow(max_retries=1)
    assert isinstance(flow.send(_ok(b"", 502)), float)
    assert next(flow) is SEND
    with pytest.raises(StepwiseError) as caught:
        flow.send(_ok(b"", 502))
    assert caught.value.status == 502


def test_no_answer_is_tried_once_more_even_with_no_retries() -> None:
    flow = _flow(max_retries=0)
    assert isinstance(flow.send(Failed(TimeoutError(), reused=False)), float)
    assert next(flow) is SEND
    with pytest.raises(StepwiseError) as caught:
        flow.send(Failed(TimeoutError(), reused=False))
    assert "TimeoutError" in caught.value.message


@pytest.mark.parametrize(("jitter", "low"), [(0.5, 0.5), (0.25, 0.75)])
def test_the_jitter_is_the_random_part_of_each_wait(jitter: float, low: float) -> None:
    policy = RetryPolicy(0, backoff=1.0, max_backoff=4.0, jitter=jitter)
    for attempt, base in [(0, 1.0), (1, 2.0), (2, 4.0), (5, 4.0)]:
        delays = [policy.backoff_delay(attempt) for _ in range(200)]
        assert all(base * low <= d <= base for d in delays)
