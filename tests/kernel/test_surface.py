"""Surface: provenance, replace ranges, tool-result rewrites, window mode, fold parity, type guards.

Conformance checklist ``shared/spec/core-session.md`` §19.4 (items 78–134); behaviour from §2, §4, §8
and §9. Each test names its checklist item in a ``# spec 19.4 #N`` comment.
"""

from __future__ import annotations

import json
import re
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog import (
    InvalidSeedError,
    Session,
    SurfaceError,
    SurfaceFoldReplacement,
    SurfaceManager,
    fold_surface,
    is_append_surface_event,
    is_replacement_surface_event,
    is_surface_eligible_type,
    is_surface_event,
)
from agentlog.testing.builders import (
    ABSENT,
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    seed_event,
    text_block,
    tool_result_msg_data,
    user_msg,
)

# ---------------------------------------------------------------------------------------------------
# helpers


def prov_event(seq: int, sources: Any = ABSENT, surface_op: Any = APPEND) -> dict[str, Any]:
    """An empty-content user/message wire event, used to exercise provenance checks."""
    return seed_event("user/message", seq, user_msg([]), surfaceOp=surface_op, sourceEventSeqs=sources)


def tr_event(
    seq: int,
    call_id: str,
    surface_op: Any = APPEND,
    sources: Any = ABSENT,
    *,
    msg_id: str | None = None,
    meta: Any = ABSENT,
) -> dict[str, Any]:
    """A tool/result wire event whose result text is ``result <seq>`` (isError false, like the original)."""
    data = tool_result_msg_data(call_id, f"result {seq}", is_error=False, id=msg_id, meta=meta)
    return seed_event("tool/result", seq, data, surfaceOp=surface_op, sourceEventSeqs=sources)


def plain(value: Any) -> Any:
    """A plain, mutable deep copy of a (possibly frozen) JSON value."""
    return json.loads(json.dumps(value))


def rewrite_of(original: dict[str, Any], seq: int, *, target: int | None = None) -> dict[str, Any]:
    """A copy of ``original`` (a tool/result event) at ``seq`` replacing ``target`` (default: its seq)."""
    target = original["seq"] if target is None else target
    event = plain(original)
    event["seq"] = seq
    event["time"] = seq
    event["surfaceOp"] = replace(target, target)
    event["sourceEventSeqs"] = [target]
    return event


def surface_session(session_id: str = "ss") -> Session:
    """turn/start (0), user ``hello`` (1), assistant ``hi`` (2), turn/end (3)."""
    s = Session.create(session_id)
    s.append("turn/start", {"turn": 1})
    s.append("user/message", user_msg("hello"), intent(APPEND))
    s.append("assistant/message", assistant_msg_data("hi"), intent(APPEND))
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    return s


def users(session: Session, *texts: str) -> None:
    for text in texts:
        session.append("user/message", user_msg(text), intent(APPEND))


def raises_surface(text: str) -> Any:
    return pytest.raises(SurfaceError, match=re.escape(text))


# ---------------------------------------------------------------------------------------------------
# foldSurface provenance


def test_surface__accepts_absent_or_valid_sources_and_complete_replacement_coverage() -> None:
    # spec 19.4 #78
    events = [prov_event(0), prov_event(1), prov_event(2, [0, 1], replace(0, 1))]
    result = fold_surface(events)
    assert result.nodes == [2]
    assert result.replacements == [SurfaceFoldReplacement(seq=2, start=0, end=1, shadowed_seqs=[0, 1])]


def test_surface__rejects_source_event_seqs_on_a_non_surface_event() -> None:
    # spec 19.4 #79
    event = seed_event("turn/start", 0, {"turn": 1}, sourceEventSeqs=[0])
    with raises_surface('session event "turn/start" is not surface-eligible and cannot carry sourceEventSeqs'):
        fold_surface([event])


def test_surface__accepts_explicit_empty_sources_on_an_assistant_message() -> None:
    # spec 19.4 #80
    event = seed_event("assistant/message", 0, assistant_msg_data([]), surfaceOp=APPEND, sourceEventSeqs=[])
    assert fold_surface([event]).nodes == [0]


def test_surface__rejects_non_array_sources() -> None:
    # spec 19.4 #81
    with raises_surface("sourceEventSeqs on event at seq 0 must be an array when present"):
        fold_surface([prov_event(0, "invalid")])


