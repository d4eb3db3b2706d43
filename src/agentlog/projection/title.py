"""The session title, pure half (runtime spec §6.10): normalizer, fallback, fold and the ``title`` unit.

A title is a log fact: ``session/title {title, messageSeqs, source}`` events are last-wins snapshots (the
whole-value rule, §2.1), so the current title is always a fold of the log and never mutable metadata.
Everything here is pure — no store, no clock, no I/O — so a session list, a cold cache read and the
title service (:mod:`agentlog.projection.title_service`) all derive the same title from the same log.

**Normalization** makes untrusted text (a prompt, a model's answer, a rename) safe to print on one line
of a terminal: operating-system-command, control-sequence and two-byte ESC sequences are removed (an
unterminated OSC swallows the rest of the text, as a terminal would), then the remaining C0/C1 controls
other than whitespace, then the directional and invisible controls that can make a title lie about its
content (bidi overrides, zero-width characters, the BOM); every run of whitespace (the ECMAScript ``\\s``
set: NBSP and U+3000 included) becomes one space; the result is trimmed, cut to a UTF-8 byte budget
without splitting a code point, and trimmed at the end again (the cut can leave a trailing space).

Budgets count **UTF-8 bytes** (not code points, not UTF-16 units): a title is stored and shown by byte
bounded consumers. A lone surrogate (only possible in text that never passed the JSON gate) counts three
bytes, as the original's ``Buffer.byteLength`` counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from ..errors import SessionTitleStateError
from ..kernel.events import USER_MESSAGE, Event
from ..kernel.titletext import (
    DEFAULT_MAX_TITLE_BYTES,
    _clean_title_text,
    fallback_session_title,
    normalize_session_title,
    truncate_title_utf8,
)
from .events import SESSION_TITLE, SESSION_TITLE_LLM_REQUEST, SessionTitleData, SessionTitleModel, SessionTitleSource
from .units import ProjectionUnit

__all__ = [
    "DEFAULT_FALLBACK_MAX_BYTES",
    "DEFAULT_FALLBACK_MAX_WORDS",
    "DEFAULT_MAX_TITLE_BYTES",
    "SESSION_TITLE",
    "SESSION_TITLE_LLM_REQUEST",
    "TITLE_KEY",
    "TITLE_STATE_VERSION",
    "TITLE_UNIT",
    "SessionTitleData",
    "SessionTitleModel",
    "SessionTitleSnapshot",
    "SessionTitleSource",
    "SessionTitleUserMessage",
    "collect_session_title_messages",
    "fallback_session_title",
    "fold_session_title",
    "normalize_session_title",
    "title_event_problem",
    "truncate_title_utf8",
]

TITLE_KEY: Final = "title"
"""The projection key of the title unit (the original's ``SessionProjectionMap.title``)."""

TITLE_STATE_VERSION: Final = 1
"""The original's ``stateVersion`` of the title unit."""

DEFAULT_FALLBACK_MAX_WORDS: Final = 5
DEFAULT_FALLBACK_MAX_BYTES: Final = 40
"""The original bundle's title limits (``packages/bundle/base/cordis.patch.yml``); the service itself has
no defaults, every limit is required."""

# --- normalization: agentlog.kernel.titletext (re-exported; the importer normalizes with it too) -----

# --- the event shapes (the events' names and data: :mod:`.events`) -----------------------------------


class SessionTitleSnapshot(SessionTitleData):
    """The folded current title plus its event's envelope facts."""

    eventSeq: int
    updatedAt: int


@dataclass(frozen=True)
class SessionTitleUserMessage:
    """One eligible human message: its ``user/message`` seq and its text blocks joined with a newline."""

    seq: int
    text: str

    def wire(self) -> dict[str, Any]:
        """The ``{seq, text}`` object a title provider frames (key order as the original's)."""
        return {"seq": self.seq, "text": self.text}


def _copy_source(source: Mapping[str, Any]) -> SessionTitleSource:
    kind = source.get("kind")
    if kind == "provider":
        copied: SessionTitleSource = {"kind": "provider", "provider": source["provider"]}
        model = source.get("model")
        if model is not None:
            copied["model"] = {"provider": model["provider"], "model": model["model"]}
        return copied
    return cast(SessionTitleSource, {"kind": kind})


def fold_session_title(events: Sequence[Event]) -> SessionTitleSnapshot | None:
    """The latest ``session/title`` as ``{...data, eventSeq, updatedAt}`` (a detached copy), or ``None``."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event["type"] != SESSION_TITLE:
            continue
        data = event["data"]
        return {
            "title": data["title"],
            "messageSeqs": list(data["messageSeqs"]),
            "source": _copy_source(data["source"]),
            "eventSeq": event["seq"],
            "updatedAt": event["time"],
        }
    return None


def _message_text(data: Mapping[str, Any]) -> str | None:
    """The joined text blocks of an eligible human message, or ``None`` when it is not one."""
    source = data.get("source")
    if not isinstance(source, Mapping) or source.get("kind") != "user":
        return None
    text = "\n".join(
        block["text"]
        for block in data.get("content") or ()
        if isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )
    return text if _clean_title_text(text) else None


def collect_session_title_messages(
    events: Iterable[Event], through_seq: int | None = None
) -> list[SessionTitleUserMessage]:
    """The eligible human messages in log order, up to ``through_seq`` inclusive.

    Eligible: a ``user/message`` whose source kind is ``user`` (not a plugin's injected context, not a
    compaction checkpoint) and whose text blocks, joined with ``\\n``, normalize to a non-empty title.
    """
    messages: list[SessionTitleUserMessage] = []
    for event in events:
        if through_seq is not None and event["seq"] > through_seq:
            break
        if event["type"] != USER_MESSAGE:
            continue
        text = _message_text(event["data"])
        if text is not None:
            messages.append(SessionTitleUserMessage(event["seq"], text))
    return messages


def title_event_problem(data: Mapping[str, Any]) -> str | None:
    """The original's title-source invariant: an automatic title cites at least one message seq, a user
    rename cites none. Returns the violation's text (without the event's seq), or ``None``."""
    source = data.get("source")
    kind = source.get("kind") if isinstance(source, Mapping) else None
    seqs = data.get("messageSeqs")
    count = len(seqs) if isinstance(seqs, Sequence) and not isinstance(seqs, str) else 0
    if (count == 0) != (kind == "user"):
        requirement = "cite no message seqs" if kind == "user" else "cite at least one message seq"
        return f'source "{kind}" must {requirement}; got {count}'
    return None


# --- the projection unit ----------------------------------------------------------------------------


def _title_initial() -> str | None:
    return None


def _title_reduce(state: str | None, event: Event) -> str | None:
    if event["type"] != SESSION_TITLE:
        return state
    title = event["data"]["title"]
    # The original returns the event's string; JavaScript's Object.is compares strings by value, so a
    # repeated identical title is "unchanged" there. Returning the old state keeps that under ``is``.
    return state if state == title else cast(str, title)


def _parse_title_state(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return value
    raise SessionTitleStateError(
        f"title projection state must be a non-empty string or null, not {type(value).__name__} {value!r}"[:200]
    )


def _title_view(state: str | None) -> str | None:
    # The original validates every served view against its schema; a log whose session/title carries
    # no string title fails loudly here instead of serving a wrong value.
    return _parse_title_state(state)


TITLE_UNIT: Final[ProjectionUnit[str | None, str | None]] = ProjectionUnit(
    key=TITLE_KEY,
    state_version=TITLE_STATE_VERSION,
    initial=_title_initial,
    reduce=_title_reduce,
    view=_title_view,
    client_visible=True,
    parse_state=_parse_title_state,
)
"""The current title (the last ``session/title``'s text) or ``None`` before the first: the plain string
session list rows show. State and view are the same value (the original's ``string | null`` schema)."""
