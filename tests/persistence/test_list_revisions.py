"""``list_revisions``: the cheap revision map the search index reconciles against on every search.

The shared contract (``BackendContract.test_list_revisions_are_the_listed_revisions_and_move_with_appends``)
checks it against ``list_sessions`` and ``read_revision`` for random sets of sessions on every backend. Here:
the coordinator's method (the backend's when present, else built from listing), and what each backend
does with the stored shapes that listing reports without a revision or refuses outright — all on real
files and real databases.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentlog.errors import PersistenceError, SessionPersistenceCorruptionError
from agentlog.persistence.backend import SessionListing
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import CWD, append_closed_turn, closed_turn, header, live_meta
from agentlog.testing.contract import ContractHarness as Harness

# --- the coordinator ------------------------------------------------------------------------------------


class _WithoutListRevisions:
    """A real backend seen through the protocol minus the optional ``list_revisions`` (a third-party backend)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "list_revisions":
            raise AttributeError(name)
        return getattr(self._inner, name)


def _listed(listings: list[SessionListing]) -> dict[str, str]:
    return {listing.id: listing.revision for listing in listings if listing.revision is not None}


def test_coordinator_list_revisions_uses_the_backend_method_or_builds_it_from_listing(env: Harness) -> None:
    writer = env.coordinator()
    for session_id, cwd in (("b", CWD), ("a", None), ("c d", "/other")):
        meta = header(session_id, cwd=cwd)
        writer.create(meta)
        writer.append(session_id, closed_turn())
    writer.create(header("never-appended"))

    coordinator = env.coordinator()
    revisions = coordinator.list_revisions()
    assert list(revisions) == ["a", "b", "c d"]
    assert revisions == coordinator.backend.list_revisions() == _listed(coordinator.list())

    fallback = env.coordinator(backend=_WithoutListRevisions(env.backend()))
    assert not hasattr(fallback.backend, "list_revisions")
    assert fallback.list_revisions() == revisions

    # A live session's flushed batch moves its revision, and only its revision, in both paths.
    store = coordinator.store
    live = store.create("live", meta=live_meta())
    append_closed_turn(live)
    assert store.flush(live) is True
    grown = coordinator.list_revisions()
    assert set(grown) == {"a", "b", "c d", "live"}
    assert {k: v for k, v in grown.items() if k != "live"} == revisions
    assert fallback.list_revisions() == grown
    live.append("turn/start", {"turn": 2})
    assert store.flush(live) is True
    moved = coordinator.list_revisions()
    assert {k for k in grown if moved[k] != grown[k]} == {"live"}
    assert moved["live"] == coordinator.backend.read_revision("live")


def test_coordinator_list_revisions_of_an_empty_store_is_empty(env: Harness) -> None:
    assert env.coordinator().list_revisions() == {}
    assert env.coordinator(backend=_WithoutListRevisions(env.backend())).list_revisions() == {}


# --- JSONL: a directory scan and a stat per log -----------------------------------------------------------


def _jsonl(root: Path, compression: str = "none") -> JsonlBackend:
    return JsonlBackend(str(root), compression=compression)  # type: ignore[arg-type]


