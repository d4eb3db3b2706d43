"""The ``sessionStats`` unit (runtime spec §2.5, §6.11) against the original's session-stats tests.

The first block follows ``session-stats/tests/projection.spec.ts`` "registry drive" case by case (the
original's plugin mount/unmount is ``register`` and its disposer); the second its "wall-time fold"
cases, folding synthetic events with controlled times through the unit directly; the loader test's
composed turn is :func:`test_loads_the_shipped_composition_and_serves_whole_log_counts`. The rest pins the
state schema (checkpoint rows read back) and the token-delta rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, cast

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.errors import ProjectionRowError
from agentlog.kernel.messages import assistant_message, text_block
from agentlog.kernel.session import Session
from agentlog.kernel.store import SessionStore
from agentlog.projection.registry import ProjectionRegistry
from agentlog.projection.stats import (
    SESSION_STATS_UNIT,
    SessionStatsState,
    SessionStatsView,
    is_token_delta,
    parse_session_stats_state,
)

MESSAGE = assistant_message([text_block("answer")], provider="mock", model="mock")


def totals(**overrides: float) -> SessionStatsView:
    """The all-zero view plus overrides, for exact fold expectations."""
    view: dict[str, float] = {
        "turns": 0,
        "steps": 0,
        "llmMs": 0,
        "toolMs": 0,
        "ttftMs": 0,
        "ttftSteps": 0,
        "decodeMs": 0,
        "decodeTokens": 0,
    }
    view.update(overrides)
    return view  # type: ignore[return-value]


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(now=lambda: 1_000)


@pytest.fixture
def registry(store: SessionStore) -> Iterator[ProjectionRegistry]:
    registry = ProjectionRegistry(store)
    yield registry
    registry.dispose()


@pytest.fixture
def session(store: SessionStore) -> Session:
    return store.create("counted")


def close_step(session: Session, turn: int, step: int) -> int:
    """Open and close one step; return the counted ``step/end`` seq."""
    session.append("step/start", {"turn": turn, "step": step})
    return session.append("step/end", {"turn": turn, "step": step}).seq


def completed(session: Session, turn: int) -> None:
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def stats(registry: ProjectionRegistry, session: Session) -> Any:
    return registry.snapshot(session)["values"]["sessionStats"]


# --- projection.spec.ts: registry drive --------------------------------------------------------------


def test_serves_zero_figures_on_the_empty_log(registry: ProjectionRegistry, session: Session) -> None:
    registry.register(SESSION_STATS_UNIT)
    assert stats(registry, session) == totals()


def test_counts_distinct_turns_and_closed_steps_and_notifies_the_change_feed_with_the_causing_seq(
    registry: ProjectionRegistry, session: Session
) -> None:
    """``step/start`` changes the (internal) open step and ``step/end`` commits the counts, so each closed
    step notifies twice with the ``step/end`` value last; boundary events without a figure stay silent."""
    registry.register(SESSION_STATS_UNIT)
    changes: list[dict[str, Any]] = []
    registry.on_changed(lambda _session, key, value, seq: changes.append({"key": key, "value": value, "seq": seq}))
    turn_start = session.append("turn/start", {"turn": 1}).seq
    first = close_step(session, 1, 1)
    second = close_step(session, 1, 2)
    completed(session, 1)
    session.append("turn/start", {"turn": 2})
    third = close_step(session, 2, 1)
    completed(session, 2)
    assert all(change["key"] == "sessionStats" for change in changes)
    assert {"key": "sessionStats", "value": totals(turns=1, steps=1), "seq": first} in changes
    assert {"key": "sessionStats", "value": totals(turns=1, steps=2), "seq": second} in changes
    assert changes[-1] == {"key": "sessionStats", "value": totals(turns=2, steps=3), "seq": third}
    assert [change["seq"] for change in changes] == [first - 1, first, second - 1, second, third - 1, third]
    assert turn_start not in [change["seq"] for change in changes]
    snapshot = registry.snapshot(session)
    assert snapshot["values"]["sessionStats"] == totals(turns=2, steps=3)
    assert snapshot["asOfSeq"] == session.seq - 1


def test_does_not_count_a_rejected_or_empty_turn_that_closes_with_no_step(
    registry: ProjectionRegistry, session: Session
) -> None:
    registry.register(SESSION_STATS_UNIT)
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "blocked"}})
    assert stats(registry, session) == totals()


def test_counts_a_cancelled_step_that_closed_without_an_assistant_message(
    registry: ProjectionRegistry, session: Session
) -> None:
    """Regression: an aborted stream never assembles its message, but its ``step/end`` still lands."""
    registry.register(SESSION_STATS_UNIT)
    session.append("turn/start", {"turn": 1})
    close_step(session, 1, 1)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "legacy"}}})
    assert stats(registry, session) == totals(turns=1, steps=1)


def test_adds_no_extra_step_for_a_max_tokens_usage_host_assistant_message(
    registry: ProjectionRegistry, session: Session
) -> None:
    """Regression: the empty-content message only hosts usage; the step counts once, from ``step/end``."""
    registry.register(SESSION_STATS_UNIT)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": assistant_message([], provider="mock", model="mock")},
        {"surfaceOp": "append", "sourceEventSeqs": []},
    )
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "max-tokens"}})
    view = stats(registry, session)
    assert (view["turns"], view["steps"], view["ttftSteps"], view["decodeTokens"]) == (1, 1, 0, 0)


def test_folds_steps_already_in_the_log_when_the_plugin_mounts_late(
    registry: ProjectionRegistry, session: Session
) -> None:
    """The lazy cell build: registered after two steps and a turn were logged."""
    session.append("turn/start", {"turn": 1})
    close_step(session, 1, 1)
    close_step(session, 1, 2)
    completed(session, 1)
    registry.register(SESSION_STATS_UNIT)
    assert stats(registry, session) == totals(turns=1, steps=2)


def test_has_no_session_stats_key_without_the_plugin_and_drops_it_when_the_plugin_unloads(
    registry: ProjectionRegistry, session: Session
) -> None:
    assert "sessionStats" not in registry.snapshot(session)["values"]
    unload = registry.register(SESSION_STATS_UNIT)
    session.append("turn/start", {"turn": 1})
    close_step(session, 1, 1)
    assert stats(registry, session) == totals(turns=1, steps=1)
    unload()
    assert "sessionStats" not in registry.snapshot(session)["values"]


def test_loads_the_shipped_composition_and_serves_whole_log_counts(store: SessionStore) -> None:
    """loader-composition.spec.ts: the composed registry (here: the built-in units) over one logged turn."""
    registry = ProjectionRegistry.with_builtin_units(store)
    session = store.create("composed")
    session.append("turn/start", {"turn": 1})
    close_step(session, 1, 1)
    completed(session, 1)
    assert stats(registry, session) == totals(turns=1, steps=1)


# --- projection.spec.ts: wall-time fold (controlled timestamps) --------------------------------------


def at(time: int, type: str, data: Any) -> dict[str, Any]:
    """One synthetic committed event at ``time`` (its seq is its time, as in the original)."""
    return {"type": type, "seq": time, "time": time, "data": data}


def chunk(time: int, text: str, *, turn: int = 1, step: int = 1, kind: str = "text-delta") -> dict[str, Any]:
    return at(time, "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": kind, "index": 0, "text": text}})


def step_start(time: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return at(time, "step/start", {"turn": turn, "step": step})


def step_end(time: int, turn: int = 1, step: int = 1) -> dict[str, Any]:
    return at(time, "step/end", {"turn": turn, "step": step})


def message(time: int, **extra: Any) -> dict[str, Any]:
    return at(time, "assistant/message", {"turn": 1, "step": 1, "message": MESSAGE, **extra})


def tool_call(time: int, call_id: str) -> dict[str, Any]:
    return at(time, "tool/call", {"turn": 1, "step": 1, "callId": call_id, "name": "read", "arguments": "{}"})


def tool_result(time: int, call_id: str) -> dict[str, Any]:
    return at(time, "tool/result", {"turn": 1, "step": 1, "message": {"source": {"kind": "tool", "callId": call_id}}})


def fold_state(events: Sequence[dict[str, Any]]) -> SessionStatsState:
    return SESSION_STATS_UNIT.fold(events)  # type: ignore[arg-type]  # synthetic events are plain dicts


def fold(events: Sequence[dict[str, Any]]) -> SessionStatsView:
    return SESSION_STATS_UNIT.view(fold_state(events))


def test_accrues_model_first_token_and_decode_time_from_one_fully_recorded_step() -> None:
    assert fold(
        [
            step_start(1_000),
            chunk(1_800, "a"),
            message(4_800, usage={"inputTokens": 10, "outputTokens": 60}),
            step_end(4_900),
        ]
    ) == totals(turns=1, steps=1, llmMs=3_800, ttftMs=800, ttftSteps=1, decodeMs=3_000, decodeTokens=60)


def test_keeps_the_first_attempt_token_boundary_across_an_in_step_retry() -> None:
    assert fold(
        [
            step_start(1_000),
            chunk(1_200, "x", kind="reasoning-delta"),
            at(2_000, "llm/retry", {"turn": 1, "step": 1}),
            chunk(3_000, "y"),
            message(5_000),
            step_end(5_100),
        ]
    ) == totals(turns=1, steps=1, llmMs=4_000, ttftMs=200, ttftSteps=1)


def test_ignores_empty_deltas_non_token_chunks_and_chunks_outside_the_open_step() -> None:
    assert fold(
        [
            chunk(500, "stray"),  # before any step/start: no open boundary
            step_start(1_000),
            at(
                1_100,
                "assistant/chunk",
                {"turn": 1, "step": 1, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
            ),
            chunk(1_200, ""),
            chunk(1_300, "other", turn=2, step=9),
            chunk(1_400, "first"),
            message(2_000),
            step_end(2_100),
        ]
    ) == totals(turns=1, steps=1, llmMs=1_000, ttftMs=400, ttftSteps=1)


def test_leaves_a_cancelled_step_untimed() -> None:
    """Counted by ``step/end``; no assembled message to accrue from."""
    assert fold([step_start(1_000), chunk(1_500, "partial"), step_end(2_000)]) == totals(turns=1, steps=1)


def test_pairs_tool_wall_time_by_call_id_ignores_orphan_results_and_prunes_leftovers_at_turn_end() -> None:
    paired = fold(
        [
            step_start(1_000),
            tool_call(1_100, "a"),
            tool_call(1_200, "b"),
            tool_result(4_200, "b"),  # out-of-order settlement pairs by id, not adjacency
            tool_result(1_600, "a"),
            tool_result(5_000, "ghost"),
            step_end(5_100),
        ]
    )
    assert paired == totals(turns=1, steps=1, toolMs=3_500)
    pruned = fold(
        [
            step_start(1_000),
            tool_call(1_100, "orphan"),
            step_end(2_000),
            at(2_100, "turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "legacy"}}}),
            tool_result(9_000, "orphan"),
        ]
    )
    assert pruned == totals(turns=1, steps=1)


def test_pairs_only_recorded_calls_a_prototype_name_call_id_without_a_call_stays_unmatched() -> None:
    """The original's own-key regression: ``toString`` with no call is unmatched; ``constructor`` pairs."""
    assert fold([step_start(1_000), tool_result(1_500, "toString"), step_end(2_000)]) == totals(turns=1, steps=1)
    assert fold(
        [step_start(1_000), tool_call(1_100, "constructor"), tool_result(1_600, "constructor"), step_end(2_000)]
    ) == totals(turns=1, steps=1, toolMs=500)


