"""The redaction hook shared by the HTML export and telemetry: patterns, a user function, dropped tool
output, and what it never touches (mapping keys, the event envelope, non-string values)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import InvalidOptionError
from agentlog.kernel.jsonvalue import snapshot_json
from agentlog.projection.redaction import DROPPED_TOOL_OUTPUT, REDACTED, Redactor, as_redactor

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=25,
)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for inner in value.values() for s in _strings(inner)]
    if isinstance(value, list):
        return [s for inner in value for s in _strings(inner)]
    return []


def _shape(value: Any) -> Any:
    """``value`` with every string replaced by one marker: what redaction must leave unchanged."""
    if isinstance(value, str):
        return "<s>"
    if isinstance(value, dict):
        return {key: _shape(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_shape(inner) for inner in value]
    return value


@given(json_values)
def test_the_function_sees_every_string_and_only_strings_change(value: Any) -> None:
    seen: list[str] = []

    def hook(text: str) -> str:
        seen.append(text)
        return "#" + text

    out = Redactor(hook).value(value)
    assert sorted(seen) == sorted(_strings(value))
    assert _shape(out) == _shape(value)  # keys, numbers, nesting kept
    assert sorted(_strings(out)) == sorted("#" + s for s in _strings(value))


def test_patterns_are_replaced_in_order_then_the_function_runs() -> None:
    redactor = Redactor(str.upper, patterns=[r"sk-[a-z0-9]+", "secret"], replacement="<x>")
    assert redactor("key sk-abc123 is secret") == "KEY <X> IS <X>"
    assert Redactor(patterns=["a+"])("baaad") == f"b{REDACTED}d"


def test_a_bad_pattern_or_function_is_a_typed_error() -> None:
    with pytest.raises(InvalidOptionError) as caught:
        Redactor(patterns=["("])
    assert caught.value.code == "INVALID_OPTION" and "(" in str(caught.value)
    with pytest.raises(InvalidOptionError):
        Redactor("not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError):
        Redactor(lambda text: None)("x")  # type: ignore[arg-type,return-value]


def test_dropping_tool_output_empties_every_tool_result_and_keeps_the_rest() -> None:
    message = al.tool_result_message("c1", "the output")
    data = {"turn": 1, "step": 1, "message": message, "meta": {"stdout": "the output"}, "error": {"code": "E"}}
    out = Redactor(drop_tool_output=True).event_data("tool/result", snapshot_json(data))  # frozen, as logged
    assert out["message"]["content"][0]["content"] == [{"type": "text", "text": DROPPED_TOOL_OUTPUT}]
    assert out["message"]["content"][0]["toolCallId"] == "c1" and out["message"]["source"] == message["source"]
    assert out["meta"] == DROPPED_TOOL_OUTPUT and out["error"] == {"code": "E"}
    prompt = al.user_message("the output is not a tool's here")
    assert Redactor(drop_tool_output=True).event_data("user/message", prompt) == prompt


def test_an_event_keeps_its_envelope() -> None:
    event = {"type": "user/message", "seq": 3, "time": 5, "data": al.user_message("hi"), "surfaceOp": "append"}
    out = Redactor(lambda text: "x").event(event)
    assert {key: out[key] for key in ("type", "seq", "time", "surfaceOp")} == {
        "type": "user/message",
        "seq": 3,
        "time": 5,
        "surfaceOp": "append",
    }
    assert out["data"]["content"][0]["text"] == "x"


def test_a_plain_function_is_a_hook_and_a_redactor_that_changes_nothing_is_none() -> None:
    assert as_redactor(None) is None and as_redactor(Redactor()) is None
    wrapped = as_redactor(str.lower)
    assert isinstance(wrapped, Redactor) and wrapped("ABC") == "abc"
    assert al.Redactor is Redactor
