"""Tool-result pruner (runtime spec §5.11): one test per case of runtime.md §10.5 (the original's
``tool-result-pruner.spec.ts``), named after it, plus the loader case (stale config refused) and
hypothesis properties: a pruned content is within budget and keeps head, tail and non-text blocks;
a pruned session still pairs every tool call with its result and replays to the same messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import InvariantError, Session, SessionInvariants, SessionStore
from agentlog.compaction.invariants import CompactionInvariants
from agentlog.compaction.meter import TokenMeter
from agentlog.compaction.pruner import (
    DEFAULTS,
    PRUNE_MARKER,
    PrunedEntry,
    PruneResult,
    ToolResultPruner,
    code_point_length,
)
from agentlog.errors import CompactionConfigError
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.kernel.messages import assistant_message, tool_call_block, tool_result_message

from .test_meter import build, sessions

MODEL = "test-model"
SMALL = {"thresholdChars": 50, "headChars": 4, "tailChars": 3}
METER = TokenMeter()  # pricing oracle for the expectations


def service(config: Mapping[str, Any] = SMALL) -> ToolResultPruner:
    return ToolResultPruner.from_config(config)


def append_tool_step(session: Session, turn: int, call: str, content: list[Any], **extra: Any) -> int:
    """The original's ``appendToolStep``: one closed turn whose single step calls a tool; returns the result seq."""
    session.append("turn/start", {"turn": turn})
    session.append("step/start", {"turn": turn, "step": 1})
    message = assistant_message([tool_call_block(call, "bash", "{}")], provider=MODEL, model=MODEL)
    session.append("assistant/message", {"turn": turn, "step": 1, "message": message}, {"surfaceOp": "append"})
    session.append("tool/call", {"turn": turn, "step": 1, "callId": call, "name": "bash", "arguments": "{}"})
    result = session.append(
        "tool/result",
        {"turn": turn, "step": 1, "message": tool_result_message(call, content, is_error=False), **extra},
        {"surfaceOp": "append"},
    )
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return result.seq


# --- configuration ----------------------------------------------------------------------------------


def test_resolves_detached_immutable_defaults_and_partial_overrides() -> None:
    """Defaults 8192/4096/1024; the resolved config is a read-only copy, detached from its input."""
    raw = {"thresholdChars": 100, "headChars": 20, "tailChars": 10}
    pruner = ToolResultPruner.from_config(raw)
    raw["headChars"] = 1
    assert pruner.config == {"thresholdChars": 100, "headChars": 20, "tailChars": 10}
    with pytest.raises(TypeError):
        pruner.config["headChars"] = 1  # type: ignore[index]
    assert DEFAULTS == {"thresholdChars": 8192, "headChars": 4096, "tailChars": 1024}
    with pytest.raises(TypeError):
        DEFAULTS["headChars"] = 1  # type: ignore[index]
    assert ToolResultPruner().config == DEFAULTS
    assert ToolResultPruner.from_config({}).config == DEFAULTS
    assert ToolResultPruner.from_config({"headChars": 100}).config == {**DEFAULTS, "headChars": 100}
    assert ToolResultPruner(300, head_chars=100, tail_chars=100).config == {
        "thresholdChars": 300,
        "headChars": 100,
        "tailChars": 100,
    }


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"thresholdChars": 0}, "thresholdChars (0) must be a positive integer"),
        ({"headChars": -1}, "headChars (-1) must be a non-negative integer"),
        ({"tailChars": 1.5}, "tailChars (1.5) must be a non-negative integer"),
        ({"tailChars": True}, "tailChars (true) must be a non-negative integer"),
        ({"thresholdChars": "50"}, "thresholdChars (50) must be a positive integer"),
        (
            {"thresholdChars": 50, "headChars": 20, "tailChars": 20},
            "headChars + marker + tailChars (79) must be at most thresholdChars (50)",
        ),
        ({"threshold": 10}, 'unknown key "threshold" (allowed: thresholdChars, headChars, tailChars)'),
        ({"maxChars": 100}, 'unknown key "maxChars" (allowed: thresholdChars, headChars, tailChars)'),
    ],
)
def test_rejects_stale_keys_invalid_scalars_and_an_output_budget_above_threshold(
    config: dict[str, Any], message: str
) -> None:
    """Each refusal is a CompactionConfigError with the original's exact text (also for the loader's stale key)."""
    with pytest.raises(CompactionConfigError) as caught:
        ToolResultPruner.from_config(config)
    assert str(caught.value) == f"ToolResultPruneConfig: {message}"


