"""Search documents: which text of an event is searchable, and where the event sits on the surface.

Runtime spec §4.2. Extraction is an allow-list over the first-party vocabulary: message text, tool
names and raw argument JSON, tool failure names/codes, todo items and meaningful turn outcomes. Every
other event — structural boundaries, raw stream chunks, request envelopes, plugin or future types — and
every other content block (``reasoning`` above all, ``image``, unknown blocks) contributes nothing,
because a string merely present in a payload is not therefore something a user said or saw. An event
whose text is empty produces no document at all, so the scan path and the full-text index agree on
the document set.

Each part is trimmed with ECMAScript's ``trim()`` whitespace set (the original's), not Python's
``str.strip()``, which also strips U+001C–U+001F and U+0085 and keeps U+FEFF: the same event must yield
the same text here and in the original, or the two indexes would disagree on what a query finds.

Surface classes come from one replay of the whole log with the kernel's own :func:`fold_surface` (the
transition the live surface uses), so a search never disagrees with the surface the model sees:
``current`` (a node of the final surface), ``shadowed`` (removed by some replace), else ``log-only``.
The module is pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from ..errors import SessionQueryError
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    TODO_WRITE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    USER_MESSAGE,
)
from ..kernel.surface import fold_surface
from .filters import JS_WHITESPACE

__all__ = [
    "SURFACES",
    "Surface",
    "build_documents",
    "build_event_records",
    "extract_event_text",
    "indexed_columns",
    "surface_classes",
]

Surface = Literal["current", "shadowed", "log-only"]

SURFACES: Final[tuple[Surface, Surface, Surface]] = ("current", "shadowed", "log-only")
"""The closed set of surface classes, in the order the spec names them."""

_TURN_END_KIND_TEXT: Final = frozenset({"max-tokens", "interrupted"})
"""Turn outcomes whose kind alone is the searchable text (``error`` and ``aborted`` are handled apart;
``completed`` and unknown future kinds say nothing a user would search for)."""


def _join(parts: Iterable[object]) -> str:
    """Trim each part, drop the empty ones, join with newlines; non-text parts count as empty."""
    out = []
    for part in parts:
        if isinstance(part, str):
            text = part.strip(JS_WHITESPACE)
            if text:
                out.append(text)
    return "\n".join(out)


def _get(value: object, key: str) -> Any:
    """``value[key]`` when ``value`` is a mapping holding it, else ``None`` (a lenient path step)."""
    return value.get(key) if isinstance(value, Mapping) else None


def _block_parts(block: object, out: list[object]) -> None:
    """Append the searchable parts of one content block; a ``tool-result`` block recurses into its content."""
    stack = [block]
    while stack:
        current = stack.pop()
        kind = _get(current, "type")
        if kind == "text":
            out.append(_get(current, "text"))
        elif kind == "tool-call":
            out.append(_get(current, "name"))
            out.append(_get(current, "arguments"))
        elif kind == "tool-result":
            inner = _get(current, "content")
            if isinstance(inner, list):
                stack.extend(reversed(inner))  # depth-first, in document order
        # "reasoning" is private model thought, "image" has no text, unknown blocks stay out.


def _content_text(content: object) -> str:
    parts: list[object] = []
    if isinstance(content, list):
        for block in content:
            _block_parts(block, parts)
    return _join(parts)


def _turn_end_text(reason: object) -> str:
    kind = _get(reason, "kind")
    if kind == "error":
        return _join(["error", _get(_get(reason, "error"), "message")])
    if kind == "aborted":
        return "aborted"
    if kind in _TURN_END_KIND_TEXT:
        return str(kind)
    return ""


def extract_event_text(event: Mapping[str, Any]) -> str:
    """The searchable text of one event (runtime spec §4.2): newline-joined trimmed parts, or ``""``.

    Lenient on shape: a missing or mistyped field contributes nothing instead of raising, because the
    logs reaching here were validated when written and extraction must not make a readable log
    unsearchable.
    """
    etype = event.get("type")
    data = event.get("data")
    if etype == USER_MESSAGE:
        return _content_text(_get(data, "content"))
    if etype == ASSISTANT_MESSAGE:
        return _content_text(_get(_get(data, "message"), "content"))
    if etype == TOOL_CALL:
        return _join([_get(data, "name"), _get(data, "arguments")])
    if etype == TOOL_RESULT:
        error = _get(data, "error")
        return _join([_content_text(_get(_get(data, "message"), "content")), _get(error, "name"), _get(error, "code")])
    if etype == TODO_WRITE:
        todos = _get(data, "todos")
        parts: list[object] = []
        if isinstance(todos, list):
            for todo in todos:
                parts.append(_get(todo, "status"))
                parts.append(_get(todo, "content"))
        return _join(parts)
    if etype == TURN_END:
        return _turn_end_text(_get(data, "reason"))
    return ""


def _surface_by_seq(events: Sequence[Mapping[str, Any]]) -> dict[int, Surface]:
    try:
        folded = fold_surface(events)
    except Exception as error:  # the original maps every fold failure, whatever its class
        raise SessionQueryError(f"invalid session surface: {error}", "SESSION_QUERY_INVALID_SURFACE") from error
    result: dict[int, Surface] = dict.fromkeys(folded.nodes, "current")
    for replacement in folded.replacements:
        for seq in replacement.shadowed_seqs:
            result[seq] = "shadowed"
    return result


def surface_classes(events: Sequence[Mapping[str, Any]]) -> list[Surface]:
    """The surface class of each event of a complete log, aligned with ``events`` (index ``i`` ↔ ``events[i]``).

    Raises ``SESSION_QUERY_INVALID_SURFACE`` when the log's replace operations do not replay.
    """
    by_seq = _surface_by_seq(events)
    return [by_seq.get(event["seq"], "log-only") for event in events]


def build_event_records(session_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One ``SessionEventRecord`` ``{sessionId, seq, type, time, surface}`` per raw event, in log order."""
    by_seq = _surface_by_seq(events)
    return [
        {
            "sessionId": session_id,
            "seq": event["seq"],
            "type": event["type"],
            "time": event["time"],
            "surface": by_seq.get(event["seq"], "log-only"),
        }
        for event in events
    ]


def indexed_columns(document: Mapping[str, Any], text: str) -> tuple[Any, ...]:
    """What every index stores of a document beside its id and text, in its column order: session, seq,
    type, time, surface class and the length of the indexed ``text`` (the filters and the ranking read
    them; both providers must store the same, or their hits would differ)."""
    return (document["sessionId"], document["seq"], document["type"], document["time"], document["surface"], len(text))


def build_documents(session_id: str, events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The search documents ``{sessionId, seq, type, time, surface, text}`` of a complete log, ascending seq.

    Events without searchable text are omitted. The surface fold runs (and may raise
    ``SESSION_QUERY_INVALID_SURFACE``) even when no event has text, as in the original.
    """
    by_seq = _surface_by_seq(events)
    documents: list[dict[str, Any]] = []
    for event in events:
        text = extract_event_text(event)
        if not text:
            continue
        seq = event["seq"]
        documents.append(
            {
                "sessionId": session_id,
                "seq": seq,
                "type": event["type"],
                "time": event["time"],
                "surface": by_seq.get(seq, "log-only"),
                "text": text,
            }
        )
    return documents
