"""``copy_sessions``: sessions move between any two backends whole, verified, and a re-run resumes.

Every pair of JSONL raw, JSONL zstd, SQLite and PostgreSQL is a source and a target: the copy keeps the
header (lineage) and every durable event (titles, ignorable custom events) byte-for-byte in value, a
session left open by a crash stays open (the source is never repaired), a re-run skips what was copied,
a conflicting id on the target is refused for that session alone, a torn tail is left out and said, a
session written to during the copy has its durable prefix copied and is reported, and random valid logs
round-trip (digest and derived messages). The crash test (SIGKILL mid-copy) is ``test_copy_crash.py``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from _postgres import drop_schema, fresh_schema
from agentlog.errors import CopyConflictError
from agentlog.kernel.store import SessionStore
from agentlog.persistence.backend import Backend
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.copy import copy_sessions, events_digest
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import (
    closed_turn,
    ev,
    header,
    open_turn_with_chunks,
)

from .test_contract_jsonl import inject_raw_torn_tail, inject_zstd_torn_tail
from .test_read_from_seek import logs

KINDS = ("jsonl-none", "jsonl-zstd", "sqlite", "postgres")

Opener = Callable[[], Backend]


def _opener(kind: str, root: Path, dsn: str | None, schema: str | None) -> Opener:
    if kind == "sqlite":
        return lambda: SqliteBackend(str(root / "sessions.sqlite3"))
    if kind == "postgres":
        from agentlog.persistence.postgres.backend import PostgresBackend

        assert dsn is not None and schema is not None
        return lambda: PostgresBackend(dsn, schema=schema)
    compression = "zstd" if kind == "jsonl-zstd" else "none"
    return lambda: JsonlBackend(str(root / "jsonl"), compression=compression)


@pytest.fixture
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str, str], Opener]]:
    """``stores(kind, name)``: an opener of new backend instances over the store ``name`` of ``kind``."""
    schemas: list[str] = []
    dsn: str | None = None

    def make(kind: str, name: str) -> Opener:
        nonlocal dsn
        schema = None
        if kind == "postgres":
            dsn = request.getfixturevalue("pg_dsn")
            schema = fresh_schema()
            schemas.append(schema)
        return _opener(kind, tmp_path / name, dsn, schema)

    yield make
    for schema in schemas:
        assert dsn is not None
        drop_schema(dsn, schema)


def _write(open_backend: Opener, sessions: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
    coordinator = PersistenceCoordinator(SessionStore(), open_backend())
    try:
        for meta, events in sessions.values():
            coordinator.create(meta)
            coordinator.append(meta["id"], events)
    finally:
        coordinator.close()


def _title(seq: int, text: str) -> dict[str, Any]:
    return ev("session/title", seq, {"title": text, "messageSeqs": [1], "source": {"kind": "user"}})


SESSIONS: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {
    "parent": (header("parent"), [*closed_turn(0), _title(6, "The parent"), *closed_turn(7, turn=2)]),
    "child": (
        header("child", parentSession="parent", origin="subagent", delegationDepth=1),
        [*closed_turn(0), ev("plugin/label", 6, {"label": "keep"}, ignorable=True)],
    ),
    "crashed": (header("crashed", cwd="/elsewhere"), open_turn_with_chunks()),
}


def _reads(open_backend: Opener, session_ids: list[str]) -> dict[str, tuple[Any, Any, str]]:
    coordinator = PersistenceCoordinator(SessionStore(), open_backend())
    try:
        found = {}
        for session_id in session_ids:
            read = coordinator.read_stored(session_id)
            found[session_id] = (read.meta, read.events, events_digest(read.events))
        return found
    finally:
        coordinator.close()


@pytest.mark.parametrize("target_kind", KINDS)
@pytest.mark.parametrize("source_kind", KINDS)
def test_copy_keeps_headers_and_events_and_a_rerun_skips_every_session(
    stores: Callable[[str, str], Opener], source_kind: str, target_kind: str
) -> None:
    source, target = stores(source_kind, "source"), stores(target_kind, "target")
    _write(source, SESSIONS)
    progress: list[tuple[int, int, str]] = []

    report = copy_sessions(source(), target(), progress=lambda *step: progress.append(step))

    assert [(s.id, s.status, s.events, s.torn, s.moved) for s in report.sessions] == [
        ("child", "copied", 7, False, False),
        ("crashed", "copied", 8, False, False),
        ("parent", "copied", 13, False, False),
    ]
    assert progress == [(1, 3, "child"), (2, 3, "crashed"), (3, 3, "parent")]
    before = _reads(source, list(SESSIONS))
    assert _reads(target, list(SESSIONS)) == before
    # The copy is exactly what was written: lineage in the header, the open turn still open (no closers).
    assert before["child"][0]["parentSession"] == "parent" and before["child"][0]["delegationDepth"] == 1
    assert [dict(event) for event in before["crashed"][1]] == open_turn_with_chunks()
    assert {session.digest for session in report.sessions} == {read[2] for read in before.values()}

    again = copy_sessions(source(), target())
    assert [(s.id, s.status) for s in again.sessions] == [(i, "skipped") for i in ("child", "crashed", "parent")]
    assert again.ok and again.to_json()["skipped"] == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_target_holding_an_id_with_other_content_is_refused_for_that_session_only(
    stores: Callable[[str, str], Opener], kind: str
) -> None:
    source, target = stores("jsonl-zstd", "source"), stores(kind, "target")
    _write(source, SESSIONS)
    other = {"parent": (header("parent"), closed_turn(0))}  # a prefix of the source's: still other content
    _write(target, other)

    report = copy_sessions(source(), target(), ["parent", "child"])

    refused, copied = report.sessions
    assert refused.status == "failed" and isinstance(refused.error, CopyConflictError)
    assert refused.error.code == "COPY_CONFLICT" and "parent" in str(refused.error)
    assert copied.status == "copied" and not report.ok
    assert _reads(target, ["parent"])["parent"][2] == events_digest(closed_turn(0))  # left untouched
    assert report.to_json()["failed"] == 1
    assert report.to_json()["sessions"][0]["error"]["code"] == "COPY_CONFLICT"


def test_a_different_header_under_the_same_events_is_a_conflict(stores: Callable[[str, str], Opener]) -> None:
    source, target = stores("sqlite", "source"), stores("jsonl-none", "target")
    _write(source, {"s": (header("s"), closed_turn(0))})
    _write(target, {"s": (header("s", parentSession="p", origin="subagent", delegationDepth=1), closed_turn(0))})

    (only,) = copy_sessions(source(), target()).sessions

    assert only.status == "failed" and only.error is not None and only.error.code == "COPY_CONFLICT"
    assert "another header" in str(only.error)


@pytest.mark.parametrize("kind", ["jsonl-none", "jsonl-zstd"])
@pytest.mark.parametrize("target_kind", ["sqlite", "jsonl-zstd"])
def test_a_torn_tail_is_left_out_said_and_the_source_is_not_repaired(
    stores: Callable[[str, str], Opener], kind: str, target_kind: str
) -> None:
    source, target = stores(kind, "source"), stores(target_kind, "target")
    _write(source, {"t": (header("t"), closed_turn(0))})
    backend = source()
    path = backend.locate(header("t"))
    backend.close()
    assert path is not None
    (inject_zstd_torn_tail if kind == "jsonl-zstd" else inject_raw_torn_tail)(path, 6)
    stored = Path(path).read_bytes()

    (only,) = copy_sessions(source(), target()).sessions

    assert (only.status, only.events, only.torn) == ("copied", 6, True)
    assert only.to_json()["torn"] is True
    assert Path(path).read_bytes() == stored  # the copy wrote nothing to its source
    assert _reads(target, ["t"])["t"][2] == events_digest(closed_turn(0))


class _WrittenDuringCopy(JsonlBackend):
    """A source whose session another writer (a second backend over the same store) appends to just
    after the copy has read it: the moment a live writer's batch lands during a copy."""

    def load_stored(self, session_id: str) -> Any:
        stored = super().load_stored(session_id)
        if stored is not None and not getattr(self, "_wrote", False):
            self._wrote = True
            writer = PersistenceCoordinator(SessionStore(), JsonlBackend(self.root, compression="none"))
            try:
                writer.append(session_id, closed_turn(len(stored.events), turn=2))
            finally:
                writer.close()
        return stored


