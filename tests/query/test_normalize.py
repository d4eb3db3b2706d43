"""Search request normalisation, SQL predicates, MATCH quoting, fingerprints, snippets and cursors.

One test per case of the original's ``session-query-sqlite/tests/query.spec.ts`` (runtime spec §10.3,
named ``test_10_3_<n>_…``), with its exact SQL strings and snippet vectors; then the §4.3 rules the
spec states without a numbered case (binding budget, sanitising, cursors) and hypothesis properties
(snippet bounds, fingerprint invariance, cursor round trip).
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionQueryError
from agentlog.query.cursor import decode_cursor, encode_cursor
from agentlog.query.normalize import (
    FTS_HIGHLIGHT_END,
    FTS_HIGHLIGHT_START,
    SQLITE_FTS5_OUTER_PREDICATE_LIMIT,
    SQLITE_MAX_PAGE_LIMIT,
    SQLITE_PORTABLE_VARIABLE_LIMIT,
    EventSearchRequest,
    SessionSearchRequest,
    SqlWhere,
    assert_fts5_outer_predicate_count,
    assert_portable_binding_count,
    build_event_where,
    build_session_where,
    make_snippet,
    normalize_cursor,
    normalize_event_request,
    normalize_limit,
    normalize_query,
    normalize_session_request,
    quote_fts_data,
    request_fingerprint,
    sanitize_fts_text,
)

LIMITS = {"default_limit": 2, "max_limit": 3}
S, E = FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END


def expect_code(code: str, fn: Any, *args: Any, **kwargs: Any) -> SessionQueryError:
    with pytest.raises(SessionQueryError) as caught:
        fn(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def test_constants_are_the_originals() -> None:
    assert (FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END) == ("\ufdd0", "\ufdd1")
    assert SQLITE_MAX_PAGE_LIMIT == 2**53 - 2
    assert SQLITE_PORTABLE_VARIABLE_LIMIT == 32_766
    assert SQLITE_FTS5_OUTER_PREDICATE_LIMIT == 14


# --- §10.3 ------------------------------------------------------------------------------------------------


def test_10_3_1_normalizes_both_scopes_defaults_arrays_and_limits_and_preserves_cursors() -> None:
    assert normalize_session_request(query="  alpha\n beta  ", **LIMITS) == SessionSearchRequest(
        query="alpha beta", session_filters=(), event_filters=(), limit=2, cursor=None
    )
    assert normalize_session_request(
        query="needle",
        session_filters=[{"kind": "availability", "values": ["live"]}],
        event_filters=[{"kind": "surface", "values": ["current"]}],
        limit=3,
        cursor="next",
        **LIMITS,
    ) == SessionSearchRequest(
        query="needle",
        session_filters=({"kind": "availability", "values": ["live"]},),
        event_filters=({"kind": "surface", "values": ["current"]},),
        limit=3,
        cursor="next",
    )
    assert normalize_event_request(session_id="s", query="needle", **LIMITS) == EventSearchRequest(
        session_id="s", query="needle", filters=(), limit=2, cursor=None
    )
    assert normalize_event_request(
        session_id="s", query="needle", filters=[{"kind": "seq", "from": 1}], cursor="next", **LIMITS
    ) == EventSearchRequest(
        session_id="s", query="needle", filters=({"kind": "seq", "from": 1},), limit=2, cursor="next"
    )


def test_10_3_2_rejects_non_text_blank_non_integer_non_positive_and_oversized_requests() -> None:
    def session(**kw: Any) -> Any:
        return normalize_session_request(**{"query": "x", **LIMITS, **kw})

    def event(**kw: Any) -> Any:
        return normalize_event_request(**{"session_id": "s", "query": "x", **LIMITS, **kw})

    assert str(expect_code("SESSION_QUERY_INVALID_QUERY", session, query=1)) == "session-search query must be text"
    assert str(expect_code("SESSION_QUERY_INVALID_QUERY", session, query=" \n ")) == (
        "session-search query must contain non-whitespace text"
    )
    assert str(expect_code("SESSION_QUERY_INVALID_QUERY", session, query="bad\0query")) == (
        "session-search query must not contain NUL"
    )
    assert str(expect_code("SESSION_QUERY_INVALID_FILTER", event, session_id=1)) == (
        "session-search session id must be text"
    )
    assert str(expect_code("SESSION_QUERY_INVALID_CURSOR", event, cursor=1)) == "session-search cursor must be text"
    assert str(expect_code("SESSION_QUERY_INVALID_FILTER", session, event_filters=[{"kind": "text", "text": "x"}])) == (
        "session-search metadata filters do not accept text clauses"
    )
    assert str(expect_code("SESSION_QUERY_INVALID_FILTER", session, event_filters=[{}])) == (
        "session filter contains unknown kind (missing)"
    )
    for limit in (1.5, 0, 4, True, "2", float("nan")):
        error = expect_code("SESSION_QUERY_INVALID_LIMIT", event, limit=limit)
        assert str(error) == "session-search limit must be an integer between 1 and 3"
    error = expect_code(
        "SESSION_QUERY_INVALID_LIMIT",
        normalize_event_request,
        session_id="s",
        query="x",
        limit=SQLITE_MAX_PAGE_LIMIT + 1,
        default_limit=1,
        max_limit=SQLITE_MAX_PAGE_LIMIT + 1,
    )
    assert str(error) == f"session-search limit must be an integer between 1 and {SQLITE_MAX_PAGE_LIMIT}"
    assert event(limit=3.0).limit == 3  # a JavaScript number: 3.0 is the integer 3
    assert event(limit=SQLITE_MAX_PAGE_LIMIT, max_limit=SQLITE_MAX_PAGE_LIMIT + 1).limit == SQLITE_MAX_PAGE_LIMIT


def test_10_3_3_materializes_owned_filter_values_during_normalization() -> None:
    values = ["live"]
    session_filters: list[dict[str, Any]] = [{"kind": "availability", "values": values}]
    seq_filter = {"kind": "seq", "from": 1}
    event_filters = [seq_filter]
    normalized = normalize_session_request(
        query="needle", session_filters=session_filters, event_filters=event_filters, **LIMITS
    )
    values[0] = "persisted"
    session_filters.append({"kind": "availability", "values": ["persisted"]})
    seq_filter["from"] = 99
    event_filters.clear()
    assert normalized.session_filters == ({"kind": "availability", "values": ["live"]},)
    assert normalized.event_filters == ({"kind": "seq", "from": 1},)
    event_values = ["user/message"]
    owned = normalize_event_request(
        session_id="s", query="q", filters=[{"kind": "type", "values": event_values}], **LIMITS
    )
    event_values.append("tool/call")
    assert owned.filters == ({"kind": "type", "values": ["user/message"]},)


def test_10_3_4_compiles_all_logical_session_clauses_including_empty_and_nullable_values() -> None:
    assert build_session_where([]) == SqlWhere("", (), 0)
    assert build_session_where([{"kind": "id", "values": []}]) == SqlWhere("0", (), 1)
    assert build_session_where([{"kind": "id", "values": ["a", "b"]}]) == SqlWhere(
        "session_id IN (?, ?)", ("a", "b"), 1
    )
    assert build_session_where([{"kind": "cwd", "values": []}]) == SqlWhere("0", (), 1)
    assert build_session_where([{"kind": "cwd", "values": [None]}]) == SqlWhere("(cwd IS NULL)", (), 1)
    assert build_session_where([{"kind": "cwd", "values": ["/a"]}]) == SqlWhere("(cwd IN (?))", ("/a",), 1)
    assert build_session_where([{"kind": "parent", "values": ["p", None]}]) == SqlWhere(
        "(parent_session IN (?) OR parent_session IS NULL)", ("p",), 1
    )
    assert build_session_where(
        [
            {"kind": "created-at", "from": 1, "to": 2},
            {"kind": "availability", "values": []},
            {"kind": "availability", "values": ["live", "live"]},
            {"kind": "availability", "values": ["live", "persisted"]},
        ]
    ) == SqlWhere("CAST(created_at AS INTEGER) >= ? AND CAST(created_at AS INTEGER) <= ? AND 0 AND live = 1", (1, 2), 4)
    assert build_session_where([{"kind": "created-at"}]) == SqlWhere("", (), 0)
    assert build_session_where([{"kind": "availability", "values": ["persisted"]}]) == SqlWhere("persisted = 1", (), 1)


def test_10_3_5_compiles_every_event_clause_and_empty_lists() -> None:
    assert build_event_where(
        [
            {"kind": "seq", "from": 1},
            {"kind": "time", "to": 9},
            {"kind": "type", "values": ["user/message"]},
            {"kind": "surface", "values": ["current", "log-only"]},
        ]
    ) == SqlWhere(
        "CAST(seq AS INTEGER) >= ? AND CAST(time AS INTEGER) <= ? AND type IN (?) AND surface IN (?, ?)",
        (1, 9, "user/message", "current", "log-only"),
        4,
    )
    assert build_event_where([{"kind": "type", "values": []}, {"kind": "surface", "values": []}]) == SqlWhere(
        "0 AND 0", (), 2
    )


def test_10_3_6_rejects_predicate_builders_above_the_supported_fts5_outer_budget() -> None:
    filters = [{"kind": "id", "values": ["safe"]}] * SQLITE_FTS5_OUTER_PREDICATE_LIMIT
    assert build_session_where(filters).predicate_count == SQLITE_FTS5_OUTER_PREDICATE_LIMIT
    error = expect_code(
        "SESSION_QUERY_INVALID_FILTER", build_session_where, [*filters, {"kind": "id", "values": ["over"]}]
    )
    assert str(error) == (
        "session-search request exceeds the supported SQLite FTS5 outer-predicate budget of 14; reduce filters"
    )
    events = [{"kind": "seq", "from": 0, "to": 1}] * 7
    assert build_event_where(events).predicate_count == 14  # each range endpoint is one predicate
    expect_code("SESSION_QUERY_INVALID_FILTER", build_event_where, [*events, {"kind": "type", "values": []}])
    assert_fts5_outer_predicate_count(14)
    expect_code("SESSION_QUERY_INVALID_FILTER", assert_fts5_outer_predicate_count, 15)


def test_10_3_7_rejects_runtime_unknown_filter_discriminants_in_both_sql_builders() -> None:
    error = expect_code("SESSION_QUERY_INVALID_FILTER", build_session_where, [{"kind": "future"}])
    assert str(error) == 'session filter contains unknown kind "future"'
    expect_code("SESSION_QUERY_INVALID_FILTER", build_event_where, [{"kind": "future"}])
    error = expect_code(
        "SESSION_QUERY_INVALID_FILTER", build_session_where, [{"kind": "availability", "values": ["future"]}]
    )
    assert str(error) == 'session availability filter contains unknown value "future"'
    error = expect_code("SESSION_QUERY_INVALID_FILTER", build_session_where, [{}])
    assert str(error) == "session filter contains unknown kind (missing)"
    expect_code("SESSION_QUERY_INVALID_FILTER", build_event_where, ["not a filter"])
    expect_code("SESSION_QUERY_INVALID_FILTER", build_event_where, [{"kind": "text", "text": "x"}])


def test_10_3_8_quotes_all_caller_match_syntax_as_data() -> None:
    assert quote_fts_data('say "needle" OR *') == '"say ""needle"" OR *"'
    assert quote_fts_data("*") == '"*"'
    assert quote_fts_data('"') == '""""'


