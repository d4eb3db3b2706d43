"""The CJK/substring companion: pure helpers against real SQLite, and recall through ``SqliteSearch``.

The unit half checks the claims :mod:`agentlog.query.cjk` rests on against the SQLite actually linked
here: its fold table *is* the ``trigram`` tokenizer's case folding (every code point), a trigram phrase
of three or more characters matches exactly the texts :func:`mark_substrings` marks, whitespace and the
highlight markers are normalised as the query side normalises them.

The end-to-end half builds a generated mixed Chinese/Japanese/English corpus (the benchmark's generator,
``benchmarks/search_recall.py``) in a real JSONL store, searches it through
:class:`agentlog.query.sqlite.SqliteSearch` — sessions and events, following every cursor — and compares
each hit set with a plain substring scan of the same documents: recall and precision must both be 100%.
Latin-script queries keep the original's ``unicode61`` token semantics.
"""

from __future__ import annotations

import importlib.util
import re
import sqlite3
import sys
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.messages import user_message
from agentlog.query.cjk import (
    COMPANION_LIVE_DDL,
    COMPANION_PERSISTED_DDL,
    COMPANION_TABLES,
    companion_text,
    fold,
    has_cjk,
    literal_needle,
    mark_substrings,
    trigram_match_expression,
    uses_substring,
)
from agentlog.query.documents import extract_event_text
from agentlog.query.filters import JS_WHITESPACE
from agentlog.query.normalize import FTS_HIGHLIGHT_END, FTS_HIGHLIGHT_START, normalize_query
from agentlog.query.sqlite import SqliteSearch

ROOT = Path(__file__).resolve().parents[2]
START, END = FTS_HIGHLIGHT_START, FTS_HIGHLIGHT_END
ALL_CODE_POINTS = [code for code in range(1, 0x110000) if not 0xD800 <= code <= 0xDFFF]


def _unmark(marked: str) -> str:
    return marked.replace(START, "").replace(END, "")


def _marked_segments(marked: str) -> list[str]:
    return [part.split(END, 1)[0] for part in marked.split(START)[1:]]


# --------------------------------------------------------------------------- fold: the tokenizer's own