def test_surface__rejects_empty_sources_on_user_message() -> None:
    # spec 19.4 #82
    with raises_surface("sourceEventSeqs must not be empty except on assistant/message"):
        fold_surface([prov_event(0, [])])


def test_surface__rejects_duplicate_sources() -> None:
    # spec 19.4 #83
    with raises_surface("sourceEventSeqs must not contain duplicates"):
        fold_surface([prov_event(0), prov_event(1, [0, 0])])


def test_surface__rejects_sparse_sources() -> None:
    # spec 19.4 #84 — Python lists have no holes; a hole reads as absent, the closest wire value is null.
    with raises_surface('session event "user/message" sourceEventSeqs must densely contain non-negative safe integers'):
        fold_surface([prov_event(0, [None])])


def test_surface__rejects_non_number_sources() -> None:
    # spec 19.4 #85
    with raises_surface('session event "user/message" sourceEventSeqs must densely contain non-negative safe integers'):
        fold_surface([prov_event(0, ["0"])])


def test_surface__rejects_fractional_sources() -> None:
    # spec 19.4 #86
    with raises_surface('session event "user/message" sourceEventSeqs must densely contain non-negative safe integers'):
        fold_surface([prov_event(0, [0.5])])


def test_surface__rejects_negative_sources() -> None:
    # spec 19.4 #87
    with raises_surface('session event "user/message" sourceEventSeqs must densely contain non-negative safe integers'):
        fold_surface([prov_event(0, [-1])])


def test_surface__rejects_self_reference() -> None:
    # spec 19.4 #88
    with raises_surface("sourceEventSeqs must reference earlier events: 0 >= current seq 0"):
        fold_surface([prov_event(0, [0])])


def test_surface__rejects_non_contiguous_event_seq() -> None:
    # spec 19.4 #89
    with raises_surface("session event seq 2 is not contiguous; expected 1"):
        fold_surface([prov_event(0), prov_event(2, [1])])


def test_surface__rejects_incomplete_replacement_coverage() -> None:
    # spec 19.4 #90
    events = [prov_event(0), prov_event(1), prov_event(2, [0], replace(0, 1))]
    with raises_surface("surface replace: sourceEventSeqs must include every shadowed surface node; missing 1"):
        fold_surface(events)


# ---------------------------------------------------------------------------------------------------
# foldSurface tool-result rewrites


def test_surface__rejects_replacement_spanning_multiple_nodes() -> None:
    # spec 19.4 #91
    events = [prov_event(0), prov_event(1), tr_event(2, "rewrite", replace(0, 1), [0, 1])]
    with raises_surface("tool/result surface replacement must rewrite exactly one current node"):
        fold_surface(events)


def test_surface__rejects_replacement_targeting_a_non_result_node() -> None:
    # spec 19.4 #92
    events = [prov_event(0), tr_event(1, "rewrite", replace(0, 0), [0])]
    with raises_surface("tool/result surface replacement must target a current tool/result"):
        fold_surface(events)


def test_surface__rejects_changes_outside_tool_result_content() -> None:
    # spec 19.4 #93 — a different call id and a different message (id) altogether
    original = tr_event(0, "original")
    events = [original, tr_event(1, "changed", replace(0, 0), [0])]
    with raises_surface("tool/result surface replacement may change only content"):
        fold_surface(events)
    # control: the same rewrite keeping everything but the inner content is accepted
    ok = rewrite_of(original, 1)
    ok["data"]["message"]["content"][0]["content"] = [text_block("pruned")]
    assert fold_surface([original, ok]).nodes == [1]


def test_surface__rejects_rewrite_changing_result_block_tool_call_id() -> None:
    # spec 19.4 #94
    original = tr_event(0, "original")
    replacement = rewrite_of(original, 1)
    replacement["data"]["message"]["content"][0]["toolCallId"] = "changed"
    with raises_surface("tool/result surface replacement may change only content"):
        fold_surface([original, replacement])


def test_surface__rejects_rewrite_changing_result_block_is_error() -> None:
    # spec 19.4 #95
    original = tr_event(0, "original")
    replacement = rewrite_of(original, 1)
    replacement["data"]["message"]["content"][0]["isError"] = True
    with raises_surface("tool/result surface replacement may change only content"):
        fold_surface([original, replacement])


