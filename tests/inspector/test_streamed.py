"""The streamed load (:mod:`agentlog.inspector.streamed`): a session read, checked and paged a batch at a
time — from a JSONL file, SQLite or PostgreSQL — answers exactly as the whole validated read does, holds
no restored session, and every log the whole read refuses or repairs is left to the whole read (the same
error, the same closers); a session that changes while it is streamed is read again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

import agentlog as al
from agentlog.errors import AgentlogError, SessionTailChangedError
from agentlog.inspector import streamed
from agentlog.inspector.views import Inspector
from agentlog.persistence.backend import Backend, StreamsStored
from agentlog.persistence.coordinator import PersistenceCoordinator

from .stores import open_backend, open_read_only, write_store

KINDS = ("jsonl", "jsonl-zstd", "sqlite", "postgres")


class _Stores:
    """Writable and read-only backends of one store of ``kind`` (PostgreSQL: a schema of the test database)."""

    def __init__(self, request: pytest.FixtureRequest, root: Path, kind: str) -> None:
        self.root, self.kind = root, kind
        if kind == "postgres":
            self.dsn = request.getfixturevalue("pg_dsn")
            self.schema = request.getfixturevalue("pg_schema")

    def open(self, *, read_only: bool) -> Backend:
        if self.kind == "postgres":
            from agentlog.persistence.postgres import PostgresBackend

            return PostgresBackend(self.dsn, schema=self.schema, read_only=read_only)
        return open_read_only(self.root, self.kind) if read_only else open_backend(self.root, self.kind)


def _answers(inspector: Inspector, session_id: str) -> list[bytes]:
    """Everything the pages ask of a session, at every seq, as JSON."""
    summary = inspector.summary(session_id)
    last = summary["lastSeq"]
    out = [orjson.dumps(summary), orjson.dumps(inspector.charts(session_id))]
    for seq in range(last + 1):
        out.append(orjson.dumps(inspector.state_at(session_id, seq, shadowed_between=(0, last))))
        out.append(orjson.dumps(inspector.log_page(session_id, seq, 7)))
        out.append(orjson.dumps(inspector.event(session_id, seq)))
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_bytes", [64, streamed.BATCH_BYTES])
def test_a_streamed_load_answers_as_the_whole_read(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, batch_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session of the test store (a pruned result and a compaction: replacements; chunks; a crashed
    turn with closers; hostile content), in batches of a few events and in the default batches."""
    stores = _Stores(request, tmp_path, kind)
    write_store(tmp_path, kind, backend=stores.open(read_only=False))
    monkeypatch.setattr(streamed, "BATCH_BYTES", batch_bytes)
    fast = Inspector(stores.open(read_only=True), page_after=None, search=False)
    whole = Inspector(stores.open(read_only=True), page_after=None, search=False, stream=False)
    try:
        for session_id in ("main", "main-fork", "crashed", "hostile"):
            loaded = fast.load(session_id)
            assert loaded.stored is None and loaded.paged is not None  # streamed: never restored whole
            assert whole.load(session_id).stored is not None
            assert _answers(fast, session_id) == _answers(whole, session_id), session_id
        assert fast.summary("crashed")["closers"] > 0
    finally:
        fast.close()
        whole.close()


def _rewrite(root: Path, session_id: str, change: Any) -> None:
    """A raw JSONL log with ``change(records)`` applied to its parsed records (the header first)."""
    [path] = [p for p in root.rglob("session.jsonl") if p.parent.name == session_id]
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    change(records)
    path.write_bytes(b"".join(json.dumps(record).encode() + b"\n" for record in records))


def _refusal(inspector: Inspector, session_id: str) -> tuple[str, str] | None:
    try:
        inspector.summary(session_id)
    except AgentlogError as err:
        return err.code, str(err)
    return None


def _first(records: list[Any], etype: str) -> dict[str, Any]:
    return next(record for record in records[1:] if record.get("type") == etype)


