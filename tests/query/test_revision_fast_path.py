"""Reconciliation through the revision listing: an unchanged store costs one revision listing (no header
listing, no inspection); a store where something moved costs a listing, the inspection of exactly what
moved, and a second listing to confirm it held still. Real coordinators over real JSONL and SQLite stores."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.query import SqliteSearch
from agentlog.testing.builders import APPEND, intent, user_msg


class Counting(PersistenceCoordinator):
    """A real coordinator that counts the calls reconciliation makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def list(self) -> Any:
        self.calls.append("list")
        return super().list()

    def list_revisions(self) -> dict[str, str]:
        self.calls.append("revisions")
        return super().list_revisions()

    def inspect(self, session_id: str) -> SessionSnapshot:
        self.calls.append(f"inspect:{session_id}")
        return super().inspect(session_id)


def _backend(kind: str, root: Path) -> Any:
    return JsonlBackend(str(root)) if kind == "jsonl" else SqliteBackend(str(root / "store.sqlite3"))


def _write(kind: str, root: Path, sid: str, *texts: str) -> None:
    store = SessionStore()
    coordinator = PersistenceCoordinator(store, _backend(kind, root))
    try:
        session = (
            coordinator.resume(sid) if sid in coordinator.list_revisions() else store.create(sid, meta={"createdAt": 1})
        )
        for text in texts:
            session.append("user/message", user_msg(text), intent(APPEND))
        coordinator.flush(session)
        store.dispose(session)
    finally:
        coordinator.close()


def _ids(page: dict[str, Any]) -> list[str]:
    return sorted(item["header"]["id"] for item in page["items"])


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_an_unchanged_store_is_reconciled_from_its_revisions_alone(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    root.mkdir()
    for sid in ("a", "b", "c"):
        _write(kind, root, sid, f"needle in {sid}")
    coordinator = Counting(SessionStore(), _backend(kind, root))
    search = SqliteSearch(coordinator, path=str(tmp_path / "index.sqlite3"))
    try:
        assert _ids(search.search_sessions(query="needle")) == ["a", "b", "c"]
        assert coordinator.calls == ["revisions", "inspect:a", "inspect:b", "inspect:c", "revisions"]
        coordinator.calls.clear()
        for _ in range(3):
            assert _ids(search.search_sessions(query="needle")) == ["a", "b", "c"]
            assert search.search_events(session_id="b", query="needle")["items"][0]["seq"] == 0
        assert coordinator.calls == ["revisions"] * 6  # no header listing, no inspection

        _write(kind, root, "b", "a second needle here")  # grows: only b is read again
        coordinator.calls.clear()
        page = search.search_events(session_id="b", query="second")
        assert [item["seq"] for item in page["items"]] == [2]  # resume wrote its end-seed at seq 1
        assert coordinator.calls == ["revisions", "inspect:b", "revisions"]

        _write(kind, root, "d", "needle in d")  # a new session
        assert _ids(search.search_sessions(query="needle")) == ["a", "b", "c", "d"]
        coordinator.calls.clear()
        assert _ids(search.search_sessions(query="needle")) == ["a", "b", "c", "d"]
        assert coordinator.calls == ["revisions"]
    finally:
        search.close()
        coordinator.close()


def test_a_deleted_session_leaves_the_results_without_any_read(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for sid in ("a", "b"):
        _write("jsonl", root, sid, "needle")
    coordinator = Counting(SessionStore(), JsonlBackend(str(root)))
    search = SqliteSearch(coordinator, path=str(tmp_path / "index.sqlite3"))
    try:
        assert _ids(search.search_sessions(query="needle")) == ["a", "b"]
        location = coordinator.backend.locate({"id": "a", "createdAt": 1, "version": 0})
        assert location is not None
        shutil.rmtree(Path(location).parent)
        coordinator.calls.clear()
        assert _ids(search.search_sessions(query="needle")) == ["b"]
        assert coordinator.calls == ["revisions"]
    finally:
        search.close()
        coordinator.close()


def test_a_damaged_session_stays_skipped_without_being_read_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for sid in ("good", "bad"):
        _write("jsonl", root, sid, "needle")
    backend = JsonlBackend(str(root))
    location = backend.locate({"id": "bad", "createdAt": 1, "version": 0})
    assert location is not None
    data = Path(location).read_bytes()
    Path(location).write_bytes(data[:-40] + b"\x00garbage\n" + data[-40:])
    coordinator = Counting(SessionStore(), backend)
    search = SqliteSearch(coordinator, path=str(tmp_path / "index.sqlite3"))
    try:
        assert _ids(search.search_sessions(query="needle")) == ["good"]
        assert [entry["sessionId"] for entry in search.skipped] == ["bad"]
        coordinator.calls.clear()
        assert _ids(search.search_sessions(query="needle")) == ["good"]
        assert coordinator.calls == ["revisions"]
        assert [entry["sessionId"] for entry in search.skipped] == ["bad"]
    finally:
        search.close()
        coordinator.close()


def test_a_live_session_that_keeps_flushing_is_searched_without_header_listings(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _write("jsonl", root, "stored", "needle stored")
    store = SessionStore()
    coordinator = Counting(store, JsonlBackend(str(root)))
    search = SqliteSearch(coordinator, path=str(tmp_path / "index.sqlite3"))
    try:
        live = store.create("live", meta={"createdAt": 2})
        live.append("user/message", user_msg("needle live"), intent(APPEND))
        coordinator.flush(live)
        page = search.search_sessions(query="needle")
        assert {(item["header"]["id"], item["live"], item["persisted"]) for item in page["items"]} == {
            ("stored", False, True),
            ("live", True, True),
        }
        for number in range(3):
            live.append("user/message", user_msg(f"more {number}"), intent(APPEND))
            coordinator.flush(live)  # its stored revision moves on every flush
            coordinator.calls.clear()
            assert [
                item["seq"] for item in search.search_events(session_id="live", query=f"more {number}")["items"]
            ] == [number + 1]
            assert coordinator.calls == ["revisions"]
    finally:
        search.close()
        coordinator.close()


def test_a_store_that_moves_during_the_revision_observation_is_observed_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for sid in ("a", "b"):
        _write("jsonl", root, sid, "needle")
    coordinator = Counting(SessionStore(), JsonlBackend(str(root)))
    search = SqliteSearch(coordinator, path=str(tmp_path / "index.sqlite3"))
    original = coordinator.inspect
    moved: list[str] = []

    def inspect_and_move(session_id: str) -> SessionSnapshot:
        snapshot = original(session_id)
        if not moved:  # another writer appends to b while a is being read
            moved.append(session_id)
            _write("jsonl", root, "b", "late needle")
        return snapshot

    coordinator.inspect = inspect_and_move  # type: ignore[method-assign]
    try:
        page = search.search_events(session_id="b", query="late")
        assert [item["seq"] for item in page["items"]] == [2]
        assert coordinator.calls.count("revisions") == 4  # unstable first attempt, stable second
    finally:
        search.close()
        coordinator.close()
