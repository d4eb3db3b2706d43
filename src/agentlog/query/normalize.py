"""Search request normalisation, SQL predicate builders, MATCH quoting, fingerprints and snippets.

Runtime spec §4.3, from the original's ``session-query-sqlite/src/query.ts``. Everything here is pure
so that every rule a search obeys before touching SQLite can be tested without a database:

* **Normalise before waiting.** A request is validated and its filters copied (materialized) before it
  queues behind other searches, so a caller mutating its lists afterwards changes nothing, and a bad
  request fails fast without observing the store.
* **The query is data.** The whole normalized query becomes one quoted FTS5 phrase; ``OR``, ``NEAR``,
  ``*`` and quotes are inert. NUL and the two highlight markers (U+FDD0/U+FDD1, noncharacters chosen so
  that ``highlight()`` output can be parsed unambiguously) are mapped to U+FFFD in both documents and
  queries, so a document can never fake a match boundary.
* **Filters compile to parameterized SQL** over the candidate row's columns, within two budgets: at
  most :data:`SQLITE_FTS5_OUTER_PREDICATE_LIMIT` outer predicates (more makes SQLite's planner stop
  using the FTS5 index for MATCH) and :data:`SQLITE_PORTABLE_VARIABLE_LIMIT` bindings (the smallest
  host-parameter ceiling of the SQLite builds we support). Both are checked before a statement is
  prepared, with typed errors instead of SQLite's.
* **A cursor binds to the normalized request**, through :func:`request_fingerprint`: equivalent
  requests (same filters in another order, list values in another order) share a fingerprint.
* **Snippets count Unicode code points** (Python ``str`` indices are code points, as the original's
  ``Array.from``), so a bound never splits a surrogate pair or an astral character.

Whitespace is ECMAScript's (``\\s`` and ``trim()`` of the original), spelled out in
:data:`agentlog.query.filters.JS_WHITESPACE` (re-exported here): Python's ``str.isspace`` also covers
U+001C–U+001F and U+0085 and misses U+FEFF, and a query must normalise to the same text here as in the
original.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from ..errors import SessionQueryError
from ..kernel.jsonvalue import MAX_SAFE_INTEGER
from .filters import JS_WHITESPACE, JS_WHITESPACE_CLASS, materialize_metadata_filters, materialize_session_filters

__all__ = [
    "FTS_HIGHLIGHT_END",
    "FTS_HIGHLIGHT_START",
    "JS_WHITESPACE",
    "SQLITE_FTS5_OUTER_PREDICATE_LIMIT",
    "SQLITE_MAX_PAGE_LIMIT",
    "SQLITE_PORTABLE_VARIABLE_LIMIT",
    "EventSearchRequest",
    "SessionSearchRequest",
    "SqlParam",
    "SqlWhere",
    "assert_fts5_outer_predicate_count",
    "assert_portable_binding_count",
    "build_event_where",
    "build_session_where",
    "make_snippet",
    "normalize_cursor",
    "normalize_event_request",
    "normalize_limit",
    "normalize_query",
    "normalize_session_request",
    "quote_fts_data",
    "request_fingerprint",
    "sanitize_fts_text",
]

FTS_HIGHLIGHT_START: Final = "\ufdd0"
"""Marker ``highlight()`` inserts before an FTS5 match (a noncharacter: never left in indexed text)."""
FTS_HIGHLIGHT_END: Final = "\ufdd1"
"""Marker ``highlight()`` inserts after an FTS5 match."""

SQLITE_MAX_PAGE_LIMIT: Final = MAX_SAFE_INTEGER - 1
"""Largest page size whose ``limit + 1`` lookahead is still an exact safe integer."""
SQLITE_PORTABLE_VARIABLE_LIMIT: Final = 32_766
"""Portable host-parameter ceiling shared by the predicate and statement builders."""
SQLITE_FTS5_OUTER_PREDICATE_LIMIT: Final = 14
"""Supported outer-predicate budget that keeps FTS5 MATCH usable by SQLite's planner."""

_WHITESPACE_RUN: Final = re.compile(JS_WHITESPACE_CLASS + "+")

_REPLACEMENT: Final = "\ufffd"
# NUL and the two highlight markers, as the original; and lone surrogates, which a Python string holds
# where the original's UTF-16 string held an unpaired half (the JSON gate admits them) and which SQLite
# cannot store as UTF-8 — the original's driver writes U+FFFD for them, so the index sees the same text.
_RESERVED: Final = re.compile("[\0\ufdd0\ufdd1\ud800-\udfff]")

SqlParam: TypeAlias = str | int | float
"""One SQL binding: text for list values, a number for range endpoints (a range may be fractional)."""


