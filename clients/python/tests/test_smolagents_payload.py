"""The smolagents step payload alone (no server): `encode_step` / `decode_step` keep what JSON
and the server's sorted objects would lose (tuples, int keys, big ints, nan and inf, images,
key order), and values that are not JSON come back in smolagents' own JSON form."""

from __future__ import annotations

import json
import random
import threading

import pytest

pytest.importorskip("smolagents")

from smolagents.memory import ActionStep, FinalAnswerStep, PlanningStep, ToolCall  # noqa: E402
from smolagents.models import ChatMessage, MessageRole  # noqa: E402
from smolagents.monitoring import Timing, TokenUsage  # noqa: E402

from stepwise.smolagents._codec import _dec, encode_value as _enc  # noqa: E402
from stepwise.smolagents import decode_step, encode_step  # noqa: E402


def test_payload_round_trip_keeps_what_json_and_the_server_would_lose():
    from PIL import Image

    image = Image.new("RGB", (3, 2), (10, 20, 30))
    step = ActionStep(
        step_number=3,
        timing=Timing(start_time=1.5, end_time=float("inf")),
        tool_calls=[
            ToolCall(
                name="lookup", arguments={"zeta": (1, 2), "alpha": {"b": 1, "a": [None, 1.25]}}, id="c"
            )
        ],
        model_output="thinking",
        observations="seen",
        observations_images=[image],
        action_output={3: "int key", "$tuple": "a key that looks like a tag", "big": 2**70, "nan": float("nan")},
        token_usage=TokenUsage(1, 2),
    )
    body = encode_step(step)
    # The server keeps objects with sorted keys: simulate it.
    wire = json.loads(json.dumps(body, sort_keys=True))
    back = decode_step(wire)
    assert back.tool_calls[0].arguments == {"zeta": (1, 2), "alpha": {"b": 1, "a": [None, 1.25]}}
    assert list(back.tool_calls[0].arguments) == ["zeta", "alpha"]
    assert back.to_messages() == step.to_messages()
    assert back.timing.end_time == float("inf")
    nan = back.action_output.pop("nan")
    assert nan != nan
    assert back.action_output == {3: "int key", "$tuple": "a key that looks like a tag", "big": 2**70}
    assert back.observations_images[0].tobytes() == image.tobytes()
    assert body["tool_calls"] == [
        {"id": "c", "name": "lookup", "arguments": {"zeta": [1, 2], "alpha": {"b": 1, "a": [None, 1.25]}}}
    ]
    assert decode_step({"output": {"something": "else"}}) is None
    # An object that is not JSON comes back in smolagents' JSON form.
    odd = encode_step(FinalAnswerStep(output=threading.Event()))
    assert json.loads(json.dumps(odd))["output"]["smolagents"]["data"]["output"]["$object"] == "Event"
    assert decode_step(odd).output["_type"] == "Event"
    planned = PlanningStep(
        model_input_messages=[],
        model_output_message=ChatMessage(role=MessageRole.ASSISTANT, content="p", token_usage=TokenUsage(5, 3)),
        plan="p",
        timing=step.timing,
    )
    assert isinstance(decode_step(json.loads(json.dumps(encode_step(planned), sort_keys=True))), PlanningStep)


def _random_value(rng, depth=0):
    kinds = ["none", "bool", "int", "float", "str", "big"] + (["list", "tuple", "dict"] * 2 if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.randint(-(2**63), 2**64 - 1)
    if kind == "big":
        return rng.choice([-1, 1]) * rng.randint(2**64, 2**80)
    if kind == "float":
        return rng.choice([rng.uniform(-1e6, 1e6), float("inf"), float("-inf"), float("nan"), 0.1, -0.0, 1e300])
    if kind == "str":
        return rng.choice(["", "$dict", "$tuple", "$int", "$object", "value", "é✓", "{\"a\": 1}", "[1, 2]"]) + str(rng.randint(0, 3))[:rng.randint(0, 1)]
    items = [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    keys = [rng.choice(["$dict", "$tuple", "$float", "$int", "$image", "$object", "value", "b", "a", "Z", "é", 7, (1, "x"), -2.5])
            for _ in items]
    return dict(zip(keys, items))


def test_payload_round_trip_of_random_values():
    for seed in range(400):
        rng = random.Random(seed)
        value = _random_value(rng)
        wire = json.loads(json.dumps(_enc(value), sort_keys=True, allow_nan=False))
        back = _dec(wire)
        # repr compares types, key order, tuples vs lists, -0.0 and nan as well
        assert repr(back) == repr(value), f"seed {seed}"
