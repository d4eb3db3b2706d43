"""Following a running session: the loaded session is continued by its stored suffix, never read again.

The backend is a real JSONL store whose whole-log read (``load_stored``) is counted; the writer is
another coordinator in another thread, flushing in the middle of turns as a running agent does.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.inspector.views import Inspector
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

APPENDS = 10_000
FLUSH_EVERY = 37
"""Events per flush: not a multiple of a turn's length, so most flushes leave a turn open."""


class CountingJsonlBackend(JsonlBackend):
    """The JSONL backend, read-only, counting its whole-log reads (whole, or streamed a batch at a time)."""

    def __init__(self, root: Path) -> None:
        super().__init__(str(root), compression="auto", read_only=True)
        self.whole_reads = 0

    def load_stored(self, session_id: str) -> Any:
        self.whole_reads += 1
        return super().load_stored(session_id)

    def stream_stored(self, session_id: str, batch_bytes: int = 1 << 21) -> Any:
        self.whole_reads += 1
        return super().stream_stored(session_id, batch_bytes)


def _turn(session: al.Session, turn: int) -> list[tuple[str, Any, Any]]:
    """One turn's appends: a prompt, a streamed reply with a tool call, its result, a final answer."""
    call_id = f"c{turn}"
    reply = al.assistant_message(
        [al.text_block("Reading."), al.tool_call_block(call_id, "read_file", "{}")], provider="p", model="m"
    )
    answer = al.assistant_message([al.text_block(f"Done {turn}.")], provider="p", model="m")
    append = {"surfaceOp": "append"}
    return [
        ("turn/start", {"turn": turn}, None),
        ("user/message", al.user_message(f"Step {turn}"), append),
        ("step/start", {"turn": turn, "step": 1}, None),
        *[
            ("assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": t}}, None)
            for t in ("Rea", "ding", ".")
        ],
        ("assistant/message", {"turn": turn, "step": 1, "message": reply}, append),
        ("tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "read_file", "arguments": "{}"}, None),
        ("tool/result", {"turn": turn, "step": 1, "message": al.tool_result_message(call_id, "x" * turn)}, append),
        ("step/end", {"turn": turn, "step": 1}, None),
        ("step/start", {"turn": turn, "step": 2}, None),
        ("assistant/message", {"turn": turn, "step": 2, "message": answer}, append),
        ("step/end", {"turn": turn, "step": 2}, None),
        ("turn/end", {"turn": turn, "reason": {"kind": "completed"}}, None),
    ]


def _write(root: Path, session_id: str, turns: range, store: SessionStore, session: al.Session | None) -> al.Session:
    """Append ``turns`` to ``session_id`` (created when ``session`` is None), flushing every few events."""
    if session is None:
        session = store.create(session_id, meta={"cwd": "/work"})
    pending = 0
    for turn in turns:
        for etype, data, intent in _turn(session, turn):
            session.append(etype, data, intent)  # type: ignore[call-overload]
            pending += 1
            if pending == FLUSH_EVERY:
                store.flush(session)
                pending = 0
    store.flush(session)
    return session