def _invalid(message: str, code: str) -> SessionQueryError:
    return SessionQueryError(message, f"SESSION_QUERY_{code}")


# --- budgets -----------------------------------------------------------------------------------------------


def assert_portable_binding_count(count: int) -> None:
    """Refuse a statement whose bindings would exceed :data:`SQLITE_PORTABLE_VARIABLE_LIMIT`."""
    if count > SQLITE_PORTABLE_VARIABLE_LIMIT:
        raise _invalid(
            f"session-search request exceeds SQLite's portable {SQLITE_PORTABLE_VARIABLE_LIMIT}-variable limit; "
            "reduce filter values",
            "INVALID_FILTER",
        )


def assert_fts5_outer_predicate_count(count: int) -> None:
    """Refuse more compiled outer predicates (fixed ones included) than FTS5 MATCH tolerates."""
    if count > SQLITE_FTS5_OUTER_PREDICATE_LIMIT:
        raise _invalid(
            "session-search request exceeds the supported SQLite FTS5 outer-predicate budget of "
            f"{SQLITE_FTS5_OUTER_PREDICATE_LIMIT}; reduce filters",
            "INVALID_FILTER",
        )


# --- scalar normalisation ----------------------------------------------------------------------------------


def sanitize_fts_text(text: str) -> str:
    """``text`` with NUL, U+FDD0, U+FDD1 and lone surrogates each replaced by U+FFFD (documents and
    queries alike; the code point count is unchanged)."""
    if text.isascii():  # of the reserved code points only NUL is ASCII: a memchr, not a regex scan
        return text.replace("\0", _REPLACEMENT)
    return _RESERVED.sub(_REPLACEMENT, text)


def normalize_query(value: object) -> str:
    """The query as searched: trimmed, whitespace runs collapsed to one space, sanitized.

    Raises ``SESSION_QUERY_INVALID_QUERY`` for a non-string, a blank query, or one containing NUL.
    """
    if not isinstance(value, str):
        raise _invalid("session-search query must be text", "INVALID_QUERY")
    query = _WHITESPACE_RUN.sub(" ", value.strip(JS_WHITESPACE))
    if not query:
        raise _invalid("session-search query must contain non-whitespace text", "INVALID_QUERY")
    if "\0" in query:
        raise _invalid("session-search query must not contain NUL", "INVALID_QUERY")
    return sanitize_fts_text(query)


def quote_fts_data(query: str) -> str:
    """``query`` as one FTS5 string phrase: wrapped in ``"`` with inner ``"`` doubled, so syntax is data."""
    return '"' + query.replace('"', '""') + '"'


def _safe_integer(value: object) -> int | None:
    """``value`` as an ``int`` when it is a JavaScript safe integer (``3.0`` included, ``True`` not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)
    return None


def normalize_limit(value: object, default_limit: int, max_limit: int) -> int:
    """The page size: ``default_limit`` when ``None``, else a safe integer in ``[1, min(max_limit, 2**53-2)]``.

    Raises ``SESSION_QUERY_INVALID_LIMIT`` (the configured default is checked the same way).
    """
    bound = min(max_limit, SQLITE_MAX_PAGE_LIMIT)
    limit = _safe_integer(default_limit if value is None else value)
    if limit is None or limit < 1 or limit > bound:
        raise _invalid(f"session-search limit must be an integer between 1 and {bound}", "INVALID_LIMIT")
    return limit


def normalize_cursor(value: object) -> str | None:
    """The cursor as given (``None`` when absent); raises ``SESSION_QUERY_INVALID_CURSOR`` for a non-string."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise _invalid("session-search cursor must be text", "INVALID_CURSOR")
    return value


# --- requests ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionSearchRequest:
    """A validated cross-session search: filters are owned copies, ``limit`` is explicit."""

    query: str
    session_filters: tuple[dict[str, Any], ...]
    event_filters: tuple[dict[str, Any], ...]
    limit: int
    cursor: str | None = None


@dataclass(frozen=True)
class EventSearchRequest:
    """A validated within-session search: filters are owned copies, ``limit`` is explicit."""

    session_id: str
    query: str
    filters: tuple[dict[str, Any], ...]
    limit: int
    cursor: str | None = None


def normalize_session_request(
    *,
    query: object,
    session_filters: object = None,
    event_filters: object = None,
    limit: object = None,
    cursor: object = None,
    default_limit: int,
    max_limit: int,
) -> SessionSearchRequest:
    """Validate and copy a cross-session request (absent filter lists are empty).

    Checks run in the original's order — session filters, event filters (metadata only), cursor,
    query, limit — so the first problem reported is the same one.
    """
    owned_session = materialize_session_filters([] if session_filters is None else session_filters)
    owned_event = materialize_metadata_filters([] if event_filters is None else event_filters)
    owned_cursor = normalize_cursor(cursor)
    return SessionSearchRequest(
        query=normalize_query(query),
        session_filters=tuple(owned_session),
        event_filters=tuple(owned_event),
        limit=normalize_limit(limit, default_limit, max_limit),
        cursor=owned_cursor,
    )