def test_surface__compares_array_valued_rest_fields_structurally() -> None:
    # spec 19.4 #96
    def with_meta(seq: int, meta: Any, surface_op: Any = APPEND, sources: Any = ABSENT) -> dict[str, Any]:
        return tr_event(seq, "c-meta", surface_op, sources, msg_id="meta-message", meta=meta)

    def rewrite(seq: int, meta: Any) -> dict[str, Any]:
        return with_meta(seq, meta, replace(0, 0), [0])

    # structurally equal arrays (fresh objects) pass
    assert fold_surface([with_meta(0, {"tags": ["a", {"n": 1}]}), rewrite(1, {"tags": ["a", {"n": 1}]})]).nodes == [1]
    text = "tool/result surface replacement may change only content"
    # same length, drifted element
    with raises_surface(text):
        fold_surface([with_meta(0, {"tags": ["a"]}), rewrite(1, {"tags": ["b"]})])
    # array vs non-array
    with raises_surface(text):
        fold_surface([with_meta(0, {"tags": ["a"]}), rewrite(1, {"tags": "a"})])
    # same key count, different key names
    with raises_surface(text):
        fold_surface([with_meta(0, {"left": 1}), rewrite(1, {"right": 1})])
    # different key counts
    with raises_surface(text):
        fold_surface([with_meta(0, {"one": 1}), rewrite(1, {"one": 1, "two": 2})])


def test_surface__tool_result_rewrite_compares_primitives_strictly() -> None:
    # spec 8.3.2 (port pitfall): JSON structural equality with strictly equal primitives — true is not 1
    original = tr_event(0, "c-strict", meta={"flag": 1})
    replacement = rewrite_of(original, 1)
    replacement["data"]["meta"] = {"flag": True}
    with raises_surface("tool/result surface replacement may change only content"):
        fold_surface([original, replacement])


# ---------------------------------------------------------------------------------------------------
# SurfaceManager (window mode, fold parity, atomic validation)

BASE = 400_000


def test_surface__folds_a_contiguous_window_without_earlier_events() -> None:
    # spec 19.4 #97
    window = [prov_event(BASE), prov_event(BASE + 1), prov_event(BASE + 2, [BASE], replace(BASE, BASE))]
    manager = SurfaceManager(window, BASE)
    assert manager.nodes == [BASE + 2, BASE + 1]
    assert manager.replace_generation == 1
    # the next candidate is expected at base + window length, and a committed candidate is picked up
    with raises_surface(f"session event seq {BASE + 2} is not contiguous; expected {BASE + 3}"):
        manager.validate_next(prov_event(BASE + 2))
    candidate = prov_event(BASE + 3, [BASE - 7])  # sources may cite seqs before the window
    manager.validate_next(candidate)
    window.append(candidate)
    assert manager.nodes == [BASE + 2, BASE + 1, BASE + 3]


def test_surface__validates_tool_result_rewrite_against_nonzero_window_offset() -> None:
    # spec 19.4 #98
    original = tr_event(BASE, "call")
    window = [original, rewrite_of(original, BASE + 1)]
    manager = SurfaceManager(window, BASE)
    assert manager.nodes == [BASE + 1]
    assert manager.replace_generation == 1


def test_surface__rejects_replacement_crossing_the_window_head() -> None:
    # spec 19.4 #99
    window = [prov_event(BASE), prov_event(BASE + 1, [BASE - 1, BASE], replace(BASE - 1, BASE))]
    with raises_surface(f"surface replace: start seq {BASE - 1} not found in surface"):
        _ = SurfaceManager(window, BASE).nodes


def test_surface__shares_ordered_entries_and_nested_ranges_with_fold_surface() -> None:
    # spec 19.4 #100
    s = Session.create("shared-fold")
    users(s, "a", "b")
    s.append("assistant/message", assistant_msg_data("summary"), intent(replace(0, 0), [0]))
    s.append("assistant/message", assistant_msg_data("summary 2", step=2), intent(replace(2, 1), [2, 1]))

    folded = fold_surface(s.events)
    assert folded.nodes == list(s.surface.nodes)
    assert folded.replacements == [
        SurfaceFoldReplacement(seq=2, start=0, end=0, shadowed_seqs=[0]),
        SurfaceFoldReplacement(seq=3, start=2, end=1, shadowed_seqs=[2, 1]),
    ]
    folded.nodes[0] = 99
    folded.replacements[0].shadowed_seqs.append(99)
    assert s.surface.nodes == [3]
    assert fold_surface(s.events).nodes == [3]
    assert fold_surface(s.events).replacements[0].shadowed_seqs == [0]