def test_constructor_keywords_are_validated_like_the_config() -> None:
    """The snake_case constructor applies the same rules and texts."""
    with pytest.raises(CompactionConfigError, match=r"^ToolResultPruneConfig: headChars \+ marker \+ tailChars"):
        ToolResultPruner(threshold_chars=50, head_chars=20, tail_chars=20)
    assert ToolResultPruner(threshold_chars=50.0, head_chars=4, tail_chars=3).config["thresholdChars"] == 50  # type: ignore[arg-type]


# --- the content transform ----------------------------------------------------------------------------


def test_measures_text_code_points_only_and_skips_content_within_threshold() -> None:
    """'a😀b' is 3 code points (4 UTF-16 units); reasoning text does not count."""
    prune = service()
    blocks = [{"type": "text", "text": "a😀b"}, {"type": "reasoning", "text": "not measured"}]
    assert prune.measure_content(blocks) == 3
    assert prune.prune_content(blocks) is None
    assert code_point_length("a😀b") == 3
    assert len(PRUNE_MARKER) == 39


def test_keeps_configured_head_and_tail_without_splitting_surrogate_pairs() -> None:
    """60 emoji (120 UTF-16 units) keep 4 + marker + 3 whole emoji."""
    prune = service()
    result = prune.prune_content([{"type": "text", "text": "😀" * 60}])
    assert result == [{"type": "text", "text": "😀" * 4 + PRUNE_MARKER + "😀" * 3}]
    assert prune.measure_content(result) <= 50
    assert "\ufffd" not in result[0]["text"]
    assert all(not 0xD800 <= ord(ch) <= 0xDFFF for ch in result[0]["text"])


def test_preserves_non_text_blocks_and_their_relative_ordering_across_removed_text() -> None:
    """The §5.11 example: [A×40, reasoning, B×30, tool-call, C×30] with (50, 4, 3)."""
    prune = service()
    reasoning = {"type": "reasoning", "text": "private-rich-block"}
    call = {"type": "tool-call", "id": "nested", "name": "nested", "arguments": "{}"}
    result = prune.prune_content(
        [
            {"type": "text", "text": "A" * 40},
            reasoning,
            {"type": "text", "text": "B" * 30},
            call,
            {"type": "text", "text": "C" * 30},
        ]
    )
    assert result == [{"type": "text", "text": "AAAA" + PRUNE_MARKER}, reasoning, call, {"type": "text", "text": "CCC"}]
    assert prune.measure_content(result) <= 50


def test_supports_zero_sized_head_and_tail_while_still_shrinking() -> None:
    """threshold = len(marker), head = tail = 0: the result is exactly the marker."""
    prune = service({"thresholdChars": code_point_length(PRUNE_MARKER), "headChars": 0, "tailChars": 0})
    result = prune.prune_content([{"type": "text", "text": "x" * 100}])
    assert result == [{"type": "text", "text": PRUNE_MARKER}]
    assert prune.measure_content(result) == prune.config["thresholdChars"]


# --- the session transaction ----------------------------------------------------------------------------