def normalize_event_request(
    *,
    session_id: object,
    query: object,
    filters: object = None,
    limit: object = None,
    cursor: object = None,
    default_limit: int,
    max_limit: int,
) -> EventSearchRequest:
    """Validate and copy a within-session request; a non-string session id is ``SESSION_QUERY_INVALID_FILTER``."""
    if not isinstance(session_id, str):
        raise _invalid("session-search session id must be text", "INVALID_FILTER")
    owned = materialize_metadata_filters([] if filters is None else filters)
    owned_cursor = normalize_cursor(cursor)
    return EventSearchRequest(
        session_id=session_id,
        query=normalize_query(query),
        filters=tuple(owned),
        limit=normalize_limit(limit, default_limit, max_limit),
        cursor=owned_cursor,
    )


# --- SQL predicates ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlWhere:
    """A parameterized predicate: ``sql`` without ``WHERE`` (``""`` for none), bindings in placeholder order."""

    sql: str
    params: tuple[SqlParam, ...]
    predicate_count: int


def _unknown_kind(filter: object) -> SessionQueryError:
    kind = filter.get("kind") if isinstance(filter, Mapping) else None
    shown = f'"{kind}"' if isinstance(kind, str) else "(missing)"
    return _invalid(f"session filter contains unknown kind {shown}", "INVALID_FILTER")


class _Compiler:
    """Accumulates ANDed clauses and their bindings, enforcing the binding budget as it grows."""

    def __init__(self) -> None:
        self.clauses: list[str] = []
        self.params: list[SqlParam] = []

    def _bind(self, values: list[SqlParam]) -> str:
        assert_portable_binding_count(len(self.params) + len(values))
        self.params.extend(values)
        return ", ".join("?" * len(values))

    def add_list(self, column: str, values: Iterable[SqlParam]) -> None:
        items = list(values)
        self.clauses.append(f"{column} IN ({self._bind(items)})" if items else "0")

    def add_nullable_list(self, column: str, values: Iterable[str | None]) -> None:
        items = list(values)
        if not items:
            self.clauses.append("0")
            return
        concrete: list[SqlParam] = [value for value in items if value is not None]
        parts = []
        if concrete:
            parts.append(f"{column} IN ({self._bind(concrete)})")
        if None in items:
            parts.append(f"{column} IS NULL")
        self.clauses.append("(" + " OR ".join(parts) + ")")

    def add_range(self, column: str, filter: Mapping[str, Any]) -> None:
        for key, operator in (("from", ">="), ("to", "<=")):
            bound = filter.get(key)
            if bound is not None:
                assert_portable_binding_count(len(self.params) + 1)
                self.clauses.append(f"CAST({column} AS INTEGER) {operator} ?")
                self.params.append(bound)

    def result(self) -> SqlWhere:
        assert_fts5_outer_predicate_count(len(self.clauses))
        return SqlWhere(" AND ".join(self.clauses), tuple(self.params), len(self.clauses))


def build_session_where(filters: Iterable[Mapping[str, Any]]) -> SqlWhere:
    """Compile validated session filters over the candidate columns (``session_id``, ``cwd``, …).

    An empty list is the literal ``0``; a list holding ``None`` also matches ``IS NULL``; availability
    deduplicates, and both values together compile to no predicate at all.
    """
    compiler = _Compiler()
    for filter in filters:
        kind = filter.get("kind") if isinstance(filter, Mapping) else None
        if kind == "id":
            compiler.add_list("session_id", filter["values"])
        elif kind == "cwd":
            compiler.add_nullable_list("cwd", filter["values"])
        elif kind == "created-at":
            compiler.add_range("created_at", filter)
        elif kind == "parent":
            compiler.add_nullable_list("parent_session", filter["values"])
        elif kind == "availability":
            availability = list(dict.fromkeys(filter["values"]))
            for value in availability:
                if value not in ("live", "persisted"):
                    raise _invalid(f'session availability filter contains unknown value "{value}"', "INVALID_FILTER")
            if not availability:
                compiler.clauses.append("0")
            elif len(availability) == 1:
                compiler.clauses.append(f"{availability[0]} = 1")
        else:
            raise _unknown_kind(filter)
    return compiler.result()


