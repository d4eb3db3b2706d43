"""The pure record mapping (:mod:`agentlog.telemetry.records`): shapes, severities, the deep copy and the
redact waterfall, without a store or a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import agentlog as al
from _json_strategies import json_mismatch, json_values
from agentlog.kernel.events import event_types
from agentlog.kernel.messages import text_block, tool_result_message
from agentlog.telemetry.records import (
    TelemetryRecord,
    agent_error_record,
    chunk_key,
    copy_data,
    error_detail,
    event_severity,
    ledger_record,
    redact_strings,
    run_rules,
    shutdown_record,
)

PLUGIN = "telemetry-test/records"
event_types.register(PLUGIN)


def _event(etype: str, data: Any, seq: int = 0, time: int = 5) -> dict[str, Any]:
    return {"type": etype, "seq": seq, "time": time, "data": data}


@given(json_values(max_leaves=40))
def test_a_ledger_body_is_an_equal_plain_copy_sharing_no_container_with_the_log(data: Any) -> None:
    frozen = al.snapshot_json({"v": data})
    record = ledger_record("s", {}, _event("x/y", frozen))
    assert json_mismatch(record["body"], frozen) is None
    frozen_ids = {id(c) for c in _containers(frozen)}
    assert not frozen_ids & {id(c) for c in _containers(record["body"])}
    for container in _containers(record["body"]):
        assert type(container) in (dict, list)  # plain, mutable: a rule may edit its own copy


@given(json_values(max_leaves=40))
def test_the_body_of_a_committed_event_is_its_data_whether_or_not_its_json_text_is_cached(data: Any) -> None:
    session = al.Session.create("s")
    event = session.append_custom(PLUGIN, {"v": data})
    assert event.cached_json_bytes() is None
    uncached = copy_data(event)
    assert event.json_bytes  # what persistence does on write: the text is cached from now on
    cached = copy_data(event)
    for body in (uncached, cached):
        assert json_mismatch(body, event["data"]) is None
    assert uncached is not cached


@given(json_values(max_leaves=40))
def test_redact_strings_maps_every_string_value_and_keeps_the_shape(body: Any) -> None:
    record: TelemetryRecord = {"channel": "ledger", "time": 0, "severity": "info", "attributes": {}, "body": body}
    out = run_rules([redact_strings(lambda text: f"<{text}>")], record)
    assert json_mismatch(out["body"], _expected_redaction(body)) is None
    assert json_mismatch(record["body"], body) is None  # the input is left as it was


@given(st.text(max_size=20))
def test_redact_strings_applies_to_a_bare_string_body(text: str) -> None:
    record: TelemetryRecord = {"channel": "ops", "time": 0, "severity": "info", "attributes": {}, "body": text}
    assert run_rules([redact_strings(str.upper)], record)["body"] == text.upper()


def test_the_innermost_next_returns_the_record_itself_and_no_rules_is_the_identity() -> None:
    record = shutdown_record("s", 7)
    assert run_rules([], record) is record
    assert run_rules([lambda r, next: next()], record) is record


def test_every_rule_sees_the_candidate_record_and_transforms_what_next_returns() -> None:
    record = shutdown_record("s", 7)
    seen: list[Any] = []

    def rule(name: str) -> Callable[[TelemetryRecord, Callable[[], TelemetryRecord]], TelemetryRecord]:
        def apply(candidate: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
            seen.append(candidate is record)
            inner = next()
            return {**inner, "body": [name, inner["body"]]}

        return apply

    out = run_rules([rule("outer"), rule("inner")], record)
    assert out["body"] == ["outer", ["inner", {"op": "shutdown"}]]
    assert seen == [True, True]


def test_severity_reads_only_the_core_outcome_flags() -> None:
    failed = tool_result_message("c", [text_block("x")], is_error=True)
    unflagged = tool_result_message("c", [text_block("x")])
    assert event_severity(_event("tool/result", {"turn": 1, "step": 1, "message": failed})) == "error"
    assert event_severity(_event("tool/result", {"turn": 1, "step": 1, "message": unflagged})) == "info"
    error_end = {"turn": 1, "reason": {"kind": "error", "error": {"message": "m", "code": "UNKNOWN"}}}
    assert event_severity(_event("turn/end", error_end)) == "error"
    for kind in ("completed", "blocked", "max-tokens", "interrupted"):
        assert event_severity(_event("turn/end", {"turn": 1, "reason": {"kind": kind}})) == "info"
    assert event_severity(_event("plugin/thing", {"isError": True, "reason": {"kind": "error"}})) == "info"


def test_ledger_identity_has_the_envelope_and_only_the_header_facts_present() -> None:
    event = _event("turn/start", {"turn": 1}, seq=4, time=1700)
    assert ledger_record("s", {"id": "s", "version": 0, "createdAt": 1}, event) == {
        "channel": "ledger",
        "time": 1700,
        "severity": "info",
        "attributes": {"session.id": "s", "event.type": "turn/start", "event.seq": 4},
        "body": {"turn": 1},
    }
    header = {"id": "s", "cwd": "/w", "parentSession": "p", "seedLength": 3}
    assert ledger_record("s", header, event)["attributes"] == {
        "session.id": "s",
        "event.type": "turn/start",
        "event.seq": 4,
        "session.cwd": "/w",
        "session.parent_id": "p",
        "session.seed_length": 3,
    }


def test_ops_records_carry_no_event_identity() -> None:
    assert shutdown_record("s", 3) == {
        "channel": "ops",
        "time": 3,
        "severity": "info",
        "attributes": {"telemetry.op": "shutdown", "session.id": "s"},
        "body": {"op": "shutdown"},
    }
    record = agent_error_record("s", "s", 2, 1, TypeError("adapter exploded"), 9)
    assert record == {
        "channel": "ops",
        "time": 9,
        "severity": "error",
        "attributes": {
            "telemetry.op": "agent-error",
            "session.id": "s",
            "agent.id": "s",
            "error.name": "TypeError",
            "turn": 2,
            "step": 1,
        },
        "body": {"name": "TypeError", "message": "adapter exploded"},
    }


def test_error_detail_normalizes_exceptions_and_other_values() -> None:
    assert error_detail(TypeError("adapter exploded")) == {"name": "TypeError", "message": "adapter exploded"}
    assert error_detail("plain failure") == {"name": "Error", "message": "plain failure"}


def test_chunk_key_is_turn_and_step_of_a_chunk_only() -> None:
    chunk = {"turn": 2, "step": 3, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}
    assert chunk_key(_event("assistant/chunk", chunk)) == (2, 3)
    assert chunk_key(_event("step/start", {"turn": 2, "step": 3})) is None


def _containers(value: Any) -> list[Any]:
    found: list[Any] = []
    work = [value]
    while work:
        item = work.pop()
        if isinstance(item, dict):
            found.append(item)
            work.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            work.extend(item)
    return found


def _expected_redaction(value: Any) -> Any:
    if isinstance(value, str):
        return f"<{value}>"
    if isinstance(value, dict):
        return {key: _expected_redaction(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_expected_redaction(item) for item in value]
    return value
