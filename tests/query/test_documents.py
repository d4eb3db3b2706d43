"""Search documents (runtime spec §4.2) and surface classes (§4.1): what is searchable, where it sits.

Every row of the §4.2 extraction table is checked on events a real kernel :class:`Session` committed
(so the shapes are the ones the kernel accepts and stores), plus the original's
``search-helpers.spec.ts`` extraction and classification cases. Surface classes are checked against
real sessions with replace operations, and as a property: over random append/replace histories the
classes agree with the live surface and with a model of which nodes each replace removed.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionQueryError
from agentlog.kernel.events import EventTypes
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.session import Session
from agentlog.query.documents import (
    SURFACES,
    build_documents,
    build_event_records,
    extract_event_text,
    surface_classes,
)
from agentlog.testing.builders import (
    APPEND,
    assistant_msg_data,
    intent,
    replace,
    seed_event,
    text_block,
    tool_result_block,
    tool_result_msg_data,
    user_msg,
)


def _clock() -> Any:
    ticks = itertools.count(100)
    return lambda: next(ticks)


MIXED_BLOCKS: list[Any] = [
    text_block(" visible "),
    {"type": "reasoning", "text": "thought"},
    {"type": "tool-call", "id": "call", "name": "read", "arguments": '{"path":"a"}'},
    tool_result_block("call", [text_block("nested")], is_error=False),
    {"type": "future-content", "payload": "hidden"},
]
MIXED_TEXT = 'visible\nread\n{"path":"a"}\nnested'


def _full_turn() -> Session:
    """One committed turn holding every §4.2 row, ending with a replace of the first two surface nodes."""
    s = Session.create("doc", now=_clock())
    s.append("turn/start", {"turn": 1})  # 0
    s.append("request/header", {"header": {"config": {"provider": "test", "model": "test"}}, "reason": "initial"})  # 1
    s.append("user/message", user_msg(MIXED_BLOCKS), intent(APPEND))  # 2
    s.append("step/start", {"turn": 1, "step": 1})  # 3
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "raw"}})
    s.append(  # 5
        "assistant/message",
        assistant_msg_data(
            [
                text_block("answer"),
                {"type": "reasoning", "text": "private thought"},
                {"type": "tool-call", "id": "c2", "name": "bash", "arguments": '{"cmd":"pwd"}'},
            ]
        ),
        intent(APPEND),
    )
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c2", "name": "bash", "arguments": '{"cmd":"pwd"}'})  # 6
    s.append(  # 7
        "tool/result",
        tool_result_msg_data("c2", "failed", is_error=True, error={"name": "Oops", "code": "E_OOPS"}),
        intent(APPEND),
    )
    s.append("step/end", {"turn": 1, "step": 1})  # 8
    s.append("todo/write", {"todos": [{"status": "in_progress", "content": "ship search"}]})  # 9
    s.append("turn/end", {"turn": 1, "reason": {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}}})
    s.append("assistant/message", assistant_msg_data("summary", turn=2), intent(replace(2, 5), [2, 5]))  # 11
    return s


EXPECTED_TEXT = [
    "",  # turn/start
    "",  # request/header
    MIXED_TEXT,  # user/message: text, tool-call name + arguments, nested tool-result; no reasoning, no unknown
    "",  # step/start
    "",  # assistant/chunk
    'answer\nbash\n{"cmd":"pwd"}',  # assistant/message: message.content, reasoning excluded
    'bash\n{"cmd":"pwd"}',  # tool/call: name, raw arguments JSON
    "failed\nOops\nE_OOPS",  # tool/result: content text, error.name, error.code
    "",  # step/end
    "in_progress\nship search",  # todo/write: status, content per todo
    "error\nboom",  # turn/end error: "error" + message
    "summary",
]


def test_every_table_row_on_a_committed_turn() -> None:
    s = _full_turn()
    assert [extract_event_text(event) for event in s.events] == EXPECTED_TEXT


def test_documents_of_a_committed_turn_carry_metadata_surface_and_skip_empty_text() -> None:
    s = _full_turn()
    documents = build_documents("doc", s.events)
    assert [list(d) for d in documents] == [["sessionId", "seq", "type", "time", "surface", "text"]] * len(documents)
    assert [(d["seq"], d["type"], d["surface"], d["text"]) for d in documents] == [
        (2, "user/message", "shadowed", MIXED_TEXT),
        (5, "assistant/message", "shadowed", 'answer\nbash\n{"cmd":"pwd"}'),
        (6, "tool/call", "log-only", 'bash\n{"cmd":"pwd"}'),
        (7, "tool/result", "current", "failed\nOops\nE_OOPS"),
        (9, "todo/write", "log-only", "in_progress\nship search"),
        (10, "turn/end", "log-only", "error\nboom"),
        (11, "assistant/message", "current", "summary"),
    ]
    assert all(d["sessionId"] == "doc" for d in documents)
    assert [d["time"] for d in documents] == [s.events[d["seq"]]["time"] for d in documents]
    assert all(type(d["text"]) is str for d in documents)


def test_assistant_reasoning_is_excluded_while_the_visible_answer_is_indexed() -> None:
    s = Session.create("r", now=_clock())
    s.append("user/message", user_msg("question"), intent(APPEND))
    s.append(
        "assistant/message",
        assistant_msg_data([{"type": "reasoning", "text": "private thought"}, text_block("visible answer")]),
        intent(APPEND),
    )
    s.append("assistant/message", assistant_msg_data([{"type": "reasoning", "text": "only thought"}]), intent(APPEND))
    documents = build_documents("r", s.events)
    assert [(d["seq"], d["text"]) for d in documents] == [(0, "question"), (1, "visible answer")]
    assert all("thought" not in d["text"] for d in documents)


def test_tool_result_without_content_or_error_has_no_document() -> None:
    s = Session.create("t", now=_clock())
    s.append("tool/result", tool_result_msg_data("c", []), intent(APPEND))
    assert extract_event_text(s.events[0]) == ""
    assert build_documents("t", s.events) == []


def test_tool_result_error_name_and_code_are_each_optional() -> None:
    s = Session.create("t", now=_clock())
    s.append("tool/result", tool_result_msg_data("c", "  ", error={"name": "Only"}), intent(APPEND))
    s.append("tool/result", tool_result_msg_data("d", "x", error={"code": "E"}), intent(APPEND))
    assert [extract_event_text(e) for e in s.events] == ["Only", "x\nE"]


def test_todo_write_lists_every_todo_in_order_and_an_empty_list_is_no_document() -> None:
    s = Session.create("t", now=_clock())
    s.append(
        "todo/write",
        {"todos": [{"status": "completed", "content": " a "}, {"status": "pending", "content": "b"}]},
    )
    s.append("todo/write", {"todos": []})
    assert extract_event_text(s.events[0]) == "completed\na\npending\nb"
    assert [d["seq"] for d in build_documents("t", s.events)] == [0]


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        ({"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}}, "error\nboom"),
        ({"kind": "error", "error": {"message": "provider boom", "code": "UNKNOWN"}}, "error\nprovider boom"),
        ({"kind": "aborted", "reason": {"kind": "user"}}, "aborted"),
        ({"kind": "aborted", "reason": {"kind": "disposed"}}, "aborted"),
        ({"kind": "max-tokens"}, "max-tokens"),
        ({"kind": "interrupted"}, "interrupted"),
        ({"kind": "completed"}, ""),
    ],
)
def test_turn_end_outcomes_on_committed_events(reason: dict[str, Any], text: str) -> None:
    # search-helpers.spec: extracts meaningful turn outcomes
    s = Session.create("t", now=_clock())
    s.append("turn/end", {"turn": 1, "reason": reason})
    assert extract_event_text(s.events[0]) == text


def test_turn_end_unknown_outcome_kind_is_not_searchable() -> None:
    event = seed_event("turn/end", 0, {"turn": 1, "reason": {"kind": "future-status", "detail": "hidden"}})
    assert extract_event_text(event) == ""


def test_structural_and_unknown_events_contribute_nothing() -> None:
    # search-helpers.spec: skips structural or unknown events
    structural = [
        seed_event("turn/start", 0, {"turn": 1}),
        seed_event("step/start", 1, {"turn": 1, "step": 1}),
        seed_event("step/end", 2, {"turn": 1, "step": 1}),
        seed_event("assistant/chunk", 3, {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "text": "raw"}}),
        seed_event("request/header", 4, {"header": {"config": {"provider": "t", "model": "t"}}, "reason": "initial"}),
        seed_event("request/context", 5, {"text": "hidden"}),
        seed_event("session/end-seed", 6, {}),
        seed_event("future/event", 7, {"text": "hidden", "content": [text_block("hidden")]}),
    ]
    assert [extract_event_text(event) for event in structural] == [""] * len(structural)


def test_plugin_event_in_a_live_session_is_not_searchable() -> None:
    registry = EventTypes()
    registry.register("plugin/note")
    s = Session.create("p", now=_clock(), registry=registry)
    s.append("plugin/note", {"text": "hidden", "content": [text_block("hidden")]})
    s.append("user/message", user_msg("seen"), intent(APPEND))
    assert [(d["seq"], d["text"]) for d in build_documents("p", s.events)] == [(1, "seen")]


def test_the_same_blocks_extract_identically_from_user_assistant_and_plugin_messages() -> None:
    # search-helpers.spec: extracts first-party message, tool, todo, and failure detail
    s = Session.create("m", now=_clock())
    s.append("user/message", user_msg(MIXED_BLOCKS), intent(APPEND))
    s.append("assistant/message", assistant_msg_data(MIXED_BLOCKS), intent(APPEND))
    s.append("user/message", user_msg(MIXED_BLOCKS, source={"kind": "plugin", "plugin": "test"}), intent(APPEND))
    assert [extract_event_text(event) for event in s.events] == [MIXED_TEXT] * 3


def test_content_blocks_image_and_deeply_nested_results() -> None:
    blocks = [
        {"type": "image", "data": "aGk=", "mediaType": "image/png"},
        tool_result_block("a", [text_block("one"), tool_result_block("b", [text_block(" two ")]), text_block("three")]),
        {"type": "tool-call", "id": "x", "name": "  ", "arguments": "{}"},
    ]
    event = seed_event("user/message", 0, user_msg(blocks), surfaceOp=APPEND)
    assert extract_event_text(event) == "one\ntwo\nthree\n{}"


def test_parts_are_trimmed_with_ecmascript_whitespace_not_python_isspace() -> None:
    # U+FEFF is JS whitespace (trimmed); U+001F and U+0085 are Python-only whitespace (kept)
    event = seed_event("user/message", 0, user_msg([text_block("\ufeff a \u3000"), text_block("\x1fb\x85")]))
    assert extract_event_text(event) == "a\n\x1fb\x85"


def test_classifies_every_event_and_omits_non_semantic_documents() -> None:
    # search-helpers.spec: the original's four-event log
    s = Session.create("session", now=_clock())
    s.append("user/message", user_msg("Hello\n(AI)+"), intent(APPEND))
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "raw"}})
    s.append("assistant/message", assistant_msg_data("replacement"), intent(replace(0, 0), [0]))
    s.append("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}})
    assert [r["surface"] for r in build_event_records("session", s.events)] == [
        "shadowed",
        "log-only",
        "current",
        "log-only",
    ]
    assert [(d["seq"], d["text"], d["surface"]) for d in build_documents("session", s.events)] == [
        (0, "Hello\n(AI)+", "shadowed"),
        (2, "replacement", "current"),
        (3, "interrupted", "log-only"),
    ]


def test_surface_classes_current_shadowed_and_log_only_through_nested_replaces() -> None:
    s = Session.create("nested", now=_clock())
    s.append("user/message", user_msg("a"), intent(APPEND))  # 0
    s.append("user/message", user_msg("b"), intent(APPEND))  # 1
    s.append("turn/start", {"turn": 1})  # 2 log-only
    s.append("assistant/message", assistant_msg_data("summary"), intent(replace(0, 0), [0]))  # 3 shadows 0
    s.append("assistant/message", assistant_msg_data("summary 2", step=2), intent(replace(3, 1), [3, 1]))  # 4
    s.append("user/message", user_msg("c"), intent(APPEND))  # 5
    assert list(s.surface.nodes) == [4, 5]
    assert surface_classes(s.events) == ["shadowed", "shadowed", "log-only", "shadowed", "current", "current"]
    records = build_event_records("nested", s.events)
    assert [r["surface"] for r in records] == surface_classes(s.events)
    assert [list(r) for r in records] == [["sessionId", "seq", "type", "time", "surface"]] * 6
    assert set(surface_classes(s.events)) == set(SURFACES)


def test_tool_result_content_rewrite_shadows_the_original_result() -> None:
    s = Session.create("rewrite", now=_clock())
    s.append(
        "assistant/message",
        assistant_msg_data([{"type": "tool-call", "id": "c", "name": "bash", "arguments": "{}"}]),
        intent(APPEND),
    )
    s.append("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "bash", "arguments": "{}"})
    s.append("tool/result", tool_result_msg_data("c", "long output"), intent(APPEND))
    rewritten = thaw(s.events[2]["data"])
    rewritten["message"]["content"][0]["content"] = [text_block("[pruned]")]  # content-only rewrite
    s.append("tool/result", rewritten, intent(replace(2, 2), [2]))
    assert surface_classes(s.events) == ["current", "log-only", "shadowed", "current"]
    documents = build_documents("rewrite", s.events)
    assert [(d["seq"], d["surface"], d["text"]) for d in documents] == [
        (0, "current", "bash\n{}"),
        (1, "log-only", "bash\n{}"),
        (2, "shadowed", "long output"),
        (3, "current", "[pruned]"),
    ]


def test_an_empty_log_has_no_classes_and_no_documents() -> None:
    assert surface_classes([]) == []
    assert build_documents("e", []) == []
    assert build_event_records("e", []) == []


def test_an_invalid_surface_is_a_typed_error_even_without_text() -> None:
    # search-helpers.spec: rejects malformed surfaces
    malformed = [seed_event("assistant/message", 0, assistant_msg_data("bad"), surfaceOp=replace(9, 9))]
    for build in (surface_classes, lambda events: build_documents("x", events), lambda e: build_event_records("x", e)):
        with pytest.raises(SessionQueryError) as caught:
            build(malformed)
        assert caught.value.code == "SESSION_QUERY_INVALID_SURFACE"
        assert str(caught.value).startswith("invalid session surface: ")
        assert caught.value.__cause__ is not None
    silent = [seed_event("assistant/message", 0, assistant_msg_data([]), surfaceOp=replace(9, 9))]
    with pytest.raises(SessionQueryError, match="invalid session surface"):
        build_documents("x", silent)


def test_documents_accept_thawed_plain_events() -> None:
    s = _full_turn()
    plain = [thaw(event) for event in s.events]
    assert type(plain[0]) is dict
    assert build_documents("doc", plain) == build_documents("doc", s.events)


# --- property: classes agree with the live surface ---------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 0), st.integers(0, 0)),
        st.tuples(st.just("replace"), st.integers(0, 20), st.integers(0, 3)),
        st.tuples(st.just("log"), st.integers(0, 0), st.integers(0, 0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_property_classes_agree_with_the_live_surface_and_the_replaced_ranges(ops: list[tuple[str, int, int]]) -> None:
    s = Session.create("prop", now=_clock())
    shadowed: set[int] = set()
    for kind, where, width in ops:
        nodes = list(s.surface.nodes)
        if kind == "append":
            s.append("user/message", user_msg(f"u{len(s.events)}"), intent(APPEND))
        elif kind == "log":
            s.append("turn/start", {"turn": 1})
        elif nodes:
            i = where % len(nodes)
            j = min(len(nodes) - 1, i + width)
            removed = nodes[i : j + 1]
            s.append(
                "assistant/message",
                assistant_msg_data(f"r{len(s.events)}"),
                intent(replace(nodes[i], nodes[j]), removed),
            )
            shadowed.update(removed)
    current = set(s.surface.nodes)
    expected = [
        "current" if e["seq"] in current else "shadowed" if e["seq"] in shadowed else "log-only" for e in s.events
    ]
    assert surface_classes(s.events) == expected
    documents = build_documents("prop", s.events)
    assert [d["seq"] for d in documents] == [e["seq"] for e in s.events if e["type"] != "turn/start"]
    assert [d["surface"] for d in documents] == [expected[d["seq"]] for d in documents]