def test_10_3_9_canonicalizes_request_and_filter_ordering_in_both_scopes() -> None:
    session_a = SessionSearchRequest(
        query="needle",
        limit=2,
        session_filters=(
            {"kind": "cwd", "values": ["/b", "/a"]},
            {"kind": "parent", "values": [None, "p"]},
            {"kind": "id", "values": ["same", "same"]},
            {"kind": "created-at", "from": 1},
        ),
        event_filters=({"kind": "time", "to": 9},),
    )
    session_b = SessionSearchRequest(
        query="needle",
        limit=2,
        session_filters=(
            {"kind": "created-at", "from": 1},
            {"kind": "id", "values": ["same", "same"]},
            {"kind": "parent", "values": ["p", None]},
            {"kind": "cwd", "values": ["/a", "/b"]},
        ),
        event_filters=({"kind": "time", "to": 9},),
    )
    assert request_fingerprint(session_a) == request_fingerprint(session_b)
    event_a = EventSearchRequest(
        session_id="s",
        query="needle",
        limit=2,
        filters=({"kind": "seq"}, {"kind": "surface", "values": ["shadowed", "current"]}),
    )
    event_b = EventSearchRequest(
        session_id="s",
        query="needle",
        limit=2,
        filters=({"kind": "surface", "values": ["current", "shadowed"]}, {"kind": "seq"}),
    )
    assert request_fingerprint(event_a) == request_fingerprint(event_b)
    other = EventSearchRequest(session_id="other", query="needle", limit=2, filters=event_b.filters)
    assert request_fingerprint(event_a) != request_fingerprint(other)
    # the canonical JSON itself (§4.3 Cursors): scope first, ranges spelled with explicit nulls
    assert json.loads(request_fingerprint(event_a)) == {
        "scope": "events",
        "sessionId": "s",
        "query": "needle",
        "filters": [
            {"kind": "seq", "from": None, "to": None},
            {"kind": "surface", "values": ["current", "shadowed"]},
        ],
        "limit": 2,
    }
    assert list(json.loads(request_fingerprint(session_a))) == [
        "scope",
        "query",
        "sessionFilters",
        "eventFilters",
        "limit",
    ]
    assert json.loads(request_fingerprint(session_a))["sessionFilters"][-1] == {"kind": "parent", "values": [None, "p"]}
    # a different query, limit or scope is a different request
    assert request_fingerprint(session_a) != request_fingerprint(
        SessionSearchRequest("other", session_a.session_filters, session_a.event_filters, 2)
    )
    assert request_fingerprint(session_a) != request_fingerprint(
        SessionSearchRequest("needle", session_a.session_filters, session_a.event_filters, 3)
    )


