"""Projection cache media: whole-record replace per session, one-query listing, and forget-never-guess.

The cache is derived: a medium that is damaged, of another domain version, not a cache at all, or built
for another store must be discarded (with a warning) and rebuilt — never read. These tests drive the
SQLite medium through real files and the memory medium through the same behaviour.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from _full_disk import fill, small_tmpfs
from agentlog.errors import StorageAccessError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl import JsonlBackend
from agentlog.persistence.memory import MemoryBackend
from agentlog.persistence.sqlite import SqliteBackend
from agentlog.projection.cache_storage import (
    APPLICATION_ID,
    CACHE_FILE_NAME,
    DOMAIN_VERSION,
    CacheRecord,
    MemoryCacheStorage,
    ServedViews,
    SqliteCacheStorage,
    cache_path_for,
    open_cache_storage,
    parse_record,
    parse_views,
    store_id_for,
)


def record(seq: int, marks: list[str], *, created_at: int = 0, cwd: str | None = None) -> CacheRecord:
    identity: dict[str, Any] = {"createdAt": created_at}
    if cwd is not None:
        identity["cwd"] = cwd
    return CacheRecord(identity, {"marks": {"ver": 1, "seq": seq, "val": {"marks": marks}}})


@pytest.fixture(params=["memory", "sqlite"])
def medium(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        storage: Any = MemoryCacheStorage()
    else:
        storage = SqliteCacheStorage(tmp_path / "cache.sqlite", store_id="store-a")
    yield storage
    storage.close()


def test_storage__put_replaces_the_whole_record_and_get_returns_it(medium: Any) -> None:
    """A put is a whole-record replace: no row of the previous record survives it."""
    medium.put(
        "s1",
        CacheRecord({"createdAt": 1}, {"a": {"ver": 1, "seq": 3, "val": 1}, "b": {"ver": 2, "seq": 3, "val": None}}),
    )
    medium.put("s1", CacheRecord({"createdAt": 1, "cwd": "/w"}, {"a": {"ver": 1, "seq": 7, "val": [1, 2]}}, "rev-7"))
    got = medium.get("s1")
    assert got == CacheRecord({"createdAt": 1, "cwd": "/w"}, {"a": {"ver": 1, "seq": 7, "val": [1, 2]}}, "rev-7")
    assert medium.get("never") is None


def test_storage__one_sessions_write_leaves_every_other_record_alone(medium: Any) -> None:
    """Per-session records: writing or deleting one session never touches another's."""
    for i in range(5):
        medium.put(f"s{i}", record(i, [str(i)]))
    medium.put("s2", record(20, ["new"]))
    medium.delete("s3")
    everything = medium.get_many()
    assert set(everything) == {"s0", "s1", "s2", "s4"}
    assert everything["s4"] == record(4, ["4"])
    assert everything["s2"] == record(20, ["new"])
    assert medium.get_many(["s0", "s3", "zz"]) == {"s0": record(0, ["0"])}
    medium.clear()
    assert medium.get_many() == {}


def test_storage__records_are_detached_from_the_caller(medium: Any) -> None:
    """Mutating what was put, or what get returned, never changes the stored record."""
    rows: dict[str, Any] = {"a": {"ver": 1, "seq": 0, "val": {"list": [1]}}}
    medium.put("s", CacheRecord({"createdAt": 0}, rows))
    rows["a"]["val"]["list"].append(2)
    got = medium.get("s")
    assert got.rows["a"]["val"] == {"list": [1]}
    got.rows["a"]["val"]["list"].append(3)
    assert medium.get("s").rows["a"]["val"] == {"list": [1]}


def test_sqlite_storage__survives_a_reopen_with_owner_only_modes_and_wal(tmp_path: Path) -> None:
    """The file is the store's derived database: private to its owner, WAL, readable after a restart."""
    path = tmp_path / "cache.sqlite"
    first = SqliteCacheStorage(path, store_id="store-a")
    first.put("s", record(4, ["t"]))
    first.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = SqliteCacheStorage(path, store_id="store-a")
    assert second.get("s") == record(4, ["t"])
    second.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == DOMAIN_VERSION == 3
    finally:
        conn.close()


