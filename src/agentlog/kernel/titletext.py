"""Session-title text normalization: the original's expressions, in the original's order.

Pure text functions, in the kernel so that every layer that writes a ``session/title`` (the title service
in :mod:`agentlog.projection.title`, the transcript importer in :mod:`agentlog.interop`) normalizes a
title the same way; :mod:`agentlog.projection.title` re-exports them.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import InvalidOptionError

__all__ = ["DEFAULT_MAX_TITLE_BYTES", "fallback_session_title", "normalize_session_title", "truncate_title_utf8"]

DEFAULT_MAX_TITLE_BYTES: Final = 80
"""The original bundle's ``maxTitleBytes`` (``packages/bundle/base/cordis.patch.yml``)."""

_OSC_SEQUENCE: Final = re.compile(r"(?:\x1b\]|\x9d)(?:(?!\x07|\x1b\\)[\s\S])*(?:\x07|\x1b\\|\Z)")
"""Operating-system-command escapes, including an unterminated tail (``\\Z``: the end of the text only,
where Python's ``$`` would also stop before a final newline)."""
_CSI_SEQUENCE: Final = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]")
"""Control-sequence-introducer escapes such as SGR colour codes."""
_ESC_SEQUENCE: Final = re.compile(r"\x1b[@-_]")
"""The remaining two-byte ESC sequences."""
_CONTROL_CHARACTER: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
"""C0/C1 controls except tab, line feed and carriage return (those are whitespace, collapsed below)."""
_DIRECTIONAL_CONTROL: Final = re.compile(r"[\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")
"""Directional and invisible controls that can make a displayed title deceptive."""
_WHITESPACE_RUN: Final = re.compile(r"[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+")
"""ECMAScript's ``\\s`` exactly (Python's ``\\s`` also matches U+001C-U+001F and U+0085, which are
removed as controls first, so the two agree on every text that reaches this step)."""


def _positive_integer(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOptionError(f"{name} must be a positive integer")
    if isinstance(value, float) and not value.is_integer():
        raise InvalidOptionError(f"{name} must be a positive integer")
    if value <= 0:
        raise InvalidOptionError(f"{name} must be a positive integer")
    return int(value)


def _clean_title_text(text: str) -> str:
    """Controls and escapes removed, whitespace collapsed, trimmed: one line, no budget yet."""
    text = _OSC_SEQUENCE.sub("", text)
    text = _CSI_SEQUENCE.sub("", text)
    text = _ESC_SEQUENCE.sub("", text)
    text = _CONTROL_CHARACTER.sub("", text)
    text = _DIRECTIONAL_CONTROL.sub("", text)
    return _WHITESPACE_RUN.sub(" ", text).strip(" ")


def truncate_title_utf8(text: str, max_bytes: int) -> str:
    """The longest leading code-point prefix of ``text`` whose UTF-8 encoding fits ``max_bytes``.

    Raises :class:`~agentlog.errors.InvalidOptionError` (``maxBytes must be a positive integer``) for a
    budget that is not a positive integer.
    """
    budget = _positive_integer("maxBytes", max_bytes)
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) <= budget:
        return text
    end = budget
    while end > 0 and (encoded[end] & 0xC0) == 0x80:  # a continuation byte: the cut is inside a code point
        end -= 1
    return encoded[:end].decode("utf-8", "surrogatepass")


def normalize_session_title(text: str, max_bytes: int) -> str:
    """A terminal-safe one-line title within ``max_bytes`` UTF-8 bytes (possibly empty)."""
    return truncate_title_utf8(_clean_title_text(text), max_bytes).rstrip(" ")


def fallback_session_title(text: str, max_words: int, max_bytes: int) -> str:
    """The deterministic first-prompt title: the first ``max_words`` normalized words, within ``max_bytes``."""
    words = _positive_integer("maxWords", max_words)
    leading = [word for word in _clean_title_text(text).split(" ") if word][:words]
    return truncate_title_utf8(" ".join(leading), max_bytes).rstrip(" ")