def _reachable_state(root: object, max_depth: int = 6) -> list[tuple[str, object]]:
    """(name, value) pairs of objects reachable from ``root`` through instance attributes and containers."""
    seen: set[int] = set()
    out: list[tuple[str, object]] = []
    stack: list[tuple[str, object, int]] = [("root", root, 0)]
    while stack:
        name, obj, depth = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), type, ModuleType)):
            continue
        seen.add(id(obj))
        out.append((name, obj))
        if depth >= max_depth:
            continue
        if isinstance(obj, dict):
            stack.extend((str(k), v, depth + 1) for k, v in obj.items())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend((name, v, depth + 1) for v in obj)
        attrs: dict[str, object] = dict(getattr(obj, "__dict__", None) or {})
        for cls in type(obj).__mro__:
            slots = getattr(cls, "__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    attrs[slot] = getattr(obj, slot)
        stack.extend((k, v, depth + 1) for k, v in attrs.items())
    return out


def test_surface__incremental_state_keeps_no_replacement_history() -> None:
    # spec 19.4 #101
    s = Session.create("incremental-state")
    users(s, "a")
    s.append("assistant/message", assistant_msg_data("b"), intent(replace(0, 0), [0]))
    assert s.surface.nodes == [1]
    assert not hasattr(s.surface, "replacements")
    for name, value in _reachable_state(s.surface):
        assert not isinstance(value, SurfaceFoldReplacement), name
        assert name.lstrip("_") != "replacements", f"surface state retains {name!r}: {value!r}"
    assert fold_surface(s.events).replacements == [SurfaceFoldReplacement(seq=1, start=0, end=0, shadowed_seqs=[0])]


def test_surface__fold_surface_reports_same_invalid_replacement_as_manager() -> None:
    # spec 19.4 #102
    events = [prov_event(0), prov_event(1, [0], replace(42, 0))]
    with raises_surface("surface replace: start seq 42 not found in surface"):
        fold_surface(events)
    with pytest.raises(
        InvalidSeedError,
        match=re.escape("invalid seed event at index 1: surface replace: start seq 42 not found in surface"),
    ) as info:
        Session.create("shared-fold-invalid", events)
    assert info.value.index == 1


def test_surface__failed_candidate_validation_leaves_state_unchanged() -> None:
    # spec 19.4 #103
    s = Session.create("atomic-validation")
    users(s, "a")
    surface = s.surface
    nodes = surface.nodes
    events_before = s.events
    assert nodes == fold_surface(s.events).nodes
    assert surface.replace_generation == 0

    with raises_surface("surface replace: sourceEventSeqs must include every shadowed surface node; missing 0"):
        s.append("assistant/message", assistant_msg_data("invalid"), intent(replace(0, 0)))

    assert len(s.events) == 1
    assert s.events == events_before
    assert s.seq == 1
    assert s.surface is surface
    assert surface.nodes == [0]
    assert surface.replace_generation == 0
    assert surface.nodes == fold_surface(s.events).nodes

    users(s, "b")
    assert surface.nodes is nodes
    assert surface.nodes == [0, 1]
    assert surface.replace_generation == 0
    assert surface.nodes == fold_surface(s.events).nodes


def test_surface__fold_surface_rejects_eligible_event_without_marker() -> None:
    # spec 19.4 #104
    event = seed_event("user/message", 0, user_msg("hidden"))
    with raises_surface('session event "user/message" is surface-eligible and requires a surfaceOp marker'):
        fold_surface([event])


def test_surface__fold_surface_rejects_surface_op_on_non_surface_event() -> None:
    # spec 19.4 #105
    event = seed_event("turn/start", 0, {"turn": 1}, surfaceOp=APPEND)
    with raises_surface('session event "turn/start" is not surface-eligible and cannot carry surfaceOp'):
        fold_surface([event])


def test_surface__folds_ordered_nodes_from_append_markers() -> None:
    # spec 19.4 #106
    assert surface_session().surface.nodes == [1, 2]


def test_surface__empty_surface_yields_empty_nodes() -> None:
    # spec 19.4 #107
    s = Session.create("empty")
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    s.append("step/end", {"turn": 1, "step": 1})
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert len(s.surface.nodes) == 0
    assert s.derive_messages() == []
    assert len(s.derive_messages()) == 0


def test_surface__picks_up_new_events_incrementally() -> None:
    # spec 19.4 #108
    s = surface_session()
    assert len(s.surface.nodes) == 2
    s.append("tool/result", tool_result_msg_data("c1", "ok", is_error=False), intent(APPEND))
    assert len(s.surface.nodes) == 3
    assert s.surface.nodes[2] == 4


def test_surface__replays_identically_from_seeded_log() -> None:
    # spec 19.4 #109
    original = surface_session()
    original.append("tool/result", tool_result_msg_data("c1", "ok", is_error=False), intent(APPEND))
    replayed = Session.create("replay", list(original.events))
    assert replayed.surface.nodes == [1, 2, 4]
    assert list(replayed.derive_messages()) == list(original.derive_messages())
    assert len(original.derive_messages()) == 3


def test_surface__replace_splices_out_shadowed_nodes() -> None:
    # spec 19.4 #110
    s = surface_session()
    s.append("assistant/message", assistant_msg_data("summary", turn=2), intent(replace(1, 2), [1, 2]))
    assert s.surface.nodes == [4]


def test_surface__replace_with_both_ends_at_real_nodes_splices_only_the_range() -> None:
    # spec 19.4 #111
    s = Session.create("range")
    users(s, "a", "b", "c")
    s.append("assistant/message", assistant_msg_data("summary"), intent(replace(0, 1), [0, 1]))
    assert s.surface.nodes == [3, 2]


def test_surface__single_node_replacement() -> None:
    # spec 19.4 #112
    s = Session.create("single")
    users(s, "a", "b")
    s.append("assistant/message", assistant_msg_data("x"), intent(replace(1, 1), [1]))
    assert s.surface.nodes == [0, 2]
    assert s.surface.replace_generation == 1


def test_surface__throws_when_replace_start_not_found() -> None:
    # spec 19.4 #113
    s = Session.create("bad-start")
    users(s, "a")
    with raises_surface("surface replace: start seq 5 not found in surface"):
        s.append("assistant/message", assistant_msg_data("y"), intent(replace(5, 0), [0]))


def test_surface__throws_when_replace_end_not_found() -> None:
    # spec 19.4 #114
    s = Session.create("bad-end")
    users(s, "a")
    with raises_surface("surface replace: end seq 99 not found in surface"):
        s.append("assistant/message", assistant_msg_data("y"), intent(replace(0, 99), [0]))


def test_surface__throws_when_start_is_after_end() -> None:
    # spec 19.4 #115
    s = Session.create("reversed")
    users(s, "a", "b")
    with raises_surface("surface replace: start seq 1 (index 1) is after end seq 0 (index 0)"):
        s.append("assistant/message", assistant_msg_data("y"), intent(replace(1, 0), [1, 0]))


def test_surface__source_event_seqs_are_snapshot_against_caller_mutation() -> None:
    # spec 19.4 #116
    s = Session.create("immutable")
    users(s, "source")
    sources = [0]
    opts = intent(APPEND, sources)
    event = s.append("assistant/message", assistant_msg_data("h"), opts)
    sources.append(1)
    sources[0] = 99
    opts["sourceEventSeqs"] = [7]
    assert s.events[1]["sourceEventSeqs"] == [0]
    assert event["sourceEventSeqs"] == [0]
    assert event.source_event_seqs == [0]


def test_surface__replace_at_non_head_position_preserves_surrounding_order() -> None:
    # spec 19.4 #117
    s = Session.create("mid-replace")
    users(s, "a", "b", "c")
    s.append("assistant/message", assistant_msg_data("x"), intent(replace(1, 1), [1]))
    assert s.surface.nodes == [0, 3, 2]


def test_surface__replace_surface_op_is_snapshot_against_caller_mutation() -> None:
    # spec 19.4 #118
    s = Session.create("immutable-op")
    users(s, "a")
    op = replace(0, 0)
    s.append("assistant/message", assistant_msg_data("s"), intent(op, [0]))
    op["start"] = 99
    assert s.events[1]["surfaceOp"] == {"op": "replace", "start": 0, "end": 0}
    assert s.events[1].surface_op == {"op": "replace", "start": 0, "end": 0}


# ---------------------------------------------------------------------------------------------------
# deriveMessages with surface


def test_surface__derive_messages_uses_the_surface_path() -> None:
    # spec 19.4 #119
    messages = surface_session().derive_messages()
    assert len(messages) == 2
    assert messages[0]["role"] == "user"
    assert messages[0]["content"][0] == {"type": "text", "text": "hello"}
    assert messages[1]["role"] == "assistant"
    assert messages[1]["content"][0] == {"type": "text", "text": "hi"}


def test_surface__derive_messages_skips_non_surface_events() -> None:
    # spec 19.4 #120
    s = Session.create("filter")
    s.append("turn/start", {"turn": 1})
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "h"}})
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 1, "text": "i"}})
    s.append("user/message", user_msg("hello"), intent(APPEND))
    s.append("assistant/message", assistant_msg_data("hi"), intent(APPEND))
    s.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    messages = s.derive_messages()
    assert len(messages) == 2
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_surface__derive_messages_excludes_shadowed_nodes() -> None:
    # spec 19.4 #121
    s = Session.create("compacted")
    users(s, "original")
    s.append("assistant/message", assistant_msg_data("compacted"), intent(replace(0, 0), [0]))
    messages = s.derive_messages()
    assert len(messages) == 1
    assert messages[0]["content"][0] == {"type": "text", "text": "compacted"}