def _assert_equals_a_fresh_load(root: Path, inspector: Inspector, session_id: str) -> None:
    fresh = Inspector(JsonlBackend(str(root), compression="auto", read_only=True))
    reference = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root), compression="auto", read_only=True))
    try:
        summary = inspector.summary(session_id)
        assert summary == fresh.summary(session_id)
        last = summary["lastSeq"]
        point = reference.view(session_id).at(last)
        messages: list[Any] = []
        nodes: list[int] = []
        state: dict[str, Any] = {"messageCount": 1}
        while len(messages) < state["messageCount"]:
            state = inspector.state_at(session_id, last, messages_from=len(messages), limit=2000)
            assert state == fresh.state_at(session_id, last, messages_from=len(messages), limit=2000)
            messages.extend(state["messages"])
            nodes.extend(node["seq"] for node in state["surface"])
        assert messages == thaw(point.derive_messages().to_list())
        assert nodes == list(point.surface.nodes)
        assert state["requestHeader"] == thaw(point.request_header())
        for seq in (0, last // 2, max(0, last - 30)):
            assert inspector.log_page(session_id, seq, 100) == fresh.log_page(session_id, seq, 100)
    finally:
        reference.close()
        fresh.close()


@pytest.mark.parametrize("page_after", [None, 0.0])
def test_following_ten_thousand_appends_reads_the_log_once(tmp_path: Path, page_after: float | None) -> None:
    """A writer appends 10,000 events in flushes of 37 while a follower refreshes the inspector after
    each batch of tail notifications (as the page does after its server-sent events): the log is read
    whole once, every later state comes from the stored suffix, and the last state is a fresh load's.
    With ``page_after=0`` the pager pages each loaded or continued session out at once, while requests
    and continuations go on: a session is continued from its pages as well."""
    store = SessionStore()
    writer = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    session = _write(tmp_path, "run", range(1, 2), store, None)
    first_stored = len(session.events)
    turns = range(2, 2 + APPENDS // len(_turn(session, 0)))
    final_last = first_stored + len(turns) * len(_turn(session, 0)) - 1
    backend = CountingJsonlBackend(tmp_path)
    inspector = Inspector(backend, page_after=page_after)
    refreshes = 0
    try:
        assert inspector.summary("run")["lastSeq"] == first_stored - 1
        assert backend.whole_reads == 1

        def refresh(notified: int) -> None:
            summary = inspector.summary("run")
            last = summary["lastSeq"]
            assert last >= notified  # the notified event is on the page
            inspector.state_at("run", last)
            inspector.log_page("run", max(0, last - 20), 200)

        failure: list[BaseException] = []

        def write() -> None:
            try:
                _write(tmp_path, "run", turns, store, session)
            except BaseException as err:  # reported by the test thread
                failure.append(err)

        async def follow() -> None:
            nonlocal refreshes
            seqs: asyncio.Queue[int] = asyncio.Queue()

            async def tail() -> None:
                async for event in inspector.reader.tail("run", from_seq=first_stored, poll_interval=0.02):
                    seqs.put_nowait(event["seq"])

            task = asyncio.create_task(tail())
            try:
                notified = -1
                while notified < final_last:
                    notified = await seqs.get()
                    while not seqs.empty():  # the notifications that came meanwhile: one refresh for all
                        notified = seqs.get_nowait()
                    await asyncio.to_thread(refresh, notified)
                    refreshes += 1
            finally:
                task.cancel()

        thread = threading.Thread(target=write)
        thread.start()
        try:
            asyncio.run(asyncio.wait_for(follow(), timeout=300))
        finally:
            thread.join()
        assert not failure, failure
        assert refreshes > 1
        assert backend.whole_reads == 1 and inspector.loads == 1
        assert inspector.extensions >= 1
        if page_after is not None:
            assert inspector.load("run").wait_paged(120)  # the last state is served from the pages
        _assert_equals_a_fresh_load(tmp_path, inspector, "run")
    finally:
        inspector.close()
        store.dispose(session)
        writer.close()


def test_a_log_left_open_is_extended_and_its_closers_recomputed(tmp_path: Path) -> None:
    """A flush in the middle of a turn is shown with the closers a resume would add; the next flush
    continues the turn: the closers go, the new events follow the stored ones."""
    store = SessionStore()
    writer = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    session = store.create("open", meta={"cwd": "/work"})
    appends = _turn(session, 1)
    backend = CountingJsonlBackend(tmp_path)
    inspector = Inspector(backend)
    try:
        for etype, data, intent in appends[:9]:  # up to the tool call: a resume would close it
            session.append(etype, data, intent)  # type: ignore[call-overload]
        store.flush(session)
        opened = inspector.summary("open")
        assert opened["status"] == "repairable" and opened["closers"] > 0
        for etype, data, intent in appends[9:]:
            session.append(etype, data, intent)  # type: ignore[call-overload]
        store.flush(session)
        closed = inspector.summary("open")
        assert (closed["status"], closed["closers"], closed["storedEvents"]) == ("ok", 0, len(appends))
        assert backend.whole_reads == 1 and inspector.extensions == 1
        _assert_equals_a_fresh_load(tmp_path, inspector, "open")
    finally:
        inspector.close()
        store.dispose(session)
        writer.close()


def test_a_rewritten_log_is_read_whole_again(tmp_path: Path) -> None:
    """A log replaced by another history under the same id (same header, a different event at the last
    loaded seq) is not extended: its anchor differs, so it is read whole."""
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    store = SessionStore(now=lambda: next(clock))
    writer = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "one")))
    session = _write(tmp_path / "one", "same", range(1, 3), store, None)
    store.dispose(session)
    writer.close()
    clock = iter(range(1_700_000_000_000, 1_800_000_000_000, 1000))
    other_store = SessionStore(now=lambda: next(clock))
    other_writer = PersistenceCoordinator(other_store, JsonlBackend(str(tmp_path / "two")))
    other = _write(tmp_path / "two", "same", range(1, 2), other_store, None)
    for etype, data, intent in _turn(other, 2)[:-1]:
        other.append(etype, data, intent)  # type: ignore[call-overload]
    other.append("turn/end", {"turn": 2, "reason": {"kind": "interrupted"}})  # where "one" completed turn 2
    _write(tmp_path / "two", "same", range(3, 5), other_store, other)
    other_store.dispose(other)
    other_writer.close()

    backend = CountingJsonlBackend(tmp_path / "one")
    inspector = Inspector(backend)
    try:
        before = inspector.summary("same")
        [log] = [path.relative_to(tmp_path / "two") for path in (tmp_path / "two").rglob("session.jsonl*")]
        shutil.copyfile(tmp_path / "two" / log, tmp_path / "one" / log.with_name("replacement"))
        os.replace(tmp_path / "one" / log.with_name("replacement"), tmp_path / "one" / log)
        after = inspector.summary("same")
        assert after["lastSeq"] > before["lastSeq"]
        assert backend.whole_reads == 2 and inspector.extensions == 0
        _assert_equals_a_fresh_load(tmp_path / "one", inspector, "same")
    finally:
        inspector.close()