def test_a_session_written_during_the_copy_has_its_durable_prefix_copied_and_is_reported(
    stores: Callable[[str, str], Opener], tmp_path: Path
) -> None:
    root = tmp_path / "live"
    _write(lambda: JsonlBackend(str(root), compression="none"), {"live": (header("live"), closed_turn(0))})
    target = stores("sqlite", "target")

    (only,) = copy_sessions(_WrittenDuringCopy(str(root), compression="none"), target()).sessions

    assert (only.status, only.events, only.moved) == ("copied", 6, True)
    assert _reads(target, ["live"])["live"][2] == events_digest(closed_turn(0))


def test_a_damaged_source_session_fails_alone(stores: Callable[[str, str], Opener]) -> None:
    source, target = stores("jsonl-none", "source"), stores("sqlite", "target")
    _write(source, SESSIONS)
    backend = source()
    path = Path(str(backend.locate(header("child"))))
    backend.close()
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"type": 17}'
    path.write_bytes(b"\n".join(lines))

    report = copy_sessions(source(), target())

    statuses = [(s.id, s.status) for s in report.sessions]
    assert statuses == [("child", "failed"), ("crashed", "copied"), ("parent", "copied")]
    failed = report.sessions[0]
    assert failed.error is not None and failed.error.code == "SESSION_CORRUPT"
    coordinator = PersistenceCoordinator(SessionStore(), target())
    assert [listing.id for listing in coordinator.list()] == ["crashed", "parent"]
    coordinator.close()