def test_prunes_a_stable_snapshot_preserves_all_data_and_cites_the_replaced_result() -> None:
    """The replacement keeps every data field but the content, replaces the original on the surface,
    cites it, and follows a ``compaction/prune`` priced with ``estimate_message(original)``."""
    session = Session.create("preserve")
    original_seq = append_tool_step(
        session,
        1,
        "one",
        [{"type": "text", "text": "x" * 100}],
        isError=True,
        error={"name": "ExitError", "code": "EXIT_1"},
        meta={"diff": ["a", "b"]},
        futureField={"nested": True},
    )
    session.append("turn/start", {"turn": 2})

    result = service().prune_session(session)
    assert len(result.pruned) == 1
    entry = result.pruned[0]
    assert (entry.original_seq, entry.call_id, entry.chars_before) == (original_seq, "one", 100)
    assert entry.chars_after == 4 + 39 + 3
    assert result.chars_removed == 100 - 46

    original = session.events[original_seq]
    assert original["data"]["message"]["content"][0]["content"] == [{"type": "text", "text": "x" * 100}]
    replacement = session.events[entry.replacement_seq]
    assert replacement["type"] == "tool/result"
    assert replacement["surfaceOp"] == {"op": "replace", "start": original_seq, "end": original_seq}
    assert replacement["sourceEventSeqs"] == [original_seq]
    data = replacement["data"]
    assert {k: v for k, v in data.items() if k != "message"} == {
        "turn": 1,
        "step": 1,
        "isError": True,
        "error": {"name": "ExitError", "code": "EXIT_1"},
        "meta": {"diff": ["a", "b"]},
        "futureField": {"nested": True},
    }
    assert data["message"]["source"] == {"kind": "tool", "callId": "one"}
    assert data["message"]["id"] == original["data"]["message"]["id"]
    block = data["message"]["content"][0]
    assert {k: v for k, v in block.items() if k != "content"} == {
        k: v for k, v in original["data"]["message"]["content"][0].items() if k != "content"
    }
    assert block["content"] == [{"type": "text", "text": "xxxx" + PRUNE_MARKER + "xxx"}]
    assert original_seq not in session.surface.nodes
    assert entry.replacement_seq in session.surface.nodes

    shadow = session.events[entry.replacement_seq - 1]
    assert shadow["type"] == "compaction/prune"
    assert shadow["data"] == {
        "shadowedRange": {"start": original_seq, "end": original_seq},
        "shadowedSeqs": [original_seq],
        "shadowedTokenCount": METER.estimate_message(original["data"]["message"]),
    }
    assert shadow["data"]["shadowedTokenCount"] == 25 + 4 + 4 + 4  # text 100 -> 25+4, tool-result +4, role +4


def test_prunes_multiple_results_skips_short_ones_and_converges_in_one_pass() -> None:
    """Two long results are pruned, the short one is left; a second pass is a no-op."""
    session = Session.create("multiple")
    append_tool_step(session, 1, "a", [{"type": "text", "text": "A" * 100}])
    append_tool_step(session, 2, "b", [{"type": "text", "text": "short"}])
    append_tool_step(session, 3, "c", [{"type": "text", "text": "C" * 80}])
    session.append("turn/start", {"turn": 4})
    prune = service()
    first = prune.prune_session(session)
    length = session.seq
    second = prune.prune_session(session)
    assert [entry.call_id for entry in first.pruned] == ["a", "c"]
    assert first.chars_removed == sum(e.chars_before - e.chars_after for e in first.pruned) == 54 + 34
    assert second == PruneResult((), 0)
    assert second.to_json() == {"pruned": [], "charsRemoved": 0}
    assert session.seq == length
    assert first.to_json()["pruned"][0] == {
        "originalSeq": first.pruned[0].original_seq,
        "replacementSeq": first.pruned[0].replacement_seq,
        "callId": "a",
        "charsBefore": 100,
        "charsAfter": 46,
    }
    assert isinstance(first.pruned[0], PrunedEntry)


def test_replays_to_the_identical_pruned_model_messages() -> None:
    """A from-scratch replay of the pruned log derives the same messages and replace generation."""
    session = Session.create("replay")
    append_tool_step(session, 1, "a", [{"type": "text", "text": "A" * 100}])
    session.append("turn/start", {"turn": 2})
    service().prune_session(session)
    replay = Session.create("replay-copy", seed=list(session.events))
    assert replay.derive_messages() == session.derive_messages()
    assert replay.surface.replace_generation == session.surface.replace_generation == 1


