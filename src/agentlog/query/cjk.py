"""Substring search for Chinese, Japanese and Korean text: the companion of the ``unicode61`` index.

Why a companion: the original indexes documents with FTS5 ``unicode61``, which splits on separators
and treats every other run of letters as one token. Chinese and Japanese are written without spaces,
so a whole clause becomes one token and ``日志`` finds nothing inside ``会话日志``. agentlog keeps the
original's index and its semantics for every query without CJK characters (``AI`` is not found inside
``BRAID``, ``CAFE`` finds ``café``, a phrase is a token sequence), and answers a query that contains a
CJK character as a case-insensitive **substring** query over a second FTS5 table with the ``trigram``
tokenizer. Only documents that contain a CJK character are entered there: a substring that contains a
CJK character can only occur in a document that contains that character, so the companion stays a small
fraction of the index for mostly-English stores.

How a CJK query runs (in :mod:`agentlog.query.sqlite`, which owns the connection):

* three or more code points: :func:`trigram_match_expression` is one quoted phrase. A trigram phrase of
  ``n ≥ 3`` characters matches exactly the documents that contain the query as a substring under the
  tokenizer's case folding (consecutive trigrams at consecutive offsets). That is the index prefilter.
* one or two code points: a trigram table cannot look up fewer than three characters, so the provider
  scans the companion rows — only CJK-bearing documents, never the whole corpus — with
  :func:`mark_substrings` registered as an SQL function, optionally after a plain ``instr`` on
  :func:`literal_needle`.
* either way, the marked text comes from :func:`mark_substrings`, not from FTS5 ``highlight()``:
  ``highlight()`` over a trigram table merges overlapping phrase hits and, on SQLite 3.40, garbles the
  text when hits overlap (``"aaa"`` in ``"aaaaaa日"`` comes back with duplicated characters). The marks
  are every non-overlapping occurrence, left to right, so ``match_count`` counts occurrences and the
  snippet starts at the first — the same contract FTS5 highlight markers give the ``unicode61`` path.

**Folding.** :func:`fold` is exactly the case folding of SQLite's ``trigram`` tokenizer with its
default ``case_sensitive 0`` (the FTS5 Unicode fold with diacritics kept — SQLite 3.40 offers no
``remove_diacritics`` for ``trigram``), as a per-code-point table captured from SQLite 3.40.1 (an older
Unicode's simple lowercase plus a few case-fold extras such as ``ſ`` → ``s``, ``ς`` → ``σ``;
U+FFFE/U+FFFF read as U+FFFD). Python's ``str.lower`` would disagree on letters added to Unicode later (Cherokee,
Georgian Mtavruli, Osage …) and lengthen ``İ``; with the same fold, the trigram prefilter admits
precisely the documents :func:`mark_substrings` marks, so the prefilter never drops a match. The test
suite compares the table with the running SQLite over every code point. Diacritics are *not* folded on
this path: ``café日志`` does not match ``cafe日志`` (a CJK query is a literal substring).

**Whitespace.** Queries arrive normalized (trimmed, every whitespace run one space, as the original's
JavaScript ``\\s``); :func:`companion_text` applies the same collapse to the stored text so a query
spanning a line break still matches. The companion stores that collapsed text; ranking still uses the
``codepoint_length`` of the original document, so hits of both paths order by one contract.

This module is pure (no ``sqlite3``): the provider registers the functions and runs the DDL.
"""

from __future__ import annotations

import re
from typing import Final

from .filters import JS_WHITESPACE_CLASS
from .normalize import FTS_HIGHLIGHT_END, FTS_HIGHLIGHT_START, sanitize_fts_text

__all__ = [
    "COMPANION_LIVE_DDL",
    "COMPANION_LIVE_TABLE",
    "COMPANION_PERSISTED_DDL",
    "COMPANION_PERSISTED_TABLE",
    "COMPANION_TABLES",
    "TRIGRAM_MIN_CODEPOINTS",
    "companion_text",
    "fold",
    "has_cjk",
    "literal_needle",
    "mark_substrings",
    "trigram_match_expression",
    "uses_substring",
]

TRIGRAM_MIN_CODEPOINTS: Final = 3
"""The shortest query the trigram index can look up; shorter CJK queries scan the companion rows."""

COMPANION_PERSISTED_TABLE: Final = "persisted_grams"
COMPANION_LIVE_TABLE: Final = "live_grams"
_COMPANION_COLUMNS: Final = (
    "text, session_id UNINDEXED, seq UNINDEXED, type UNINDEXED, time UNINDEXED, surface UNINDEXED, "
    "codepoint_length UNINDEXED"
)
COMPANION_PERSISTED_DDL: Final = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {COMPANION_PERSISTED_TABLE} USING fts5({_COMPANION_COLUMNS}, "
    "tokenize = 'trigram')"
)
COMPANION_LIVE_DDL: Final = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{COMPANION_LIVE_TABLE} USING fts5({_COMPANION_COLUMNS}, "
    "tokenize = 'trigram')"
)
COMPANION_TABLES: Final = (
    COMPANION_PERSISTED_TABLE,
    *(f"{COMPANION_PERSISTED_TABLE}_{shadow}" for shadow in ("data", "idx", "content", "docsize", "config")),
)
"""The main-database tables the companion creates (the FTS5 table and its shadow tables); the TEMP
``live_grams`` lives in the connection's temp schema and is not listed."""