def test_an_extended_session_continues_its_surface_timeline(tmp_path: Path) -> None:
    """Each extension continues the loaded surface timeline by the new events (a copy folded on, the
    loaded one unchanged; never folded again from seq 0): after every flush, with replacements, streamed
    chunk runs and turns left open (closers), ``state_at(seq)`` is ``view.at(seq)`` at every seq."""
    from agentlog.kernel.surface import fold_surface
    from agentlog.testing.builders import user_msg

    store = SessionStore()
    writer = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    session = store.create("grow", meta={"cwd": "/work"})
    backend = CountingJsonlBackend(tmp_path)
    inspector = Inspector(backend)
    try:
        timelines: list[Any] = []
        for turn in range(1, 7):
            appends = _turn(session, turn)
            half = len(appends) // 2
            for cut in (appends[:half], appends[half:]):  # a flush in the middle of the turn, then its end
                for etype, data, intent in cut:
                    session.append(etype, data, intent)  # type: ignore[call-overload]
                if turn % 2 == 0 and cut is appends[half:]:  # replace the last nodes by a summary
                    shadow = list(session.surface.nodes)[-turn // 2 :]
                    op = {"op": "replace", "start": shadow[0], "end": shadow[-1]}
                    summary = user_msg(f"summary {turn}", source={"kind": "plugin", "plugin": "t"})
                    session.append("user/message", summary, {"surfaceOp": op, "sourceEventSeqs": shadow})
                store.flush(session)
                last = inspector.summary("grow")["lastSeq"]
                timeline = inspector.load("grow").timeline()
                timelines.append((timeline, timeline.last_seq))
                reference = PersistenceCoordinator(
                    SessionStore(), JsonlBackend(str(tmp_path), compression="auto", read_only=True)
                )
                try:
                    view = reference.view("grow")
                    assert view.seq == last
                    for seq in range(last + 1):
                        point = view.at(seq)
                        state = inspector.state_at("grow", seq, limit=2000)
                        assert state["messages"] == thaw(point.derive_messages().to_list()), seq
                        assert [node["seq"] for node in state["surface"]] == list(point.surface.nodes), seq
                        fold = fold_surface(point.events)
                        assert [r["seq"] for r in state["replacements"]] == [r.seq for r in fold.replacements], seq
                finally:
                    reference.close()
        assert backend.whole_reads == 1 and inspector.extensions == len(timelines) - 1
        assert len({id(timeline) for timeline, _ in timelines}) == len(timelines)  # each a continued copy
        assert all(timeline.last_seq == last_seq for timeline, last_seq in timelines)  # the loaded ones unchanged
        _assert_equals_a_fresh_load(tmp_path, inspector, "grow")
    finally:
        inspector.close()
        store.dispose(session)
        writer.close()
