"""A paged-out session: the inspector keeps no restored log, decodes a page only when it shows a seq in
it, and answers exactly what the restored session answers (pages of three seqs here, so every answer
crosses page edges and packed chunk runs)."""

from __future__ import annotations

import gc
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.inspector.paged import DECODED_PAGES, PagedLog
from agentlog.inspector.views import Inspector, LoadedSession
from agentlog.kernel.events import Event
from agentlog.kernel.jsoncodec import dumps
from agentlog.kernel.packedrun import ChunkRun, expand_items
from agentlog.kernel.session import EventsView, Session, SessionView
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator, StoredView
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend

from .stores import open_backend, open_read_only

Written = tuple[Path, str, dict[str, Any]]
SESSIONS = ("main", "main-fork", "crashed", "hostile")


def _paging(written: Written, page_events: int = 3) -> Inspector:
    root, kind, _facts = written
    return Inspector(open_read_only(root, kind), page_after=None, page_events=page_events)


def _reachable(root: object) -> Iterator[object]:
    """Every object reachable from ``root`` through references, classes, modules and functions left out."""
    seen = {id(root)}
    stack = [root]
    while stack:
        item = stack.pop()
        yield item
        for inner in gc.get_referents(item):
            if isinstance(inner, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)):
                continue
            if id(inner) not in seen:
                seen.add(id(inner))
                stack.append(inner)


def test_a_paged_out_session_answers_what_the_restored_one_answers(written: Written) -> None:
    as_read = Inspector(open_read_only(written[0], written[1]), page_after=None)
    paged = _paging(written)
    try:
        for session_id in SESSIONS:
            paged.page_out(session_id)
            assert paged.load(session_id).stored is None
            summary = as_read.summary(session_id)
            assert paged.summary(session_id) == summary
            last = summary["lastSeq"]
            for start in range(last + 1):
                assert paged.log_page(session_id, start, 4) == as_read.log_page(session_id, start, 4), start
            for seq in range(last + 1):
                assert paged.state_at(session_id, seq) == as_read.state_at(session_id, seq), seq
                assert paged.state_at(session_id, seq, limit=1, messages_from=0) == as_read.state_at(
                    session_id, seq, limit=1, messages_from=0
                )
                assert paged.event(session_id, seq) == as_read.event(session_id, seq), seq
            assert paged.diff(session_id, 0, last) == as_read.diff(session_id, 0, last)
            assert paged.charts(session_id) == as_read.charts(session_id)
            assert paged.export_document(session_id) == as_read.export_document(session_id)
        assert paged.loads == len(SESSIONS)  # each log read once, before it was paged out
    finally:
        paged.close()
        as_read.close()


def test_a_paged_out_session_holds_no_restored_event(written: Written) -> None:
    """Structurally: nothing reachable from the loaded session is a restored session, a view of its log,
    an event or a packed run until a page is read, and then only the pages read (at most
    ``DECODED_PAGES`` of them) hold events."""
    inspector = _paging(written, page_events=1)  # a page per event or packed run: more pages than are kept
    try:
        loaded = inspector.page_out("main")
        paged = loaded.paged
        assert isinstance(paged, PagedLog) and loaded.stored is None
        held = {type(item) for item in _reachable(loaded)}
        assert not held & {Session, SessionView, EventsView, StoredView, Event, ChunkRun}
        assert paged.pages_decoded == 0
        last = loaded.last_seq
        for seq in range(last + 1):
            inspector.event("main", seq)
        assert paged.decoded_pages <= DECODED_PAGES
        events = [item for item in _reachable(loaded) if type(item) is Event]
        assert 0 < len(events) < last + 1  # the pages read last, not the log
    finally:
        inspector.close()


