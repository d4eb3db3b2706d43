"""Lone surrogates: a Python string can hold one (the original's UTF-16 strings can too), SQLite cannot
store it as UTF-8. A query holding one must be searched, not crash the index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.query.normalize import normalize_query, sanitize_fts_text
from agentlog.testing.builders import APPEND, intent, user_msg


def test_sanitizer_replaces_lone_surrogates_like_reserved_characters() -> None:
    assert sanitize_fts_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert normalize_query("  \ud800 日志 ") == "\ufffd 日志"


def test_a_query_with_a_lone_surrogate_is_searched_not_a_crash(tmp_path: Path, provider: Any) -> None:
    """The kernel refuses lone surrogates in event data, so only a query can carry one: it is searched
    as U+FFFD, as the original's driver stores it, on the token path and on the CJK substring path."""
    store = SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    session = store.create("s1", meta={"createdAt": 1})
    session.append("user/message", user_msg("the migration 日志 ran"), intent(APPEND))
    coordinator.flush(session)
    search = provider.make(coordinator, path=str(tmp_path / "index.sqlite3"))
    try:
        assert [item["header"]["id"] for item in search.search_sessions(query="migration")["items"]] == ["s1"]
        # Token path: U+FFFD is a separator to unicode61, so the query is the word "migration".
        for query in ("\ud83d migration", "migration\udfff"):
            assert [item["header"]["id"] for item in search.search_sessions(query=query)["items"]] == ["s1"]
            assert [item["seq"] for item in search.search_events(session_id="s1", query=query)["items"]] == [0]
        # Substring path: U+FFFD is part of the substring, which no stored text holds.
        for query in ("日志\ud800", "\ud800日"):
            assert search.search_sessions(query=query)["items"] == [], query
            assert search.search_events(session_id="s1", query=query)["items"] == [], query
    finally:
        search.close()
        coordinator.close()
