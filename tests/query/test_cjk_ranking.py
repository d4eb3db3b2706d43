"""The CJK companion ranks by the same contract as the unicode61 path: occurrences of the folded query
(counted in SQL from the companion's folded text) descending, then length, time, seq; only the page's
rows are marked, and their marks are exactly ``mark_substrings``'s."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentlog.kernel.store import SessionStore
from agentlog.query.cjk import fold, mark_substrings
from agentlog.query.filters import JS_WHITESPACE
from agentlog.query.normalize import FTS_HIGHLIGHT_START, make_snippet
from agentlog.query.schema import SCHEMA_VERSION, open_search_database
from agentlog.testing.builders import APPEND, intent, user_msg

_ALPHABET = st.sampled_from([*"日志会话修复ログテAa ", "itgc"])


def _expected(texts: list[str], query: str) -> list[int]:
    counts = []
    for seq, text in enumerate(texts):
        # Matches are counted on the folded companion (whitespace runs collapsed); the length ranked is the
        # document's own (runtime spec §4.3: the code points of the indexed text, the trimmed message text).
        normalized = " ".join(text.split())
        marked = mark_substrings(normalized, query)
        if marked is not None:
            length = len(text.strip(JS_WHITESPACE))
            counts.append((-marked.count(FTS_HIGHLIGHT_START), length, -seq, -seq, seq))
    return [entry[-1] for entry in sorted(counts)]


@example(texts=["日日日日日日日日志  日", "日日日日日日日日日日日志"], query="日志")  # a double space: lengths differ
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.lists(_ALPHABET, min_size=1, max_size=12).map("".join), min_size=1, max_size=8),
    st.sampled_from(["日志", "日", "会话日志", "ログ", "a日", "itgc修复", "A a日"]),
)
def test_cjk_hits_rank_by_occurrences_like_marking_counts_them(provider: Any, texts: list[str], query: str) -> None:
    store = SessionStore()
    search = provider.make(store=store, snippet_chars=1000)
    try:
        session = store.create("s", meta={"createdAt": 1})
        for text in texts:
            session.append("user/message", user_msg(text), intent(APPEND))
        times = [event["time"] for event in session.events]
        page = search.search_events(session_id="s", query=query, limit=100)
        got = [item["seq"] for item in page["items"]]
        # time ties are broken by seq descending; with a strictly increasing clock both agree
        assert times == sorted(times)
        assert got == _expected(texts, query)
        for item in page["items"]:
            text = " ".join(texts[item["seq"]].split())
            marked = mark_substrings(text, query)
            assert marked is not None and fold(query) in fold(text)
            assert item["snippet"] == make_snippet(marked, 1000)
    finally:
        search.close()


def test_a_version_8_index_missing_a_side_table_is_rebuilt(tmp_path: Path) -> None:
    """An index of the original's layout (or an earlier one of ours) lacks the side tables: CJK and one-term
    searches would miss its documents, so it is rebuilt in place, not trusted."""
    path = tmp_path / "index.sqlite3"
    open_search_database(str(path), "wal").close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE persisted_gram_folded")
    conn.execute("INSERT INTO persisted_docs (text, session_id) VALUES ('stale', 's')")
    conn.commit()
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()
    reopened = open_search_database(str(path), "wal")
    try:
        tables = {row[0] for row in reopened.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"persisted_gram_folded", "persisted_terms", "persisted_doc_meta"} <= tables
        assert reopened.execute("SELECT count(*) FROM persisted_docs").fetchone()[0] == 0
    finally:
        reopened.close()