def test_sqlite_storage__two_writers_interleaving_different_sessions_both_land(tmp_path: Path) -> None:
    """Two processes' caches over one file: row-level writes, so neither overwrites the other's session
    (the original rewrote one global JSON file, and the last writer won every session)."""
    path = tmp_path / "cache.sqlite"
    a = SqliteCacheStorage(path, store_id="store")
    b = SqliteCacheStorage(path, store_id="store")
    for i in range(10):
        a.put("from-a", record(i, ["a"]))
        b.put("from-b", record(i, ["b"]))
    assert a.get_many() == {"from-a": record(9, ["a"]), "from-b": record(9, ["b"])}
    a.close()
    b.close()


def test_sqlite_storage__listing_is_one_query(tmp_path: Path) -> None:
    """get_many reads every record with one SELECT, however many sessions are cached."""
    storage = SqliteCacheStorage(tmp_path / "cache.sqlite", store_id="s")
    for i in range(50):
        storage.put(f"s{i}", record(i, []))
    statements: list[str] = []
    assert storage._conn is not None
    storage._conn.set_trace_callback(statements.append)
    assert len(storage.get_many()) == 50
    assert len(storage.get_many([f"s{i}" for i in range(0, 50, 2)])) == 25
    assert [s for s in statements if s.lstrip().upper().startswith("SELECT")] == statements
    assert len(statements) == 2
    storage.close()


def _poke(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(sql)
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: _poke(p, "PRAGMA user_version = 2"), "domain version 2, expected 3"),
        (lambda p: _poke(p, "PRAGMA application_id = 1146308688"), "not a projection cache database"),
        (lambda p: _poke(p, "UPDATE cache_state SET store_id = 'store-b'"), "built for another store"),
        (lambda p: _poke(p, "ALTER TABLE sessions ADD COLUMN extra TEXT"), "unexpected schema"),
        (lambda p: p.write_bytes(b"this is not a database at all" * 200), "file is not a database"),
    ],
    ids=["version-mismatch", "foreign-application", "other-store", "altered-schema", "garbage"],
)
def test_sqlite_storage__a_foreign_or_damaged_file_is_discarded_and_rebuilt_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, reason: str
) -> None:
    """Never read a medium that may not be this store's current cache: forget it, warn, start afresh."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="store-a")
    storage.put("s", record(4, ["stale"]))
    storage.close()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(str(path) + suffix):
            os.unlink(str(path) + suffix)
    damage(path)
    reopened = SqliteCacheStorage(path, store_id="store-a")
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        assert reopened.get("s") is None
    assert any("discarding" in r.getMessage() and reason in r.getMessage() for r in caplog.records), caplog.text
    reopened.put("s", record(5, ["fresh"]))
    assert reopened.get("s") == record(5, ["fresh"])
    reopened.close()


def test_sqlite_storage__a_flipped_byte_inside_a_record_is_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite does not checksum pages: each record carries a digest, so a silently altered seq is refused."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("s", record(4, ["t"]))
    storage.put("other", record(1, ["o"]))
    storage.close()
    _poke(path, """UPDATE sessions SET rows = replace(rows, '"seq":4', '"seq":9') WHERE session_id = 's'""")
    reopened = SqliteCacheStorage(path, store_id="a")
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        assert reopened.get("s") is None
        assert reopened.get_many() == {"other": record(1, ["o"])}
    assert "fails its digest" in caplog.text
    reopened.close()


def test_sqlite_storage__a_record_from_another_session_slot_is_refused(tmp_path: Path) -> None:
    """The digest covers the session id: a row copied under another id is not served for it."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("s", record(4, ["t"]))
    storage.close()
    _poke(path, "UPDATE sessions SET session_id = 'impostor'")
    reopened = SqliteCacheStorage(path, store_id="a")
    assert reopened.get("impostor") is None
    reopened.close()


