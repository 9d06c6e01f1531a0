"""The shared schema base: unknown keys and wrong types become one-line ConfigErrors naming the key."""

from typing import Literal

import pytest
from pydantic import PositiveInt

from contrastfit.errors import ConfigError
from contrastfit.schema import Schema, parse


class Protocol(Schema):
    kind: Literal["few-shot", "full"]
    samples: PositiveInt = 5
    rate: float = 0.5


def test_parse_accepts_valid_values_and_fills_defaults():
    p = parse(Protocol, {"kind": "full", "rate": 1}, "exp.yaml: protocol")
    assert (p.kind, p.samples, p.rate) == ("full", 5, 1.0)


@pytest.mark.parametrize("raw, needle", [
    ({"kind": "full", "sample": 3}, "unknown key 'sample' (allowed: kind, rate, samples)"),
    ({"kind": "full", "samples": "3"}, "exp.yaml: protocol: samples must be int, got '3'"),
    ({"kind": "full", "samples": 0}, "exp.yaml: protocol: samples must be > 0, got 0"),
    ({"kind": "x"}, "exp.yaml: protocol: kind must be one of few-shot, full, got 'x'"),
    ([1, 2], "expected a mapping"),
])
def test_parse_errors_are_one_line_and_name_the_key(raw, needle):
    with pytest.raises(ConfigError) as info:
        parse(Protocol, raw, "exp.yaml: protocol")
    message = str(info.value)
    assert message.startswith("exp.yaml: protocol: ") and needle in message and "\n" not in message


def test_parsed_objects_are_immutable():
    p = parse(Protocol, {"kind": "full"}, "x")
    with pytest.raises(Exception):
        p.samples = 3
