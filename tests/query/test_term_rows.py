"""The PostgreSQL index's term rows and a one-term query's snippets are FTS5 unicode61's, whichever path
makes them.

ASCII documents are tokenized by the C accelerator (``_accel.ascii_term_rows``), everything else by FTS5
in a private SQLite table; both must give exactly the rows FTS5 gives (term, doc, frequency, positions),
or phrase and term queries would find other documents than the SQLite provider does. The reference here
is FTS5 itself, read through its own ``fts5vocab`` table in a fresh database.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentlog import _accel
from agentlog.query.normalize import FTS_HIGHLIGHT_END as END
from agentlog.query.normalize import FTS_HIGHLIGHT_START as START
from agentlog.query.normalize import make_snippet
from agentlog.query.postgres import _Fts5, _mark_ascii_term

pytestmark = pytest.mark.accel


def fts5_rows(documents: Sequence[tuple[int, str]]) -> set[tuple[str, int, int, tuple[int, ...]]]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(text, content = '', tokenize = 'unicode61')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", documents)
        positions: dict[tuple[str, int], list[int]] = {}
        for term, doc, offset in conn.execute('SELECT term, doc, "offset" FROM v'):
            positions.setdefault((term, doc), []).append(offset)
    finally:
        conn.close()
    return {(term, doc, len(found), tuple(sorted(found))) for (term, doc), found in positions.items()}


def columns_of(doc: int) -> str:
    """A document's columns as COPY text (what the provider appends to each of its term rows)."""
    return f"s-{doc}\\t\\\\é\t{doc * 3}\tuser/message\t{doc + 1}\tcurrent\t{doc % 5}"


def parsed(copy_text: str) -> list[tuple[str, int, int, tuple[int, ...]]]:
    """The term rows of a COPY text, each checked to end with its document's columns."""
    rows = []
    for line in copy_text.splitlines():
        term, doc, count, positions, columns = line.split("\t", 4)
        assert positions.startswith("{") and positions.endswith("}")
        assert columns == columns_of(int(doc))
        rows.append(
            (term.replace("\\\\", "\\"), int(doc), int(count), tuple(int(p) for p in positions[1:-1].split(",")))
        )
    return rows


def _unmark(text: str) -> str:
    return text.replace(START, "").replace(END, "")


def term_rows(documents: Sequence[tuple[int, str]]) -> list[tuple[str, int, int, tuple[int, ...]]]:
    tokenizer = _Fts5()
    try:
        return parsed(tokenizer.term_rows([(doc, text, columns_of(doc)) for doc, text in documents]))
    finally:
        tokenizer.close()


ASCII_TEXT = st.text(st.characters(max_codepoint=0x7F), max_size=120)
ANY_TEXT = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from("éÉßØçñ\u0301\u0308ǅΣσςдД日本語会话ログ﹏＿٣①"),
        st.characters(blacklist_categories=("Cs",)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ASCII_TEXT, ANY_TEXT), max_size=8))
@example(["a" * 40_000 + " tail", "a" * 32_768 + "b " + "a" * 32_769])  # FTS5 cuts a term at 32,768 bytes
@example(["".join(map(chr, range(128))), "\x00x\x00Y\x7fz", "", "   ", "A_b-C.d/E9"])
@example(["Hello hello HELLO", "x x y x", "café CAFE cafe\u0301"])
def test_every_document_gets_exactly_fts5_term_rows(texts: list[str]) -> None:
    documents = [(index * 7 + 1, text) for index, text in enumerate(texts)]
    rows = term_rows(documents)
    assert len(rows) == len(set(rows)), "a (term, doc) row was written twice"
    assert set(rows) == fts5_rows(documents)


def test_large_document_ids_are_written_in_full() -> None:
    documents = [(2**62 + 5, "alpha beta alpha"), (9, "gamma")]
    assert set(term_rows(documents)) == fts5_rows(documents)
    assert ("alpha", 2**62 + 5, 2, (0, 2)) in term_rows(documents)


@pytest.mark.skipif(_accel.ascii_term_rows is None, reason="the C accelerator is disabled or not built")
def test_only_non_ascii_documents_are_left_to_fts5() -> None:
    assert _accel.ascii_term_rows is not None
    documents = [(1, "plain ascii"), (2, "café"), (3, ""), (4, "日本"), (5, "X")]
    text, fallback = _accel.ascii_term_rows([(doc, body, columns_of(doc)) for doc, body in documents])
    assert fallback == [1, 3]
    assert set(parsed(text)) == fts5_rows([documents[0], documents[2], documents[4]])


@pytest.mark.skipif(_accel.ascii_term_rows is None, reason="the C accelerator is disabled or not built")
def test_unexpected_items_are_left_to_fts5_not_guessed() -> None:
    assert _accel.ascii_term_rows is not None
    documents = [(1, "ok", columns_of(1)), ("2", "text"), (3.0, "float id"), (2**70, "huge id"), [4, "list"], (5,)]
    documents += [(6, "columns not text", 6), (7, "too", "many", "items")]
    text, fallback = _accel.ascii_term_rows(documents)
    assert fallback == [1, 2, 3, 4, 5, 6, 7]
    assert parsed(text) == [("ok", 1, 1, (0,))]
    assert _accel.ascii_term_rows([(8, "columns", "x\\ty")]) == ("columns\t8\t1\t{0}\tx\\ty\n", [])


_VOCABULARY = st.sampled_from(["r7", "R7", "r77", "xr7", "r", "7", "Cafe", "cafe", "CAFE", "café", "a" * 40])
_SEPARATORS = st.sampled_from([" ", "  ", "-", "_", ".", "\n", "r7", "", "\t", "/", "\x00", "\ufffd"])
_MARKABLE = st.lists(st.one_of(_VOCABULARY, _SEPARATORS, ASCII_TEXT), max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MARKABLE, min_size=1, max_size=6), st.sampled_from(["r7", "R7!", "cafe", "Café", "7", "a" * 40]))
@example(["a" * 40_000 + " r7", "r7 " + "r" * 32_768 + "7"], "r7")
@example(["R7 r7r7 r7-r7_r7.r7"], "r7")
def test_a_one_term_querys_snippets_are_fts5_highlights(texts: list[str], query: str) -> None:
    tokenizer = _Fts5()
    try:
        (term,) = tokenizer.terms(query)
        documents = list(enumerate(texts))
        expected = tokenizer.highlight(documents, query)
    finally:
        tokenizer.close()
    marked: dict[int, str] = {}
    decided = [key for key, text in documents if _mark_ascii_term(text, term, key, marked)]
    assert set(marked) == {key for key in decided if key in expected}  # the documents FTS5 marks
    for key, text in marked.items():  # every snippet FTS5's, to the character (and the first mark the same)
        assert _unmark(text) == _unmark(expected[key]) == documents[key][1]
        assert text.index(START) == expected[key].index(START)
        for budget in (1, 2, 5, 12, 40, 200):
            assert make_snippet(text, budget) == make_snippet(expected[key], budget)
    for key, text in documents:  # left to FTS5 only where its rules are not the ASCII ones
        if key not in decided:
            assert not text.isascii() or "\0" in text or any(len(t) >= 32_768 for t in re.findall("[A-Za-z0-9]+", text))