def test_a_log_page_reads_only_its_pages_and_nothing_from_the_store(
    written: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    inspector = _paging(written)
    reads: list[str] = []
    try:
        loaded = inspector.page_out("main")
        paged = loaded.paged
        assert paged is not None
        for cls in (JsonlBackend, SqliteBackend):
            for name in ("load_stored", "load_stored_from", "read_prefix"):
                real = getattr(cls, name)

                def counting(self: Any, *args: Any, _real: Any = real, _name: str = name) -> Any:
                    reads.append(_name)
                    return _real(self, *args)

                monkeypatch.setattr(cls, name, counting)
        page = inspector.log_page("main", 0, 3)
        shown = page["nextSeq"]
        assert paged.pages_decoded <= -(-shown // 3)  # the pages of seqs 0..nextSeq-1, no other
        inspector.state_at("main", loaded.last_seq)
        inspector.event("main", 1)
        assert reads == []  # a page, a state and an event read no log from the store
        assert len(paged) == loaded.last_seq + 1
    finally:
        inspector.close()


def test_paged_log_round_trips_every_event_and_seed(written: Written) -> None:
    """Every seq, every iteration and every seed prefix of the pages equal the restored log's (JSON bytes),
    for pages of one to five seqs; JSONL and SQLite keep chunk runs packed, and the pages keep them so."""
    root, kind, _facts = written
    reader = PersistenceCoordinator(SessionStore(), open_read_only(root, kind))
    try:
        events = reader.stored_view("main", keep=False).view.events
        seed = events.restore_seed()
        assert any(item.__class__ is ChunkRun for item in seed)
        expected = [dumps(event) for event in events]
        for size in range(1, 6):
            paged = PagedLog(seed, len(events), page_events=size)
            assert [dumps(paged[seq]) for seq in range(len(events))] == expected
            assert [dumps(event) for event in paged] == expected
            for n in range(len(events) + 1):
                assert [dumps(event) for event in expand_items(paged.restore_seed(n))] == expected[:n], (size, n)
        with pytest.raises(ValueError):
            PagedLog(seed, len(events) + 1)
    finally:
        reader.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_paged_out_session_is_continued_by_its_stored_suffix(tmp_path: Path, kind: str) -> None:
    """After a writer appends, a paged-out session is continued from its pages and the stored suffix (the
    log is not read again), and it answers what a fresh read answers."""
    from .stores import write_store

    write_store(tmp_path, kind)
    inspector = Inspector(open_read_only(tmp_path, kind), page_after=None, page_events=3)
    try:
        inspector.page_out("main")
        store = al.SessionStore()
        writer = PersistenceCoordinator(store, open_backend(tmp_path, kind))
        session = writer.resume("main")
        session.append("turn/start", {"turn": 3})
        session.append("user/message", al.user_message("more"), {"surfaceOp": "append"})
        session.append("turn/end", {"turn": 3, "reason": {"kind": "completed"}})
        store.flush(session)
        store.dispose(session)
        writer.close()
        summary = inspector.summary("main")
        assert (inspector.loads, inspector.extensions) == (1, 1)
        fresh = Inspector(open_read_only(tmp_path, kind), page_after=None)
        try:
            assert summary == fresh.summary("main")
            last = summary["lastSeq"]
            for seq in range(last + 1):
                assert inspector.state_at("main", seq) == fresh.state_at("main", seq), seq
            assert inspector.log_page("main", 0, 1000) == fresh.log_page("main", 0, 1000)
        finally:
            fresh.close()
        again: LoadedSession = inspector.page_out("main")  # the continued session pages out too
        assert again.stored is None and inspector.state_at("main", last)["messages"][-1]["role"] == "user"
    finally:
        inspector.close()


def test_the_background_pager_pages_out_a_loaded_session(written: Written) -> None:
    """With ``page_after=0`` a loaded session is paged out by the pager thread (the test waits for the
    session's own report that it is paged out)."""
    root, kind, _facts = written
    inspector = Inspector(open_read_only(root, kind), page_after=0)
    try:
        loaded = inspector.load("main")
        assert loaded.wait_paged(60)
        assert loaded.paged is not None and loaded.stored is None
        assert inspector.summary("main")["lastSeq"] == loaded.last_seq
    finally:
        inspector.close()