def test_surface__injected_context_and_user_messages_appear_on_surface() -> None:
    # spec 19.4 #122
    s = Session.create("ctx")
    s.append(
        "user/message",
        user_msg("file changed", source={"kind": "plugin", "plugin": "watcher"}),
        intent(APPEND),
    )
    s.append("user/message", user_msg("focus"), intent(APPEND))
    messages = s.derive_messages()
    assert len(messages) == 2
    assert messages[0]["content"] == [{"type": "text", "text": "file changed"}]
    assert messages[0]["source"] == {"kind": "plugin", "plugin": "watcher"}
    assert messages[1]["content"] == [{"type": "text", "text": "focus"}]


# ---------------------------------------------------------------------------------------------------
# Session.append surface opts


def test_surface__records_source_event_seqs_and_surface_op_on_the_event() -> None:
    # spec 19.4 #123
    s = Session.create("opts")
    s.append("turn/start", {"turn": 1})
    s.append("step/start", {"turn": 1, "step": 1})
    event = s.append("assistant/message", assistant_msg_data("h"), intent(APPEND, [0, 1]))
    assert event["sourceEventSeqs"] == [0, 1]
    assert event["surfaceOp"] == "append"
    assert s.events[2] is event
    assert s.events[2]["sourceEventSeqs"] == [0, 1]
    assert s.events[2]["surfaceOp"] == "append"
    # §2.1 key order of an appended event: type, seq, time, data, sourceEventSeqs, surfaceOp
    assert list(event.keys()) == ["type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp"]


