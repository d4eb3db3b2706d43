"""Provider-independent filters over logical sessions and event documents (runtime spec §4.1 Filters).

A filter list is ANDed; the ``values`` of one clause are ORed; ranges are inclusive. Filters arrive as
the plain JSON shapes of the spec (``{"kind": "id", "values": [...]}``, ``{"kind": "seq", "from": 1}``,
``{"kind": "text", "text": "..."}``) and are *materialized* — validated and copied — before a caller's
operation waits on anything, so mutating the caller's lists afterwards has no effect and a malformed
filter fails before any store is observed. Every refusal is ``SESSION_QUERY_INVALID_FILTER`` with the
original's message: an unknown kind, an unknown value of a closed set (availability, surface), a
non-list ``values``, a non-finite or inverted range.

Numbers follow JavaScript's: a range endpoint is any finite number (``True`` is not a number); an
integer beyond SQLite's 64-bit range becomes the double JavaScript would hold, so the SQL provider can
bind every endpoint a caller may pass.

The ``text`` clause is the scan path's literal match (the full-text provider refuses it, see
:func:`materialize_metadata_filters`): whitespace-flexible, case-insensitive, with every part
regex-escaped so caller text is never a pattern. Whitespace is ECMAScript's (:data:`JS_WHITESPACE`),
which the other query modules share from here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import SessionQueryError

__all__ = [
    "AVAILABILITY_VALUES",
    "EVENT_FILTER_KINDS",
    "JS_WHITESPACE",
    "JS_WHITESPACE_CLASS",
    "SESSION_FILTER_KINDS",
    "SURFACE_VALUES",
    "apply_event_filters",
    "apply_session_filters",
    "compile_text_filter",
    "materialize_event_filters",
    "materialize_metadata_filters",
    "materialize_session_filters",
]

JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
"""ECMAScript's ``WhiteSpace`` and ``LineTerminator`` code points: what the original's ``\\s`` and
``String.prototype.trim`` match. Python's ``str.isspace``/``\\s`` also cover U+001C–U+001F and U+0085
and miss U+FEFF."""

JS_WHITESPACE_CLASS: Final = "[" + re.escape(JS_WHITESPACE) + "]"
"""A regex character class matching one :data:`JS_WHITESPACE` code point."""

_WHITESPACE_RUN: Final = re.compile(JS_WHITESPACE_CLASS + "+")

SESSION_FILTER_KINDS: Final = ("id", "cwd", "created-at", "parent", "availability")
EVENT_FILTER_KINDS: Final = ("seq", "time", "type", "surface", "text")
AVAILABILITY_VALUES: Final = ("live", "persisted")
SURFACE_VALUES: Final = ("current", "shadowed", "log-only")

_INT64: Final = 2**63

Filter = dict[str, Any]
Predicate = Callable[[Mapping[str, Any]], bool]


def _invalid(detail: str) -> SessionQueryError:
    return SessionQueryError(f"session {detail}", "SESSION_QUERY_INVALID_FILTER")


def _kind_of(filter: object) -> object:
    return filter.get("kind") if isinstance(filter, Mapping) else None


def _unknown(filter: object) -> SessionQueryError:
    kind = _kind_of(filter)
    return _invalid(f'unknown filter kind "{kind}"' if isinstance(kind, str) else "unknown filter kind (missing)")


def _filter_list(filters: object) -> Sequence[Any]:
    if not isinstance(filters, list | tuple):
        raise _invalid("filters must be an array")
    return filters


def _strings(name: str, values: object) -> list[str]:
    if not isinstance(values, list | tuple) or not all(isinstance(value, str) for value in values):
        raise _invalid(f"{name} filter values must be an array of strings")
    return list(values)


def _nullable_strings(name: str, values: object) -> list[str | None]:
    if not isinstance(values, list | tuple) or not all(value is None or isinstance(value, str) for value in values):
        raise _invalid(f"{name} filter values must be an array of strings or null")
    return list(values)


def _allowed(name: str, values: Iterable[str], allowed: tuple[str, ...]) -> None:
    for value in values:
        if value not in allowed:
            raise _invalid(f'{name} filter contains unknown value "{value}"')


def _endpoint(name: str, key: str, value: object) -> int | float:
    """A finite range endpoint; an integer outside SQLite's 64-bit range becomes a double, as in JavaScript."""
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(f"{name} filter {key} must be finite")
    return value


def _range(kind: str, filter: Mapping[str, Any]) -> Filter:
    copy: Filter = {"kind": kind}
    for key in ("from", "to"):
        if key in filter:
            copy[key] = _endpoint(kind, key, filter[key])
    if "from" in copy and "to" in copy and copy["from"] > copy["to"]:
        raise _invalid(f"{kind} filter from must be less than or equal to to")
    return copy


def _field(filter: object, key: str) -> object:
    return filter.get(key) if isinstance(filter, Mapping) else None