def test_10_3_10_normalizes_bounds_and_positions_snippets_by_unicode_code_point() -> None:
    assert make_snippet("  short\ntext  ", 20) == "short text"
    assert make_snippet(f"abcde{S}f{E}", 1) == "…"
    assert make_snippet("abcdefghij", 5) == "abcd…"
    assert make_snippet(f"ab{S}c{E}defghij", 5) == "…bcd…"
    assert make_snippet(f"ab{S}c{E}defghij", 3) == "…c…"
    assert make_snippet(f"abcde{S}f{E}", 2) == "…f"
    assert make_snippet(f"abcde{S}f{E}", 5) == "…cdef"
    assert make_snippet(f"  x—{S}café{E}\n y  ", 20) == "x—café y"
    # code points, not UTF-16 units: an astral character counts once and is never split
    assert make_snippet(f"😀😀😀{S}😀{E}😀😀😀😀", 4) == "…😀😀…"
    assert make_snippet("😀" * 10, 3) == "😀😀…"


# --- §4.3 rules without a numbered case --------------------------------------------------------------------


def test_query_whitespace_is_ecmascripts_and_markers_are_sanitized() -> None:
    assert normalize_query("\ufeff a\u3000\u2028b \t") == "a b"
    assert normalize_query("a\x1fb") == "a\x1fb"  # U+001F is Python whitespace only: kept, as the original
    assert normalize_query(f"x{S}y{E}z") == "x\ufffdy\ufffdz"
    assert sanitize_fts_text(f"\0{S}{E}ok") == "\ufffd\ufffd\ufffdok"
    assert sanitize_fts_text("plain") == "plain"