def test_skips_decode_for_an_invalid_usage_report_and_ignores_a_duplicate_assembled_message() -> None:
    events = [
        step_start(1_000),
        chunk(1_400, "a"),
        message(2_000, usage={"inputTokens": 1, "outputTokens": -5}),
    ]
    assert fold([*events, step_end(2_100)]) == totals(turns=1, steps=1, llmMs=1_000, ttftMs=400, ttftSteps=1)
    state = fold_state(events)
    assert SESSION_STATS_UNIT.reduce(state, message(2_050)) is state  # type: ignore[arg-type]


def test_accrues_nothing_for_unrelated_events_and_clamps_negative_clock_skew_to_zero() -> None:
    state = SESSION_STATS_UNIT.initial()
    assert SESSION_STATS_UNIT.reduce(state, at(1, "user/message", {"content": []})) is state  # type: ignore[arg-type]
    assert fold([step_start(2_000), message(1_000), step_end(2_100)]) == totals(turns=1, steps=1)


# --- more of §2.5 ------------------------------------------------------------------------------------


def test_every_time_delta_clamps_at_zero() -> None:
    """First token before the step start, message before the first token, result before its call."""
    assert fold(
        [
            step_start(2_000),
            chunk(1_500, "early"),
            message(1_000, usage={"inputTokens": 1, "outputTokens": 7}),
            tool_call(3_000, "a"),
            tool_result(2_500, "a"),
            step_end(3_100),
        ]
    ) == totals(turns=1, steps=1, ttftSteps=1, decodeTokens=7)


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"inputTokens": 1, "outputTokens": 0}, 0),
        ({"inputTokens": 1, "outputTokens": 2.5}, 2.5),
        ({"inputTokens": 1}, None),
        ({"inputTokens": 1, "outputTokens": "9"}, None),
        ({"inputTokens": 1, "outputTokens": True}, None),
        ({"inputTokens": 1, "outputTokens": float("inf")}, None),
        ("not a usage record", None),
    ],
)
def test_decode_needs_a_finite_non_negative_output_token_count(usage: Any, tokens: float | None) -> None:
    view = fold([step_start(1_000), chunk(1_100, "a"), message(1_600, usage=usage), step_end(1_700)])
    if tokens is None:
        assert (view["decodeMs"], view["decodeTokens"]) == (0, 0)
    else:
        assert (view["decodeMs"], view["decodeTokens"]) == (500, tokens)
    assert (view["ttftMs"], view["ttftSteps"], view["llmMs"]) == (100, 1, 600)