def test_parse_record__refuses_every_shape_the_spec_schemas_refuse() -> None:
    """ver int >= 0, seq int >= -1, val present; identity createdAt int >= 0 and an optional string cwd."""
    good_rows = {"k": {"ver": 0, "seq": -1, "val": None}}
    assert parse_record({"createdAt": 0}, good_rows) == CacheRecord({"createdAt": 0}, good_rows)
    assert parse_record({"createdAt": 0, "cwd": "/w"}, good_rows) is not None
    bad_identities: list[Any] = [
        {},
        {"createdAt": -1},
        {"createdAt": 1.5},
        {"createdAt": 0, "cwd": 3},
        [],
        {"createdAt": 0, "x": 1},
    ]
    for identity in bad_identities:
        assert parse_record(identity, good_rows) is None, identity
    bad_rows: list[Any] = [
        [],
        {"k": {"ver": -1, "seq": 0, "val": 1}},
        {"k": {"ver": 1, "seq": -2, "val": 1}},
        {"k": {"ver": True, "seq": 0, "val": 1}},
        {"k": {"ver": 1, "seq": 0}},
        {"k": 5},
    ]
    for rows in bad_rows:
        assert parse_record({"createdAt": 0}, rows) is None, rows


def test_sqlite_storage__a_malformed_json_record_is_absent(tmp_path: Path) -> None:
    """A record whose JSON no longer has the stored shape is treated as absent, never half-read."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("s", record(4, ["t"]))
    storage.close()
    # A well-formed digest over a badly shaped record (the check is on shape, not only on bytes).
    from agentlog.projection.cache_storage import _digest

    rows = '{"marks":{"ver":1,"seq":"4","val":null}}'
    _poke(path, f"""UPDATE sessions SET rows = '{rows}', digest = '{_digest("s", '{"createdAt":0}', rows, None)}'""")
    reopened = SqliteCacheStorage(path, store_id="a")
    assert reopened.get("s") is None
    reopened.close()


def test_cache_path_for__each_backend_keeps_its_cache_beside_its_store(tmp_path: Path) -> None:
    """JSONL: a dot-file in the root; SQLite: a sibling file; in-process stores: no file at all."""
    jsonl = JsonlBackend(str(tmp_path / "j"))
    sqlite_backend = SqliteBackend(str(tmp_path / "s.db"))
    assert cache_path_for(jsonl) == str(tmp_path / "j" / CACHE_FILE_NAME)
    assert cache_path_for(sqlite_backend) == str(tmp_path / "s.db") + ".projections.sqlite"
    assert cache_path_for(MemoryBackend()) is None
    assert cache_path_for(SqliteBackend(":memory:")) is None
    assert isinstance(open_cache_storage(MemoryBackend()), MemoryCacheStorage)
    jsonl.close()
    sqlite_backend.close()


def _stored_session(backend: Any, session_id: str = "s1") -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, backend)
    session = store.create(session_id, meta={"cwd": "/work", "createdAt": 1})
    session.append("turn/start", {"turn": 1})
    store.flush(session)
    store.dispose(session)
    coordinator.close()


def test_jsonl_store__the_cache_file_in_the_root_does_not_disturb_listing(tmp_path: Path) -> None:
    """The JSONL listing skips the dot-file (and its WAL companions): sessions list as before."""
    root = str(tmp_path / "j")
    _stored_session(JsonlBackend(root))
    backend = JsonlBackend(root)
    storage = open_cache_storage(backend)
    assert isinstance(storage, SqliteCacheStorage)
    storage.put("s1", record(0, []))
    assert [listing.id for listing in backend.list_sessions()] == ["s1"]
    assert all(listing.ok for listing in backend.list_sessions())
    storage.close()
    backend.close()


def test_store_id_for__binds_a_cache_to_its_store_not_to_a_copy(tmp_path: Path) -> None:
    """Two SQLite stores never share an id; one store keeps its id across reopens. A JSONL store copied
    elsewhere gets another id, so a cache file copied along with it is rebuilt, not trusted."""
    _stored_session(SqliteBackend(str(tmp_path / "a.db")))
    _stored_session(SqliteBackend(str(tmp_path / "b.db")))
    a1, a2, b = (SqliteBackend(str(tmp_path / n)) for n in ("a.db", "a.db", "b.db"))
    assert store_id_for(a1) == store_id_for(a2) != store_id_for(b)
    assert (store_id_for(a1) or "").startswith("sqlite-store:")
    j1, j2 = JsonlBackend(str(tmp_path / "j1")), JsonlBackend(str(tmp_path / "j2"))
    _stored_session(j1)
    _stored_session(j2)
    assert store_id_for(j1) != store_id_for(j2)
    assert store_id_for(j1) == store_id_for(JsonlBackend(str(tmp_path / "j1")))
    for backend in (a1, a2, b, j1, j2):
        backend.close()


def test_open_cache_storage__a_copied_cache_file_is_rebuilt_in_its_new_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Copying store A's cache file into store B: B discards it instead of serving A's rows."""
    for name in ("a", "b"):
        _stored_session(JsonlBackend(str(tmp_path / name)))
    a = open_cache_storage(JsonlBackend(str(tmp_path / "a")))
    a.put("s1", record(0, ["from a"]))
    a.close()
    (tmp_path / "b" / CACHE_FILE_NAME).write_bytes((tmp_path / "a" / CACHE_FILE_NAME).read_bytes())
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        b = open_cache_storage(JsonlBackend(str(tmp_path / "b")))
        assert b.get("s1") is None
    assert "built for another store" in caplog.text
    b.close()