def test_surface__derive_messages_skips_node_deriving_to_null() -> None:
    # spec 19.4 #124
    seed = [
        seed_event("turn/start", 0, {"turn": 1}, time=1),
        seed_event("step/start", 1, {"turn": 1, "step": 1}, time=2),
        seed_event("assistant/message", 2, assistant_msg_data([]), time=3, surfaceOp=APPEND),
        seed_event("step/end", 3, {"turn": 1, "step": 1}, time=4),
        seed_event("turn/end", 4, {"turn": 1, "reason": {"kind": "completed"}}, time=5),
    ]
    s = Session.create("nomessage", seed)
    assert s.surface.nodes == [2]
    assert len(s.derive_messages()) == 0


def test_surface__non_surface_event_carries_no_surface_fields() -> None:
    # spec 19.4 #125
    s = Session.create("noopts")
    event = s.append("turn/start", {"turn": 1})
    logged = s.events[0]
    assert "sourceEventSeqs" not in logged
    assert "surfaceOp" not in logged
    assert logged.source_event_seqs is None
    assert logged.surface_op is None
    assert list(event.keys()) == ["type", "seq", "time", "data"]


def test_surface__surface_op_primitives_are_not_cloned() -> None:
    # spec 19.4 #126
    s = Session.create("prim")
    event = s.append("assistant/message", assistant_msg_data([]), intent(APPEND))
    assert event["surfaceOp"] == "append"
    assert type(event["surfaceOp"]) is str
    assert event.surface_op == "append"