def test_decode_needs_a_first_token() -> None:
    """A usage report without a streamed token: model time only (no first token, no decode span)."""
    view = fold([step_start(1_000), message(1_600, usage={"inputTokens": 1, "outputTokens": 4}), step_end(1_700)])
    assert view == totals(turns=1, steps=1, llmMs=600)


def test_a_message_for_another_step_does_not_close_the_open_one() -> None:
    view = fold(
        [
            step_start(1_000),
            at(1_500, "assistant/message", {"turn": 1, "step": 2, "message": MESSAGE}),
            message(1_800),
            step_end(1_900),
        ]
    )
    assert view == totals(turns=1, steps=1, llmMs=800)


def test_turns_count_once_per_turn_number_with_a_closed_step() -> None:
    view = fold(
        [
            step_start(1, 1, 1),
            step_end(2, 1, 1),
            step_start(3, 1, 2),
            step_end(4, 1, 2),
            step_start(5, 2, 1),
            step_end(6, 2, 1),
        ]
    )
    assert (view["turns"], view["steps"]) == (2, 3)


def test_turn_end_returns_the_same_state_when_no_call_is_pending() -> None:
    state = fold_state([step_start(1), step_end(2)])
    assert SESSION_STATS_UNIT.reduce(state, at(3, "turn/end", {"turn": 1, "reason": {"kind": "completed"}})) is state  # type: ignore[arg-type]