def test_open_cache_storage__an_unusable_path_falls_back_to_memory_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory where the cache file belongs: the cache works in memory; the store is not touched."""
    root = tmp_path / "j"
    _stored_session(JsonlBackend(str(root)))
    (root / CACHE_FILE_NAME).mkdir()
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        storage = open_cache_storage(JsonlBackend(str(root)))
    assert isinstance(storage, MemoryCacheStorage)
    assert "caching in memory" in caplog.text
    assert (root / CACHE_FILE_NAME).is_dir()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_open_cache_storage__a_cache_opened_before_the_store_exists_keeps_its_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A fresh store: reads answer "absent" without creating anything; the first record, written after
    the store materialized, is bound to the store it then has and survives the next open."""

    def make() -> Any:
        return JsonlBackend(str(tmp_path / "j")) if kind == "jsonl" else SqliteBackend(str(tmp_path / "s.db"))

    backend = make()
    assert store_id_for(backend) is None
    storage = open_cache_storage(backend)
    path = cache_path_for(backend)
    assert path is not None
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        assert storage.get("s1") is None
        assert storage.get_many() == {}
    assert caplog.text == ""
    assert not os.path.exists(path)
    _stored_session(backend)  # materializes the store (and closes that backend)
    storage.put("s1", record(0, ["first"]))
    storage.close()
    reopened = open_cache_storage(make())
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        assert reopened.get("s1") == record(0, ["first"])
    assert "discarding" not in caplog.text
    reopened.close()


def viewed(seq: int, marks: list[str], *, revision: str | None = "rev-1") -> CacheRecord:
    """``record`` with the served views of its rows, as the cache writes it."""
    base = record(seq, marks)
    views = {"code": "agentlog test", "rows": {"marks": [1, seq]}, "views": {"marks": {"marks": marks}}}
    return CacheRecord(base.identity, base.rows, revision, views)


