"""Token meter (runtime spec §5.4): one test per case of the original's ``token-meter.spec.ts``.

Each test is named after the original case it ports; the original's vitest-only cases (type-level
config checks, cordis plugin registration) are replaced by what they mean for a Python meter. Expected
token counts are worked out by hand in comments (``ceil(len/4) + 4`` per text block, ``+ 4`` per
message), so a change in any price fails a test. Beyond the original: the incremental fold equals a
fresh fold at every prefix of random sessions (hypothesis), the provider-output fast path equals the
block assembler, measurements share rather than copy their nodes, and the fold state is weak.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import FrozenError, Session, SessionStore
from agentlog.compaction.estimate import estimate_content, estimate_header, estimate_message
from agentlog.compaction.meter import (
    TokenMeasurement,
    TokenMeter,
    TokenSurfaceNode,
    provider_assistant_tokens,
)
from agentlog.errors import CompactionConfigError, CompactionStateError
from agentlog.kernel.messages import (
    assistant_message,
    plugin_message,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.request_header import canonical_header, header_equals
from agentlog.kernel.session import derive_event_message
from agentlog.llm.assembler import Assembler

APPEND = {"surfaceOp": "append"}
USAGE = {"inputTokens": 20, "cacheReadTokens": 3, "cacheWriteTokens": 4, "outputTokens": 7, "reasoningTokens": 6}


def header(model: str, **extras: Any) -> dict[str, Any]:
    return canonical_header({"config": {"provider": "mock", "model": model}, **extras})


def append_header(session: Any, value: Mapping[str, Any], reason: str = "initial") -> None:
    session.append("request/header", {"header": value, "reason": reason})


def append_user(session: Session, text: str) -> int:
    return session.append("user/message", user_message(text), APPEND).seq


def append_successful_call(
    session: Session,
    value: Mapping[str, Any],
    *,
    turn: int = 1,
    step: int = 1,
    provider_text: str = "provider answer",
    durable_text: str | None = None,
    usage: Mapping[str, Any] | None = None,
    provenance: str = "exact",
) -> None:
    """The original's ``appendSuccessfulCall``: step/start, header, streamed chunks, the message, step/end."""
    durable = provider_text if durable_text is None else durable_text
    session.append("step/start", {"turn": turn, "step": step})
    append_header(session, value)
    sources: list[int] = []
    if provenance == "exact":
        chunks: list[dict[str, Any]] = [
            {"type": "block-start", "index": 0, "blockType": "text"},
            {"type": "text-delta", "index": 0, "text": provider_text},
            {"type": "block-end", "index": 0, "block": {"type": "text", "text": provider_text}},
        ]
        if usage is not None:
            chunks.append({"type": "usage", "usage": dict(usage)})
        chunks.append({"type": "finish", "reason": {"kind": "stop"}})
        for chunk in chunks:
            sources.append(session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}).seq)
    intent: dict[str, Any] = {"surfaceOp": "append"}
    if provenance != "absent":
        intent["sourceEventSeqs"] = [] if provenance == "empty" else sources
    config = value["config"]
    data: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "message": assistant_message(
            [{"type": "text", "text": durable}] if durable else [], provider=config["provider"], model=config["model"]
        ),
    }
    if usage is not None:
        data["usage"] = dict(usage)
    session.append("assistant/message", data, intent)
    session.append("step/end", {"turn": turn, "step": step})


def assert_surface_total(measurement: TokenMeasurement) -> None:
    assert sum(node.tokens for node in measurement.nodes) == measurement.surface_tokens


class UncheckedLog:
    """A session stand-in whose log may hold what ``Session.append`` refuses.

    The original pushes malformed events into the session's private log for its defensive replay tests;
    the meter only reads ``.events``, so a plain list of event dicts serves the same purpose.
    """

    def __init__(self, events: Sequence[Mapping[str, Any]]) -> None:
        self.events: list[Mapping[str, Any]] = [dict(event) for event in events]

    def push(self, type: str, data: Any, **extra: Any) -> int:
        seq = len(self.events)
        self.events.append({"type": type, "seq": seq, "time": 0, "data": data, **extra})
        return seq


# --- configuration --------------------------------------------------------------------------------


def test_exposes_an_empty_public_configuration() -> None:
    """The meter takes no settings: a bare ``TokenMeter()`` measures (the original's empty config type)."""
    meter = TokenMeter()
    assert meter.measure(Session.create("empty-config")).total_tokens == 0


@pytest.mark.parametrize("key", ["models", "contextWindow", "contextWidow"])
def test_rejects_stale_or_unknown_top_level_config_key(key: str) -> None:
    """Every key is refused with the original's text (there is nothing to configure)."""
    with pytest.raises(CompactionConfigError, match=f'^TokenMeterConfig: unknown key "{key}" \\(no settings'):
        TokenMeter(**{key: {}})


# --- pricing --------------------------------------------------------------------------------------


