"""Request-header utilities and route context: spec core-session.md §3.8, §7.4, §10 and checklist §19.8
(items 166–177)."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from agentlog import (
    FrozenDict,
    FrozenError,
    InvalidEventError,
    InvalidSeedError,
    LegacyFormatError,
    Session,
    call_config_equals,
    canonical_header,
    fold_request_header,
    header_equals,
    thaw,
)

CONFIG = {"provider": "mock", "model": "m"}
CAPACITY = {"provider": "mock", "model": "m", "contextWindow": 128_000}


def _now() -> int:
    return 1_000


def tool(name: str, description: str = "d") -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": {"type": "object"}}


def user_message(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": [{"type": "text", "text": text}], "source": {"kind": "user"}}


def seed_with(*records: dict[str, Any]) -> list[dict[str, Any]]:
    """A turn-enclosed run of request/context records (original test helper `seedWith`)."""
    events: list[dict[str, Any]] = [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}]
    for data in records:
        events.append({"type": "request/context", "seq": len(events), "time": 1, "data": dict(data)})
    return events


# ------------------------------------------------------------------------------------------ 19.8


# spec 19.8 #166
def test_canonical_header__normalizes_empty_optional_fields_and_preserves_populated() -> None:
    empty = {"config": CONFIG, "adapterDefaults": {}, "system": "", "tools": []}
    before = copy.deepcopy(empty)
    result = canonical_header(empty)
    assert result == {"config": CONFIG}
    assert set(result) == {"config"}  # dropped, not set to None
    assert result["config"] is empty["config"]  # same reference (§10.1)
    assert empty == before  # input not mutated

    # marker-less adapterDefaults are dropped as well
    assert canonical_header({"config": CONFIG, "adapterDefaults": {"maxTokens": False}}) == {"config": CONFIG}

    config = {**CONFIG, "maxTokens": 256_000}
    adapter_defaults = {"maxTokens": True}
    tools = [tool("a")]
    # keys supplied in reverse order come back as config, adapterDefaults, system, tools
    full_input = {"tools": tools, "system": "s", "adapterDefaults": adapter_defaults, "config": config}
    full = canonical_header(full_input)
    assert full == {
        "config": {**CONFIG, "maxTokens": 256_000},
        "adapterDefaults": {"maxTokens": True},
        "system": "s",
        "tools": [tool("a")],
    }
    assert list(full) == ["config", "adapterDefaults", "system", "tools"]
    assert full["config"] is config
    assert full["adapterDefaults"] == adapter_defaults
    assert full is not full_input
    assert full_input == {"tools": [tool("a")], "system": "s", "adapterDefaults": {"maxTokens": True},
                          "config": {**CONFIG, "maxTokens": 256_000}}  # fmt: skip

    effort = canonical_header({"config": {**CONFIG, "reasoningEffort": "high"},
                               "adapterDefaults": {"reasoningEffort": True}})  # fmt: skip
    assert effort == {
        "config": {**CONFIG, "reasoningEffort": "high"},
        "adapterDefaults": {"reasoningEffort": True},
    }


# spec 19.8 #167
def test_header_equals__compares_every_canonical_field_and_preserves_tool_order() -> None:
    base = canonical_header({"config": CONFIG, "system": "s", "tools": [tool("a")]})
    clone = copy.deepcopy(thaw(base))
    assert header_equals(base, clone) is True
    assert header_equals(base, {**base, "config": {"provider": "mock", "model": "other"}}) is False
    assert header_equals(base, {**base, "config": {**base["config"], "reasoningEffort": "high"}}) is False
    assert (
        header_equals(
            {**base, "config": {**base["config"], "maxTokens": 256_000}},
            {
                **base,
                "config": {**base["config"], "maxTokens": 256_000},
                "adapterDefaults": {"maxTokens": True},
            },
        )
        is False
    )
    assert (
        header_equals(
            {"config": {**CONFIG, "reasoningEffort": "x"}},
            {"config": {**CONFIG, "reasoningEffort": "x"}, "adapterDefaults": {"reasoningEffort": True}},
        )
        is False
    )
    assert header_equals(base, {**base, "system": "other"}) is False
    assert header_equals(base, {**base, "tools": []}) is False
    assert header_equals(base, {**base, "tools": [tool("a", "changed")]}) is False
    assert (
        header_equals(
            {"config": CONFIG, "tools": [tool("a"), tool("b")]},
            {"config": CONFIG, "tools": [tool("b"), tool("a")]},
        )
        is False
    )
    # key order inside a tool schema matters (JSON text comparison, §10.2 / §18.11)
    reordered = {"description": "d", "name": "a", "parameters": {"type": "object"}}
    assert (
        header_equals({"config": CONFIG, "tools": [tool("a")]}, {"config": CONFIG, "tools": [reordered]})
        is False
    )
    # system is compared strictly: absent vs "" differ (§10.2)
    assert header_equals({"config": CONFIG}, {"config": CONFIG, "system": ""}) is False


# spec §10.2: tool comparison uses JSON text with JS number semantics (1 and 1.0 are the same JSON number)
def test_header_equals__tool_numbers_use_js_number_semantics() -> None:
    a = {"name": "a", "description": "d", "parameters": {"type": "string", "maxLength": 1}}
    b = {"name": "a", "description": "d", "parameters": {"type": "string", "maxLength": 1.0}}
    assert header_equals({"config": CONFIG, "tools": [a]}, {"config": CONFIG, "tools": [b]}) is True
    c = {"name": "a", "description": "d", "parameters": {"type": "string", "maxLength": 2}}
    assert header_equals({"config": CONFIG, "tools": [a]}, {"config": CONFIG, "tools": [c]}) is False


# spec 19.8 #168
def test_header_equals__treats_absent_and_empty_tool_arrays_as_equivalent() -> None:
    assert header_equals({"config": CONFIG}, {"config": CONFIG, "tools": []}) is True
    assert header_equals({"config": CONFIG, "tools": []}, {"config": CONFIG}) is True
    assert header_equals({"config": CONFIG}, {"config": CONFIG, "tools": [tool("a")]}) is False


# spec §3.8 (callConfigEquals, used by headerEquals in 19.8 #167)
def test_call_config_equals__strict_fields_stop_lists_and_ignored_keys() -> None:
    base = {"provider": "p", "model": "m", "reasoningEffort": "high", "temperature": 0.5, "maxTokens": 10}
    assert call_config_equals(base, dict(base)) is True
    for key, other in (
        ("provider", "q"),
        ("model", "n"),
        ("reasoningEffort", "low"),
        ("temperature", 0.7),
        ("maxTokens", 11),
    ):
        assert call_config_equals(base, {**base, key: other}) is False, key
        without = {k: v for k, v in base.items() if k != key}
        assert call_config_equals(base, without) is False, key  # absent ≠ any value
        assert call_config_equals(without, base) is False, key
    # a present null counts as present (§0): absent ≠ None
    assert (
        call_config_equals(
            {"provider": "p", "model": "m"}, {"provider": "p", "model": "m", "temperature": None}
        )
        is False
    )

    plain = {"provider": "p", "model": "m"}
    assert call_config_equals(plain, {**plain, "stop": []}) is False  # one side absent → both must be absent
    assert call_config_equals({**plain, "stop": []}, plain) is False
    assert call_config_equals({**plain, "stop": []}, {**plain, "stop": []}) is True
    assert call_config_equals({**plain, "stop": ["a", "b"]}, {**plain, "stop": ["a", "b"]}) is True
    assert call_config_equals({**plain, "stop": ["a", "b"]}, {**plain, "stop": ["b", "a"]}) is False
    assert call_config_equals({**plain, "stop": ["a"]}, {**plain, "stop": ["a", "b"]}) is False
    # any other key is ignored
    assert call_config_equals({**plain, "extra": 1, "topP": 0.9}, {**plain, "extra": 2}) is True


# spec 19.8 #169
def test_fold_request_header__returns_supplied_baseline_when_no_snapshot_follows() -> None:
    baseline = {"config": CONFIG, "system": "baseline"}
    unrelated = [{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}]
    assert fold_request_header(unrelated) is None
    assert fold_request_header(unrelated, baseline) is baseline
    assert fold_request_header([]) is None
    assert fold_request_header([], baseline) is baseline

    session = Session.create("fold-baseline", now=_now)
    session.append("turn/start", {"turn": 1})
    session.append("todo/write", {"todos": []})
    assert fold_request_header(session.events) is None
    assert fold_request_header(session.events, baseline) is baseline


# spec 19.8 #170
def test_fold_request_header__takes_latest_full_snapshot_and_skips_unrelated_events() -> None:
    session = Session.create("fold", now=_now)
    session.append("turn/start", {"turn": 1})
    session.append("request/header", {"header": {"config": CONFIG, "system": "first"}, "reason": "initial"})
    session.append("user/message", user_message("hi"), {"surfaceOp": "append"})
    session.append(
        "request/header",
        {"header": {"config": {"provider": "mock", "model": "other"}, "tools": []}, "reason": "change"},
    )
    folded = fold_request_header(session.events)
    assert folded == {"config": {"provider": "mock", "model": "other"}}
    assert "tools" not in folded
    # a later unrelated event does not change the fold; a baseline is replaced by the snapshot
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert fold_request_header(session.events, {"config": CONFIG}) == {
        "config": {"provider": "mock", "model": "other"}
    }
    # the session's incremental fold agrees, and is header-equal to the canonical form
    assert session.request_header() == folded
    assert header_equals(
        session.request_header(), canonical_header({"config": {"provider": "mock", "model": "other"}})
    )


# spec 19.8 #171
def test_legacy__rejects_request_header_delta_in_seeds_and_appends() -> None:
    legacy = [{"type": "request/header-delta", "seq": 0, "time": 1, "data": {"config": CONFIG}}]
    with pytest.raises(
        InvalidSeedError,
        match=re.escape("seed event at index 0 uses unsupported legacy request/header-delta format"),
    ) as seed_err:
        Session.create("legacy", legacy, now=_now)
    assert seed_err.value.index == 0
    assert seed_err.value.code == "INVALID_SEED"

    # at index 1, and checked before the envelope (§7.1 step 1): an extra key does not change the text
    later = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "request/header-delta", "seq": 1, "time": 1, "data": {}, "bogus": True},
    ]
    with pytest.raises(
        InvalidSeedError,
        match=re.escape("seed event at index 1 uses unsupported legacy request/header-delta format"),
    ) as seed_err:
        Session.create("legacy-later", later, now=_now)
    assert seed_err.value.index == 1

    session = Session.create("legacy-append-delta", now=_now)
    with pytest.raises(
        LegacyFormatError,
        match=re.escape(
            'session event "request/header-delta" uses unsupported legacy request/header-delta format'
        ),
    ) as append_err:
        session.append("request/header-delta", {"config": CONFIG})
    assert isinstance(append_err.value, InvalidEventError)
    assert append_err.value.code == "UNSUPPORTED_LEGACY_FORMAT"
    assert session.events == []
    assert session.seq == 0
    assert session.request_header() is None


# spec 19.8 #172
def test_legacy__rejects_removed_fallback_reason_in_seeds_and_appends() -> None:
    legacy = [
        {
            "type": "request/header",
            "seq": 0,
            "time": 1,
            "data": {"header": {"config": CONFIG}, "reason": "fallback"},
        }
    ]
    with pytest.raises(
        InvalidSeedError,
        match=re.escape('seed event at index 0 uses unsupported legacy request/header reason "fallback"'),
    ) as seed_err:
        Session.create("legacy-seed-reason", legacy, now=_now)
    assert seed_err.value.index == 0

    # §7.4: for seeds the provider/model check (7.2) runs before the fallback check
    no_model = [
        {
            "type": "request/header",
            "seq": 0,
            "time": 1,
            "data": {"header": {"config": {}}, "reason": "fallback"},
        }
    ]
    with pytest.raises(
        InvalidSeedError, match=re.escape("seed request/header at index 0 lacks provider/model")
    ):
        Session.create("legacy-seed-no-model", no_model, now=_now)

    session = Session.create("legacy-append-reason", now=_now)
    with pytest.raises(
        LegacyFormatError,
        match=re.escape(
            'session event "request/header" uses unsupported legacy request/header reason "fallback"'
        ),
    ) as append_err:
        session.append("request/header", {"header": {"config": CONFIG}, "reason": "fallback"})
    assert isinstance(append_err.value, InvalidEventError)
    assert session.events == []
    assert session.seq == 0

    # the three live reasons are accepted
    for reason in ("initial", "resume", "change"):
        session.append("request/header", {"header": {"config": CONFIG}, "reason": reason})
    assert [e["data"]["reason"] for e in session.events] == ["initial", "resume", "change"]


# spec 19.8 #173
def test_request_context__reads_none_before_any_record_exists() -> None:
    assert Session.create("no-capacity", now=_now).request_context() is None
    seeded = Session.create("no-capacity-seeded", [], now=_now)
    assert seeded.request_context() is None
    seeded.append("todo/write", {"todos": []})
    assert seeded.request_context() is None


# spec 19.8 #174
def test_request_context__folds_seeded_log_on_first_read_taking_last_record() -> None:
    session = Session.create(
        "seeded-capacity",
        seed_with(CAPACITY, {**CAPACITY, "model": "later", "contextWindow": 256_000}),
        now=_now,
    )
    assert session.request_context() == {"provider": "mock", "model": "later", "contextWindow": 256_000}


# spec 19.8 #175
def test_request_context__advances_incrementally_and_skips_unrelated_events() -> None:
    session = Session.create("incremental-capacity", seed_with(CAPACITY), now=_now)
    assert session.request_context() == CAPACITY
    session.append("todo/write", {"todos": []})
    assert session.request_context() == CAPACITY
    session.append("request/context", {**CAPACITY, "model": "next", "contextWindow": 64_000})
    assert session.request_context() == {"provider": "mock", "model": "next", "contextWindow": 64_000}
    session.append("request/context", {"provider": "mock", "model": "unknown"})
    latest = session.request_context()
    assert latest == {"provider": "mock", "model": "unknown"}
    assert "contextWindow" not in latest  # a record without contextWindow clears the capacity


# spec 19.8 #176
def test_request_context__folds_a_batch_appended_between_two_reads() -> None:
    session = Session.create("batched-capacity", seed_with(CAPACITY), now=_now)
    assert session.request_context() == CAPACITY
    session.append("request/context", {**CAPACITY, "contextWindow": 200_000})
    session.append("todo/write", {"todos": []})
    session.append("request/context", {**CAPACITY, "contextWindow": 300_000})
    assert session.request_context()["contextWindow"] == 300_000


# spec 19.8 #177
def test_request_context__exposes_a_frozen_record() -> None:
    session = Session.create("frozen-capacity", seed_with(CAPACITY), now=_now)
    held = session.request_context()
    assert held is not None
    assert isinstance(held, FrozenDict)
    with pytest.raises(FrozenError):
        held["contextWindow"] = 1
    with pytest.raises(TypeError):
        held["contextWindow"] = 1
    with pytest.raises(FrozenError):
        held.pop("model")
    with pytest.raises(FrozenError):
        held.update(model="x")
    assert session.request_context() == CAPACITY


# spec §10.4 session.requestHeader(): incremental canonical fold, deep-frozen result
def test_session_request_header__incremental_canonical_and_frozen() -> None:
    session = Session.create("header-fold", now=_now)
    assert session.request_header() is None
    session.append("turn/start", {"turn": 1})
    assert session.request_header() is None

    session.append(
        "request/header",
        {"header": {"config": CONFIG, "adapterDefaults": {}, "system": "", "tools": []}, "reason": "initial"},
    )
    first = session.request_header()
    assert first == {"config": CONFIG}
    assert set(first) == {"config"}
    with pytest.raises(FrozenError):
        first["system"] = "x"
    with pytest.raises(FrozenError):
        first["config"]["model"] = "x"

    session.append("todo/write", {"todos": []})
    assert session.request_header() == {"config": CONFIG}

    second_header = {"config": {**CONFIG, "maxTokens": 8}, "adapterDefaults": {"maxTokens": True},
                     "system": "sys", "tools": [tool("a")]}  # fmt: skip
    session.append("request/header", {"header": second_header, "reason": "change"})
    second = session.request_header()
    assert second == second_header
    assert list(second) == ["config", "adapterDefaults", "system", "tools"]
    with pytest.raises(FrozenError):
        second["tools"].append(tool("b"))
    assert first == {"config": CONFIG}  # an earlier result is not changed by later appends
    assert second == fold_request_header(session.events)

    # a seeded log is folded on first read
    seed = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {
            "type": "request/header",
            "seq": 1,
            "time": 1,
            "data": {"header": second_header, "reason": "initial"},
        },
    ]
    reopened = Session.create("header-reopen", seed, now=_now)
    assert reopened.request_header() == second_header