def test_storage__views_round_trip_and_the_listing_read_returns_them_with_identity_and_revision(
    medium: Any,
) -> None:
    """A record's views come back from ``get`` as written, and ``get_views`` returns, per session that
    has views, the record's identity, revision and views (a record without views is not listed)."""
    medium.put("viewed", viewed(4, ["a"]))
    medium.put("plain", record(2, ["b"]))
    assert medium.get("viewed") == viewed(4, ["a"])
    listed = medium.get_views()
    assert set(listed) == {"viewed"}
    found = listed["viewed"]
    assert isinstance(found, ServedViews)
    assert (found.identity, found.revision) == ({"createdAt": 0}, "rev-1")
    assert found.views["rows"] == {"marks": [1, 4]} and found.views["views"] == {"marks": {"marks": ["a"]}}
    assert medium.get_views(["plain", "absent"]) == {}
    medium.put("viewed", record(5, ["c"]))  # a whole-record replace drops the views too
    assert medium.get_views() == {}


def test_storage__a_record_with_malformed_views_is_refused_at_write(medium: Any) -> None:
    """The cache writes views of one shape; anything else is a bug caught before it is stored."""
    base = record(1, [])
    with pytest.raises(ValueError, match="invalid shape"):
        medium.put("s", CacheRecord(base.identity, base.rows, None, {"code": "x", "rows": {"marks": [1]}, "views": {}}))
    assert medium.get("s") is None


def test_parse_views__refuses_every_shape_a_listing_could_misread() -> None:
    """Rows are ``[ver, seq]`` pairs of safe naturals (seq may be -1), views only for listed rows."""
    good = {"code": "c", "rows": {"k": [1, -1]}, "views": {"k": None}}
    assert parse_views(good) == good
    bad: object
    for bad in (
        None,
        [],
        {"rows": {}, "views": {}},
        {"code": 1, "rows": {}, "views": {}},
        {"code": "c", "rows": [], "views": {}},
        {"code": "c", "rows": {}, "views": []},
        {"code": "c", "rows": {"k": [1]}, "views": {}},
        {"code": "c", "rows": {"k": [True, 0]}, "views": {}},
        {"code": "c", "rows": {"k": [1, -2]}, "views": {}},
        {"code": "c", "rows": {"k": [1, 2**53]}, "views": {}},
        {"code": "c", "rows": {}, "views": {"k": 1}},
    ):
        assert parse_views(bad) is None, bad


def test_sqlite_storage__the_listing_read_is_one_query_that_never_reads_the_rows(tmp_path: Path) -> None:
    """``get_views`` is one SELECT of the listing columns: the rows text is neither read nor hashed."""
    storage = SqliteCacheStorage(tmp_path / "cache.sqlite", store_id="s")
    for i in range(20):
        storage.put(f"s{i}", viewed(i, ["m"]))
    statements: list[str] = []
    assert storage._conn is not None
    storage._conn.set_trace_callback(statements.append)
    assert len(storage.get_views()) == 20
    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("SELECT")
    assert "rows" not in statements[0].split("FROM")[0]
    storage.close()


def test_sqlite_storage__a_flipped_byte_inside_the_views_is_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The views text carries its own check: altered views (or an altered revision inside them) are
    not listed, and ``get`` returns the intact rows without them — the reader then parses the rows."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("s", viewed(4, ["t"]))
    storage.put("other", viewed(1, ["o"]))
    storage.close()
    _poke(path, """UPDATE sessions SET views = replace(views, '"t"', '"x"') WHERE session_id = 's'""")
    _poke(path, """UPDATE sessions SET views = replace(views, 'rev-1', 'rev-2') WHERE session_id = 'other'""")
    reopened = SqliteCacheStorage(path, store_id="a")
    with caplog.at_level(logging.WARNING, logger="agentlog.projection.cache"):
        assert reopened.get_views() == {}
    assert "fail their digest" in caplog.text
    found = reopened.get("s")
    assert found is not None and found.views is None and found.rows == record(4, ["t"]).rows
    reopened.close()