def test_prices_every_built_in_content_shape_and_merge_extended_blocks_with_one_fixed_heuristic() -> None:
    """text 'abcd' 1+4, reasoning 'ab' 1+4, tool-call 1+2+4, tool-result (1+4)+4, unknown 4+ceil(40/4); +4 role."""
    blocks = [
        {"type": "text", "text": "abcd"},
        {"type": "reasoning", "text": "ab"},
        {"type": "tool-call", "id": "c", "name": "read", "arguments": '{"x":1}'},
        {"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "xy"}], "isError": False},
        {"type": "future-block", "payload": "abcd"},  # JSON.stringify: 40 characters
    ]
    meter = TokenMeter()
    message = {"role": "assistant", "content": blocks, "source": {"kind": "plugin", "plugin": "test"}}
    assert meter.estimate_message(message) == 5 + 5 + 7 + 9 + 14 + 4
    assert meter.estimate_message(user_message("abcd")) == 9


def test_estimate_message_counts_utf16_code_units() -> None:
    """Lengths are JavaScript ``string.length``: an emoji is 2 units, a CJK character 1, ASCII 1."""
    meter = TokenMeter()
    assert meter.estimate_message(user_message("😀😀😀")) == 2 + 4 + 4  # 6 units
    assert meter.estimate_message(user_message("中文字")) == 1 + 4 + 4  # 3 units
    assert meter.estimate_message(user_message("abcde")) == 2 + 4 + 4  # 5 units
    assert meter.estimate_message(user_message("a😀b")) == 1 + 4 + 4  # 4 units, 3 code points
    assert meter.estimate_message(user_message("a😀bc")) == 2 + 4 + 4  # 5 units


def test_returns_a_detached_deeply_immutable_empty_measurement() -> None:
    """The empty session: no baseline, nothing on the surface; no part of the result can be changed."""
    result = TokenMeter().measure(Session.create("empty"))
    assert result.to_json() == {
        "logRevision": 0,
        "baseline": {"kind": "none", "tokens": 0},
        "surfaceDeltaTokens": 0,
        "totalTokens": 0,
        "surfaceTokens": 0,
        "nodes": [],
    }
    assert_surface_total(result)
    with pytest.raises(AttributeError):
        result.total_tokens = 1  # type: ignore[misc]
    with pytest.raises(FrozenError):
        result.baseline["tokens"] = 1  # type: ignore[index]
    with pytest.raises((TypeError, AttributeError)):
        result.nodes.append(TokenSurfaceNode(99, 1))  # type: ignore[attr-defined]


def test_keeps_an_earlier_unified_snapshot_detached_from_later_replay() -> None:
    """A measurement taken earlier is unchanged by later appends (its nodes are a frozen view)."""
    meter = TokenMeter()
    session = Session.create("detached")
    append_user(session, "first")
    snapshot = meter.measure(session)
    copy = snapshot.to_json()
    assert_surface_total(snapshot)
    with pytest.raises(TypeError):
        snapshot.nodes[0] = TokenSurfaceNode(99, 1)  # type: ignore[index]
    with pytest.raises(AttributeError):
        snapshot.nodes[0].tokens = 1  # type: ignore[misc]

    append_user(session, "second")
    advanced = meter.measure(session)
    assert advanced.log_revision == 2
    assert len(advanced.nodes) == 2
    assert_surface_total(advanced)
    assert snapshot.to_json() == copy
    assert snapshot.log_revision == 1
    assert len(snapshot.nodes) == 1


def test_prices_header_tools_and_surface_when_no_reusable_usage_exists() -> None:
    """Without usage: total = estimate_header + surface. 'question' 2+4+4; 'system' 2+4; tools ceil(69/4)+4."""
    session = Session.create("heuristic")
    append_user(session, "question")
    tools = [{"name": "read", "description": "read", "parameters": {"type": "object"}}]
    append_header(session, header("deepseek-v4-flash", system="system", tools=tools))
    result = TokenMeter().measure(session)
    assert result.baseline["kind"] == "estimated"
    assert result.surface_tokens == 10
    assert result.total_tokens == 10 + 6 + 22
    assert result.total_tokens > result.surface_tokens
    assert result.log_revision == len(session.events)
    assert_surface_total(result)


def test_keeps_request_header_overrides_out_of_the_returned_surface() -> None:
    """An override header changes pressure only; surface tokens and nodes stay the session's."""
    meter = TokenMeter()
    session = Session.create("override-surface")
    append_user(session, "question")
    logged = meter.measure(session)
    overridden = meter.measure(session, header("another-model", system="large override " * 100))
    assert overridden.total_tokens == logged.total_tokens + 375 + 4  # 1500 units
    assert overridden.surface_tokens == logged.surface_tokens
    assert overridden.nodes == logged.nodes
    assert_surface_total(overridden)


# --- replay anchors and surface folds -------------------------------------------------------------


def test_uses_disjoint_provider_usage_and_signed_durable_output_rewrites() -> None:
    """usage 20+3+4+7 = 34 (reasoning not added); the durable rewrite is priced as a signed delta.

    'before' 10; provider 'short' 2+8 = 10 (anchor surface 20, heuristic 20 <= 34 -> usage);
    durable answer (48 chars) 12+8 = 20, so the surface is 30 and the delta +10.
    """
    session = Session.create("usage")
    append_user(session, "before")
    append_successful_call(
        session,
        header("deepseek-v4-flash"),
        provider_text="short",
        durable_text="a much longer rewritten durable assistant answer",
        usage=USAGE,
    )
    result = TokenMeter().measure(session)
    assert result.baseline == {"kind": "usage", "tokens": 34, "usage": USAGE}
    assert result.surface_delta_tokens == 10
    assert result.total_tokens == 34 + 10
    with pytest.raises(FrozenError):
        result.baseline["usage"]["inputTokens"] = 1


def test_selects_a_heuristic_anchor_when_provider_usage_would_undercut_its_scale() -> None:
    """usage 27 < header 8 + provider 520 -> the anchor is the heuristic 528; a shrink stays positive.

    Replacing the 2048-char answer (520) by 'short' (10) gives delta -510 and total 18, the same as a
    from-scratch estimate under another model with the same system prompt.
    """
    meter = TokenMeter()
    session = Session.create("low-usage-anchor")
    request_header = header("deepseek-v4-flash", system="system context")
    append_successful_call(
        session, request_header, provider_text="abcd" * 512, usage={"inputTokens": 20, "outputTokens": 7}
    )
    anchored = meter.measure(session)
    assert anchored.baseline == {"kind": "estimated", "tokens": 528}
    assistant = anchored.nodes[0].seq
    session.append(
        "user/message",
        plugin_message("short", plugin="test"),
        {"surfaceOp": {"op": "replace", "start": assistant, "end": assistant}, "sourceEventSeqs": [assistant]},
    )
    shrunken = meter.measure(session)
    assert shrunken.surface_delta_tokens == -510
    assert 27 + shrunken.surface_delta_tokens < 0
    assert shrunken.total_tokens == 18
    assert (
        shrunken.total_tokens == meter.measure(session, header("different-model", system="system context")).total_tokens
    )


def test_uses_an_estimated_anchor_when_provider_usage_is_absent() -> None:
    """No usage: the anchor prices the durable message (header 5 + 'rewritten' 11 = 16); later appends add."""
    meter = TokenMeter()
    session = Session.create("missing-usage")
    append_successful_call(
        session, header("deepseek-v4-flash", system="s"), provider_text="provider", durable_text="rewritten"
    )
    anchored = meter.measure(session)
    assert anchored.baseline == {"kind": "estimated", "tokens": 16}
    assert anchored.surface_delta_tokens == 0
    append_user(session, "later")
    advanced = meter.measure(session)
    assert advanced.surface_delta_tokens == 10


def test_distinguishes_an_explicit_empty_source_event_list_from_an_absent_legacy_list() -> None:
    """``[]`` prices a known-empty stream (delta = the durable 14); an absent list prices the durable message."""
    explicit = Session.create("explicit-empty")
    legacy = Session.create("legacy-absent")
    for session, provenance in ((explicit, "empty"), (legacy, "absent")):
        append_successful_call(
            session,
            header("deepseek-v4-flash"),
            durable_text="listener injected text",
            provider_text="",
            usage=USAGE,
            provenance=provenance,
        )
    meter = TokenMeter()
    assert meter.measure(explicit).surface_delta_tokens == 14
    assert meter.measure(legacy).surface_delta_tokens == 0


def test_keeps_only_the_latest_successful_request_anchor_across_model_switches() -> None:
    """Only the newest anchor counts; returning to an older header re-estimates (8 + 10 + 12 = 30)."""
    meter = TokenMeter()
    session = Session.create("switch")
    alpha = header("alpha", system="same envelope")
    append_successful_call(session, alpha, usage=USAGE, provider_text="alpha")
    assert meter.measure(session).baseline == {"kind": "usage", "tokens": 34, "usage": USAGE}
    append_successful_call(
        session, header("beta"), step=2, usage={"inputTokens": 100, "outputTokens": 50}, provider_text="beta response"
    )
    beta = meter.measure(session).baseline
    assert (beta["kind"], beta["tokens"]) == ("usage", 150)
    append_header(session, alpha)
    switched_back = meter.measure(session)
    assert switched_back.baseline == {"kind": "estimated", "tokens": 30}
    assert switched_back.surface_delta_tokens == 0


def test_invalidates_usage_for_any_canonical_envelope_change_or_explicit_override() -> None:
    """Usage is reused only under a canonically equal header (``tools: []`` is no change)."""
    meter = TokenMeter()
    session = Session.create("envelope")
    anchored = header("deepseek-v4-flash", system="one")
    append_successful_call(session, anchored, usage=USAGE)
    tools = [{"name": "read", "description": "read", "parameters": {"type": "object"}}]
    assert meter.measure(session, {**anchored, "tools": []}).baseline["kind"] == "usage"
    assert meter.measure(session).baseline["kind"] == "usage"
    for changed in (
        header("deepseek-v4-flash", system="two"),
        header("deepseek-v4-pro", system="one"),
        {**anchored, "config": {**anchored["config"], "temperature": 0.2}},
        {**anchored, "tools": tools},
    ):
        assert meter.measure(session, changed).baseline["kind"] == "estimated", changed


def test_folds_the_latest_full_header_snapshot_into_the_effective_envelope() -> None:
    """The latest ``request/header`` is the effective one; with it there is an estimate even at 0 tokens."""
    session = Session.create("header-snapshot")
    append_header(session, header("deepseek-v4-flash", system="x" * 40))
    append_header(session, header("deepseek-v4-pro"), reason="change")
    result = TokenMeter().measure(session)
    assert result.baseline == {"kind": "estimated", "tokens": 0}
    assert result.log_revision == 2


def test_replays_seeded_append_and_replace_operations_with_signed_deltas() -> None:
    """A seeded session folds like the original; a replacement's delta is signed; old snapshots survive.

    Provider answer (2100 chars) 525+8 = 533 is the anchor surface; 'new tail' adds 10; replacing the
    answer by 'replacement' (3+8 = 11) leaves 21, a delta of -512.
    """
    meter = TokenMeter()
    original = Session.create("surface-original")
    append_successful_call(
        original, header("deepseek-v4-flash"), usage=USAGE, provider_text="long provider answer " * 100
    )
    append_user(original, "new tail")
    seeded = Session.create("surface-seeded", seed=list(original.events))
    before = meter.measure(seeded)
    assert len(before.nodes) == 2
    assert before.surface_delta_tokens == 10
    assert_surface_total(before)

    first = seeded.surface.nodes[0]
    seeded.append(
        "user/message",
        plugin_message("replacement", plugin="test"),
        {"surfaceOp": {"op": "replace", "start": first, "end": first}, "sourceEventSeqs": [first]},
    )
    after = meter.measure(seeded)
    assert len(after.nodes) == 2
    assert after.nodes[0].seq == len(seeded.events) - 1
    assert after.log_revision == len(seeded.events)
    assert after.surface_delta_tokens == -512
    assert_surface_total(after)
    # The earlier snapshot still reports the log it measured: seed + end-seed boundary.
    assert [node.seq for node in before.nodes] == [first, seeded.surface.nodes[1]]
    assert before.log_revision == len(original.events) + 1
    assert before.surface_delta_tokens == 10


def test_prices_an_empty_assistant_surface_anchor_as_zero() -> None:
    """An empty assistant message is a surface node priced 0."""
    session = Session.create("empty-assistant")
    append_successful_call(session, header("deepseek-v4-flash"), provider_text="", durable_text="", provenance="empty")
    measurement = TokenMeter().measure(session)
    assistant = next(event for event in session.events if event["type"] == "assistant/message")
    assert [node.to_json() for node in measurement.nodes] == [{"seq": assistant.seq, "tokens": 0}]
    assert measurement.surface_tokens == 0
    assert_surface_total(measurement)


# --- malformed replay and listener lifecycle ------------------------------------------------------


def expect_repeated_failure(meter: TokenMeter, session: Any, pattern: str) -> None:
    for _ in range(2):
        with pytest.raises(CompactionStateError, match=pattern):
            meter.measure(session)


def test_rejects_an_assistant_without_its_step_boundary_transactionally() -> None:
    """An assistant message outside its step bracket fails, and fails the same on retry."""
    session = Session.create("bad-step")
    append_header(session, header("deepseek-v4-flash"))
    message = assistant_message([{"type": "text", "text": "bad"}], provider="mock", model="deepseek-v4-flash")
    session.append(
        "assistant/message", {"turn": 1, "step": 1, "message": message}, {"surfaceOp": "append", "sourceEventSeqs": []}
    )
    expect_repeated_failure(
        TokenMeter(), session, "^token meter: assistant/message at seq 1 has no matching step/start event"
    )


def test_clears_completed_step_boundaries_and_rejects_overlapping_or_late_step_events() -> None:
    """Overlapping step/start, an assistant message after its step/end, and a mismatched step/end fail."""
    overlapping = Session.create("overlapping-step")
    overlapping.append("step/start", {"turn": 1, "step": 1})
    overlapping.append("step/start", {"turn": 1, "step": 2})
    expect_repeated_failure(
        TokenMeter(), overlapping, "^token meter: step/start at seq 1 arrived before turn 1/step 1 ended"
    )

    late = Session.create("late-assistant")
    late.append("step/start", {"turn": 1, "step": 1})
    append_header(late, header("deepseek-v4-flash"))
    late.append("step/end", {"turn": 1, "step": 1})
    message = assistant_message([], provider="mock", model="deepseek-v4-flash")
    late.append(
        "assistant/message", {"turn": 1, "step": 1, "message": message}, {"surfaceOp": "append", "sourceEventSeqs": []}
    )
    expect_repeated_failure(TokenMeter(), late, "^token meter: assistant/message at seq 3 has no matching step/start")

    mismatched = Session.create("mismatched-end")
    mismatched.append("step/start", {"turn": 1, "step": 1})
    mismatched.append("step/end", {"turn": 1, "step": 2})
    expect_repeated_failure(
        TokenMeter(), mismatched, "^token meter: step/end at seq 1 has no matching step/start event"
    )


@pytest.mark.parametrize(
    ("name", "pattern"),
    [("non-chunk", "source seq 3 is not assistant/chunk"), ("wrong-step", "source seq 3 belongs to another step")],
)
def test_rejects_invalid_assistant_source_event_references(name: str, pattern: str) -> None:
    """A cited source must be an ``assistant/chunk`` of the same turn and step."""
    session = Session.create(f"bad-source-{name}")
    session.append("step/start", {"turn": 1, "step": 1})
    append_header(session, header("deepseek-v4-flash"))
    session.append("user/message", user_message("x"), APPEND)  # seq 2, not cited
    if name == "non-chunk":
        source = session.append("user/message", user_message("x"), APPEND).seq
    else:
        chunk = {"type": "finish", "reason": {"kind": "stop"}}
        source = session.append("assistant/chunk", {"turn": 1, "step": 2, "chunk": chunk}).seq
    message = assistant_message([{"type": "text", "text": "bad"}], provider="mock", model="deepseek-v4-flash")
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": message, "usage": {"inputTokens": 1, "outputTokens": 1}},
        {"surfaceOp": "append", "sourceEventSeqs": [source]},
    )
    expect_repeated_failure(TokenMeter(), session, f"^token meter: assistant/message at seq 4 {pattern}")