def test_surface__append_opts_is_surface_event_rejects_markerless_eligible_event() -> None:
    # spec 19.4 #127
    no_marker = seed_event("user/message", 0, user_msg("hi"), time=1)
    assert is_surface_event(no_marker) is False
    boundary = seed_event("turn/start", 1, {"turn": 1}, time=1)
    assert is_surface_event(boundary) is False
    marked = {**no_marker, "surfaceOp": APPEND}
    assert is_surface_event(marked) is True


# ---------------------------------------------------------------------------------------------------
# type guards


def test_surface__is_surface_eligible_type_only_for_message_types() -> None:
    # spec 19.4 #128
    assert is_surface_eligible_type("user/message") is True
    assert is_surface_eligible_type("assistant/message") is True
    assert is_surface_eligible_type("tool/result") is True
    assert is_surface_eligible_type("turn/start") is False
    assert is_surface_eligible_type("assistant/chunk") is False
    assert is_surface_eligible_type("tool/call") is False
    assert is_surface_eligible_type("plugin/marker") is False


def test_surface__is_surface_event_narrows_fully_formed_surface_event() -> None:
    # spec 19.4 #129
    s = surface_session()
    user_event = next(e for e in s.events if e["type"] == "user/message")
    assert is_surface_event(user_event) is True


def test_surface__is_surface_event_rejects_non_eligible_type() -> None:
    # spec 19.4 #130
    s = surface_session()
    turn_start = next(e for e in s.events if e["type"] == "turn/start")
    assert is_surface_event(turn_start) is False


def test_surface__type_guards_is_surface_event_rejects_markerless_eligible_event() -> None:
    # spec 19.4 #131
    markerless = seed_event("user/message", 0, user_msg("hi"), time=0)
    assert is_surface_eligible_type(markerless["type"]) is True
    assert is_surface_event(markerless) is False


def test_surface__splits_append_origin_and_replacement_events() -> None:
    # spec 19.4 #132
    s = surface_session()
    s.append(
        "user/message",
        user_msg("checkpoint", source={"kind": "plugin", "plugin": "compact"}),
        intent(replace(1, 2), [1, 2]),
    )
    appended = next(e for e in s.events if e["type"] == "user/message")
    replacement = s.events[-1]
    assert is_append_surface_event(appended) is True
    assert is_replacement_surface_event(appended) is False
    assert is_append_surface_event(replacement) is False
    assert is_replacement_surface_event(replacement) is True
    assert is_surface_event(replacement) is True


def test_surface__marker_guards_reject_log_only_and_markerless_events() -> None:
    # spec 19.4 #133
    s = surface_session()
    turn_start = next(e for e in s.events if e["type"] == "turn/start")
    markerless = seed_event("user/message", 0, user_msg("hi"), time=0)
    assert is_append_surface_event(turn_start) is False
    assert is_replacement_surface_event(turn_start) is False
    assert is_append_surface_event(markerless) is False
    assert is_replacement_surface_event(markerless) is False


# ---------------------------------------------------------------------------------------------------
# replaceGeneration


def test_surface__replace_generation_folds_pending_delta_and_counts_replaces() -> None:
    # spec 19.4 #134
    s = Session.create("gen")
    s.append("turn/start", {"turn": 1})
    users(s, "one", "two")
    # read the generation FIRST so its getter folds the pending delta itself
    assert s.surface.replace_generation == 0
    nodes = s.surface.nodes
    assert nodes == [1, 2]
    start, end = nodes[0], nodes[1]
    s.append(
        "user/message",
        user_msg("summary", source={"kind": "plugin", "plugin": "compact"}),
        intent(replace(start, end), [start, end]),
    )
    assert s.surface.replace_generation == 1
    assert s.surface.nodes == [3]