DAMAGE = {
    "a log-only event carrying a surface op": lambda r: _first(r, "step/start").update(surfaceOp="append"),
    "a message without its surface op": lambda r: _first(r, "user/message").pop("surfaceOp"),
    "a message with a null surface op": lambda r: _first(r, "user/message").update(surfaceOp=None),
    "a message with a numeric surface op": lambda r: _first(r, "assistant/message").update(surfaceOp=1),
    "sources on a log-only event": lambda r: _first(r, "turn/end").update(sourceEventSeqs=[0]),
    "a source seq from the future": lambda r: _first(r, "user/message").update(sourceEventSeqs=[10_000]),
    "a replacement of a node not on the surface": lambda r: (
        _first(r, "compaction/checkpoint").update(surfaceOp={"op": "replace", "start": 10_000, "end": 10_001})
        if any(x.get("type") == "compaction/checkpoint" for x in r)
        else _first(r, "user/message").update(surfaceOp={"op": "replace", "start": 10_000, "end": 10_001})
    ),
    "a seq gap": lambda r: _first(r, "turn/end").update(seq=99_999),
    "a seq written as a float": lambda r: _first(r, "turn/end").update(seq=float(_first(r, "turn/end")["seq"])),
    "an unknown event type": lambda r: _first(r, "turn/end").update(type="no/such-type"),
    "bad data": lambda r: _first(r, "step/start").update(data={"turn": "one", "step": 1}),
    "an invalid message": lambda r: _first(r, "user/message")["data"].update(content=42),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_log_the_whole_read_refuses_is_refused_the_same_way(tmp_path: Path, damage: str) -> None:
    """The streamed load leaves what it cannot accept to the whole read: the same typed refusal."""
    write_store(tmp_path, "jsonl")
    _rewrite(tmp_path, "main", DAMAGE[damage])
    fast = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False)
    whole = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False, stream=False)
    try:
        refusal = _refusal(whole, "main")
        assert refusal is not None, damage
        assert _refusal(fast, "main") == refusal
    finally:
        fast.close()
        whole.close()


def test_a_torn_tail_is_left_to_the_whole_read(tmp_path: Path) -> None:
    """A raw log cut inside its last record: the whole read reports the torn tail (repairable)."""
    write_store(tmp_path, "jsonl")
    [path] = [p for p in tmp_path.rglob("session.jsonl") if p.parent.name == "main"]
    path.write_bytes(path.read_bytes() + b'{"type": "turn/st')
    fast = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False)
    try:
        assert fast.summary("main")["tornTail"] is True
        assert fast.load("main").stored is not None  # read whole
    finally:
        fast.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_session_appended_to_while_it_is_streamed_is_refused_and_read_again(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """Batches read before an append and after it are not one revision's log: the stream says so, typed
    (a JSONL stream reads the file's bytes at one revision first: it gives the log before the append), and
    the inspector's next read sees the append."""
    stores = _Stores(request, tmp_path, kind)
    write_store(tmp_path, kind, backend=stores.open(read_only=False))
    reader = stores.open(read_only=True)
    assert isinstance(reader, StreamsStored)
    before = reader.read_revision("main")
    stream = reader.stream_stored("main", 64)  # a batch every few events
    assert stream is not None
    first = next(batch for batch in stream.batches if batch)
    assert first and first[0]["seq"] == 0
    writer = PersistenceCoordinator(al.SessionStore(), stores.open(read_only=False))
    try:
        session = writer.resume("main")
        session.append("session/title", {"title": "Renamed", "messageSeqs": [1], "source": {"kind": "user"}})
        writer.store.flush(session)
        last = session.events[-1].seq
    finally:
        writer.close()
    if kind.startswith("jsonl"):  # the file's bytes were read at one revision before the first batch
        rest = [item for batch in stream.batches for item in batch]
        assert rest[-1]["seq"] < last and stream.revision == before != reader.read_revision("main")
    else:  # rows are read a page at a time: pages from both sides of the append are refused
        with pytest.raises(SessionTailChangedError) as info:
            for _ in stream.batches:
                pass
        assert info.value.code == "SESSION_TAIL_CHANGED"
    inspector = Inspector(reader, page_after=None, search=False)
    try:
        assert inspector.summary("main")["lastSeq"] == last
        assert inspector.load("main").paged is not None  # streamed again
    finally:
        inspector.close()


_ROW_AT = "(SELECT min(seq) FROM events WHERE session_id = 'main' AND seq >= {0})"
SQL_DAMAGE = {
    "an unparsable row": "UPDATE events SET data = '{\"turn\": 1, ' WHERE session_id = 'main' AND seq = "
    + _ROW_AT.format(5),
    "a missing row": "DELETE FROM events WHERE session_id = 'main' AND seq = " + _ROW_AT.format(7),
    "a row of another seq": "UPDATE events SET seq = 900 WHERE session_id = 'main' AND seq = " + _ROW_AT.format(9),
}


@pytest.mark.parametrize("damage", sorted(SQL_DAMAGE))
def test_a_damaged_sqlite_row_is_refused_as_the_whole_read_refuses_it(tmp_path: Path, damage: str) -> None:
    """Damage met a page at a time ends the stream; the whole read then names it exactly."""
    import sqlite3

    write_store(tmp_path, "sqlite")
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as conn:
        conn.execute(SQL_DAMAGE[damage])
    conn.close()
    fast = Inspector(open_read_only(tmp_path, "sqlite"), page_after=None, search=False)
    whole = Inspector(open_read_only(tmp_path, "sqlite"), page_after=None, search=False, stream=False)
    try:
        refusal = _refusal(whole, "main")
        assert refusal is not None and refusal[0] == "SESSION_CORRUPT", refusal
        assert _refusal(fast, "main") == refusal
    finally:
        fast.close()
        whole.close()