def _store(backend: JsonlBackend, session_id: str, cwd: str | None = CWD) -> str:
    meta = header(session_id, cwd=cwd)
    backend.append_batch(meta, closed_turn(), False)
    path = backend.locate(meta)
    assert path is not None
    return path


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_jsonl_list_revisions_reads_no_byte_of_any_log(
    tmp_path: Path, compression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _jsonl(tmp_path / "root", compression)
    for index in range(5):
        _store(backend, f"s{index}", cwd=f"/p{index % 2}")
    expected = _listed(backend.list_sessions())

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("list_revisions opened or read a file")

    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(os, "read", refuse)
    monkeypatch.setattr(os, "pread", refuse)
    assert backend.list_revisions() == expected


def test_jsonl_list_revisions_includes_a_damaged_header_with_its_stat_revision(tmp_path: Path) -> None:
    backend = _jsonl(tmp_path / "root")
    _store(backend, "ok")
    damaged = _store(backend, "bad")
    Path(damaged).write_bytes(b"not a header\n")
    listings = {listing.id: listing for listing in backend.list_sessions()}
    assert not listings["bad"].ok and listings["bad"].revision is not None
    revisions = backend.list_revisions()
    assert revisions == _listed(list(listings.values()))
    assert revisions["bad"] == backend.read_revision("bad")


def test_jsonl_list_revisions_leaves_out_what_listing_reports_without_a_revision(tmp_path: Path) -> None:
    root = tmp_path / "root"
    backend = _jsonl(root)
    path = Path(_store(backend, "kept"))
    project = path.parent.parent
    # A symlinked session directory: listing reports a refusal (no revision), reads refuse it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "session.jsonl").write_bytes(path.read_bytes())
    (project / "linked").symlink_to(elsewhere, target_is_directory=True)
    # A log that is a symbolic link, and one that is a directory.
    (project / "log-link").mkdir()
    (project / "log-link" / "session.jsonl").symlink_to(path)
    (project / "log-dir").mkdir()
    (project / "log-dir" / "session.jsonl").mkdir()
    # A session directory without a log (a create that never appended), and a non-canonical name.
    (project / "empty").mkdir()
    (project / "non~0041canonical").mkdir()
    (project / "non~0041canonical" / "session.jsonl").write_bytes(b"not a header\n")

    listings = backend.list_sessions()
    assert {listing.id for listing in listings if listing.revision is None} >= {"linked", "log-link", "log-dir"}
    assert backend.list_revisions() == {"kept": backend.read_revision("kept")}


def test_jsonl_list_revisions_keeps_the_root_misconfiguration_refusals(tmp_path: Path) -> None:
    root = tmp_path / "root"
    backend = _jsonl(root)
    path = Path(_store(backend, "s1"))
    assert set(backend.list_revisions()) == {"s1"}

    # An opposite-encoding log next to ours: the same refusal as listing.
    opposite = path.with_name("session.jsonl.zstd")
    opposite.write_bytes(b"")
    with pytest.raises(PersistenceError) as listed:
        backend.list_sessions()
    with pytest.raises(PersistenceError) as revised:
        backend.list_revisions()
    assert revised.value.message == listed.value.message
    opposite.unlink()

    # One id in two project directories — even when the copy's header is damaged (listing raises only when
    # both headers parse; read_revision refuses the id either way).
    copy = root / "-other-" / "s1"
    copy.mkdir(parents=True)
    (copy / "session.jsonl").write_bytes(b"not a header\n")
    with pytest.raises(PersistenceError, match='duplicate JSONL session id "s1"'):
        backend.read_revision("s1")
    with pytest.raises(PersistenceError, match='duplicate JSONL session id "s1"'):
        backend.list_revisions()
    (copy / "session.jsonl").write_bytes(path.read_bytes())
    with pytest.raises(PersistenceError, match='duplicate JSONL session id "s1"'):
        backend.list_sessions()
    with pytest.raises(PersistenceError, match='duplicate JSONL session id "s1"'):
        backend.list_revisions()
    (copy / "session.jsonl").unlink()
    copy.rmdir()

    # A flat file of the obsolete layout.
    (path.parent.parent / "s2.jsonl").write_bytes(b"")
    with pytest.raises(PersistenceError, match="unsupported flat-file layout"):
        backend.list_revisions()


def test_jsonl_list_revisions_of_a_missing_root_is_empty(tmp_path: Path) -> None:
    assert _jsonl(tmp_path / "not-yet").list_revisions() == {}


# --- SQLite: one SELECT of the id and revision columns ------------------------------------------------------


def test_sqlite_list_revisions_includes_damaged_headers_but_not_invalid_revision_columns(tmp_path: Path) -> None:
    db = tmp_path / "db" / "sessions.sqlite"
    backend = SqliteBackend(str(db))
    for session_id in ("ok", "bad-cwd", "bad-incarnation", "bad-revision", "newer"):
        backend.append_batch(header(session_id), closed_turn(), False)
    con = sqlite3.connect(db, timeout=10, isolation_level=None)
    try:
        con.execute("UPDATE sessions SET cwd = 'relative' WHERE id = 'bad-cwd'")
        con.execute("UPDATE sessions SET incarnation = 'not-a-uuid' WHERE id = 'bad-incarnation'")
        con.execute("UPDATE sessions SET revision = -1 WHERE id = 'bad-revision'")
        con.execute("UPDATE sessions SET version = 1 WHERE id = 'newer'")
        # A foreign writer's id that is not UTF-8 (listing names it with backslash escapes; no read can).
        con.execute(
            "INSERT INTO sessions (id, version, created_at, incarnation, revision) "
            "SELECT CAST(x'ff61' AS TEXT), 0, 1, incarnation, 0 FROM sessions WHERE id = 'ok'"
        )
    finally:
        con.close()
    reader = SqliteBackend(str(db))
    listings = {listing.id: listing for listing in reader.list_sessions()}
    assert len(listings) == 6 and "\\xffa" in listings  # the undecodable id, reported without a revision
    revisions = reader.list_revisions()
    assert list(revisions) == ["bad-cwd", "newer", "ok"]
    # Listing reports the format refusal with its revision; the damaged header without one.
    assert {k: v for k, v in revisions.items() if k != "bad-cwd"} == _listed(list(listings.values()))
    assert revisions["ok"] == reader.read_revision("ok")
    assert revisions["newer"] == reader.read_revision("newer")
    assert listings["bad-cwd"].revision is None
    with pytest.raises(SessionPersistenceCorruptionError):
        reader.read_revision("bad-cwd")  # the reader the index hands it to reports the damage
    prefix = revisions["ok"].rsplit(":revision:", 1)[0].split(":incarnation:")[0]
    assert revisions["bad-cwd"].startswith(prefix + ":incarnation:")
    for backend_ in (backend, reader):
        backend_.close()


def test_sqlite_list_revisions_of_a_read_only_uninitialised_database_is_empty(tmp_path: Path) -> None:
    db = tmp_path / "db" / "sessions.sqlite"
    db.parent.mkdir(mode=0o700)
    sqlite3.connect(db).close()
    os.chmod(db, 0o600)
    reader = SqliteBackend(str(db), read_only=True)
    try:
        assert reader.list_revisions() == {} == _listed(reader.list_sessions())
    finally:
        reader.close()


def test_the_coordinator_over_a_fresh_process_view_agrees_with_read_revision(tmp_path: Path) -> None:
    """Both real file backends: a second instance (another process's view) reports the same map."""
    for backend_of in (lambda: _jsonl(tmp_path / "root", "zstd"), lambda: SqliteBackend(str(tmp_path / "db.sqlite"))):
        first: Any = backend_of()
        for session_id in ("x", "y"):
            first.append_batch(header(session_id), closed_turn(), False)
        second: Any = backend_of()
        from agentlog import SessionStore

        coordinator = PersistenceCoordinator(SessionStore(), second)
        try:
            revisions = coordinator.list_revisions()
            assert revisions == first.list_revisions()
            assert revisions == {sid: first.read_revision(sid) for sid in ("x", "y")}
        finally:
            coordinator.close()
            first.close()