def build_event_where(filters: Iterable[Mapping[str, Any]]) -> SqlWhere:
    """Compile validated event metadata filters over ``seq``, ``time``, ``type`` and ``surface``."""
    compiler = _Compiler()
    for filter in filters:
        kind = filter.get("kind") if isinstance(filter, Mapping) else None
        if kind in ("seq", "time"):
            compiler.add_range(kind, filter)
        elif kind in ("type", "surface"):
            compiler.add_list(kind, filter["values"])
        else:
            raise _unknown_kind(filter)
    return compiler.result()


# --- fingerprints ------------------------------------------------------------------------------------------


def _canonical_number(value: object) -> object:
    """One JSON spelling per number, as the original's ``JSON.stringify`` has (``1.0`` and ``1`` agree)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _canonical_filters(filters: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    canonical: list[dict[str, Any]] = []
    for filter in filters:
        if "values" in filter:
            values = list(filter["values"])
            concrete = sorted(value for value in values if value is not None)
            ordered = [None] * (len(values) - len(concrete)) + concrete
            canonical.append({**filter, "values": ordered})
        elif "text" in filter:
            canonical.append(dict(filter))
        else:
            canonical.append(
                {
                    "kind": filter.get("kind"),
                    "from": _canonical_number(filter.get("from")),
                    "to": _canonical_number(filter.get("to")),
                }
            )
    keyed = sorted((_json(item), index) for index, item in enumerate(canonical))
    return [canonical[index] for _, index in keyed]


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def request_fingerprint(request: SessionSearchRequest | EventSearchRequest) -> str:
    """The canonical JSON identity of a normalized request, which a cursor must carry back unchanged.

    List values are sorted (``None`` first) and the filter list is sorted by its JSON text. The order is
    code-point order where the original uses ``localeCompare``: the fingerprint is private to one
    service instance, so only determinism matters, and code-point order is total (a locale collation can
    tie distinct strings, leaving the result to the caller's order).
    """
    if isinstance(request, EventSearchRequest):
        return _json(
            {
                "scope": "events",
                "sessionId": request.session_id,
                "query": request.query,
                "filters": _canonical_filters(request.filters),
                "limit": request.limit,
            }
        )
    return _json(
        {
            "scope": "sessions",
            "query": request.query,
            "sessionFilters": _canonical_filters(request.session_filters),
            "eventFilters": _canonical_filters(request.event_filters),
            "limit": request.limit,
        }
    )


# --- snippets ----------------------------------------------------------------------------------------------

_ELLIPSIS: Final = "…"


def _collapse(text: str) -> str:
    """Whitespace runs as one space, none leading (a trailing one is kept: see :func:`_clean_marked`)."""
    return _WHITESPACE_RUN.sub(" ", text).lstrip(" ")


def _clean_marked(marked: str) -> tuple[str, int]:
    """Drop the markers, collapse whitespace to single spaces (none leading or trailing); the first match index.

    The index is where the first start marker falls in the cleaned text: the length of the cleaned
    prefix before it, trailing space included (a space before the match is part of the output). Done
    with C-level string operations: a page of long documents is cleaned per search, and a Python loop
    over every character was a tenth of a search's time.
    """
    first = marked.find(FTS_HIGHLIGHT_START)
    clean = _collapse(_unmarked(marked)).rstrip(" ")
    if first < 0:
        return clean, 0
    return clean, len(_collapse(_unmarked(marked[:first])))


def _unmarked(text: str) -> str:
    # str.replace, not str.translate: a translation table is looked up per character in Python's
    # slow path, ten times the cost on a page of long documents.
    return text.replace(FTS_HIGHLIGHT_START, "").replace(FTS_HIGHLIGHT_END, "")


def make_snippet(marked: str, max_chars: int) -> str:
    """A plain excerpt of at most ``max_chars`` code points around the first highlighted match.

    ``marked`` is a document as FTS5 ``highlight()`` returns it. The excerpt starts about a third of
    the budget before the match, keeps the match in view, and marks each cut with ``…``. A budget below
    one yields ``""`` (the service's ``snippet_chars`` is at least one).
    """
    clean, match_start = _clean_marked(marked)
    length = len(clean)
    if length <= max_chars:
        return clean
    if max_chars < 1:
        return ""
    if max_chars == 1:
        return _ELLIPSIS
    matched = min(match_start, length - 1)
    start = max(0, matched - max_chars // 3)
    prefix = _ELLIPSIS if start > 0 else ""
    suffix = _ELLIPSIS
    content = max_chars - len(prefix) - len(suffix)
    if content < 1:
        start = matched
        suffix = ""
        content = max_chars - len(prefix)
    elif matched >= start + content:
        start = matched - content + 1
    end = min(length, start + content)
    if end == length:
        suffix = ""
        content = max_chars - len(prefix)
        start = max(0, end - content)
    end = min(length, start + content)
    return prefix + clean[start:end] + suffix