def test_fold_is_the_trigram_tokenizers_case_folding_for_every_code_point() -> None:
    """Each code point tripled is one trigram; fts5vocab shows how the tokenizer folded it."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE g USING fts5(text, tokenize = 'trigram')")
    conn.execute("CREATE VIRTUAL TABLE g_terms USING fts5vocab(g, 'instance')")
    conn.executemany("INSERT INTO g (rowid, text) VALUES (?, ?)", ((code, chr(code) * 3) for code in ALL_CODE_POINTS))
    folded = dict(conn.execute("SELECT doc, term FROM g_terms").fetchall())
    mismatches = [
        (hex(code), folded.get(code), fold(chr(code)) * 3)
        for code in ALL_CODE_POINTS
        if folded.get(code) != fold(chr(code)) * 3
    ]
    assert mismatches == []


def test_fold_is_length_preserving_idempotent_and_keeps_cjk_cjk() -> None:
    """Offsets in folded text are offsets in the original; folding never moves a character in or out
    of the CJK set (so the companion's CJK-only population holds every possible substring match)."""
    text = "".join(chr(code) for code in ALL_CODE_POINTS)
    folded = fold(text)
    assert len(folded) == len(text)
    assert fold(folded) == folded
    moved = [hex(ord(a)) for a, b in zip(text, folded, strict=True) if has_cjk(a) != has_cjk(b)]
    assert moved == []


def test_fold_examples_follow_sqlite_not_python_lower() -> None:
    assert fold("ITGC修复 Straße ΣΊΣΥΦΟΣ ＡＢＣ ǅ") == "itgc修复 straße σίσυφοσ ａｂｃ ǆ"
    assert fold("İ") == "İ"  # Python's lower() would lengthen it to "i̇"
    assert fold("ſ ς µ") == "s σ μ"  # fold extras SQLite applies and str.lower does not
    assert fold("Ꭰ") == "Ꭰ"  # Cherokee: lowercased by Unicode 8+, not by SQLite's table
    assert fold("café") == "café"  # diacritics kept: trigram has no remove_diacritics on 3.40


# --------------------------------------------------------------------------- has_cjk / uses_substring


@pytest.mark.parametrize(
    "text",
    [
        "会话日志",
        "ひらがな",
        "カタカナ",
        "ｶﾀｶﾅ",  # half-width katakana
        "한국어",
        "ㄅㄆㄇ",  # bopomofo
        "。",
        "，",  # full-width comma
        "「引用」",
        "㈱",  # enclosed CJK
        "𠀀",  # extension B
        "﨑",  # compatibility ideograph
        "ＡＩ",  # full-width forms block
        "fix: itgc修复",
    ],
)
def test_has_cjk_recognises_han_kana_hangul_and_cjk_forms(text: str) -> None:
    assert has_cjk(text)
    assert uses_substring(text)


@pytest.mark.parametrize(
    "text", ["", "AI", "BRAID", "café — naïve", "Привет", "Ωμέγα", "🚀✅", "\u3000", "a\u3000b", "§ ¶ → ✓"]
)
def test_has_cjk_is_false_for_latin_other_scripts_emoji_and_ideographic_space(text: str) -> None:
    assert not has_cjk(text)
    assert not uses_substring(text)


def test_no_cjk_character_is_whitespace() -> None:
    """A CJK query character survives query normalisation, so the companion decision is stable."""
    assert [hex(ord(c)) for c in JS_WHITESPACE if has_cjk(c)] == []
    assert [hex(code) for code in ALL_CODE_POINTS if has_cjk(chr(code)) and chr(code).isspace()] == []


# --------------------------------------------------------------------------- companion_text


def test_companion_text_collapses_whitespace_and_sanitizes_markers() -> None:
    assert companion_text("  日志\n\t  abc  ") == "日志 abc"
    assert companion_text("会话\u3000日志\u00a0x") == "会话 日志 x"
    assert companion_text("a\x00b\ufdd0c\ufdd1d") == "a\ufffdb\ufffdc\ufffdd"
    assert companion_text("\u2028\ufeff") == ""


@given(st.text(alphabet=st.sampled_from([*"日志ab ", *JS_WHITESPACE, "\x00", "\ufdd0", "\x1c", "\x85"]), max_size=30))
def test_companion_text_normalises_exactly_as_queries_are_normalised(text: str) -> None:
    """Same whitespace set and sanitiser as ``normalize_query``: any non-blank text collapses to the
    very string the query normalisation produces (NUL aside, which a query may not contain)."""
    stored = companion_text(text)
    assert companion_text(stored) == stored
    assert START not in stored and END not in stored and "\x00" not in stored
    candidate = text.replace("\x00", "\ufffd")
    if stored:
        assert normalize_query(candidate) == stored


# --------------------------------------------------------------------------- mark_substrings


def test_mark_substrings_marks_every_occurrence_inside_longer_runs() -> None:
    assert mark_substrings("会话日志已保存，日志完整", "日志") == f"会话{START}日志{END}已保存，{START}日志{END}完整"
    assert mark_substrings("会话日志", "话日志") == f"会{START}话日志{END}"
    assert mark_substrings("ログを確認してください", "確認") == f"ログを{START}確認{END}してください"
    assert mark_substrings("会话日志", "日记") is None
    assert mark_substrings("会话日志", "") is None


def test_mark_substrings_folds_the_comparison_and_keeps_the_original_characters() -> None:
    assert mark_substrings("已完成 ITGC修复 与 itgc修复", "Itgc修复") == (
        f"已完成 {START}ITGC修复{END} 与 {START}itgc修复{END}"
    )
    assert mark_substrings("ＡＰＩ文档", "ａｐｉ文") == f"{START}ＡＰＩ文{END}档"
    assert mark_substrings("café日志", "cafe日志") is None


def test_mark_substrings_is_non_overlapping_left_to_right() -> None:
    assert mark_substrings("哈哈哈哈哈", "哈哈") == f"{START}哈哈{END}{START}哈哈{END}哈"
    assert mark_substrings("aaaaaa日", "aaa") == f"{START}aaa{END}{START}aaa{END}日"


_ALPHABET = st.sampled_from([*'日志会话ログ確認aAbBßσΣς "*', "İ", "ｶ", "🚀", "\ufffe"])


@given(text=st.text(alphabet=_ALPHABET, max_size=40), query=st.text(alphabet=_ALPHABET, min_size=1, max_size=4))
def test_mark_substrings_invariants(text: str, query: str) -> None:
    """Unmarking restores the text; every marked segment folds to the query; the number of marks is the
    number of non-overlapping folded occurrences (``str.count``)."""
    marked = mark_substrings(text, query)
    occurrences = fold(text).count(fold(query))
    if marked is None:
        assert occurrences == 0
        return
    assert _unmark(marked) == text
    segments = _marked_segments(marked)
    assert len(segments) == occurrences
    assert all(fold(segment) == fold(query) for segment in segments)


@given(text=st.text(alphabet=_ALPHABET, max_size=40), query=st.text(alphabet=_ALPHABET, min_size=1, max_size=2))
def test_literal_needle_is_a_safe_verbatim_prefilter(text: str, query: str) -> None:
    needle = literal_needle(query)
    if needle is not None:
        assert needle in query and fold(needle) == needle
    if mark_substrings(text, query) is not None and needle is not None:
        assert needle in text


def test_literal_needle_examples() -> None:
    assert literal_needle("日志") == "日志"
    assert literal_needle("A日志b") == "日志"
    assert literal_needle("Ａ") is None  # full-width letters have case partners
    assert literal_needle("日a志会话") == "志会话"


# --------------------------------------------------------------------------- trigram expression vs SQLite


def test_trigram_match_expression_quotes_one_phrase_from_three_code_points() -> None:
    assert trigram_match_expression("日志") is None
    assert trigram_match_expression("🚀日") is None  # two code points (three UTF-16 units)
    assert trigram_match_expression("会话日") == '"会话日"'
    assert trigram_match_expression('说 "needle" OR *') == '"说 ""needle"" OR *"'


@pytest.fixture(scope="module")
def grams() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute(COMPANION_PERSISTED_DDL)
    conn.execute(COMPANION_LIVE_DDL)
    yield conn
    conn.close()


def test_companion_ddl_creates_exactly_the_listed_tables_with_the_docs_columns(grams: sqlite3.Connection) -> None:
    main = {row[0] for row in grams.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
    temp = {row[0] for row in grams.execute("SELECT name FROM temp.sqlite_master WHERE type = 'table'")}
    assert main == set(COMPANION_TABLES)
    assert "live_grams" in temp and not temp & set(COMPANION_TABLES)
    columns = ["text", "session_id", "seq", "type", "time", "surface", "codepoint_length"]
    assert [row[1] for row in grams.execute("PRAGMA main.table_info(persisted_grams)")] == columns
    assert [row[1] for row in grams.execute("PRAGMA temp.table_info(live_grams)")] == columns


def test_trigram_phrase_matches_substrings_across_case_and_whitespace(grams: sqlite3.Connection) -> None:
    """The scratch findings, kept: a phrase of ≥ 3 characters is a substring (also across the one space
    the companion keeps, and across case); fewer than three characters look up nothing."""
    grams.execute("DELETE FROM persisted_grams")
    texts = ["会话日志已保存", "ITGC修复完成", companion_text("日志\n  abc"), "Café 日志"]
    grams.executemany(
        "INSERT INTO persisted_grams (rowid, text) VALUES (?, ?)", [(n, t) for n, t in enumerate(texts, 1)]
    )

    def rows(query: str) -> list[int]:
        sql = "SELECT rowid FROM persisted_grams WHERE persisted_grams MATCH ? ORDER BY rowid"
        return [row[0] for row in grams.execute(sql, (query,))]

    assert rows('"话日志"') == [1]
    assert rows('"itgc修复"') == [2]
    assert rows('"日志 abc"') == [3]
    assert rows('"CAFÉ 日"') == [4]
    assert rows('"cafe 日"') == []
    assert rows('"日志"') == []


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(alphabet=_ALPHABET, max_size=24), min_size=1, max_size=8),
    query=st.text(alphabet=_ALPHABET, min_size=3, max_size=6),
)
def test_trigram_prefilter_admits_exactly_the_marked_texts(
    grams: sqlite3.Connection, texts: list[str], query: str
) -> None:
    """With one fold on both sides, the index prefilter never drops a text the marks would find (and,
    for ≥ 3 characters, admits nothing else)."""
    grams.execute("DELETE FROM temp.live_grams")
    grams.executemany("INSERT INTO temp.live_grams (rowid, text) VALUES (?, ?)", list(enumerate(texts, 1)))
    expression = trigram_match_expression(query)
    assert expression is not None
    matched = {row[0] for row in grams.execute("SELECT rowid FROM live_grams WHERE live_grams MATCH ?", (expression,))}
    marked = {n for n, text in enumerate(texts, 1) if mark_substrings(text, query) is not None}
    assert matched == marked