def test_limit_and_cursor_normalisation() -> None:
    assert normalize_limit(None, 20, 100) == 20
    assert normalize_limit(100, 20, 100) == 100
    expect_code("SESSION_QUERY_INVALID_LIMIT", normalize_limit, None, 200, 100)  # a default above the maximum
    assert normalize_cursor(None) is None
    assert normalize_cursor("c") == "c"
    expect_code("SESSION_QUERY_INVALID_CURSOR", normalize_cursor, b"c")


def test_binding_budget_counts_fixed_and_list_bindings() -> None:
    assert_portable_binding_count(SQLITE_PORTABLE_VARIABLE_LIMIT)
    error = expect_code(
        "SESSION_QUERY_INVALID_FILTER", assert_portable_binding_count, SQLITE_PORTABLE_VARIABLE_LIMIT + 1
    )
    assert str(error) == ("session-search request exceeds SQLite's portable 32766-variable limit; reduce filter values")
    at_limit = [{"kind": "id", "values": [f"v{i}" for i in range(SQLITE_PORTABLE_VARIABLE_LIMIT)]}]
    assert len(build_session_where(at_limit).params) == SQLITE_PORTABLE_VARIABLE_LIMIT
    expect_code("SESSION_QUERY_INVALID_FILTER", build_session_where, [{"kind": "id", "values": ["x"] * 125_000}])
    split = [
        {"kind": "cwd", "values": ["c"] * (SQLITE_PORTABLE_VARIABLE_LIMIT - 1)},
        {"kind": "created-at", "from": 1, "to": 2},
    ]
    expect_code("SESSION_QUERY_INVALID_FILTER", build_session_where, split)


