"""The storage JSON codec: any depth both ways, and only typed errors for bad text."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.kernel import jsoncodec
from agentlog.kernel.jsoncodec import JsonDecodeError


def _deep(depth: int, leaf: object) -> object:
    value = leaf
    for index in range(depth):
        value = {"k": [value, index]} if index % 2 else [value]
    return value


def test_jsoncodec__values_deeper_than_orjson_accepts_round_trip() -> None:
    value = _deep(5_000, {"leaf": "é", "n": 1.5})
    data = jsoncodec.dumps(value)
    assert jsoncodec.dumps(jsoncodec.loads(data)) == data


@pytest.mark.parametrize(
    "text",
    ['{"a\\q": 1}', '[{"a": 1, "b\\x": 2}]', '{"a" 1}', "{1: 2}", "[1,]", "[1 2]", '{"a": 1', '"open', "[] x"],
)
def test_jsoncodec__bad_text_past_the_fast_parser_is_a_typed_error(text: str) -> None:
    deep = "[" * 1_100 + text + "]" * 1_100  # beyond orjson's nesting limit: the iterative parser decides
    with pytest.raises(JsonDecodeError):
        jsoncodec.loads(deep)


def test_jsoncodec__nesting_beyond_the_reader_limit_is_a_typed_error() -> None:
    with pytest.raises(JsonDecodeError, match="nesting exceeds 2000 levels"):
        jsoncodec.loads(b"[" * 2_500 + b"]" * 2_500, max_depth=2_000)


json_text_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(json_text_values)
def test_jsoncodec__the_iterative_parser_agrees_with_the_standard_library(value: object) -> None:
    text = json.dumps(value)
    assert jsoncodec._loads_iterative(text, 100) == json.loads(text)