def test_mark_substrings_runs_as_an_sql_function_over_companion_rows(grams: sqlite3.Connection) -> None:
    """The short-query scan as the provider runs it: an SQL function over the companion rows only."""
    grams.create_function("cjk_mark", 2, mark_substrings, deterministic=True)
    grams.execute("DELETE FROM persisted_grams")
    grams.executemany(
        "INSERT INTO persisted_grams (rowid, text) VALUES (?, ?)", [(1, "会话日志"), (2, "日记"), (3, "日志日志")]
    )
    sql = "SELECT rowid, cjk_mark(text, ?) AS m FROM persisted_grams WHERE m IS NOT NULL ORDER BY rowid"
    assert grams.execute(sql, ("日志",)).fetchall() == [
        (1, f"会话{START}日志{END}"),
        (3, f"{START}日志{END}{START}日志{END}"),
    ]


def test_unicode_names_of_the_ranges_are_cjk() -> None:
    """A spot check that the class boundaries sit on the blocks they claim (first/last assigned)."""
    for char in "\u1100\u11ff\u3001\u303f\u3041\u30ff\u4e00\u9fff\uac00\ud7a3\uff01\uffee\U00020000\U0002a6df":
        name = unicodedata.name(char, "")
        assert has_cjk(char), name
    assert not has_cjk("\u4dc0")  # YIJING HEXAGRAM SYMBOL FOR THE CREATIVE HEAVEN