# --- the live manager's position index (kept once replaces happen) -----------------------------------


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "one", "range", "missing"]), st.integers(0, 10_000)), max_size=60))
def test_live_surface_with_position_index_equals_a_fresh_fold(ops: list[tuple[str, int]]) -> None:
    """Appends, one-node and range replaces in any order: the live surface (which validates replaces through
    its seq→position index after the first one) equals a fresh fold of the log, and refuses exactly the
    replaces a fresh fold refuses, with the same message."""
    import agentlog as al
    from agentlog.errors import SurfaceError
    from agentlog.kernel.messages import user_message
    from agentlog.kernel.surface import fold_surface, plan_surface_event

    session = al.SessionStore().create("positions")
    for kind, pick in ops:
        nodes = list(session.surface.nodes)
        if kind == "append" or not nodes:
            session.append("user/message", user_message(f"m{pick}"), {"surfaceOp": "append"})
            continue
        if kind == "missing":
            start = end = session.seq + 5  # never on the surface
        elif kind == "one":
            start = end = nodes[pick % len(nodes)]
        else:
            i = pick % len(nodes)
            j = i + (pick // 7) % (len(nodes) - i)
            start, end = nodes[i], nodes[j]
        shadowed = nodes[nodes.index(start) : nodes.index(end) + 1] if start in nodes else [start]
        intent = {"surfaceOp": {"op": "replace", "start": start, "end": end}, "sourceEventSeqs": shadowed}
        candidate = {"type": "user/message", "seq": session.seq, "time": 0, "data": {}, **intent}
        try:
            plan_surface_event(nodes, candidate, session.seq, session.events.to_list())
            expected = None
        except SurfaceError as err:
            expected = str(err)
        try:
            session.append("user/message", user_message(f"r{pick}"), intent)
            got = None
        except SurfaceError as err:
            got = str(err)
        assert got == expected
    assert list(session.surface.nodes) == fold_surface(session.events.to_list()).nodes


def test_surface_timeline_refusals_leave_it_as_it_was() -> None:
    """A replacement of nodes that are not on the surface is refused as the live fold refuses it, and
    the timeline still answers what it answered; seqs it was not given are out of range."""
    from agentlog import SeqOutOfRangeError
    from agentlog.kernel.surface import SurfaceTimeline

    session = Session.create("timeline")
    session.append("user/message", user_msg("one"), intent(APPEND))
    session.append("user/message", user_msg("two"), intent(APPEND))
    events = list(session.events)
    timeline = SurfaceTimeline.fold(events)
    bad = {
        "type": "user/message",
        "seq": 2,
        "time": 0,
        "data": user_msg("summary"),
        "surfaceOp": replace(7, 7),
        "sourceEventSeqs": [7],
    }
    with pytest.raises(SurfaceError):
        timeline.add(bad)
    assert timeline.last_seq == 1 and timeline.nodes_at(1) == [0, 1] and timeline.nodes_at(0) == [0]
    with pytest.raises(SeqOutOfRangeError):
        timeline.nodes_at(2)
    with pytest.raises(SurfaceError):
        timeline.add(events[1])  # not after the last seq added


def test_surface_timeline__a_copy_folds_on_alone() -> None:
    """``copy()`` answers as the original and is continued by ``add`` on its own: after replacements
    (checkpoints taken), the copy folded on equals a fold of the whole log at every seq, and the
    original still answers what it answered."""
    from agentlog.kernel.surface import SurfaceTimeline, fold_surface

    session = Session.create("timeline-copy")
    for k in range(12):
        session.append("user/message", user_msg(f"m{k}"), intent(APPEND))
        if k % 3 == 2:
            nodes = list(session.surface.nodes)
            shadow = nodes[-2:]
            session.append(
                "user/message",
                user_msg(f"s{k}", source={"kind": "plugin", "plugin": "t"}),
                {"surfaceOp": replace(shadow[0], shadow[-1]), "sourceEventSeqs": shadow},
            )
    events = list(session.events)
    half = len(events) // 2
    original = SurfaceTimeline(events, every=1)
    for event in events[:half]:
        original.add(event)
    before = [original.nodes_at(seq) for seq in range(half)]
    copy = original.copy(events)
    for event in events[half:]:
        copy.add(event)
    for seq in range(len(events)):
        assert copy.nodes_at(seq) == fold_surface(events[: seq + 1]).nodes, seq
    assert [r.seq for r in copy.replacements] == [r.seq for r in fold_surface(events).replacements]
    assert original.last_seq == half - 1
    assert [original.nodes_at(seq) for seq in range(half)] == before
