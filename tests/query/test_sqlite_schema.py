"""The derived search index's file and schema rules (runtime spec §4.3 "Schema", §10.4 cases 39–45), and
what happens to a damaged index file: rebuilt when it is provably ours, refused (untouched) otherwise."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from agentlog.errors import SessionQueryError
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.memory import MemoryBackend
from agentlog.query.schema import APPLICATION_ID, SCHEMA_VERSION, open_search_database
from agentlog.query.sqlite import SqliteSearch

from .test_sqlite_search import code_of, message_events

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def pragma(path: Path, name: str) -> object:
    db = sqlite3.connect(path)
    try:
        return db.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        db.close()


def user_tables(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [
            row[0]
            for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT GLOB 'sqlite_*'")
        ]
    finally:
        db.close()


def indexed(path: Path, **config: object) -> SqliteSearch:
    return SqliteSearch(store=SessionStore(), path=str(path), **config)  # type: ignore[arg-type]


@posix_only
def test_10_4_39_creates_database_and_wal_sidecars_owner_only_without_changing_parent_mode(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir()
    os.chmod(directory, 0o755)
    path = directory / "search.db"
    search = indexed(path)
    search.search_sessions(query="needle")
    assert mode(directory) == 0o755
    assert mode(path) == 0o600
    assert mode(f"{path}-wal") == 0o600
    assert mode(f"{path}-shm") == 0o600
    search.close()


@posix_only
def test_10_4_39_creates_missing_parent_directories_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "search.db"
    search = indexed(path)
    assert mode(path.parent) & 0o077 == 0
    assert mode(path) == 0o600
    search.close()


@posix_only
def test_10_4_40_creates_a_persistent_rollback_journal_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "search.db"
    search = indexed(path, journal_mode="persist")
    search.store.create("s", seed=message_events("needle"))
    search.search_sessions(query="needle")
    assert mode(path) == 0o600
    assert mode(f"{path}-journal") == 0o600
    search.close()


@posix_only
def test_10_4_41_preserves_the_mode_of_an_existing_database_file(tmp_path: Path) -> None:
    path = tmp_path / "search.db"
    path.write_bytes(b"")
    os.chmod(path, 0o644)
    search = indexed(path, journal_mode="delete")
    search.search_sessions(query="needle")
    assert mode(path) == 0o644
    search.close()


def test_10_4_42_surfaces_filesystem_failures_while_precreating_the_database(tmp_path: Path) -> None:
    with pytest.raises(SessionQueryError) as info:
        indexed(Path(f"{tmp_path / 'search.db'}\0"))
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert isinstance(info.value.__cause__, ValueError)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SessionQueryError) as info:
        indexed(blocker / "search.db")
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert isinstance(info.value.__cause__, OSError)


def test_10_4_43_resets_a_recognized_stale_schema_in_place(tmp_path: Path) -> None:
    path = tmp_path / "stale.db"
    indexed(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    db.close()
    search = indexed(path)
    search.store.create("live", seed=message_events("needle"))
    assert len(search.search_sessions(query="needle")["items"]) == 1
    search.close()
    assert pragma(path, "user_version") == SCHEMA_VERSION
    assert pragma(path, "application_id") == APPLICATION_ID


def test_10_4_43_refuses_unrelated_tables_in_a_stale_index_untouched(tmp_path: Path) -> None:
    path = tmp_path / "augmented.db"
    indexed(path).close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE unrelated(value TEXT)")
    db.execute("INSERT INTO unrelated VALUES ('safe')")
    db.execute("PRAGMA user_version = 999")
    db.commit()
    db.close()
    assert code_of(lambda: indexed(path)) == "SESSION_QUERY_INDEX_FAILED"
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM unrelated").fetchone() == ("safe",)
    db.close()
    assert pragma(path, "user_version") == 999


def test_10_4_43_refuses_unrelated_tables_in_a_current_index_before_any_mutating_pragma(tmp_path: Path) -> None:
    path = tmp_path / "current-augmented.db"
    indexed(path).close()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE unrelated(value TEXT)")
    db.execute("INSERT INTO unrelated VALUES ('safe')")
    db.commit()
    db.close()
    with pytest.raises(SessionQueryError) as info:
        indexed(path, journal_mode="delete")
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert "unrecognized user tables: unrelated" in str(info.value)
    assert pragma(path, "user_version") == SCHEMA_VERSION
    assert pragma(path, "journal_mode") == "wal"


@pytest.mark.parametrize("table", ["canonical", "sqliteX"])
def test_10_4_43_refuses_a_nonempty_unmarked_database_untouched(tmp_path: Path, table: str) -> None:
    path = tmp_path / "foreign.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"CREATE TABLE {table}(value TEXT)")
    db.execute(f"INSERT INTO {table} VALUES ('safe')")
    db.commit()
    db.close()
    with pytest.raises(SessionQueryError) as info:
        indexed(path, journal_mode="delete")
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert "is not an empty or recognized derived index" in str(info.value)
    db = sqlite3.connect(path)
    assert db.execute(f"SELECT value FROM {table}").fetchone() == ("safe",)
    db.close()
    assert pragma(path, "application_id") == 0
    assert pragma(path, "user_version") == 0
    assert pragma(path, "journal_mode") == "wal"


def test_10_4_43_refuses_a_database_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "other-app.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 123")
    db.close()
    with pytest.raises(SessionQueryError) as info:
        indexed(path)
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert "belongs to another application" in str(info.value)
    assert pragma(path, "application_id") == 123


def test_10_4_43_refuses_triggers_and_views_in_our_file(tmp_path: Path) -> None:
    """Not in the original: a crafted view or trigger in a file carrying our id is refused like a table."""
    path = tmp_path / "crafted.db"
    indexed(path).close()
    db = sqlite3.connect(path)
    db.execute("CREATE VIEW spy AS SELECT 1")
    db.close()
    assert code_of(lambda: indexed(path)) == "SESSION_QUERY_INDEX_FAILED"


def test_10_4_43_rebuilds_a_version_8_file_without_the_companion_tables(tmp_path: Path) -> None:
    """A version-8 index written without the CJK companion (by the original) is rebuilt in place: its
    stored documents were never entered into the companion, so CJK searches would miss them."""
    path = tmp_path / "original.db"
    indexed(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE persisted_grams")
    db.execute("INSERT INTO persisted_sessions VALUES ('x', 0, 1, NULL, NULL, NULL, NULL, NULL, 'rev', 1)")
    db.commit()
    db.close()
    indexed(path).close()
    assert "persisted_grams" in user_tables(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM persisted_sessions").fetchone() == (0,)
    db.close()


def test_10_4_44_fails_initialization_without_a_partial_service(tmp_path: Path) -> None:
    path = tmp_path / "never-queried.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE canonical(value TEXT)")
    db.close()
    store = SessionStore()
    with pytest.raises(SessionQueryError) as info:
        SqliteSearch(store=store, path=str(path))
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert str(info.value).startswith("session-search SQLite index failed to open: ")
    # Nothing left open: the file can be replaced at once (no handle holds it).
    os.replace(path, tmp_path / "moved.db")


def test_10_4_45_defers_an_invalid_database_failure_only_in_first_search_mode(tmp_path: Path) -> None:
    path = tmp_path / "lazy-invalid.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE canonical(value TEXT)")
    db.close()
    lazy = indexed(path, open_at="first-search")
    assert code_of(lambda: lazy.search_sessions(query="needle")) == "SESSION_QUERY_INDEX_FAILED"
    # Readiness is shared: the failure is remembered, not retried on every search.
    assert code_of(lambda: lazy.search_sessions(query="needle")) == "SESSION_QUERY_INDEX_FAILED"
    lazy.close()
    assert code_of(lambda: indexed(path)) == "SESSION_QUERY_INDEX_FAILED"


# --- damage -------------------------------------------------------------------------------------------------


def _populated(path: Path, sessions: int = 40) -> PersistenceCoordinator:
    """An index file holding stored (persisted) rows of a real memory-backed store, closed."""
    coordinator = PersistenceCoordinator(SessionStore(), MemoryBackend())
    for i in range(sessions):
        coordinator.create({"version": 0, "id": f"s{i}", "createdAt": 1})
        coordinator.append(f"s{i}", message_events(f"needle number{i} " + "filler text " * 200))
    search = SqliteSearch(coordinator, path=str(path), journal_mode="delete")
    assert len(search.search_sessions(query="needle", limit=100)["items"]) == sessions
    search.close()
    return coordinator


def _answers(path: Path, coordinator: PersistenceCoordinator, sessions: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="agentlog.query.search"):
        search = SqliteSearch(coordinator, path=str(path))
    coordinator.store.create("fresh", seed=message_events("needle fresh"))
    try:
        with caplog.at_level("WARNING", logger="agentlog.query.search"):
            found = {item["header"]["id"] for item in search.search_sessions(query="needle", limit=100)["items"]}
        assert found == {"fresh", *(f"s{i}" for i in range(sessions))}
        assert any("rebuilding it from the logs" in record.getMessage() for record in caplog.records)
    finally:
        search.close()
    assert pragma(path, "application_id") == APPLICATION_ID
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_damaged_pages_of_our_index_are_rebuilt_never_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Corrupt bytes inside an index that carries our application id: the derived file is deleted and
    rebuilt from the corpus (what a user expects of a cache); the search answers from fresh rows."""
    path = tmp_path / "search.db"
    coordinator = _populated(path)
    size = path.stat().st_size
    with open(path, "r+b") as handle:  # keep page 1 (the header), smash everything after it
        handle.seek(4096)
        handle.write(b"\xa5" * (size - 4096))
    _answers(path, coordinator, 40, caplog)