def test_rejects_repeated_and_non_earlier_assistant_source_event_references() -> None:
    """Citations the kernel would refuse (a repeat, a later seq) are still refused when replaying a raw log."""
    duplicate = Session.create("duplicate-source")
    duplicate.append("step/start", {"turn": 1, "step": 1})
    append_header(duplicate, header("deepseek-v4-flash"))
    source = duplicate.append(
        "assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}}
    ).seq
    message = assistant_message([], provider="mock", model="deepseek-v4-flash")
    data = {"turn": 1, "step": 1, "message": message, "usage": {"inputTokens": 1, "outputTokens": 0}}
    log = UncheckedLog(duplicate.events)
    log.push("assistant/message", data, surfaceOp="append", sourceEventSeqs=[source, source])
    expect_repeated_failure(TokenMeter(), log, "^token meter: assistant/message at seq 3 repeats source seq 2")

    future = UncheckedLog(duplicate.events[:2])
    future.push("assistant/message", data, surfaceOp="append", sourceEventSeqs=[99])
    expect_repeated_failure(
        TokenMeter(), future, "^token meter: assistant/message at seq 2 source seq 99 is not earlier"
    )


def test_does_not_partially_apply_a_malformed_assistant_replacement() -> None:
    """A replacement that is invalid for the meter changes nothing: the retry fails the same way."""
    session = Session.create("transactional-replace")
    head = append_user(session, "head")
    append_header(session, header("deepseek-v4-flash"))
    message = assistant_message([{"type": "text", "text": "replacement"}], provider="mock", model="deepseek-v4-flash")
    session.append(
        "assistant/message",
        {"turn": 1, "step": 1, "message": message},
        {"surfaceOp": {"op": "replace", "start": head, "end": head}, "sourceEventSeqs": [head]},
    )
    expect_repeated_failure(TokenMeter(), session, "no matching step/start")