def test_runs_under_real_invariants_between_closed_steps_but_not_outside_a_turn() -> None:
    """Under the kernel's invariant checker the replacement needs an open turn (no open step needed).

    The kernel's rule is on the ``tool/result`` replacement; ``compaction/prune`` itself has no rule (the
    original's pruner companion is empty, and so is agentlog's compaction checker for it), so the refused
    pass leaves its shadow-price event behind, as in the original. The compaction checker is installed
    too: a prune pass inside a turn satisfies it."""
    store = SessionStore()
    invariants = SessionInvariants(store)
    invariants.install()
    compaction_invariants = CompactionInvariants(store).install()
    try:
        session = store.create("invariants")
        append_tool_step(session, 1, "a", [{"type": "text", "text": "A" * 100}])
        prune = service()
        with pytest.raises(InvariantError, match=r"^invariant violated by .*outside any open turn"):
            prune.prune_session(session)
        assert session.events[-1]["type"] == "compaction/prune"  # the refused replacement's shadow price
        session.append("turn/start", {"turn": 2})
        result = prune.prune_session(session)
        assert [entry.call_id for entry in result.pruned] == ["a"]
        assert session.events[-1]["surfaceOp"] == {"op": "replace", "start": 4, "end": 4}
    finally:
        compaction_invariants.dispose()
        invariants.dispose()


# --- properties ---------------------------------------------------------------------------------------------

_CHARS = st.sampled_from(["a", "Z", " ", "é", "中", "😀", "\n"])
_TEXT_BLOCKS = st.builds(lambda t: {"type": "text", "text": t}, st.text(alphabet=_CHARS, max_size=120))
_OTHER_BLOCKS = st.sampled_from(
    [
        {"type": "reasoning", "text": "r" * 30},
        {"type": "tool-call", "id": "n", "name": "nested", "arguments": "{}"},
        {"type": "image", "attachment": {"attachmentId": "i", "mediaType": "image/png"}},
    ]
)


@st.composite
def budgets(draw: st.DrawFn) -> tuple[int, int, int]:
    head = draw(st.integers(0, 60))
    tail = draw(st.integers(0, 60))
    threshold = head + len(PRUNE_MARKER) + tail + draw(st.integers(0, 60))
    return threshold, head, tail


@given(budgets(), st.lists(st.one_of(_TEXT_BLOCKS, _OTHER_BLOCKS), max_size=8))
def test_prune_content_is_within_budget_and_keeps_head_tail_and_other_blocks(
    budget: tuple[int, int, int], blocks: list[dict[str, Any]]
) -> None:
    """Over the threshold: the result is <= threshold and strictly smaller, its text is exactly the first
    ``head`` code points + marker + the last ``tail`` ones, non-text blocks survive in order, no text
    block is empty. Within the threshold: ``None``."""
    threshold, head, tail = budget
    prune = ToolResultPruner(threshold, head, tail)
    full = "".join(block["text"] for block in blocks if block["type"] == "text")
    result = prune.prune_content(blocks)
    if len(full) <= threshold:
        assert result is None
        return
    assert result is not None
    after = prune.measure_content(result)
    assert after <= threshold
    assert after < len(full)
    text = "".join(block["text"] for block in result if block["type"] == "text")
    assert text == full[:head] + PRUNE_MARKER + full[len(full) - tail :]
    assert [b for b in result if b["type"] != "text"] == [b for b in blocks if b["type"] != "text"]
    assert all(block["text"] for block in result if block["type"] == "text")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), budgets())
def test_pruned_sessions_stay_paired_and_replay_to_the_same_messages(
    appends: list[tuple[str, Any, Any]], budget: tuple[int, int, int]
) -> None:
    """After a prune pass (on random sessions with parallel calls and earlier replacements): no tool call
    without its result or result without its call, a from-scratch replay derives the same messages, the
    token meter's incremental fold agrees with a fresh one, and a second pass does nothing."""
    session = build(appends)
    meter = TokenMeter()
    meter.measure(session)
    turn = 1 + sum(1 for type, _data, _intent in appends if type == "turn/start")
    session.append("turn/start", {"turn": turn})
    pruner = ToolResultPruner(*budget, meter=meter)
    result = pruner.prune_session(session)
    messages = session.derive_messages()
    assert tool_pairing_problems(messages) == []
    replay = Session.create("replayed", seed=list(session.events))
    assert replay.derive_messages() == messages
    assert replay.surface.replace_generation == session.surface.replace_generation
    assert meter.measure(session) == TokenMeter().measure(session)
    assert result.chars_removed == sum(e.chars_before - e.chars_after for e in result.pruned)
    for entry in result.pruned:
        assert entry.chars_before > budget[0] >= entry.chars_after
        assert session.events[entry.replacement_seq - 1]["type"] == "compaction/prune"
    assert pruner.prune_session(session).pruned == ()
