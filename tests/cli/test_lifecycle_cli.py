"""``agentlog rm`` and ``agentlog gc``: deleting sessions (and their derived records) and retention, on
the JSONL, SQLite and PostgreSQL stores; ``--archive`` copies that verify; two PostgreSQL hosts."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner, Result

import agentlog as al
from agentlog.cli.commands import app
from agentlog.cli.lifecycle_commands import expired_sessions, parse_age
from agentlog.errors import InvalidOptionError
from agentlog.persistence.archive import MANIFEST_NAME, session_digest
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.projection.cache_storage import cache_path_for
from agentlog.query.sqlite import default_index_path
from agentlog.testing.builders import closed_turn, header, user_event

runner = CliRunner()
DAY_MS = 86_400_000


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def at(kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store options of the test's store (PostgreSQL: its own schema and this host's cache dir)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-cache"))
    if kind == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        schema = request.getfixturevalue("pg_schema")
        return ["--backend", "postgres", "--dsn", dsn, "--pg-schema", schema]
    return ["--store", str(tmp_path / "store"), "--backend", kind]


def _backend(at: list[str]) -> Any:
    from agentlog.cli.options import BackendKind, Compression, open_backend

    options = dict(zip(at[::2], at[1::2], strict=True))
    kind = BackendKind(options["--backend"])
    store = Path(options["--store"]) if "--store" in options else None
    return open_backend(store, kind, Compression.zstd, dsn=options.get("--dsn"), pg_schema=options.get("--pg-schema"))


def _events(word: str, at_ms: int) -> list[dict[str, Any]]:
    events = closed_turn()
    events[1] = user_event(1, f"tell me about {word}")
    for event in events:
        event["time"] = at_ms
    return events


def _write(at: list[str], sessions: dict[str, tuple[str, int, str | None]]) -> None:
    """``{id: (word, last activity ms, parent)}`` stored through a coordinator."""
    coordinator = PersistenceCoordinator(al.SessionStore(), _backend(at))
    try:
        for session_id, (word, when, parent) in sessions.items():
            extra: dict[str, Any] = {} if parent is None else {"parentSession": parent, "seedLength": 0}
            coordinator.create(header(session_id, created_at=when, **extra))
            coordinator.append(session_id, _events(word, when))
    finally:
        coordinator.close()


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args))


def _json(*args: str, code: int = 0) -> Any:
    result = _invoke(*args, "--json")
    assert result.exit_code == code, result.stdout + result.stderr
    return orjson.loads(result.stdout)


def _listed(at: list[str]) -> list[str]:
    return sorted(row["id"] for row in _json("ls", *at)["sessions"])


def _found(at: list[str], word: str) -> list[str]:
    return sorted(item["bestMatch"]["sessionId"] for item in _json("search", word, *at)["items"])


def _cache_ids(at: list[str]) -> list[str]:
    backend = _backend(at)
    try:
        path = cache_path_for(backend)
    finally:
        backend.close()
    assert path is not None and os.path.isfile(path)
    with sqlite3.connect(path) as conn:
        return sorted(row[0] for row in conn.execute("SELECT session_id FROM sessions"))


def _indexed_ids(at: list[str]) -> list[str]:
    backend = _backend(at)
    try:
        from agentlog.query.provider import is_postgres_store

        if is_postgres_store(backend):  # the index is in the store's database (agentlog.query.PostgresSearch)
            from agentlog.query.postgres import index_schema

            schema = index_schema(backend.schema)  # type: ignore[attr-defined]
            import psycopg

            with psycopg.connect(at[at.index("--dsn") + 1]) as conn:
                rows = conn.execute(f'SELECT id FROM "{schema}".persisted_sessions').fetchall()
            return sorted(row[0] for row in rows)
        path = default_index_path(backend)
    finally:
        backend.close()
    assert path is not None and os.path.isfile(path)
    with sqlite3.connect(path) as conn:
        return sorted(row[0] for row in conn.execute("SELECT id FROM persisted_sessions"))


def test_rm_removes_the_log_the_cache_row_and_the_index_documents(at: list[str]) -> None:
    now = time.time_ns() // 1_000_000
    _write(at, {"victim": ("zebra", now, None), "kept": ("zebra", now, None)})
    _json("reindex", "--projections", "--search", *at)
    assert _cache_ids(at) == _indexed_ids(at) == ["kept", "victim"]

    assert _json("rm", "victim", *at) == {"deleted": ["victim"], "orphaned": [], "failed": []}

    assert _cache_ids(at) == ["kept"]  # gone at delete time, before any reader reconciles
    assert _indexed_ids(at) == ["kept"]
    assert _listed(at) == ["kept"]
    assert _found(at, "zebra") == ["kept"]
    failed = _json("rm", "victim", *at, code=1)["failed"]
    assert [item["error"]["code"] for item in failed] == ["SESSION_NOT_FOUND"]


def test_rm_refuses_a_parent_a_session_open_for_writing_and_conflicting_options(at: list[str]) -> None:
    now = time.time_ns() // 1_000_000
    _write(at, {"root": ("a", now, None), "child": ("b", now, "root"), "leaf": ("c", now, "child")})
    refused = _json("rm", "root", *at, code=1)
    assert refused["deleted"] == [] and refused["failed"][0]["error"]["code"] == "SESSION_HAS_CHILDREN"
    assert _invoke("rm", "root", "--with-children", "--orphan", *at, "--json").exit_code == 1

    coordinator = PersistenceCoordinator(al.SessionStore(), _backend(at))
    try:
        live = coordinator.resume("leaf")
        locked = _json("rm", "leaf", *at, code=1)
        assert locked["failed"][0]["error"]["code"] == "SESSION_LOCKED"
        coordinator.store.dispose(live)
    finally:
        coordinator.close()

    assert _json("rm", "child", "--orphan", *at) == {"deleted": ["child"], "orphaned": ["leaf"], "failed": []}
    assert _listed(at) == ["leaf", "root"]
    text = _invoke("rm", "root", "leaf", *at)
    assert text.exit_code == 0 and text.stdout.splitlines() == ["deleted root", "deleted leaf"]
    assert _listed(at) == []


def test_gc_selects_by_last_activity_keeps_recent_subtrees_and_dry_run_deletes_nothing(at: list[str]) -> None:
    now = time.time_ns() // 1_000_000
    _write(
        at,
        {
            "old": ("a", now - 40 * DAY_MS, None),
            "old-child": ("b", now - 35 * DAY_MS, "old"),
            "old-parent-of-recent": ("c", now - 40 * DAY_MS, None),
            "recent-child": ("d", now - DAY_MS, "old-parent-of-recent"),
            "recent": ("e", now, None),
        },
    )
    dry = _json("gc", "--older-than", "30d", "--dry-run", *at)
    assert dry["dryRun"] is True and dry["deleted"] == []
    assert [item["id"] for item in dry["selected"]] == ["old", "old-child"]
    assert dry["kept"] == [{"id": "old-parent-of-recent", "reason": "a descendant is recent or kept"}]
    assert len(_listed(at)) == 5

    done = _json("gc", "--older-than", "30d", *at)
    assert done["deleted"] == ["old-child", "old"] and done["failed"] == []
    assert _listed(at) == ["old-parent-of-recent", "recent", "recent-child"]
    assert _json("gc", "--older-than", "30d", *at)["deleted"] == []


def _label(at: list[str], session_id: str, when: int, labels: dict[str, str], tags: list[str]) -> None:
    """Label a stored session with events dated ``when`` (its last activity stays old)."""
    coordinator = PersistenceCoordinator(al.SessionStore(), _backend(at))
    try:
        seq = len(coordinator.view(session_id).events)
        changes: list[tuple[str, dict[str, Any]]] = []
        if labels:
            changes.append(("session/labels", {"labels": labels}))
        if tags:  # an empty change is refused (it would not load back)
            changes.append(("session/tags", {"add": tags}))
        coordinator.append(
            session_id,
            [
                {"type": etype, "seq": seq + i, "time": when, "data": data, "ignorable": True}
                for i, (etype, data) in enumerate(changes)
            ],
        )
    finally:
        coordinator.close()


def test_gc_keeps_the_sessions_a_keep_tag_or_keep_label_names_with_their_ancestors(at: list[str]) -> None:
    now = time.time_ns() // 1_000_000
    old = now - 40 * DAY_MS
    _write(
        at,
        {
            "plain": ("a", old, None),
            "tagged": ("b", old, None),
            "labelled": ("c", old, None),
            "parent-of-tagged": ("d", old, None),
            "tagged-child": ("e", old, "parent-of-tagged"),
        },
    )
    _label(at, "tagged", old, {"user": "bob"}, ["eval"])
    _label(at, "labelled", old, {"project": "x"}, [])
    _label(at, "tagged-child", old, {"k": "v"}, ["eval"])
    dry = _json("gc", "--older-than", "30d", "--keep-tag", "eval", "--keep-label", "project=x", "--dry-run", *at)
    assert [item["id"] for item in dry["selected"]] == ["plain"]
    kept = {item["id"]: item["reason"] for item in dry["kept"]}
    assert kept == {"parent-of-tagged": "a descendant is recent or kept"}
    done = _json("gc", "--older-than", "30d", "--keep-tag", "eval", "--keep-label", "project=x", *at)
    assert done["deleted"] == ["plain"]
    assert _listed(at) == ["labelled", "parent-of-tagged", "tagged", "tagged-child"]
    refused = _invoke("gc", "--older-than", "30d", "--keep-label", "no-equals-sign", *at, "--json")
    assert refused.exit_code == 1 and orjson.loads(refused.stderr)["error"]["code"]


def test_gc_archive_writes_a_verified_copy_that_reads_back_as_a_store(at: list[str], tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    _write(at, {"old": ("zebra", now - 40 * DAY_MS, None), "recent": ("e", now, None)})
    source = PersistenceCoordinator(al.SessionStore(), _backend(at))
    try:
        stored = source.backend.load_stored("old")
        expected = session_digest(stored.meta, stored.events)
    finally:
        source.close()
    archive = tmp_path / "archive"

    done = _json("gc", "--older-than", "30d", "--archive", str(archive), *at)

    assert done["deleted"] == ["old"]
    (record,) = done["archived"]
    assert (record["id"], record["sha256"], record["events"]) == ("old", expected[0], expected[1])
    manifest = [orjson.loads(line) for line in (archive / MANIFEST_NAME).read_bytes().splitlines()]
    assert manifest == [record]
    archived = JsonlBackend(str(archive), compression="none", read_only=True).load_stored("old")
    assert archived is not None and session_digest(archived.meta, archived.events) == expected
    archive_at = ["--store", str(archive), "--backend", "jsonl"]
    assert _listed(archive_at) == ["old"]
    assert _found(archive_at, "zebra") == ["old"]
    assert _listed(at) == ["recent"]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_rm_and_gc_on_a_missing_store_are_store_not_found_and_create_nothing(at: list[str], tmp_path: Path) -> None:
    for args in (["rm", "s1"], ["gc", "--older-than", "1d"]):
        result = _invoke(*args, *at, "--json")
        assert result.exit_code == 1
        assert orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND"
    assert not (tmp_path / "store").exists()


def test_parse_age_and_the_retention_predicate() -> None:
    assert parse_age("30d") == 30 * DAY_MS and parse_age("12h") == 12 * 3_600_000 and parse_age("2w") == 14 * DAY_MS
    for bad in ("30", "d", "-1d", "1.5d", "30 days"):
        with pytest.raises(InvalidOptionError):
            parse_age(bad)
    rows = [
        {"id": "a", "parentSession": None, "lastActivity": 10, "createdAt": 1},
        {"id": "b", "parentSession": "a", "lastActivity": None, "createdAt": 5},
        {"id": "c", "parentSession": None, "lastActivity": 10, "createdAt": 1},
    ]
    assert expired_sessions(rows, 100) == (["a", "c"], [])
    assert expired_sessions(rows, 100, keep=lambda row: row["id"] == "b") == (
        ["c"],
        [{"id": "a", "reason": "a descendant is recent or kept"}],
    )
    assert expired_sessions(rows, 6) == (["b"], [])  # an old child of a recent parent goes alone


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_reindex_after_deletes_shrinks_the_search_index(at: list[str]) -> None:
    now = time.time_ns() // 1_000_000
    _write(at, {f"s{i:02d}": (f"word{i} " * 200, now, None) for i in range(20)})
    assert len(_found(at, "word3")) == 1
    backend = _backend(at)
    index = Path(str(default_index_path(backend)))
    backend.close()
    before = index.stat().st_size
    _json("rm", *(f"s{i:02d}" for i in range(1, 20)), *at)
    _json("reindex", "--search", *at)
    assert index.stat().st_size < before
    assert _found(at, "word0") == ["s00"] and _found(at, "word3") == []


# --- PostgreSQL: one host deletes while another lists, searches and tails ----------------------------------


@pytest.fixture
def two_hosts(pg_dsn: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-a"))
    yield ["--backend", "postgres", "--dsn", pg_dsn, "--pg-schema", pg_schema]


def test_postgres_a_session_deleted_by_one_host_leaves_the_others_listing_search_and_tail(
    two_hosts: list[str], pg_dsn: str, pg_schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = two_hosts
    now = time.time_ns() // 1_000_000
    _write(at, {"victim": ("zebra", now, None), "kept": ("zebra", now, None)})
    assert _listed(at) == ["kept", "victim"]  # host A's cache and index know both
    assert _found(at, "zebra") == ["kept", "victim"]
    from agentlog.persistence.postgres import PostgresBackend

    reader = PersistenceCoordinator(al.SessionStore(), PostgresBackend(pg_dsn, schema=pg_schema))

    async def tail_across_the_delete() -> BaseException | None:
        tail = reader.tail("victim")
        seen = [await anext(tail) for _ in range(6)]  # the stored log, then the tail waits for more
        assert [event["seq"] for event in seen] == list(range(6))

        def host_b_deletes() -> Any:
            monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-b"))
            try:
                return _json("rm", "victim", *at)
            finally:
                monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-a"))

        assert host_b_deletes()["deleted"] == ["victim"]
        try:
            await asyncio.wait_for(anext(tail), timeout=120)  # a bound for a hung test, not a timing check
        except al.SessionNotFoundError as err:
            return err
        return None

    try:
        ended = asyncio.run(tail_across_the_delete())
    finally:
        reader.close()
    assert isinstance(ended, al.SessionNotFoundError)
    assert _listed(at) == ["kept"]  # host A: its stale cache and index rows are never served
    assert _found(at, "zebra") == ["kept"]
    assert _indexed_ids(at) == ["kept"]  # and its index dropped them when it reconciled


@pytest.mark.parametrize("kind", ["jsonl"])
def test_gc_never_deletes_a_session_whose_header_cannot_be_read_and_rm_does(at: list[str], tmp_path: Path) -> None:
    _write(at, {"old": ("a", 1000, None)})
    damaged = tmp_path / "store" / "--work-project--" / "broken" / "session.jsonl.zstd"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"this is not a header\n")
    done = _json("gc", "--older-than", "1d", *at)
    assert done["deleted"] == ["old"]
    assert [item["id"] for item in done["skipped"]] == ["broken"]
    assert damaged.exists()
    assert _json("rm", "broken", *at)["deleted"] == ["broken"]
    assert not damaged.parent.exists()