# Han (unified, extensions A–H, compatibility, radicals, strokes), kana (incl. half-width katakana, small
# and historic kana), Hangul (syllables, jamo, half-width), Bopomofo, and the CJK punctuation, symbol,
# enclosed, compatibility, vertical and full-width form blocks. U+3000 IDEOGRAPHIC SPACE is whitespace
# (queries collapse it to " "), so it is not a CJK character here.
_CJK_CLASS: Final = (
    "\u1100-\u11ff\u2e80-\u2fdf\u2ff0-\u2fff\u3001-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff"
    "\uf900-\ufaff\ufe10-\ufe1f\ufe30-\ufe6f\uff00-\uffef"
    "\U00016fe0-\U00016fff\U0001aff0-\U0001b16f\U0001f200-\U0001f2ff\U00020000-\U0002fa1f\U00030000-\U000323af"
)
_CJK: Final = re.compile(f"[{_CJK_CLASS}]")

# Whitespace exactly as the query normalisation collapses it (ECMAScript ``\s``, shared with filters).
_WHITESPACE_RUN: Final = re.compile(JS_WHITESPACE_CLASS + "+")

# SQLite 3.40.1's trigram fold (``sqlite3Fts5UnicodeFold(c, 0)`` plus its UTF-8 reader), captured from the
# tokenizer itself: ``start:count:stride:delta`` (start in hex) — code points ``start + i*stride``
# (``i < count``; ``start::delta`` is one code point) fold to themselves plus ``delta``. Every other one folds
# to itself. ``tests/query/test_cjk.py`` re-derives it from the running SQLite over all code points.
_FOLD_RUNS: Final = (
    "41:26:1:32 b5::775 c0:23:1:32 d8:7:1:32 100:24:2:1 132:3:2:1 139:8:2:1 14a:23:2:1 178::-121 179:3:2:1 "
    "17f::-268 181::210 182:2:2:1 186::206 187::1 189:2:1:205 18b::1 18e::79 18f::202 190::203 191::1 "
    "193::205 194::207 196::211 197::209 198::1 19c::211 19d::213 19f::214 1a0:3:2:1 1a6::218 1a7::1 "
    "1a9::218 1ac::1 1ae::218 1af::1 1b1:2:1:217 1b3:2:2:1 1b7::219 1b8::1 1bc::1 1c4::2 1c5::1 1c7::2 "
    "1c8::1 1ca::2 1cb:9:2:1 1de:9:2:1 1f1::2 1f2:2:2:1 1f6::-97 1f7::-56 1f8:20:2:1 220::-130 222:9:2:1 "
    "23a::10795 23b::1 23d::-163 23e::10792 241::1 243::-195 244::69 245::71 246:5:2:1 345::116 370:2:2:1 "
    "376::1 386::38 388:3:1:37 38c::64 38e:2:1:63 391:17:1:32 3a3:9:1:32 3c2::1 3cf::8 3d0::-30 3d1::-25 "
    "3d5::-15 3d6::-22 3d8:12:2:1 3f0::-54 3f1::-48 3f4::-60 3f5::-64 3f7::1 3f9::-7 3fa::1 3fd:3:1:-130 "
    "400:16:1:80 410:32:1:32 460:17:2:1 48a:27:2:1 4c0::15 4c1:7:2:1 4d0:44:2:1 531:38:1:48 10a0:38:1:7264 "
    "10c7::7264 10cd::7264 1e00:75:2:1 1e9b::-58 1e9e::-7615 1ea0:48:2:1 1f08:8:1:-8 1f18:6:1:-8 1f28:8:1:-8 "
    "1f38:8:1:-8 1f48:6:1:-8 1f59:4:2:-8 1f68:8:1:-8 1f88:8:1:-8 1f98:8:1:-8 1fa8:8:1:-8 1fb8:2:1:-8 "
    "1fba:2:1:-74 1fbc::-9 1fbe::-7173 1fc8:4:1:-86 1fcc::-9 1fd8:2:1:-8 1fda:2:1:-100 1fe8:2:1:-8 "
    "1fea:2:1:-112 1fec::-7 1ff8:2:1:-128 1ffa:2:1:-126 1ffc::-9 2126::-7517 212a::-8383 212b::-8262 "
    "2132::28 2160:16:1:16 2183::1 24b6:26:1:26 2c00:47:1:48 2c60::1 2c62::-10743 2c63::-3814 2c64::-10727 "
    "2c67:3:2:1 2c6d::-10780 2c6e::-10749 2c6f::-10783 2c70::-10782 2c72::1 2c75::1 2c7e:2:1:-10815 "
    "2c80:50:2:1 2ceb:2:2:1 2cf2::1 a640:23:2:1 a680:12:2:1 a722:7:2:1 a732:31:2:1 a779:2:2:1 a77d::-35332 "
    "a77e:5:2:1 a78b::1 a78d::-42280 a790:2:2:1 a7a0:5:2:1 a7aa::-42308 ff21:26:1:32 fffe::-1 ffff::-2 "
    "10400:40:1:40 "
)