# --------------------------------------------------------------------------- the shared corpus generator


def _load_generator() -> ModuleType:
    path = ROOT / "benchmarks" / "search_recall.py"
    spec = importlib.util.spec_from_file_location("bench_search_recall", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


recall = _load_generator()


@dataclass
class Indexed:
    corpus: list[Any]
    store: Any
    coordinator: Any
    search: SqliteSearch


def _open(root: Path, corpus: list[Any]) -> Indexed:
    store, coordinator = recall.write_store(str(root / "store"), corpus)
    search = SqliteSearch(coordinator, path=str(root / "index.sqlite3"))
    return Indexed(corpus, store, coordinator, search)


def _close(indexed: Indexed) -> None:
    indexed.search.close()
    indexed.coordinator.close()


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Indexed]:
    """A generated corpus of 30 sessions (three of them live in this process) in a real JSONL store."""
    handle = _open(tmp_path_factory.mktemp("cjk-recall"), recall.build_corpus(30, seed=11))
    yield handle
    _close(handle)


def _by_id(indexed: Indexed) -> dict[str, Any]:
    return {item.id: item for item in indexed.corpus}


def _assert_exact(indexed: Indexed, query: str, *, limit: int = 4) -> Any:
    """Search ``query`` at session and event level through every page; demand the substring truth."""
    truth = recall.ground_truth(indexed.corpus, query)
    assert truth, f"the corpus must contain {query!r} for the case to mean anything"
    extra = [item.id for item in indexed.corpus[:3]]
    tally = recall.check_query(indexed.search, indexed.corpus, query, limit=limit, extra_sessions=extra)
    assert tally.failures == []
    assert tally.figures() == {"recall": 1.0, "precision": 1.0, "session_recall": 1.0, "session_precision": 1.0}
    return truth


def _queries(indexed: Indexed, kind: str, count: int = 6) -> list[str]:
    found = [q.text for q in recall.make_queries(indexed.corpus, 8 * count + 2, seed=5) if q.kind == kind]
    assert len(found) >= count
    return found[:count]


def _inside_a_longer_run(indexed: Indexed, query: str) -> bool:
    """Some matching document has a CJK character right before and right after the query: the whole
    run is one ``unicode61`` token, so the original finds nothing there."""
    pattern = re.compile(f"[\u3041-\u30ff\u4e00-\u9fff]{re.escape(query)}[\u3041-\u30ff\u4e00-\u9fff]", re.IGNORECASE)
    return any(pattern.search(doc) for item in indexed.corpus for doc in item.docs.values())