def test_a_tool_result_without_pending_calls_returns_the_same_state() -> None:
    state = fold_state([step_start(1)])
    assert SESSION_STATS_UNIT.reduce(state, tool_result(2, "a")) is state  # type: ignore[arg-type]


def test_the_first_token_is_recorded_once_per_step() -> None:
    state = fold_state([step_start(1_000), chunk(1_100, "a")])
    assert SESSION_STATS_UNIT.reduce(state, chunk(1_200, "b")) is state  # type: ignore[arg-type]
    assert state["openStep"] == {"turn": 1, "step": 1, "startTime": 1_000, "firstTokenTime": 1_100}


@pytest.mark.parametrize(
    ("chunk_data", "expected"),
    [
        ({"type": "text-delta", "index": 0, "text": "a"}, True),
        ({"type": "text-delta", "index": 0, "text": ""}, False),
        ({"type": "reasoning-delta", "index": 0, "text": "r"}, True),
        ({"type": "reasoning-delta", "index": 0, "text": ""}, False),
        ({"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": "{"}, True),
        ({"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": ""}, False),
        ({"type": "tool-call-delta", "index": 0, "id": "c", "name": "read", "argumentsDelta": ""}, True),
        ({"type": "tool-call-delta", "index": 0, "id": "c", "name": "", "argumentsDelta": ""}, True),
        ({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}}, False),
        ({"type": "block-start", "index": 0, "blockType": "text"}, False),
    ],
)
def test_is_token_delta(chunk_data: dict[str, Any], expected: bool) -> None:
    """The original's ``isTokenDelta``: a tool-call delta counts with arguments or any ``name`` key."""
    assert is_token_delta(chunk_data) is expected


def test_the_state_keeps_the_original_key_order() -> None:
    state = fold_state([step_start(1_000), tool_call(1_100, "a")])
    assert list(state) == [
        "turns",
        "steps",
        "llmMs",
        "toolMs",
        "ttftMs",
        "ttftSteps",
        "decodeMs",
        "decodeTokens",
        "lastTurn",
        "openStep",
        "pendingCalls",
    ]
    assert state["pendingCalls"] == {"a": 1_100}


# --- the state schema ---------------------------------------------------------------------------------


def test_parse_state_round_trips_every_reachable_state() -> None:
    """A checkpointed state read back from JSON folds on exactly like the live one."""
    prefix = [step_start(1_000), chunk(1_200, "a"), tool_call(1_300, "a"), tool_call(1_310, "b")]
    rest = [tool_result(1_500, "b"), message(2_000, usage={"inputTokens": 1, "outputTokens": 3}), step_end(2_100)]
    live = fold_state(prefix)
    parsed = parse_session_stats_state(orjson.loads(orjson.dumps(live)))
    assert parsed == live
    assert SESSION_STATS_UNIT.view(SESSION_STATS_UNIT.fold_from(parsed, rest)) == fold([*prefix, *rest])  # type: ignore[arg-type]