def materialize_session_filters(filters: object) -> list[Filter]:
    """Validated owned copies of session filters (``id``, ``cwd``, ``created-at``, ``parent``, ``availability``)."""
    owned: list[Filter] = []
    for filter in _filter_list(filters):
        kind = _kind_of(filter)
        if kind == "id":
            owned.append({"kind": kind, "values": _strings(kind, _field(filter, "values"))})
        elif kind in ("cwd", "parent"):
            owned.append({"kind": kind, "values": _nullable_strings(str(kind), _field(filter, "values"))})
        elif kind == "created-at":
            owned.append(_range(kind, filter))
        elif kind == "availability":
            values = _strings(kind, _field(filter, "values"))
            _allowed(kind, values, AVAILABILITY_VALUES)
            owned.append({"kind": kind, "values": values})
        else:
            raise _unknown(filter)
    return owned


def materialize_event_filters(filters: object) -> list[Filter]:
    """Validated owned copies of event filters (``seq``, ``time``, ``type``, ``surface``, ``text``).

    A ``text`` clause is only type-checked here; a blank text is refused when the clause is applied
    (:func:`compile_text_filter`), as in the original.
    """
    owned: list[Filter] = []
    for filter in _filter_list(filters):
        kind = _kind_of(filter)
        if kind in ("seq", "time"):
            owned.append(_range(str(kind), filter))
        elif kind == "type":
            owned.append({"kind": kind, "values": _strings(kind, _field(filter, "values"))})
        elif kind == "surface":
            values = _strings(kind, _field(filter, "values"))
            _allowed(kind, values, SURFACE_VALUES)
            owned.append({"kind": kind, "values": values})
        elif kind == "text":
            text = _field(filter, "text")
            if not isinstance(text, str):
                raise _invalid("text filter text must be a string")
            owned.append({"kind": kind, "text": text})
        else:
            raise _unknown(filter)
    return owned


def materialize_metadata_filters(filters: object) -> list[Filter]:
    """Event filters a full-text provider applies before ranking: every kind but ``text``.

    A ``text`` clause is refused (the provider's query *is* the text); an unknown kind is refused with
    the provider's own wording, before any clause is copied.
    """
    for filter in _filter_list(filters):
        kind = _kind_of(filter)
        if kind == "text":
            raise SessionQueryError(
                "session-search metadata filters do not accept text clauses", "SESSION_QUERY_INVALID_FILTER"
            )
        if kind not in ("seq", "time", "type", "surface"):
            shown = f'"{kind}"' if isinstance(kind, str) else "(missing)"
            raise SessionQueryError(f"session filter contains unknown kind {shown}", "SESSION_QUERY_INVALID_FILTER")
    return materialize_event_filters(filters)


def compile_text_filter(text: str) -> re.Pattern[str]:
    """The literal, case-insensitive, whitespace-flexible pattern of a ``text`` clause.

    Raises ``SESSION_QUERY_INVALID_FILTER`` for a blank text.
    """
    trimmed = text.strip(JS_WHITESPACE)
    if not trimmed:
        raise SessionQueryError("session text filter must contain non-whitespace text", "SESSION_QUERY_INVALID_FILTER")
    pattern = (JS_WHITESPACE_CLASS + "+").join(re.escape(part) for part in _WHITESPACE_RUN.split(trimmed))
    return re.compile(pattern, re.IGNORECASE)


def _in_range(value: Any, filter: Mapping[str, Any]) -> bool:
    low = filter.get("from")
    high = filter.get("to")
    return (low is None or value >= low) and (high is None or value <= high)


def _session_predicate(filter: Filter) -> Predicate:
    kind = filter["kind"]
    if kind == "id":
        ids = set(filter["values"])
        return lambda record: record["header"].get("id") in ids
    if kind in ("cwd", "parent"):
        field = "cwd" if kind == "cwd" else "parentSession"
        accepted = set(filter["values"])
        return lambda record: record["header"].get(field) in accepted
    if kind == "created-at":
        return lambda record: _in_range(record["header"].get("createdAt"), filter)
    wanted = set(filter["values"])  # availability
    return lambda record: (
        ("live" in wanted and bool(record["live"])) or ("persisted" in wanted and bool(record["persisted"]))
    )


def _event_predicate(filter: Filter) -> Predicate:
    kind = filter["kind"]
    if kind in ("seq", "time"):
        return lambda document: _in_range(document[kind], filter)
    if kind in ("type", "surface"):
        accepted = set(filter["values"])
        return lambda document: document[kind] in accepted
    pattern = compile_text_filter(filter["text"])
    return lambda document: pattern.search(document["text"]) is not None


def apply_session_filters(records: Iterable[Mapping[str, Any]], filters: object = ()) -> list[Any]:
    """The records (``{header, live, persisted}``) every clause accepts, in input order."""
    predicates = [_session_predicate(filter) for filter in materialize_session_filters(filters)]
    return [record for record in records if all(predicate(record) for predicate in predicates)]


def apply_event_filters(documents: Iterable[Mapping[str, Any]], filters: object = ()) -> list[Any]:
    """The documents (``{sessionId, seq, type, time, surface, text}``) every clause accepts, in input order.

    Every clause is compiled before the first document is tested, so a blank ``text`` clause fails even
    over an empty document list.
    """
    predicates = [_event_predicate(filter) for filter in materialize_event_filters(filters)]
    return [document for document in documents if all(predicate(document) for predicate in predicates)]