def test_generated_corpus_documents_are_exactly_the_index_extraction(indexed: Indexed) -> None:
    """The ground truth scans the generator's own texts; they must be the documents the index holds."""
    for item in indexed.corpus:
        events = [thaw(event) for event in indexed.coordinator.inspect(item.id).events]
        assert len(events) == len(item.events)
        extracted = {event["seq"]: extract_event_text(event) for event in events}
        assert {seq: text for seq, text in extracted.items() if text} == item.docs


def test_cjk_two_character_chinese_inside_longer_runs_matches_the_substring_truth(indexed: Indexed) -> None:
    truth = _assert_exact(indexed, "日志")
    assert _inside_a_longer_run(indexed, "日志")  # e.g. 会话日志已保存
    assert any("会话日志" in _by_id(indexed)[sid].docs[seq] for sid, seqs in truth.items() for seq in seqs)
    for query in _queries(indexed, "zh-2"):
        assert len(query) == 2
        _assert_exact(indexed, query)


def test_cjk_three_character_chinese_inside_longer_runs_matches_the_substring_truth(indexed: Indexed) -> None:
    for query in ["话日志", *_queries(indexed, "zh-3")]:
        assert len(query) == 3
        assert _inside_a_longer_run(indexed, query)
        _assert_exact(indexed, query)


def test_cjk_eight_character_chinese_inside_longer_runs_matches_the_substring_truth(indexed: Indexed) -> None:
    for query in _queries(indexed, "zh-8"):
        assert len(query) == 8
        _assert_exact(indexed, query, limit=3)


def test_cjk_single_character_scan_matches_the_substring_truth_through_many_pages(indexed: Indexed) -> None:
    for query in ["志", *_queries(indexed, "zh-1", 3)]:
        _assert_exact(indexed, query, limit=5)


def test_cjk_japanese_kana_hiragana_katakana_and_half_width_match_the_substring_truth(indexed: Indexed) -> None:
    for query in ["ログ", "ください", "ｾｯｼｮﾝ", "ﾛｸﾞ", *_queries(indexed, "kana")]:
        _assert_exact(indexed, query)


def test_cjk_mixed_latin_identifiers_match_case_insensitively(indexed: Indexed) -> None:
    """``itgc修复`` finds ``ITGC修复``, ``Itgc修复补丁`` and ``git commit -m "itgc修复: …"`` alike; the
    Latin letters of a CJK query fold case but keep diacritics and width."""
    truth = _assert_exact(indexed, "itgc修复")
    texts = [_by_id(indexed)[sid].docs[seq] for sid, seqs in truth.items() for seq in seqs]
    assert any("ITGC修复" in text for text in texts) and any("itgc修复" in text for text in texts)
    assert recall.ground_truth(indexed.corpus, "ITGC修复") == truth
    _assert_exact(indexed, "ITGC修复")
    _assert_exact(indexed, "parse_ログ()")
    _assert_exact(indexed, "ＡＰＩ文档")  # full-width stays full-width: not the same as API文档
    for query in _queries(indexed, "mixed"):
        _assert_exact(indexed, query)


def test_cjk_queries_spanning_whitespace_punctuation_and_emoji_match_the_substring_truth(indexed: Indexed) -> None:
    """The companion stores whitespace runs as one space, as queries are normalized: a query copied
    across a line break, a tab or an ideographic space still matches."""
    for query in _queries(indexed, "span", 8):
        _assert_exact(indexed, query)


def test_cjk_hits_snippet_around_the_match_and_report_live_sessions(indexed: Indexed) -> None:
    live = {item.id for item in indexed.corpus if item.live}
    assert live
    hits = recall.search_sessions_all(indexed.search, "日志", limit=50)
    assert {hit["header"]["id"] for hit in hits} & live
    for hit in hits:
        assert hit["live"] is (hit["header"]["id"] in live)
        assert hit["persisted"] is True
        assert "日志" in hit["bestMatch"]["snippet"]
        assert START not in hit["bestMatch"]["snippet"]


def test_cjk_text_never_indexed_is_never_found(indexed: Indexed) -> None:
    """Assistant reasoning and streamed chunks are not documents (§4.2), on the companion path too."""
    for query in (recall.REASONING_ONLY, recall.CHUNK_ONLY, "推理", "流式片段"):
        assert recall.ground_truth(indexed.corpus, query) == {}
        assert indexed.search.search_sessions(query=query) == {"items": []}