def test_fractional_and_float_range_bounds_bind_as_numbers() -> None:
    where = build_event_where([{"kind": "time", "from": 1.5, "to": 2.0}])
    assert where == SqlWhere("CAST(time AS INTEGER) >= ? AND CAST(time AS INTEGER) <= ?", (1.5, 2.0), 2)
    one = SessionSearchRequest("q", (), ({"kind": "time", "from": 1.0},), 2)
    other = SessionSearchRequest("q", (), ({"kind": "time", "from": 1},), 2)
    assert request_fingerprint(one) == request_fingerprint(other)  # one JavaScript number, one spelling


def test_requests_and_where_clauses_are_frozen_values() -> None:
    request = normalize_session_request(query="q", **LIMITS)
    with pytest.raises(AttributeError):
        request.query = "other"  # type: ignore[misc]
    where = build_session_where([])
    with pytest.raises(AttributeError):
        where.sql = "1"  # type: ignore[misc]


# --- cursors ----------------------------------------------------------------------------------------------

CURSOR = {"instance": "inst", "scope": "events", "fingerprint": '{"scope":"events"}', "generation": "live:3"}


def _raw_cursor(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()


def test_cursor_round_trip_is_unpadded_base64url_json() -> None:
    cursor = encode_cursor(**CURSOR, offset=20)
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor
    payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    assert payload == {"version": 1, **CURSOR, "offset": 20}
    assert list(payload) == ["version", "instance", "scope", "fingerprint", "generation", "offset"]
    assert decode_cursor(cursor, **CURSOR) == 20


def test_cursor_generation_is_compared_as_text() -> None:
    cursor = encode_cursor(instance="i", scope="sessions", fingerprint="f", generation=7, offset=2)
    assert decode_cursor(cursor, instance="i", scope="sessions", fingerprint="f", generation="7") == 2
    assert decode_cursor(cursor, instance="i", scope="sessions", fingerprint="f", generation=7) == 2
    error = expect_code(
        "SESSION_QUERY_STALE_CURSOR",
        decode_cursor,
        cursor,
        instance="i",
        scope="sessions",
        fingerprint="f",
        generation=8,
    )
    assert str(error) == "session-search cursor is stale because its relevant corpus changed"


@pytest.mark.parametrize(
    "change",
    [{"instance": "other"}, {"scope": "sessions"}, {"fingerprint": "other"}],
)
def test_cursor_from_another_instance_scope_or_request_is_invalid(change: dict[str, str]) -> None:
    cursor = encode_cursor(**CURSOR, offset=1)
    error = expect_code("SESSION_QUERY_INVALID_CURSOR", decode_cursor, cursor, **{**CURSOR, **change})
    assert str(error) == "session-search cursor is invalid"


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "next",
        "%%%",
        "é",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        _raw_cursor([1, 2]),
        _raw_cursor({"version": 2, **CURSOR, "offset": 0}),
        _raw_cursor({"version": True, **CURSOR, "offset": 0}),
        _raw_cursor({**CURSOR, "offset": 0}),
        _raw_cursor({"version": 1, **CURSOR, "offset": -1}),
        _raw_cursor({"version": 1, **CURSOR, "offset": 1.5}),
        _raw_cursor({"version": 1, **CURSOR, "offset": 2**53}),
        _raw_cursor({"version": 1, **CURSOR, "offset": "1"}),
        _raw_cursor({"version": 1, **CURSOR, "offset": True}),
        _raw_cursor({"version": 1, **CURSOR}),
    ],
)
def test_undecodable_or_malformed_cursors_are_invalid(cursor: str) -> None:
    error = expect_code("SESSION_QUERY_INVALID_CURSOR", decode_cursor, cursor, **CURSOR)
    assert str(error) == "session-search cursor is invalid"