def test_sqlite_storage__views_copied_under_another_session_id_are_refused(tmp_path: Path) -> None:
    """The views check covers the session id, like the record digest."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("s", viewed(4, ["t"]))
    storage.close()
    _poke(path, "UPDATE sessions SET session_id = 'impostor'")
    reopened = SqliteCacheStorage(path, store_id="a")
    assert reopened.get_views() == {}
    reopened.close()


def test_sqlite_storage__a_file_from_before_the_views_columns_keeps_its_records(tmp_path: Path) -> None:
    """A cache written before records stored their views is not discarded: the columns are added in
    place, its records are served from their rows (no views listed), and the next write adds views."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("old", record(3, ["kept"]))
    storage.close()
    _poke(path, "ALTER TABLE sessions DROP COLUMN anchor")
    _poke(path, "ALTER TABLE sessions DROP COLUMN views_digest")
    _poke(path, "ALTER TABLE sessions DROP COLUMN views")
    reopened = SqliteCacheStorage(path, store_id="a")
    assert reopened.get("old") == record(3, ["kept"])
    assert reopened.get_views() == {}
    reopened.put("old", viewed(4, ["new"]))
    assert set(reopened.get_views()) == {"old"}
    reopened.close()
    conn = sqlite3.connect(path)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(sessions)")]
    finally:
        conn.close()
    assert columns[-3:] == ["views", "views_digest", "anchor"]


def test_sqlite_storage__a_file_from_before_the_anchor_column_keeps_its_records_and_their_digests(
    tmp_path: Path,
) -> None:
    """A cache written before records kept their anchor is not discarded either: the column is added,
    every record still passes its digest (served without an anchor), and the next write stores one."""
    path = tmp_path / "cache.sqlite"
    storage = SqliteCacheStorage(path, store_id="a")
    storage.put("old", viewed(3, ["kept"]))
    storage.close()
    _poke(path, "ALTER TABLE sessions DROP COLUMN anchor")
    reopened = SqliteCacheStorage(path, store_id="a")
    assert reopened.get("old") == viewed(3, ["kept"])
    assert set(reopened.get_views()) == {"old"}
    anchored = CacheRecord(**{**viewed(4, ["new"]).__dict__, "anchor": "4:abc"})
    reopened.put("old", anchored)
    assert reopened.get("old") == anchored
    reopened.close()


def test_storage__the_anchor_round_trips_and_a_malformed_one_is_refused(medium: Any) -> None:
    base = viewed(2, ["a"])
    anchored = CacheRecord(base.identity, base.rows, base.revision, base.views, "2:0123abcd")
    medium.put("s", anchored)
    assert medium.get("s") == anchored and medium.get("s").anchor == "2:0123abcd"
    assert medium.get_many(["s"]) == {"s": anchored}
    with pytest.raises(ValueError, match="invalid shape"):
        medium.put("s", CacheRecord(base.identity, base.rows, None, None, 7))  # type: ignore[arg-type]
    assert medium.get("s") == anchored


def test_sqlite_storage__a_full_disk_is_storage_full_for_writes_and_absent_for_reads() -> None:
    """On a really full file system the medium's writes raise ``STORAGE_FULL`` naming the cache file
    (never a raw ``sqlite3`` error) and its reads answer "absent"; with space freed both work again."""
    with small_tmpfs() as disk:
        path = disk / "cache.sqlite"
        storage = SqliteCacheStorage(path, store_id="a")
        filler = fill(disk)
        try:
            for write in (lambda: storage.put("s", record(1, ["x"])), lambda: storage.clear()):
                with pytest.raises(StorageAccessError) as info:
                    write()
                assert info.value.code == "STORAGE_FULL" and info.value.path == str(path)
                assert "free space" in str(info.value) and "no session log was touched" in str(info.value)
            assert storage.get("s") is None and storage.get_many() == {} and storage.get_views() == {}
        finally:
            filler.unlink()
        storage.put("s", record(1, ["x"]))
        assert storage.get("s") == record(1, ["x"])
        storage.close()