def _fold_table() -> dict[int, int]:
    table: dict[int, int] = {}
    for run in _FOLD_RUNS.split():
        parts = run.split(":")
        if len(parts) == 3:  # "start::delta": one code point
            start, count, stride, delta = int(parts[0], 16), 1, 1, int(parts[2])
        else:
            start, count, stride, delta = int(parts[0], 16), int(parts[1]), int(parts[2]), int(parts[3])
        for index in range(count):
            code = start + index * stride
            table[code] = code + delta
    return table


_FOLD: Final = _fold_table()
# What some other code point folds to. A code point neither in _FOLD nor here is matched only by itself, so
# a run of such code points in a query occurs verbatim (case-sensitively) in any text that matches it.
_FOLD_TARGETS: Final = frozenset(_FOLD.values())


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Han, kana, Hangul, Bopomofo or CJK punctuation/compatibility character.

    Decides both sides of the companion: which documents are entered (only these can contain a CJK
    substring) and which queries take substring semantics.
    """
    # ASCII text (most documents: tool output, code) holds none; ``isascii`` is a flag read, not a scan.
    return not text.isascii() and _CJK.search(text) is not None


def uses_substring(query: str) -> bool:
    """Whether a normalized query is answered as a substring query (it contains a CJK character).

    Every other query keeps the original's ``unicode61`` one-phrase token semantics unchanged.
    """
    return has_cjk(query)


def companion_text(text: str) -> str:
    """The text the companion stores for a document (entered only where :func:`has_cjk` holds).

    Sanitized like every indexed text (NUL, U+FDD0 and U+FDD1 become U+FFFD, so stored text never holds
    the highlight markers), every whitespace run collapsed to one space and the ends trimmed — exactly
    as queries are normalized, so the query ``日志 abc`` finds a document ``日志`` + line break + ``abc``.
    After the collapse an end can only be a single space, hence the plain ``strip(" ")``.
    """
    return _WHITESPACE_RUN.sub(" ", sanitize_fts_text(text)).strip(" ")


def fold(text: str) -> str:
    """The case folding of substring matching: SQLite's trigram fold, one code point to one code point.

    Length-preserving, so an offset found in the folded text is the same offset in the original.
    """
    return text.translate(_FOLD)


def mark_substrings(text: str, query: str) -> str | None:
    """``text`` with every non-overlapping occurrence of ``query`` (both folded) wrapped in U+FDD0 and
    U+FDD1, scanning left to right; ``None`` when there is none (or the query is empty).

    The markers are the ones FTS5 ``highlight()`` emits on the ``unicode61`` path, so the provider's
    match count (markers) and snippet (first marker) work unchanged. The original characters are kept:
    only the comparison is folded.
    """
    if not query:
        return None
    haystack = fold(text)
    needle = fold(query)
    width = len(needle)
    found = haystack.find(needle)
    if found < 0:
        return None
    pieces: list[str] = []
    cursor = 0
    while found >= 0:
        pieces.append(text[cursor:found])
        pieces.append(FTS_HIGHLIGHT_START)
        pieces.append(text[found : found + width])
        pieces.append(FTS_HIGHLIGHT_END)
        cursor = found + width
        found = haystack.find(needle, cursor)
    pieces.append(text[cursor:])
    return "".join(pieces)


def trigram_match_expression(query: str) -> str | None:
    """The companion MATCH expression for a query of at least three code points, else ``None``.

    One quoted phrase (``"`` doubled), like the original's expression, so operators stay data. Its
    trigrams at consecutive offsets are exactly the substring occurrences under :func:`fold`.
    """
    if len(query) < TRIGRAM_MIN_CODEPOINTS:
        return None
    return '"' + query.replace('"', '""') + '"'


def literal_needle(query: str) -> str | None:
    """The longest run of ``query`` that every matching text contains verbatim, or ``None``.

    A character that folds only to itself and that no other character folds to (every Han, kana and
    Hangul character) can only be matched by itself, so a plain, case-sensitive ``instr(text, needle)``
    is a safe cheap filter before the :func:`mark_substrings` scan of one- and two-character queries.
    """
    best = ""
    current: list[str] = []
    for char in query:
        code = ord(char)
        if code not in _FOLD and code not in _FOLD_TARGETS:
            current.append(char)
            continue
        if len(current) > len(best):
            best = "".join(current)
        current = []
    if len(current) > len(best):
        best = "".join(current)
    return best or None