def test_invalid_is_checked_before_stale() -> None:
    stale_and_foreign = encode_cursor(**{**CURSOR, "instance": "other", "generation": "live:1"}, offset=0)
    expect_code("SESSION_QUERY_INVALID_CURSOR", decode_cursor, stale_and_foreign, **CURSOR)
    assert decode_cursor(encode_cursor(**CURSOR, offset=2**53 - 1), **CURSOR) == 2**53 - 1


# --- properties -------------------------------------------------------------------------------------------

_plain = st.text(alphabet=st.sampled_from("ab c\n\t\u3000😀é—"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(before=_plain, match=st.text(alphabet="★", min_size=1, max_size=3), after=_plain, max_chars=st.integers(1, 50))
def test_property_snippet_is_bounded_and_keeps_the_match_start(
    before: str, match: str, after: str, max_chars: int
) -> None:
    marked = f"{before}{S}{match}{E}{after}"
    snippet = make_snippet(marked, max_chars)
    assert len(snippet) <= max_chars
    assert S not in snippet and E not in snippet
    assert "\n" not in snippet and "\t" not in snippet and "  " not in snippet
    assert snippet == snippet.strip(" ")
    clean = make_snippet(marked, 10**6)
    if len(clean) <= max_chars:
        assert snippet == clean
    elif max_chars >= 2:
        assert "★" in snippet  # the first matched code point is in view
        core = snippet.removeprefix("…").removesuffix("…")
        assert core in clean
        assert len(core) >= 1


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=30), max_chars=st.integers(1, 40))
def test_property_snippet_of_arbitrary_text_is_bounded(text: str, max_chars: int) -> None:
    assert len(make_snippet(text, max_chars)) <= max_chars


_values = st.lists(st.sampled_from(["a", "b", "c", "é", "Z"]), max_size=4)
_nullable = st.lists(st.one_of(st.none(), st.sampled_from(["/a", "/b", "/é"])), max_size=4)
_range = st.fixed_dictionaries({}, optional={"from": st.integers(0, 5), "to": st.integers(5, 9)})
_session_filter = st.one_of(
    st.builds(lambda v: {"kind": "id", "values": v}, _values),
    st.builds(lambda v: {"kind": "cwd", "values": v}, _nullable),
    st.builds(lambda v: {"kind": "parent", "values": v}, _nullable),
    st.builds(lambda r: {"kind": "created-at", **r}, _range),
    st.builds(
        lambda v: {"kind": "availability", "values": v}, st.lists(st.sampled_from(["live", "persisted"]), max_size=2)
    ),
)
_event_filter = st.one_of(
    st.builds(lambda r: {"kind": "seq", **r}, _range),
    st.builds(lambda r: {"kind": "time", **r}, _range),
    st.builds(lambda v: {"kind": "type", "values": v}, _values),
    st.builds(
        lambda v: {"kind": "surface", "values": v}, st.lists(st.sampled_from(["current", "shadowed", "log-only"]))
    ),
)


