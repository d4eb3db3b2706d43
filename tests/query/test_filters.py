"""Session and event filters (runtime spec §4.1 Filters): validation, ownership, predicates, the text scan.

The cases of the original's ``session-query/tests/search-helpers.spec.ts`` that concern filters, named
after its ``it`` titles, on documents built from a real kernel session; then the §4.1 rules in detail
(exact error texts, JSON number rules, ECMAScript whitespace) and hypothesis properties of the literal
text scan.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionQueryError
from agentlog.kernel.session import Session
from agentlog.query.documents import build_documents
from agentlog.query.filters import (
    JS_WHITESPACE,
    apply_event_filters,
    apply_session_filters,
    compile_text_filter,
    materialize_event_filters,
    materialize_metadata_filters,
    materialize_session_filters,
)
from agentlog.testing.builders import APPEND, assistant_msg_data, intent, replace, user_msg


def expect_invalid(fn: Any, *args: Any) -> str:
    with pytest.raises(SessionQueryError) as caught:
        fn(*args)
    assert caught.value.code == "SESSION_QUERY_INVALID_FILTER", caught.value
    return str(caught.value)


def header(value: str, **extra: Any) -> dict[str, Any]:
    return {"version": 0, "id": value, "createdAt": 10, **extra}


def _helper_documents() -> list[dict[str, Any]]:
    """The original's four-event log, committed by a real session (consecutive clock ticks)."""
    ticks = itertools.count(10)
    s = Session.create("session", now=lambda: next(ticks))
    s.append("user/message", user_msg("Hello\n(AI)+"), intent(APPEND))
    s.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "raw"}})
    s.append("assistant/message", assistant_msg_data("replacement"), intent(replace(0, 0), [0]))
    s.append("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}})
    return build_documents("session", s.events)


# --- search-helpers.spec.ts ---------------------------------------------------------------------------------


def test_applies_every_session_clause_with_or_values_and_validates_closed_values() -> None:
    records = [
        {"header": header("a", cwd="/a", parentSession="parent"), "live": True, "persisted": False, "marker": 1},
        {"header": header("b", createdAt=20), "live": False, "persisted": True, "marker": 2},
    ]
    assert apply_session_filters(
        records,
        [
            {"kind": "id", "values": ["a", "x"]},
            {"kind": "cwd", "values": ["/a", None]},
            {"kind": "created-at", "from": 5, "to": 15},
            {"kind": "parent", "values": ["parent", None]},
            {"kind": "availability", "values": ["live"]},
        ],
    ) == [records[0]]
    assert apply_session_filters(records, [{"kind": "cwd", "values": [None]}]) == [records[1]]
    assert apply_session_filters(records, [{"kind": "parent", "values": [None]}]) == [records[1]]
    assert apply_session_filters(records, [{"kind": "availability", "values": ["persisted"]}]) == [records[1]]
    assert apply_session_filters(records, [{"kind": "availability", "values": ["persisted", "live"]}]) == records
    assert apply_session_filters(records, [{"kind": "availability", "values": []}]) == []
    assert apply_session_filters(records) == records
    assert apply_session_filters(records)[0] is records[0]  # the records themselves, in input order
    message = expect_invalid(apply_session_filters, records, [{"kind": "availability", "values": ["remote"]}])
    assert message == 'session availability filter contains unknown value "remote"'


def test_applies_event_metadata_and_safe_literal_text_clauses() -> None:
    documents = [{**d, "marker": i} for i, d in enumerate(_helper_documents())]
    t0 = documents[0]["time"]
    assert [d["time"] - t0 for d in documents] == [0, 2, 3]  # one clock tick per committed event
    assert apply_event_filters(
        documents,
        [
            {"kind": "seq", "from": 0, "to": 1},
            {"kind": "time", "from": t0 - 1, "to": t0 + 1},
            {"kind": "type", "values": ["user/message", "tool/result"]},
            {"kind": "surface", "values": ["shadowed"]},
            {"kind": "text", "text": "hello   (ai)+"},
        ],
    ) == [documents[0]]
    assert compile_text_filter("CAFÉ").search("café") is not None
    assert apply_event_filters(documents) == documents
    assert apply_event_filters(documents, [{"kind": "surface", "values": []}]) == []
    message = expect_invalid(apply_event_filters, documents, [{"kind": "surface", "values": ["future"]}])
    assert message == 'session surface filter contains unknown value "future"'
    assert expect_invalid(compile_text_filter, " \n ") == "session text filter must contain non-whitespace text"


def test_rejects_malformed_range_filters() -> None:
    documents = _helper_documents()
    cases = [
        ({"kind": "seq", "from": math.nan}, "session seq filter from must be finite"),
        ({"kind": "seq", "to": math.inf}, "session seq filter to must be finite"),
        ({"kind": "time", "from": 2, "to": 1}, "session time filter from must be less than or equal to to"),
    ]
    for filter, message in cases:
        assert expect_invalid(apply_event_filters, documents, [filter]) == message
    assert expect_invalid(apply_session_filters, [], [{"kind": "created-at", "from": math.nan}]) == (
        "session created-at filter from must be finite"
    )
    record = {"header": header("x"), "live": True, "persisted": False}
    expect_invalid(apply_session_filters, [record], [{"kind": "created-at", "from": math.nan}])


def test_owns_filters_and_rejects_malformed_runtime_filter_shapes_deterministically() -> None:
    assert materialize_session_filters([{"kind": "created-at", "to": 2}]) == [{"kind": "created-at", "to": 2}]
    assert expect_invalid(materialize_session_filters, "not-an-array") == "session filters must be an array"
    assert expect_invalid(materialize_session_filters, [{"kind": "id", "values": "bad"}]) == (
        "session id filter values must be an array of strings"
    )
    expect_invalid(materialize_session_filters, [{"kind": "id", "values": [1]}])
    assert expect_invalid(materialize_session_filters, [{"kind": "cwd", "values": "bad"}]) == (
        "session cwd filter values must be an array of strings or null"
    )
    assert expect_invalid(materialize_session_filters, [{"kind": "parent", "values": [1]}]) == (
        "session parent filter values must be an array of strings or null"
    )
    assert expect_invalid(materialize_session_filters, [{}]) == "session unknown filter kind (missing)"
    assert expect_invalid(materialize_event_filters, [{"kind": "text", "text": 1}]) == (
        "session text filter text must be a string"
    )
    assert expect_invalid(materialize_event_filters, [{"kind": "future"}]) == 'session unknown filter kind "future"'
    expect_invalid(apply_session_filters, [], [{"kind": "future"}])
    expect_invalid(apply_event_filters, [], [{"kind": "future"}])


def test_exposes_the_scan_path_over_a_live_session() -> None:
    # the original checks this through its service; here the same documents feed the scan directly
    s = Session.create("session")
    s.append("user/message", user_msg("Alpha\n beta"), intent(APPEND))
    s.append("user/message", user_msg("other"), intent(APPEND))
    found = apply_event_filters(build_documents("session", s.events), [{"kind": "text", "text": "alpha beta"}])
    assert [(d["seq"], d["text"]) for d in found] == [(0, "Alpha\n beta")]


# --- §4.1 rules in detail -----------------------------------------------------------------------------------


def test_materialized_filters_are_owned_copies_with_only_known_keys() -> None:
    values = ["a"]
    source = [{"kind": "id", "values": values, "extra": "dropped"}, {"kind": "seq", "from": 1, "extra": 2}]
    owned = materialize_session_filters(source[:1])
    owned_events = materialize_event_filters(source[1:])
    values.append("b")
    source[1]["from"] = 5
    assert owned == [{"kind": "id", "values": ["a"]}]
    assert owned_events == [{"kind": "seq", "from": 1}]
    assert owned[0]["values"] is not values


def test_tuples_are_accepted_as_lists() -> None:
    assert materialize_session_filters(({"kind": "id", "values": ("a",)},)) == [{"kind": "id", "values": ["a"]}]


def test_range_endpoints_must_be_finite_numbers() -> None:
    for bad in (None, "1", True, math.nan, -math.inf, [1]):
        message = expect_invalid(materialize_event_filters, [{"kind": "seq", "from": bad}])
        assert message == "session seq filter from must be finite"
    assert materialize_event_filters([{"kind": "time", "from": 1.5, "to": 1.5}]) == [
        {"kind": "time", "from": 1.5, "to": 1.5}
    ]
    huge = materialize_event_filters([{"kind": "time", "to": 10**30}])
    assert huge == [{"kind": "time", "to": 1e30}] and type(huge[0]["to"]) is float
    assert expect_invalid(materialize_event_filters, [{"kind": "time", "to": 10**400}]) == (
        "session time filter to must be finite"
    )
    assert materialize_event_filters([{"kind": "seq", "from": 2**63 - 1}]) == [{"kind": "seq", "from": 2**63 - 1}]


def test_ranges_are_inclusive_and_open_ended() -> None:
    documents = [{"seq": seq, "time": seq * 10, "type": "t", "surface": "current", "text": "x"} for seq in range(5)]
    assert [d["seq"] for d in apply_event_filters(documents, [{"kind": "seq", "from": 1, "to": 3}])] == [1, 2, 3]
    assert [d["seq"] for d in apply_event_filters(documents, [{"kind": "seq", "from": 3}])] == [3, 4]
    assert [d["seq"] for d in apply_event_filters(documents, [{"kind": "time", "to": 10}])] == [0, 1]
    assert [d["seq"] for d in apply_event_filters(documents, [{"kind": "seq"}])] == [0, 1, 2, 3, 4]
    assert [d["seq"] for d in apply_event_filters(documents, [{"kind": "seq", "from": 2, "to": 2}])] == [2]


def test_empty_value_lists_match_nothing() -> None:
    records = [{"header": header("a"), "live": True, "persisted": True}]
    for kind in ("id", "cwd", "parent", "availability"):
        assert apply_session_filters(records, [{"kind": kind, "values": []}]) == []
    documents = _helper_documents()
    assert apply_event_filters(documents, [{"kind": "type", "values": []}]) == []


def test_metadata_filters_refuse_text_and_unknown_kinds_with_the_providers_wording() -> None:
    assert materialize_metadata_filters([{"kind": "seq", "from": 1}, {"kind": "type", "values": ["x"]}]) == [
        {"kind": "seq", "from": 1},
        {"kind": "type", "values": ["x"]},
    ]
    assert expect_invalid(materialize_metadata_filters, [{"kind": "text", "text": "x"}]) == (
        "session-search metadata filters do not accept text clauses"
    )
    assert expect_invalid(materialize_metadata_filters, [{"kind": "future"}]) == (
        'session filter contains unknown kind "future"'
    )
    assert expect_invalid(materialize_metadata_filters, [{"kind": "id", "values": []}]) == (
        'session filter contains unknown kind "id"'
    )
    assert expect_invalid(materialize_metadata_filters, [7]) == "session filter contains unknown kind (missing)"
    assert expect_invalid(materialize_metadata_filters, None) == "session filters must be an array"
    expect_invalid(materialize_metadata_filters, [{"kind": "surface", "values": ["future"]}])


def test_text_scan_is_literal_case_insensitive_and_whitespace_flexible() -> None:
    pattern = compile_text_filter("  a.b  (c)*  ")
    assert pattern.search("xx A.B\n\t(C)* yy")
    assert not pattern.search("axb (c)")  # "." is literal
    assert not pattern.search("a.b(c)*")  # a whitespace run needs at least one whitespace
    assert compile_text_filter("[").search("[x")
    assert compile_text_filter("\\d+").search("\\d+") and not compile_text_filter("\\d+").search("12")
    # ECMAScript whitespace: U+FEFF and U+3000 separate words; U+001F and U+0085 do not
    assert compile_text_filter("a b").search("a\ufeff\u3000b")
    assert not compile_text_filter("a b").search("a\x1fb")
    assert not compile_text_filter("a b").search("a\x85b")
    assert compile_text_filter("a\x1fb").search("A\x1fB")


def test_blank_text_clause_fails_even_over_no_documents() -> None:
    assert expect_invalid(apply_event_filters, [], [{"kind": "text", "text": "\u3000"}]) == (
        "session text filter must contain non-whitespace text"
    )
    assert materialize_event_filters([{"kind": "text", "text": " "}]) == [{"kind": "text", "text": " "}]


_words = st.lists(
    st.text(alphabet=st.characters(blacklist_characters=JS_WHITESPACE), min_size=1, max_size=6), min_size=1, max_size=4
)
_ws = st.text(alphabet=st.sampled_from(JS_WHITESPACE), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    words=_words,
    separators=st.lists(_ws, min_size=4, max_size=4),
    prefix=st.text(max_size=5),
    suffix=st.text(max_size=5),
)
def test_property_text_clause_finds_its_own_words_across_any_whitespace(
    words: list[str], separators: list[str], prefix: str, suffix: str
) -> None:
    query = " ".join(words)
    document = prefix + "".join(w + s for w, s in zip(words, separators, strict=False)).rstrip(JS_WHITESPACE) + suffix
    assert compile_text_filter(query).search(document)


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=1, max_size=20))
def test_property_caller_text_is_never_a_pattern(text: str) -> None:
    if not text.strip(JS_WHITESPACE):
        expect_invalid(compile_text_filter, text)
        return
    pattern = compile_text_filter(text)
    assert isinstance(pattern, re.Pattern)
    assert pattern.search(text)