def test_cjk_absent_and_reversed_runs_find_nothing(indexed: Indexed) -> None:
    for query in _queries(indexed, "zh-absent", 3):
        tally = recall.check_query(indexed.search, indexed.corpus, query, limit=4)
        assert tally.failures == [] and tally.session_returned == tally.session_truth


def test_cjk_live_append_is_found_by_the_next_substring_search(tmp_path: Path) -> None:
    """A live session gaining a CJK message is re-observed: both the trigram and the short-query path
    see the new document, and the stored copy of a disposed session keeps its hits."""
    corpus = recall.build_corpus(4, seed=3)
    corpus[1].live = True
    handle = _open(tmp_path, corpus)
    try:
        session = handle.store.get(corpus[1].id)
        assert session is not None
        event = session.append(
            "user/message", user_message("把新增会话日志同步到远端", id="u-new"), {"surfaceOp": "append"}
        )
        handle.store.flush(session)
        corpus[1].events.append(("user/message", thaw(event["data"]), {"surfaceOp": "append"}))
        corpus[1].docs[event["seq"]] = "把新增会话日志同步到远端"
        for query in ("新增会话", "新增", "远端"):
            items = handle.search.search_events(session_id=corpus[1].id, query=query)["items"]
            assert event["seq"] in [item["seq"] for item in items]
            _assert_exact(handle, query)
    finally:
        _close(handle)


# --------------------------------------------------------------------------- Latin queries: unchanged


def _token_truth(corpus: list[Any], phrase: str) -> dict[str, set[int]]:
    """``unicode61`` phrase semantics, independently: tokens are runs of letters and digits, folded to
    lower case without diacritics; a match is the phrase's tokens at consecutive token positions."""

    def tokens(text: str) -> list[str]:
        bare = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if not unicodedata.combining(c))
        return re.findall(r"[^\W_]+", bare)

    wanted = tokens(phrase)
    hits: dict[str, set[int]] = {}
    for item in corpus:
        for seq, doc in item.docs.items():
            have = tokens(doc)
            if any(have[n : n + len(wanted)] == wanted for n in range(len(have))):
                hits.setdefault(item.id, set()).add(seq)
    return hits


def _event_hits(indexed: Indexed, query: str) -> dict[str, set[int]]:
    hits: dict[str, set[int]] = {}
    for hit in recall.search_sessions_all(indexed.search, query, limit=4):
        sid = hit["header"]["id"]
        hits[sid] = {item["seq"] for item in recall.search_events_all(indexed.search, sid, query, limit=4)}
    return hits


def _docs_with(indexed: Indexed, needle: str) -> set[tuple[str, int]]:
    return {(item.id, seq) for item in indexed.corpus for seq, doc in item.docs.items() if needle in doc}


def _pairs(hits: dict[str, set[int]]) -> set[tuple[str, int]]:
    return {(sid, seq) for sid, seqs in hits.items() for seq in seqs}


def test_latin_two_letter_token_ai_is_not_found_inside_braid(indexed: Indexed) -> None:
    hits = _event_hits(indexed, "AI")
    assert hits == _token_truth(indexed.corpus, "AI")
    only_braid = _docs_with(indexed, "BRAID") - _docs_with(indexed, "An AI helper")
    assert only_braid, "the corpus must hold BRAID without AI"
    assert not only_braid & _pairs(hits)
    assert _docs_with(indexed, "An AI helper") <= _pairs(hits)


def test_latin_cafe_finds_cafe_with_diacritics_folded(indexed: Indexed) -> None:
    hits = _event_hits(indexed, "CAFE")
    assert _pairs(hits) == _docs_with(indexed, "café") != set()
    assert hits == _token_truth(indexed.corpus, "café")


def test_latin_phrase_alpha_beta_is_not_found_in_alpha_middle_beta(indexed: Indexed) -> None:
    hits = _event_hits(indexed, "alpha beta")
    assert hits == _token_truth(indexed.corpus, "alpha beta")
    only_middle = _docs_with(indexed, "alpha middle beta") - _docs_with(indexed, "alpha beta")
    assert only_middle, "the corpus must hold alpha middle beta without alpha beta"
    assert not only_middle & _pairs(hits)