def _shuffled(filters: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for f in filters:
        copy = dict(f)
        if "values" in copy:
            copy["values"] = rng.sample(copy["values"], len(copy["values"]))
        out.append(copy)
    return rng.sample(out, len(out))


@settings(max_examples=150, deadline=None)
@given(
    session_filters=st.lists(_session_filter, max_size=5),
    event_filters=st.lists(_event_filter, max_size=5),
    seed=st.integers(0, 2**32),
)
def test_property_fingerprint_is_invariant_under_filter_and_value_reordering(
    session_filters: list[dict[str, Any]], event_filters: list[dict[str, Any]], seed: int
) -> None:
    rng = random.Random(seed)
    a = normalize_session_request(query="q", session_filters=session_filters, event_filters=event_filters, **LIMITS)
    b = normalize_session_request(
        query=" q ",
        session_filters=_shuffled(session_filters, rng),
        event_filters=_shuffled(event_filters, rng),
        **LIMITS,
    )
    assert request_fingerprint(a) == request_fingerprint(b)
    ea = normalize_event_request(session_id="s", query="q", filters=event_filters, **LIMITS)
    eb = normalize_event_request(session_id="s", query="q", filters=_shuffled(event_filters, rng), **LIMITS)
    assert request_fingerprint(ea) == request_fingerprint(eb)
    assert request_fingerprint(ea) != request_fingerprint(a)  # the scope is part of the identity


@settings(max_examples=100, deadline=None)
@given(
    instance=st.text(max_size=10),
    fingerprint=st.text(max_size=30),
    generation=st.one_of(st.integers(0, 2**40), st.text(max_size=12)),
    offset=st.integers(0, 2**53 - 1),
)
def test_property_cursor_round_trips(instance: str, fingerprint: str, generation: int | str, offset: int) -> None:
    binding = {"instance": instance, "scope": "sessions", "fingerprint": fingerprint, "generation": generation}
    assert decode_cursor(encode_cursor(**binding, offset=offset), **binding) == offset


def _clean_marked_reference(marked: str) -> tuple[str, int]:
    """The original's character walk (normalizeMarkedText), kept as the reference of the fast cleaner."""
    from agentlog.query.normalize import JS_WHITESPACE

    chars: list[str] = []
    match_start: int | None = None
    for char in marked:
        if char == "\ufdd0":
            if match_start is None:
                match_start = len(chars)
        elif char == "\ufdd1":
            continue
        elif char in JS_WHITESPACE:
            if chars and chars[-1] != " ":
                chars.append(" ")
        else:
            chars.append(char)
    if chars and chars[-1] == " ":
        chars.pop()
    return "".join(chars), 0 if match_start is None else match_start


@given(
    st.text(st.sampled_from(["a", "b", " ", "\n", "\t", "\u3000", "\u00a0", "\ufeff", "\ufdd0", "\ufdd1", "日", "😀"])),
)
def test_snippet_cleaning_equals_the_original_character_walk(marked: str) -> None:
    from agentlog.query.normalize import _clean_marked

    assert _clean_marked(marked) == _clean_marked_reference(marked)


@given(st.text(st.sampled_from("ab \0\ufdd0\ufdd1\ufffdé日\U0001f600")) | st.text())
def test_sanitizing_replaces_exactly_the_reserved_code_points_ascii_or_not(text: str) -> None:
    def expected(value: str) -> str:
        return "".join("\ufffd" if c in "\0\ufdd0\ufdd1" or 0xD800 <= ord(c) <= 0xDFFF else c for c in value)

    ascii_only = text.encode("ascii", "ignore").decode()
    assert sanitize_fts_text(text) == expected(text)
    assert sanitize_fts_text(ascii_only) == expected(ascii_only)