def test_parse_state_accepts_integral_floats_for_integer_fields() -> None:
    state = dict(fold_state([step_start(1), step_end(2)]))
    state.update(turns=1.0, steps=1.0, lastTurn=1.0)
    parsed = parse_session_stats_state(state)
    assert (parsed["turns"], parsed["steps"], parsed["lastTurn"]) == (1, 1, 1)
    assert (type(parsed["turns"]), type(parsed["steps"]), type(parsed["lastTurn"])) == (int, int, int)


def test_parse_state_drops_unknown_open_step_keys() -> None:
    state = dict(fold_state([step_start(1)]))
    state["openStep"] = {**state["openStep"], "extra": True}  # type: ignore[dict-item]
    assert parse_session_stats_state(state)["openStep"] == {
        "turn": 1,
        "step": 1,
        "startTime": 1,
        "firstTokenTime": None,
    }


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"turns": -1}, "turns must be at least 0"),
        ({"steps": 1.5}, "steps must be an integer"),
        ({"llmMs": "3"}, "llmMs must be a number"),
        ({"toolMs": True}, "toolMs must be a number"),
        ({"decodeTokens": -0.5}, "decodeTokens must be at least 0"),
        ({"lastTurn": -2}, "lastTurn must be at least 0"),
        ({"openStep": []}, "openStep must be an object or null"),
        ({"openStep": {"turn": 1, "step": 1, "startTime": 0}}, "openStep lacks firstTokenTime"),
        ({"openStep": {"turn": 1, "step": 1, "startTime": -1, "firstTokenTime": None}}, "openStep.startTime must be"),
        ({"pendingCalls": []}, "pendingCalls must be an object"),
        ({"pendingCalls": {"a": -1}}, r"pendingCalls\['a'\] must be at least 0"),
        ({"extra": 1}, "state has unknown keys extra"),
    ],
)
def test_parse_state_rejects_a_malformed_row(change: dict[str, Any], why: str) -> None:
    state: dict[str, Any] = {**SESSION_STATS_UNIT.initial(), **change}
    with pytest.raises(ProjectionRowError, match=f'^projection "sessionStats" checkpoint state is malformed: {why}'):
        parse_session_stats_state(state)


@pytest.mark.parametrize("value", [None, [], "state", {"turns": 0}])
def test_parse_state_rejects_what_is_not_a_whole_state(value: Any) -> None:
    with pytest.raises(ProjectionRowError):
        parse_session_stats_state(value)


def test_a_malformed_stats_row_is_skipped_by_the_view_and_refused_by_restore() -> None:
    registry = ProjectionRegistry()
    registry.register(SESSION_STATS_UNIT)
    row = {"sessionStats": {"ver": 1, "seq": 3, "val": {"turns": "many"}}}
    assert registry.view_checkpoint(row) == {}
    with pytest.raises(ProjectionRowError):
        registry.restore(row, [], 4)


# --- property: folding in pieces through checkpoints equals one fold ----------------------------------

_EVENT = st.one_of(
    st.builds(step_start, st.integers(0, 5_000), st.integers(1, 2), st.integers(1, 2)),
    st.builds(step_end, st.integers(0, 5_000), st.integers(1, 2), st.integers(1, 2)),
    st.builds(chunk, st.integers(0, 5_000), st.sampled_from(["", "t"])),
    st.builds(message, st.integers(0, 5_000)),
    st.builds(tool_call, st.integers(0, 5_000), st.sampled_from(["a", "b"])),
    st.builds(tool_result, st.integers(0, 5_000), st.sampled_from(["a", "b", "c"])),
    st.builds(lambda time: at(time, "turn/end", {"turn": 1, "reason": {"kind": "completed"}}), st.integers(0, 5_000)),
)


@given(events=st.lists(_EVENT, max_size=30), cut=st.integers(0, 30))
def test_a_fold_resumed_from_a_json_checkpoint_equals_one_fold(events: list[dict[str, Any]], cut: int) -> None:
    """Every reachable state is a valid checkpoint (schema round trip), and totals never go negative."""
    state = fold_state(events[:cut])
    resumed = SESSION_STATS_UNIT.fold_from(parse_session_stats_state(orjson.loads(orjson.dumps(state))), events[cut:])  # type: ignore[arg-type]
    assert resumed == fold_state(events)
    view = cast("dict[str, float]", SESSION_STATS_UNIT.view(resumed))
    assert all(value >= 0 for value in view.values())