def test_damage_found_only_by_a_search_rebuilds_and_answers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Damage the opening checks cannot see (one FTS content page) is found by the search, which
    discards the file, rebuilds it and answers once more."""
    path = tmp_path / "search.db"
    coordinator = _populated(path, sessions=30)
    db = sqlite3.connect(path)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'persisted_docs_content'").fetchone()[0]
    db.close()
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\x5a" * page_size)
    _answers(path, coordinator, 30, caplog)


def test_a_damaged_file_without_our_id_is_refused_untouched(tmp_path: Path) -> None:
    """Bytes that are not a SQLite database at all (a wrong path): refused, never replaced."""
    path = tmp_path / "notes.txt"
    content = b"my notes, not a database\n" * 200
    path.write_bytes(content)
    with pytest.raises(SessionQueryError) as info:
        indexed(path)
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert path.read_bytes() == content


def test_a_damaged_header_is_refused_untouched(tmp_path: Path) -> None:
    """Our index with its header page smashed no longer proves it is ours: refused, bytes kept."""
    path = tmp_path / "search.db"
    _populated(path, sessions=3)
    with open(path, "r+b") as handle:
        handle.write(b"\x00" * 100)
    content = path.read_bytes()
    with pytest.raises(SessionQueryError) as info:
        indexed(path)
    assert info.value.code == "SESSION_QUERY_INDEX_FAILED"
    assert path.read_bytes() == content


def test_open_search_database_memory_has_the_full_schema() -> None:
    conn = open_search_database(":memory:", "wal")
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        temp = {row[0] for row in conn.execute("SELECT name FROM sqlite_temp_master")}
        assert {"search_state", "persisted_sessions", "persisted_docs", "persisted_grams"} <= names
        assert {"live_sessions", "live_docs", "live_grams"} <= temp
        assert conn.execute("SELECT singleton, global_generation FROM search_state").fetchall() == [(1, 0)]
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    finally:
        conn.close()