def test_a_coordinator_passed_in_stays_open(stores: Callable[[str, str], Opener]) -> None:
    source, target = stores("sqlite", "source"), stores("jsonl-zstd", "target")
    _write(source, {"s": (header("s"), closed_turn(0))})
    with PersistenceCoordinator(SessionStore(), target()) as kept:
        assert copy_sessions(source(), kept).ok
        assert len(kept.read_stored("s").events) == 6  # still usable after the copy


@pytest.mark.parametrize("target_kind", ["jsonl-zstd", "sqlite"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=logs())
def test_copies_of_random_valid_logs_read_back_with_the_same_digest_and_messages(
    target_kind: str, events: list[dict[str, Any]]
) -> None:
    # The drawn logs serve read tests that never validate seeds: a tool result there may lack its surfaceOp.
    events = [{**e, "surfaceOp": "append"} if e["type"] == "tool/result" and "surfaceOp" not in e else e
              for e in events]
    with tempfile.TemporaryDirectory() as tmp:
        source = _opener("jsonl-none", Path(tmp) / "source", None, None)
        target = _opener(target_kind, Path(tmp) / "target", None, None)
        _write(source, {"r": (header("r"), events)})

        (only,) = copy_sessions(source(), target()).sessions

        assert only.status == "copied", only.error
        views = []
        for opener in (source, target):
            coordinator = PersistenceCoordinator(SessionStore(), opener())
            read = coordinator.read_stored("r")
            views.append((events_digest(read.events), coordinator.stored_view("r", keep=False).view.derive_messages()))
            coordinator.close()
        assert views[0][0] == views[1][0] == only.digest
        assert views[0][1] == views[1][1]


def test_the_digest_does_not_depend_on_key_order_or_nesting_depth() -> None:
    reordered = [{"b": [2, {"d": 4, "c": 3}], "a": 1}]
    assert events_digest([{"a": 1, "b": [2, {"c": 3, "d": 4}]}]) == events_digest(reordered)
    assert events_digest([{"a": 1}]) != events_digest([{"a": 2}])
    assert events_digest([{"a": 1}, {"a": 2}]) != events_digest([{"a": 2}, {"a": 1}])
    deep: Any = "leaf"
    for _ in range(600):  # deeper than orjson writes
        deep = {"z": deep, "a": 0}
    assert events_digest([deep]).startswith("sha256:")
    flipped: Any = "leaf"
    for _ in range(600):
        flipped = {"a": 0, "z": flipped}
    assert events_digest([deep]) == events_digest([flipped])
