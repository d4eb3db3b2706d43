"""A search index and a projection cache built on a coordinator drop a session's records when the
coordinator deletes it (``PersistenceCoordinator.on_deleted``), before any later search or listing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.projection.cache import InlineWriter, ProjectionCache
from agentlog.projection.cache_storage import SqliteCacheStorage
from agentlog.projection.listing import command_registry
from agentlog.query.sqlite import SqliteSearch
from agentlog.testing.builders import closed_turn, header, user_event


def _rows(path: Path, sql: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(row[0] for row in conn.execute(sql))


def test_the_index_and_the_cache_of_a_coordinator_forget_what_it_deletes(tmp_path: Path) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path / "store")))
    for sid in ("victim", "kept"):
        events = closed_turn()
        events[1] = user_event(1, "zebra crossing")
        coordinator.create(header(sid))
        coordinator.append(sid, events)
    index = tmp_path / "index.sqlite3"
    search = SqliteSearch(coordinator, path=str(index))
    cache_file = tmp_path / "cache.sqlite3"
    cache = ProjectionCache(
        command_registry(),
        coordinator,
        SqliteCacheStorage(str(cache_file), store_id="store"),
        writer=InlineWriter(),
        owns_storage=True,
    )
    try:
        hits = search.search_sessions(query="zebra")
        assert sorted(item["bestMatch"]["sessionId"] for item in hits["items"]) == ["kept", "victim"]
        for sid in ("victim", "kept"):
            cache.cold_snapshot(sid)
        assert _rows(cache_file, "SELECT session_id FROM sessions") == ["kept", "victim"]

        coordinator.delete("victim")

        assert _rows(index, "SELECT id FROM persisted_sessions") == ["kept"]
        assert _rows(cache_file, "SELECT session_id FROM sessions") == ["kept"]
        hits = search.search_sessions(query="zebra")
        assert [item["bestMatch"]["sessionId"] for item in hits["items"]] == ["kept"]
        assert search.forget(["victim", "never-stored"]) == 0
    finally:
        cache.close()
        search.close()
    try:
        coordinator.delete("kept")  # both unsubscribed when closed: the closed files are left alone
    finally:
        coordinator.close()
    assert _rows(index, "SELECT id FROM persisted_sessions") == ["kept"]
    assert _rows(cache_file, "SELECT session_id FROM sessions") == ["kept"]