def test_rejects_corrupt_replacement_ranges_without_advancing_the_replay_cursor() -> None:
    """A replace range not on the priced surface fails at that event; once the log is good, the fold resumes
    exactly where it stopped (the same result as a fresh meter)."""
    session = Session.create("bad-replace")
    head = append_user(session, "head")
    log = UncheckedLog(session.events)
    bad = log.push(
        "user/message",
        user_message("bad"),
        surfaceOp={"op": "replace", "start": 99, "end": 99},
        sourceEventSeqs=[head],
    )
    meter = TokenMeter()
    expect_repeated_failure(meter, log, "^token surface: replace at seq 1 has invalid current range 99-99")
    log.events[bad] = {**log.events[bad], "surfaceOp": {"op": "replace", "start": head, "end": head}}
    assert meter.measure(log) == TokenMeter().measure(log)
    assert [node.seq for node in meter.measure(log).nodes] == [bad]


def test_handles_earlier_reader_catch_up_eager_observation_and_service_reload() -> None:
    """A meter read from an event listener sees the just-committed event; a new meter catches up alone."""
    store = SessionStore()
    meter = TokenMeter()
    revisions: list[int] = []
    store.on_event(lambda session, event: revisions.append(meter.measure(session).log_revision))
    session = store.create("listener-order", seed=[{"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}])
    meter.measure(session)
    append_user(session, "one")
    # Seed, end-seed, then one live append; only the live append is published.
    assert revisions == [3]
    assert meter.measure(session).log_revision == 3
    reloaded = TokenMeter()
    assert reloaded.measure(session).log_revision == 3
    assert reloaded.measure(session) == meter.measure(session)


# --- beyond the original ----------------------------------------------------------------------------


def test_fold_state_is_weak_so_a_dropped_session_is_collected() -> None:
    """The meter does not keep a measured session alive."""
    meter = TokenMeter()
    session = Session.create("weak")
    append_user(session, "x")
    meter.measure(session)
    ref = weakref.ref(session)
    del session
    gc.collect()
    assert ref() is None


def test_measures_a_session_view_like_the_session_at_that_time() -> None:
    """``measure(session.at(seq))`` equals the measurement taken when ``seq`` was the last event."""
    meter = TokenMeter()
    session = Session.create("view")
    taken: dict[int, TokenMeasurement] = {}
    append_user(session, "before")
    taken[session.seq - 1] = meter.measure(session)
    append_successful_call(session, header("m", system="sys"), usage=USAGE)
    taken[session.seq - 1] = meter.measure(session)
    append_user(session, "after")
    taken[session.seq - 1] = meter.measure(session)
    for seq, measurement in taken.items():
        assert meter.measure(session.at(seq)) == measurement


def test_measurements_share_nodes_until_a_replacement_copies_them() -> None:
    """Appends extend the shared node list (old views keep their length); a replace copies first."""
    meter = TokenMeter()
    session = Session.create("sharing")
    first = append_user(session, "one")
    a = meter.measure(session)
    append_user(session, "two")
    b = meter.measure(session)
    assert len(a.nodes) == 1 and len(b.nodes) == 2 and b.nodes[:1] == list(a.nodes)
    session.append(
        "user/message",
        plugin_message("r", plugin="test"),
        {"surfaceOp": {"op": "replace", "start": first, "end": first}, "sourceEventSeqs": [first]},
    )
    c = meter.measure(session)
    assert [n.seq for n in b.nodes] == [0, 1]
    assert [n.seq for n in c.nodes] == [2, 1]
    as_list: Sequence[TokenSurfaceNode] = [TokenSurfaceNode(0, 9)]
    as_tuple: Sequence[TokenSurfaceNode] = (TokenSurfaceNode(0, 9),)
    assert a.nodes == as_list
    assert a.nodes == as_tuple


def test_measurement_equality_and_json_shape() -> None:
    """Equal fields compare equal (nodes by value); ``to_json`` is exactly the original's camelCase shape."""
    meter = TokenMeter()
    session = Session.create("eq")
    append_user(session, "x")
    m = meter.measure(session)
    rebuilt = TokenMeasurement(1, {"kind": "estimated", "tokens": 9}, 0, 9, 9, [TokenSurfaceNode(0, 9)])
    assert m == rebuilt and not (m != rebuilt)
    assert m != TokenMeasurement(1, {"kind": "estimated", "tokens": 9}, 0, 9, 9, [TokenSurfaceNode(0, 8)])
    assert m != tuple(m)
    assert m.to_json() == {
        "logRevision": 1,
        "baseline": {"kind": "estimated", "tokens": 9},
        "surfaceDeltaTokens": 0,
        "totalTokens": 9,
        "surfaceTokens": 9,
        "nodes": [{"seq": 0, "tokens": 9}],
    }


# --- properties -------------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.sampled_from(["a", "b", " ", "é", "中", "😀"]), max_size=12)


def _chunk_strategy() -> st.SearchStrategy[dict[str, Any]]:
    index = st.integers(0, 2)
    return st.one_of(
        st.builds(lambda i, t: {"type": "text-delta", "index": i, "text": t}, index, TEXT),
        st.builds(lambda i, t: {"type": "reasoning-delta", "index": i, "text": t}, index, TEXT),
        st.builds(
            lambda i, k: {"type": "block-start", "index": i, "blockType": k},
            index,
            st.sampled_from(["text", "reasoning", "tool-call"]),
        ),
        st.builds(
            lambda i, k, t: {"type": "block-end", "index": i, "block": {"type": k, "text": t}},
            index,
            st.sampled_from(["text", "reasoning"]),
            TEXT,
        ),
        st.builds(
            lambda i, n, a: {"type": "tool-call-delta", "index": i, "id": "c", "name": n, "argumentsDelta": a},
            index,
            st.sampled_from(["", "read"]),
            TEXT,
        ),
        st.just({"type": "usage", "usage": {"inputTokens": 1, "outputTokens": 1}}),
        st.builds(
            lambda k: {"type": "finish", "reason": {"kind": k}}, st.sampled_from(["stop", "max-tokens", "tool-calls"])
        ),
    )


@given(st.lists(_chunk_strategy(), max_size=10))
def test_provider_price_fast_path_equals_the_block_assembler(chunks: list[dict[str, Any]]) -> None:
    """The one-pass provider price equals assembling the cited chunks and pricing the blocks."""
    log: list[dict[str, Any]] = [
        {"type": "assistant/chunk", "seq": n, "time": 0, "data": {"turn": 1, "step": 1, "chunk": chunk}}
        for n, chunk in enumerate(chunks)
    ]
    event = {
        "type": "assistant/message",
        "seq": len(log),
        "data": {"turn": 1, "step": 1, "message": assistant_message([], provider="p", model="m")},
        "sourceEventSeqs": list(range(len(log))),
    }
    assembler = Assembler()
    for chunk in chunks:
        assembler.push(chunk)
    blocks = assembler.blocks()
    expected = 0 if not blocks else estimate_content(blocks) + 4
    assert provider_assistant_tokens(log, event, -1) == expected


Action = Callable[[Session], None]


@st.composite
def sessions(draw: st.DrawFn, *, with_prunes: bool = True) -> list[tuple[str, Any, Any]]:
    """A random valid session as ``(type, data, intent)`` appends: turns of steps with streamed chunks,
    assistant messages (with or without usage and citations), parallel tool calls and their results,
    header changes, and surface replacements of single tool results (the pruner's rewrite shape)."""
    appends: list[tuple[str, Any, Any]] = []
    seq = 0
    surface: list[int] = []
    results: dict[int, Any] = {}

    def add(type: str, data: Any, intent: Any = None) -> int:
        nonlocal seq
        appends.append((type, data, intent))
        seq += 1
        return seq - 1

    for turn in range(1, draw(st.integers(1, 3)) + 1):
        add("turn/start", {"turn": turn})
        surface.append(add("user/message", user_message(draw(TEXT)), APPEND))
        for step in range(1, draw(st.integers(1, 3)) + 1):
            add("step/start", {"turn": turn, "step": step})
            if draw(st.booleans()):
                system = draw(st.sampled_from(["", "sys", "a longer system prompt"]))
                add(
                    "request/header",
                    {"header": header(draw(st.sampled_from(["m1", "m2"])), system=system), "reason": "initial"},
                )
            if draw(st.booleans()):  # the common stream shape, or any mix of chunk kinds and block indexes
                chunks = [{"type": "text-delta", "index": 0, "text": t} for t in draw(st.lists(TEXT, max_size=3))]
            else:
                chunks = draw(st.lists(_chunk_strategy(), max_size=5))
            chunk_seqs = [add("assistant/chunk", {"turn": turn, "step": step, "chunk": c}) for c in chunks]
            if draw(st.booleans()):  # a stray chunk of another step inside this one, never cited
                add(
                    "assistant/chunk",
                    {"turn": turn, "step": step + 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}},
                )
            calls = [f"c{turn}-{step}-{n}" for n in range(draw(st.integers(0, 2)))]
            blocks = [{"type": "text", "text": draw(TEXT)}] + [tool_call_block(c, "read", "{}") for c in calls]
            data: dict[str, Any] = {
                "turn": turn,
                "step": step,
                "message": assistant_message(blocks, provider="p", model="m"),
            }
            if draw(st.booleans()):
                data["usage"] = {"inputTokens": draw(st.integers(0, 200)), "outputTokens": draw(st.integers(0, 50))}
            intent: dict[str, Any] = {"surfaceOp": "append"}
            citation = draw(st.sampled_from(["exact", "empty", "absent"]))
            if citation != "absent":
                intent["sourceEventSeqs"] = chunk_seqs if citation == "exact" else []
            surface.append(add("assistant/message", data, intent))
            for call in calls:
                add("tool/call", {"turn": turn, "step": step, "callId": call, "name": "read", "arguments": "{}"})
            for call in draw(st.permutations(calls)):
                text = draw(st.sampled_from(["ok", "x" * 80, "y😀" * 40]))
                result = {"turn": turn, "step": step, "message": tool_result_message(call, text)}
                results[add("tool/result", result, APPEND)] = result
                surface.append(seq - 1)
            add("step/end", {"turn": turn, "step": step})
            if with_prunes and len(results) > 0 and draw(st.booleans()):
                target = draw(st.sampled_from(sorted(s for s in results if s in surface)))
                old = results.pop(target)
                message = old["message"]
                block = message["content"][0]
                new = {
                    **old,
                    "message": {**message, "content": [{**block, "content": [{"type": "text", "text": "p"}]}]},
                }
                replacement = add(
                    "tool/result",
                    new,
                    {"surfaceOp": {"op": "replace", "start": target, "end": target}, "sourceEventSeqs": [target]},
                )
                surface[surface.index(target)] = replacement
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return appends


def build(appends: Sequence[tuple[str, Any, Any]], session_id: str = "random") -> Session:
    session = Session.create(session_id)
    for type, data, intent in appends:
        if intent is None:
            session.append(type, data)
        else:
            session.append(type, data, intent)
    return session


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.data())
def test_incremental_fold_equals_a_fresh_fold_at_every_prefix(
    appends: list[tuple[str, Any, Any]], data: st.DataObject
) -> None:
    """Measuring after any subset of appends (so folds run in batches of every size) gives, at each
    prefix, exactly what a fresh meter computes for that prefix from scratch."""
    meter = TokenMeter()
    session = Session.create("incremental")
    for type, payload, intent in appends:
        if intent is None:
            session.append(type, payload)
        else:
            session.append(type, payload, intent)
        if data.draw(st.booleans()):
            incremental = meter.measure(session)
            assert incremental == TokenMeter().measure(session.at(session.seq - 1))
            assert_surface_total(incremental)
            assert [node.seq for node in incremental.nodes] == list(session.surface.nodes)
    assert meter.measure(session) == TokenMeter().measure(build(appends, "fresh"))


def reference_measure(events: Sequence[Mapping[str, Any]], request_header: Any = None) -> dict[str, Any]:
    """§5.4 written out plainly: fold the whole log, re-assemble provider output with the assembler."""
    nodes: list[tuple[int, int]] = []
    current: Any = None
    step: Any = None
    anchor: Any = None
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "request/header":
            current = canonical_header(data["header"])
        elif kind == "step/start":
            step = (data["turn"], data["step"], sum(tokens for _seq, tokens in nodes))
        elif kind == "step/end":
            step = None
        if kind not in ("user/message", "assistant/message", "tool/result"):
            continue
        message = derive_event_message(event)
        tokens = 0 if message is None else estimate_message(message)
        op = event["surfaceOp"]
        if op == "append":
            nodes.append((event["seq"], tokens))
        else:
            seqs = [seq for seq, _tokens in nodes]
            nodes[seqs.index(op["start"]) : seqs.index(op["end"]) + 1] = [(event["seq"], tokens)]
        if kind != "assistant/message":
            continue
        usage = data.get("usage")
        if usage is not None and current is not None:
            sources = event.get("sourceEventSeqs")
            if sources is None:
                provider = tokens
            else:
                assembler = Assembler()
                for source in sources:
                    assembler.push(events[source]["data"]["chunk"])
                blocks = assembler.blocks()
                provider = 0 if not blocks else estimate_content(blocks) + 4
            surface = step[2] + provider
            used = (
                usage["inputTokens"]
                + usage.get("cacheReadTokens", 0)
                + usage.get("cacheWriteTokens", 0)
                + usage["outputTokens"]
            )
            estimated = estimate_header(current) + surface
            baseline: dict[str, Any] = (
                {"kind": "usage", "tokens": used, "usage": usage}
                if used >= estimated
                else {"kind": "estimated", "tokens": estimated}
            )
        else:
            surface = step[2] + tokens
            baseline = {"kind": "estimated", "tokens": estimate_header(current) + surface}
        anchor = (current, surface, baseline)
    surface_tokens = sum(tokens for _seq, tokens in nodes)
    effective = current if request_header is None else canonical_header(request_header)
    same = anchor is not None and (
        anchor[0] is effective if anchor[0] is None or effective is None else header_equals(anchor[0], effective)
    )
    if same:
        baseline, delta = anchor[2], surface_tokens - anchor[1]
    elif effective is None and surface_tokens == 0:
        baseline, delta = {"kind": "none", "tokens": 0}, 0
    else:
        baseline, delta = {"kind": "estimated", "tokens": estimate_header(effective) + surface_tokens}, 0
    return {
        "logRevision": len(events),
        "baseline": baseline,
        "surfaceDeltaTokens": delta,
        "totalTokens": max(0, baseline["tokens"] + delta),
        "surfaceTokens": surface_tokens,
        "nodes": [{"seq": seq, "tokens": tokens} for seq, tokens in nodes],
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.data())
def test_meter_equals_a_plain_reference_fold_of_the_spec(
    appends: list[tuple[str, Any, Any]], data: st.DataObject
) -> None:
    """At random prefixes (and with a random header override) the meter's measurement is exactly the
    plain whole-log fold of §5.4 that re-assembles every provider stream with the block assembler."""
    meter = TokenMeter()
    session = Session.create("reference")
    overrides = [None, header("m1", system="sys"), header("m2")]
    for type, payload, intent in appends:
        if intent is None:
            session.append(type, payload)
        else:
            session.append(type, payload, intent)
        if data.draw(st.booleans()):
            override = data.draw(st.sampled_from(overrides))
            assert meter.measure(session, override).to_json() == reference_measure(session.events, override)
