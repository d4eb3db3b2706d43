"""``verify``, ``show --log`` and ``show --at`` read a stored session once (issue 14, "Resume at any size").

``verify`` and ``show --log`` used to read the raw stored prefix (``backend.load_stored``) for what only
it tells (its length, a torn tail, an interrupted last turn) and then read the session again for the
balanced view; ``show --at SEQ`` built a second session from the view's events (every event expanded and
the whole log validated again) to take one earlier moment of it. Now one validated read answers all
of it (:meth:`PersistenceCoordinator.stored_view`, :meth:`SessionView.at`).

What must not change is compared here against the old way, computed inside the tests: the raw prefix's
facts next to the view, and ``Session.create(seed=events).at(seq)`` for the earlier moment. The sessions
are clean, interrupted (in a step's chunks, and with a call unanswered), torn (file stores only: a
SQLite row cannot tear), compacted (a prune and a checkpoint; ``--at`` before it shows the uncompacted
view), on jsonl raw, jsonl-zstd and SQLite; damaged ones must fail with the very same error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import agentlog as al
import agentlog.persistence.jsonl.backend as jsonl_module
import agentlog.persistence.sqlite.backend as sqlite_module
from agentlog.cli._marks import CheckpointMark, log_marks, mark_of, marks_json, seq_ranges, surface_marks
from agentlog.cli.commands import PENDING_MARK, app
from agentlog.cli.options import SQLITE_FILENAME
from agentlog.cli.render import _event_line, _short, _transcript
from agentlog.errors import AgentlogError, ArgumentTypeError, SeqOutOfRangeError, SessionNotFoundError
from agentlog.kernel.chunkrows import ChunkRun
from agentlog.kernel.invariants import check_tool_pairing
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.messages import (
    assistant_message,
    text_block,
    text_delta,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.repair import interrupted_turn_closers
from agentlog.kernel.session import Session
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from kernel import test_lazy_chunks as lazy_suite

from .test_compaction_cli import _compact, _prune

runner = CliRunner()
SID = "s"
KINDS = ("jsonl-none", "jsonl-zstd", "sqlite")
CASES = (
    "clean",
    "interrupted",
    "unanswered",
    "torn",
    "torn-interrupted",
    "compacted",
    "compacted-interrupted",
    "forked",
    "forked-interrupted",
)
TORN_CASES = {"torn", "torn-interrupted"}


def _cases() -> Iterator[tuple[str, str]]:
    for kind in KINDS:
        for case in CASES:
            if kind == "sqlite" and case in TORN_CASES:
                continue  # a SQLite row is written by a transaction: it never tears
            yield kind, case


KIND_CASES = list(_cases())


# --- stores and sessions ----------------------------------------------------------------------------


def backend(kind: str, root: Path, *, read_only: bool = False) -> Any:
    """The backend the CLI opens for ``--store root`` (read-only: JSONL reads whichever encoding)."""
    if kind == "sqlite":
        return SqliteBackend(str(root / SQLITE_FILENAME), read_only=read_only)
    if read_only:
        return JsonlBackend(str(root), compression="auto", read_only=True)
    return JsonlBackend(str(root), compression="zstd" if kind == "jsonl-zstd" else "none")


def store_args(kind: str, root: Path) -> list[str]:
    return ["--store", str(root), "--backend", "sqlite" if kind == "sqlite" else "jsonl"]


def _turn(session: al.Session, turn: int, *, open_at: str | None = None) -> int:
    """One tool turn: chunks (packed into runs when stored), the message, the call and its result.
    ``open_at`` stops it early ("chunks": in the streamed chunks; "call": the call unanswered), as a
    crash would. Returns the seq of the tool result (-1 when there is none)."""
    append = session.append
    append("turn/start", {"turn": turn})
    append("user/message", user_message(f"question {turn}", id=f"u{turn}"), {"surfaceOp": "append"})
    append("step/start", {"turn": turn, "step": 1})
    if turn == 1:
        header = {"config": {"provider": "deepseek", "model": "deepseek-chat"}, "system": "Be careful.", "tools": []}
        append("request/header", {"header": header, "reason": "initial"})
        append("request/context", {"cwd": "/work", "turn": turn})
    seqs = []
    for index in range(8):
        seqs.append(session.seq)
        append("assistant/chunk", {"turn": turn, "step": 1, "chunk": text_delta(0, f"w{turn}.{index} ")})
    if open_at == "chunks":
        return -1
    call = f"c{turn}"
    blocks = [text_block(f"reading {turn}"), tool_call_block(call, "read_file", "{}")]
    message = assistant_message(blocks, provider="deepseek", model="deepseek-chat", id=f"a{turn}")
    append(
        "assistant/message",
        {"turn": turn, "step": 1, "message": message},
        {"surfaceOp": "append", "sourceEventSeqs": seqs},
    )
    append("tool/call", {"turn": turn, "step": 1, "callId": call, "name": "read_file", "arguments": "{}"})
    if open_at == "call":
        return -1
    result = tool_result_message(call, [{"type": "text", "text": f"result {turn} " * 40}], id=f"r{turn}")
    append("tool/result", {"turn": turn, "step": 1, "message": result}, {"surfaceOp": "append"})
    result_seq = session.seq - 1
    append("step/end", {"turn": turn, "step": 1})
    return result_seq


def _answer(session: al.Session, turn: int) -> None:
    session.append("step/start", {"turn": turn, "step": 2})
    message = assistant_message(
        [text_block(f"answer {turn}")], provider="deepseek", model="deepseek-chat", id=f"b{turn}"
    )
    session.append("assistant/message", {"turn": turn, "step": 2, "message": message}, {"surfaceOp": "append"})
    session.append("step/end", {"turn": turn, "step": 2})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


def write_case(kind: str, root: Path, case: str, session_id: str = SID) -> None:
    """Store one session of ``case`` through a live, persisted session (then damage it, for a torn case)."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, backend(kind, root))
    try:
        if case.startswith("forked"):  # the child's stored log: the parent's events, then the end-seed marker
            parent = store.create("parent", meta={"cwd": "/work"})
            for turn in (1, 2):
                _turn(parent, turn)
                _answer(parent, turn)
            store.flush(parent)
            child = store.fork("parent", child_id=session_id)
            if case == "forked-interrupted":
                _turn(child, 3, open_at="chunks")
            store.flush(child)
            return
        session = store.create(session_id, meta={"cwd": "/work"})
        _turn(session, 1)
        _answer(session, 1)
        first_turn = list(session.surface.nodes)
        result = _turn(session, 2)
        if case.startswith("compacted"):
            _prune(session, result)
            _compact(session, 2, first_turn)
        _answer(session, 2)
        if case in ("interrupted", "torn-interrupted", "compacted-interrupted"):
            _turn(session, 3, open_at="chunks")
        elif case == "unanswered":
            _turn(session, 3, open_at="call")
        store.flush(session)
        next_seq = len(session.events)
    finally:
        coordinator.close()
    if case in TORN_CASES:
        tear(kind, root, session_id, next_seq)


def tear(kind: str, root: Path, session_id: str, seq: int) -> None:
    """A write cut short after the committed prefix: half a record (raw) or half a frame (zstd)."""
    record = orjson.dumps({"type": "assistant/chunk", "seq": seq, "time": 1, "data": {"turn": 9, "text": "x" * 5000}})
    if kind == "jsonl-zstd":
        (log,) = root.glob(f"*/{session_id}/session.jsonl.zstd")
        frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(record + b"\n")
        torn = frame[: len(frame) // 2]
    else:
        (log,) = root.glob(f"*/{session_id}/session.jsonl")
        torn = record[: len(record) // 2]
    with log.open("ab") as handle:
        handle.write(torn)


# --- the old way: the raw stored prefix read beside the view ------------------------------------------


def old_verify(kind: str, root: Path, session_id: str) -> dict[str, Any]:
    """``verify``'s result for one session as the command computed it before it read the log once:
    ``load_stored`` for the raw facts, then the view, validated, then the tool pairing."""
    return old_verify_on(backend(kind, root, read_only=True), session_id)


def old_verify_on(storage: Any, session_id: str) -> dict[str, Any]:
    """:func:`old_verify` over an open read-only backend."""
    reader = PersistenceCoordinator(al.SessionStore(), storage)
    result: dict[str, Any] = {"id": session_id, "status": "ok", "events": None, "error": None, "note": None}
    try:
        stored = reader.backend.load_stored(session_id)
        if stored is None:
            raise SessionNotFoundError(f'session "{session_id}" not found')
        count, torn = len(stored.events), stored.torn_marker is not None
        try:
            interrupted: bool | None = bool(interrupted_turn_closers(stored.events))
        except Exception:
            interrupted = None
        view = reader.view(session_id)
        check_tool_pairing(view.derive_messages(), session_id, view.events)
        if interrupted is None:
            again = reader.backend.load_stored(session_id)
            assert again is not None
            interrupted = bool(interrupted_turn_closers(again.events))
    except AgentlogError as err:
        result["status"] = "failed"
        result["error"] = {"code": err.code, "message": str(err)}
        return result
    finally:
        reader.close()
    result["events"] = count
    notes = []
    if torn:
        notes.append("torn tail after the committed prefix (removed on the next load)")
    if interrupted:
        notes.append("interrupted turn (closed on the next load)")
    if notes:
        result["status"] = "repairable"
        result["note"] = "; ".join(notes)
    return result


def old_read(kind: str, root: Path) -> tuple[Any, int, bool]:
    """``(view, last stored seq, torn)`` as ``show --log`` took them: the view and the raw prefix."""
    reader = PersistenceCoordinator(al.SessionStore(), backend(kind, root, read_only=True))
    try:
        stored = reader.backend.load_stored(SID)
        assert stored is not None
        return reader.view(SID), stored.events[-1]["seq"], stored.torn_marker is not None
    finally:
        reader.close()


def expected_log(kind: str, root: Path) -> tuple[bytes, bytes]:
    """``show --log --json`` and ``show --log`` as the command printed them."""
    view, last_stored, torn = old_read(kind, root)
    events = view.events
    pending = [event["seq"] for event in events if event["seq"] > last_stored]
    marks = {mark.seq: mark for mark in log_marks(events)}
    document = {
        "sessionId": SID,
        "header": thaw(view.header),
        "events": thaw(events.to_list()),
        "storedEvents": len(events) - len(pending),
        "wouldBeAddedOnResume": pending,
        "tornTail": torn,
        "compaction": [mark.to_json() for mark in marks.values()],
    }
    lines = []
    for event in events:
        line = _event_line(event)
        lines.append(f"{line}  {PENDING_MARK}" if event["seq"] > last_stored else line)
        mark = marks.get(event["seq"])
        if isinstance(mark, CheckpointMark):
            lines.append(f"{'':>6}  ↳ {mark.label}: shadows seqs {seq_ranges(mark.shadowed_seqs) or 'nothing'}")
        elif mark is not None:
            lines.append(f"{'':>6}  ↳ {mark.label}: replaces seq {mark.original_seq}")
    if torn:
        lines.append(f"(a torn tail after seq {last_stored} is not shown; it would be removed on resume)")
    return _pretty(document), "".join(line + "\n" for line in lines).encode()


def old_point(view: Any, seq: int) -> Any:
    """``show --at``'s moment as the command built it: a second session seeded with the view's events."""
    return Session.create(view.id, seed=list(view.events), header=view.header).at(seq)


def expected_at(view: Any, seq: int) -> tuple[bytes, bytes]:
    """``show --at SEQ --json`` and ``show --at SEQ`` as the command printed them."""
    point = old_point(view, seq)
    messages = thaw(point.derive_messages().to_list())
    request_header = thaw(point.request_header())
    marks = surface_marks(point.events, point.surface.nodes)
    document = {
        "sessionId": SID,
        "seq": seq,
        "event": {"type": view.events[seq]["type"]},
        "messages": messages,
        "messageSeqs": [s for s, _ in marks],
        "compaction": marks_json(marks),
        "requestHeader": request_header,
        "requestContext": thaw(point.request_context()),
    }
    lines = [f"session {SID} at seq {seq} ({view.events[seq]['type']}): {len(messages)} messages"]
    if request_header is None:
        lines.append("request header: none yet")
    else:
        config = request_header.get("config") or {}
        tools = [tool.get("name") for tool in request_header.get("tools") or ()]
        named = ", ".join(tools) or "none"  # no tools is said, not left blank
        lines.append(f"request header: {config.get('provider')}/{config.get('model')}, tools: {named}")
        if request_header.get("system"):
            lines.append(f"system: {_short(str(request_header['system']))}")
    lines.extend(_transcript(messages, marks=[mark for _, mark in marks]))
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n", "".join(line + "\n" for line in lines).encode()


def _pretty(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def run(*args: str) -> Any:
    return runner.invoke(app, list(args))


# --- one read ---------------------------------------------------------------------------------------


class _Reads:
    """The ``load_stored`` calls of the counting backends below, by session id."""

    calls: ClassVar[list[str]] = []


class CountingJsonl(JsonlBackend):
    """The real JSONL backend, counting its whole-log reads."""

    def load_stored(self, session_id: str) -> Any:
        _Reads.calls.append(session_id)
        return super().load_stored(session_id)


class CountingSqlite(SqliteBackend):
    """The real SQLite backend, counting its whole-log reads."""

    def load_stored(self, session_id: str) -> Any:
        _Reads.calls.append(session_id)
        return super().load_stored(session_id)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The CLI's backends (it imports the classes from their modules when it opens a store) count reads."""
    monkeypatch.setattr(jsonl_module, "JsonlBackend", CountingJsonl)
    monkeypatch.setattr(sqlite_module, "SqliteBackend", CountingSqlite)
    _Reads.calls.clear()
    yield _Reads.calls
    _Reads.calls.clear()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "command",
    [
        ["verify", SID, "--json"],
        ["verify", SID],
        ["verify", "--json"],
        ["show", SID, "--log"],
        ["show", SID, "--log", "--json"],
        ["show", SID, "--at", "5"],
        ["show", SID],
        ["show", SID, "--json"],
    ],
    ids=" ".join,
)
def test_each_command_reads_the_stored_log_once(
    kind: str, command: list[str], tmp_path: Path, counted: list[str]
) -> None:
    """One whole-log read per session, for an interrupted session (the case that needs the closers)."""
    write_case(kind, tmp_path, "interrupted")
    counted.clear()
    result = run(*command, *store_args(kind, tmp_path))
    assert result.exit_code == 0, result.output
    assert counted == [SID]


# --- the coordinator's facts equal the raw prefix's -----------------------------------------------------


def stored_facts(stored: Any) -> tuple[int, int, bool, int]:
    """``(events, last seq, torn, closers)`` of a raw stored prefix, as the commands computed them."""
    events = stored.events
    return (
        len(events),
        events[-1]["seq"] if events else -1,
        stored.torn_marker is not None,
        len(interrupted_turn_closers(events)),
    )


def view_state(view: Any) -> tuple[Any, ...]:
    return (
        [event.json_bytes for event in view.events],
        list(view.derive_messages()),
        list(view.surface.nodes),
        view.request_header(),
        view.request_context(),
        view.header,
        view.seq,
    )


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_stored_view_reports_what_the_raw_prefix_holds(kind: str, case: str, tmp_path: Path) -> None:
    write_case(kind, tmp_path, case)
    reader = PersistenceCoordinator(al.SessionStore(), backend(kind, tmp_path, read_only=True))
    try:
        stored = reader.backend.load_stored(SID)
        got = reader.stored_view(SID)
        assert (got.stored_events, got.last_stored_seq, got.torn, got.closers) == stored_facts(stored)
        assert got.torn == (case in TORN_CASES)
        assert (got.closers > 0) == (case.endswith("interrupted") or case == "unanswered")
        if case == "forked":  # a stored end-seed marker is a stored event of the view
            assert got.view.events[-1]["type"] == "session/end-seed" == stored.events[-1]["type"]
        assert view_state(got.view) == view_state(reader.view(SID))
        # The view's closers are its last events, after the stored ones.
        assert len(got.view.events) == got.stored_events + got.closers
    finally:
        reader.close()


@pytest.mark.parametrize("kind", lazy_suite.BACKENDS)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(script=lazy_suite.sessions())
def test_stored_view_facts_equal_the_raw_prefix_for_random_sessions(kind: str, script: dict[str, Any]) -> None:
    """Random sessions with chunk runs of every shape (packed and not, across flushes), maybe an open
    last turn: the facts are the raw prefix's and the view is :meth:`view`'s."""
    with lazy_suite.store_root() as root:
        lazy_suite.write(kind, root, script)
        reader = PersistenceCoordinator(al.SessionStore(), lazy_suite.make_backend(kind, root))
        try:
            stored = reader.backend.load_stored(lazy_suite.SID)
            got = reader.stored_view(lazy_suite.SID)
            assert (got.stored_events, got.last_stored_seq, got.torn, got.closers) == stored_facts(stored)
            assert view_state(got.view) == view_state(reader.view(lazy_suite.SID))
        finally:
            reader.close()


def test_stored_view_of_a_live_session_is_its_view_with_this_coordinators_writes(tmp_path: Path) -> None:
    """A live session is viewed as it is (as :meth:`view` does): its stored events are those this
    coordinator wrote, no torn tail, no closers (its open turn is its own, not interrupted)."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    # (no write-behind deadline during the test: the unflushed events stay buffered until close)
    coordinator = PersistenceCoordinator(store, backend("jsonl-zstd", tmp_path), batch_delay_ms=2_000_000_000)
    try:
        session = store.create(SID, meta={"cwd": "/work"})
        _turn(session, 1)
        _answer(session, 1)
        store.flush(session)
        flushed = len(session.events)
        _turn(session, 2, open_at="chunks")  # buffered, not flushed, and an open turn
        got = coordinator.stored_view(SID)
        assert view_state(got.view) == view_state(coordinator.view(SID))
        assert got.view.seq == len(session.events) - 1
        assert (got.stored_events, got.torn, got.closers) == (flushed, False, 0)
    finally:
        coordinator.close()


def test_stored_view_of_a_reserved_session_is_the_prepared_one(tmp_path: Path) -> None:
    """While a preparation holds the id, the view is the prepared session's (its repair committed:
    nothing torn, no closers left to add), as :meth:`view` shows it."""
    write_case("jsonl-none", tmp_path, "torn-interrupted")
    coordinator = PersistenceCoordinator(al.SessionStore(), backend("jsonl-none", tmp_path))
    try:
        preparation = coordinator.prepare(SID)
        try:
            got = coordinator.stored_view(SID)
            assert view_state(got.view) == view_state(coordinator.view(SID))
            stored = coordinator.backend.load_stored(SID)
            assert (got.stored_events, got.last_stored_seq, got.torn, got.closers) == stored_facts(stored)
            assert (got.torn, got.closers) == (False, 0)
            assert got.view.seq == len(preparation.session.events) - 2  # (the restore's end-seed marker)
        finally:
            preparation.dispose()
    finally:
        coordinator.close()


def test_stored_view_keep_false_leaves_a_fresh_read_out_of_the_cache(tmp_path: Path) -> None:
    """``verify`` goes through a store's sessions once each: with ``keep=False`` no read stays cached
    (the next ask reads the log again), while a current cached read is still served as is."""
    write_case("sqlite", tmp_path, "interrupted")
    reads: list[str] = []

    class Counting(SqliteBackend):
        def load_stored(self, session_id: str) -> Any:
            reads.append(session_id)
            return super().load_stored(session_id)

    reader = PersistenceCoordinator(al.SessionStore(), Counting(str(tmp_path / SQLITE_FILENAME), read_only=True))
    try:
        first = reader.stored_view(SID, keep=False)
        second = reader.stored_view(SID, keep=False)
        assert reads == [SID, SID]
        assert view_state(first.view) == view_state(second.view)
        assert (first.stored_events, first.torn, first.closers) == (second.stored_events, second.torn, second.closers)
        kept = reader.stored_view(SID)
        again = reader.stored_view(SID, keep=False)  # the current cached read
        assert reads == [SID, SID, SID]
        assert view_state(again.view) == view_state(kept.view)
    finally:
        reader.close()


def test_stored_view_refuses_what_view_refuses(tmp_path: Path) -> None:
    write_case("sqlite", tmp_path, "clean")
    reader = PersistenceCoordinator(al.SessionStore(), backend("sqlite", tmp_path, read_only=True))
    try:
        for session_id in ("nope", "bad/../id" * 40):
            with pytest.raises(AgentlogError) as viewed:
                reader.view(session_id)
            with pytest.raises(AgentlogError) as stored:
                reader.stored_view(session_id)
            assert (type(stored.value), str(stored.value)) == (type(viewed.value), str(viewed.value))
    finally:
        reader.close()


# --- the commands' outputs are unchanged ---------------------------------------------------------------


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_verify_and_show_log_print_what_they_printed(kind: str, case: str, tmp_path: Path) -> None:
    write_case(kind, tmp_path, case)
    write_case(kind, tmp_path, "clean", session_id="other")
    args = store_args(kind, tmp_path)
    listing = backend(kind, tmp_path, read_only=True)
    try:
        ids = [item.id for item in listing.list_sessions()]  # (verify's order; a fork's parent too)
    finally:
        listing.close()
    expected = [old_verify(kind, tmp_path, session_id) for session_id in ids]
    verified = run("verify", *args, "--json")
    assert verified.exit_code == 0, verified.output
    assert orjson.loads(verified.stdout) == {"sessions": expected, "ok": True}
    mine = expected[ids.index(SID)]
    assert mine["status"] == (
        "repairable" if case in TORN_CASES or case.endswith("interrupted") or case == "unanswered" else "ok"
    )
    table = run("verify", SID, *args)
    assert table.exit_code == 0
    assert str(mine["note"] or "ok") in table.stdout
    log_json, log_text = expected_log(kind, tmp_path)
    assert run("show", SID, "--log", "--json", *args).stdout_bytes == log_json
    assert run("show", SID, "--log", *args).stdout_bytes == log_text


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_show_at_prints_what_it_printed_at_every_seq(kind: str, case: str, tmp_path: Path) -> None:
    """Every seq of the balanced view (closers included; before a compaction the uncompacted view),
    and one past it (refused, naming the last seq)."""
    write_case(kind, tmp_path, case)
    args = store_args(kind, tmp_path)
    view, _last, _torn = old_read(kind, tmp_path)
    for seq in range(len(view.events)):
        as_json, as_text = expected_at(view, seq)
        assert run("show", SID, "--at", str(seq), "--json", *args).stdout_bytes == as_json, seq
        if seq % 7 == 0 or seq == len(view.events) - 1:
            assert run("show", SID, "--at", str(seq), *args).stdout_bytes == as_text, seq
    past = len(view.events)
    refused = run("show", SID, "--at", str(past), "--json", *args)
    assert refused.exit_code == 1 and refused.stdout == ""
    # (the command refused it itself: a seeded session also holds the end-seed marker at that seq)
    old = f'seq {past} is not in session "{SID}" (last seq: {past - 1})'
    assert orjson.loads(refused.stderr)["error"] == {"code": "SEQ_OUT_OF_RANGE", "message": old}


def test_show_at_before_the_compaction_is_the_uncompacted_view(tmp_path: Path) -> None:
    write_case("jsonl-zstd", tmp_path, "compacted")
    view, _last, _torn = old_read("jsonl-zstd", tmp_path)
    start = next(event["seq"] for event in view.events if event["type"] == "compaction/start")
    before = orjson.loads(run("show", SID, "--at", str(start - 1), "--json", "--store", str(tmp_path)).stdout)
    after = orjson.loads(run("show", SID, "--json", "--store", str(tmp_path)).stdout)
    assert before["compaction"] and {mark["kind"] for mark in before["compaction"]} == {"pruned"}
    assert "checkpoint" in {mark["kind"] for mark in after["compaction"]}
    assert before["messageSeqs"][:4] == list(old_point(view, start - 1).surface.nodes)[:4]


@pytest.mark.parametrize(("kind", "case"), KIND_CASES)
def test_show_log_finds_the_marks_without_building_the_chunk_runs(kind: str, case: str, tmp_path: Path) -> None:
    """``show --log``'s marks (:func:`log_marks`) are found in one pass that leaves a restored log's
    packed chunk runs packed, and are the marks of looking every seq up."""
    write_case(kind, tmp_path, case)
    view, _last, _torn = old_read(kind, tmp_path)
    assert any(item.__class__ is ChunkRun for item in view._log)
    runs = sum(1 for item in view._log if item.__class__ is ChunkRun)
    found = log_marks(view.events)
    assert sum(1 for item in view._log if item.__class__ is ChunkRun) == runs
    eager = list(view.events)  # every seq looked up, as the marks were found before
    assert found == [mark for seq in range(len(eager)) if (mark := mark_of(eager, seq)) is not None]
    assert bool(found) == case.startswith("compacted")


# --- damaged sessions fail as they failed ------------------------------------------------------------------


def _lines_of(root: Path) -> tuple[Path, list[bytes]]:
    (log,) = root.glob(f"*/{SID}/session.jsonl")
    return log, log.read_bytes().split(b"\n")


def _edit_line(root: Path, pick: Callable[[dict[str, Any]], bool], change: Callable[[dict[str, Any]], Any]) -> None:
    log, lines = _lines_of(root)
    for index, line in enumerate(lines[1:], start=1):
        if line and pick(orjson.loads(line)):
            record = orjson.loads(line)
            changed = change(record)
            lines[index] = changed if isinstance(changed, bytes) else orjson.dumps(record)
            break
    else:
        raise AssertionError("no such record")
    log.write_bytes(b"\n".join(lines))


def _sql(root: Path, statement: str) -> None:
    con = sqlite3.connect(str(root / SQLITE_FILENAME), isolation_level=None)
    try:
        assert con.execute(statement).rowcount >= 1
    finally:
        con.close()


def _is_run(record: dict[str, Any]) -> bool:
    return "seq0" in record


def _damage_cases() -> dict[str, tuple[str, Callable[[Path], None]]]:
    def flip_frame(root: Path) -> None:
        (log,) = root.glob(f"*/{SID}/session.jsonl.zstd")
        data = bytearray(log.read_bytes())
        second = data.index(b"\x28\xb5\x2f\xfd", 4)
        data[second + 12] ^= 0xFF
        log.write_bytes(bytes(data))

    def unparsable_middle(root: Path) -> None:
        log, lines = _lines_of(root)
        lines[len(lines) // 2] = lines[len(lines) // 2][:-1]
        log.write_bytes(b"\n".join(lines))

    def short_run(record: dict[str, Any]) -> None:
        record["data"]["dt"] = record["data"]["dt"][:-1]

    def shifted_run(record: dict[str, Any]) -> None:
        record["seq0"] += 1

    def seq_gap(record: dict[str, Any]) -> None:
        record["seq"] += 1

    def unknown_type(record: dict[str, Any]) -> None:
        record["type"] = "mystery/event"

    def bad_message(record: dict[str, Any]) -> None:
        record["data"] = {"role": "user"}

    def run_without_texts(record: dict[str, Any]) -> None:
        record["data"]["texts"] = 5

    return {
        "zstd frame": ("jsonl-zstd", flip_frame),
        "unparsable record": ("jsonl-none", unparsable_middle),
        "packed run shorter than it says": ("jsonl-none", lambda r: _edit_line(r, _is_run, short_run)),
        "packed run at the wrong seq": ("jsonl-none", lambda r: _edit_line(r, _is_run, shifted_run)),
        "packed run without texts": ("jsonl-none", lambda r: _edit_line(r, _is_run, run_without_texts)),
        "seq gap": ("jsonl-none", lambda r: _edit_line(r, lambda e: e.get("type") == "tool/call", seq_gap)),
        "unknown event type": (
            "jsonl-none",
            lambda r: _edit_line(r, lambda e: e.get("type") == "step/end", unknown_type),
        ),
        "malformed user message": (
            "jsonl-none",
            lambda r: _edit_line(r, lambda e: e.get("type") == "user/message", bad_message),
        ),
        "sqlite unparsable row": ("sqlite", lambda r: _sql(r, "UPDATE events SET data = '{not json' WHERE seq = 13")),
        "sqlite packed run shorter than it says": (
            "sqlite",
            lambda r: _sql(r, "UPDATE events SET data = json_set(data, '$.dt', json('[0]')) WHERE seq = 5"),
        ),
        "sqlite seq gap": ("sqlite", lambda r: _sql(r, "DELETE FROM events WHERE seq = 14")),
        "sqlite bad row type": ("sqlite", lambda r: _sql(r, "UPDATE events SET type = 'mystery/event' WHERE seq = 2")),
    }


DAMAGE = _damage_cases()


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize("case", ["clean", "interrupted"])
def test_a_damaged_session_fails_verify_and_show_log_with_the_same_error(
    damage: str, case: str, tmp_path: Path
) -> None:
    kind, harm = DAMAGE[damage]
    write_case(kind, tmp_path, case)
    harm(tmp_path)
    expected = old_verify(kind, tmp_path, SID)
    assert expected["status"] == "failed", expected
    args = store_args(kind, tmp_path)
    verified = run("verify", SID, *args, "--json")
    assert verified.exit_code == 1
    assert orjson.loads(verified.stdout) == {"sessions": [expected], "ok": False}
    shown = run("show", SID, "--log", *args, "--json")
    assert shown.exit_code == 1 and shown.stdout == ""
    assert orjson.loads(shown.stderr)["error"] == expected["error"]


def test_missing_sessions_and_stores_fail_as_they_failed(tmp_path: Path) -> None:
    write_case("jsonl-zstd", tmp_path, "clean")
    expected = old_verify("jsonl-zstd", tmp_path, "nope")
    verified = run("verify", "nope", "--store", str(tmp_path), "--json")
    assert verified.exit_code == 1
    assert orjson.loads(verified.stdout) == {"sessions": [expected], "ok": False}
    assert expected["error"] == {"code": "SESSION_NOT_FOUND", "message": 'session "nope" not found'}
    shown = run("show", "nope", "--log", "--store", str(tmp_path), "--json")
    assert orjson.loads(shown.stderr)["error"] == expected["error"]
    for command in (["verify", SID], ["show", SID, "--log"], ["show", SID, "--at", "3"]):
        for kind in ("jsonl", "sqlite"):
            missing = run(*command, "--store", str(tmp_path / "absent"), "--backend", kind, "--json")
            assert missing.exit_code == 1, command
            assert orjson.loads(missing.stderr)["error"]["code"] == "STORE_NOT_FOUND"


# --- SessionView.at -------------------------------------------------------------------------------------


def at_state(view: Any) -> tuple[Any, ...]:
    """Everything ``show --at`` prints of a moment, and the events."""
    return (
        thaw(view.derive_messages().to_list()),
        thaw(view.request_header()),
        thaw(view.request_context()),
        surface_marks(view.events, view.surface.nodes),
        [event.json_bytes for event in view.events],
        view.seq,
        view.id,
        view.header,
    )


@pytest.mark.parametrize("kind", lazy_suite.BACKENDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=lazy_suite.sessions(), data=st.data())
def test_view_at_is_the_seeded_sessions_at_for_every_seq(kind: str, script: dict[str, Any], data: Any) -> None:
    """For every seq of a random session's cold view, ``view.at(seq)`` is what a session seeded with the
    view's events shows at that seq; an earlier view's ``at`` is the same moment; a seq outside the
    view is refused with the seeded session's words; and packed chunk runs stay packed throughout."""
    with lazy_suite.store_root() as root:
        lazy_suite.write(kind, root, script)
        reader = PersistenceCoordinator(al.SessionStore(), lazy_suite.make_backend(kind, root))
        try:
            view = reader.view(lazy_suite.SID)
        finally:
            reader.close()
        packed = any(item.__class__ is ChunkRun for item in view._log)
        seeded = Session.create(view.id, seed=list(view.events), header=view.header)
        for seq in range(len(view.events)):
            point = view.at(seq)
            assert at_state(point) == at_state(seeded.at(seq)), seq
        assert any(item.__class__ is ChunkRun for item in view._log) == packed  # nothing was expanded
        later = data.draw(st.integers(0, len(view.events) - 1), label="later")
        earlier = data.draw(st.integers(0, later), label="earlier")
        assert at_state(view.at(later).at(earlier)) == at_state(view.at(earlier))
        for outside in (len(view.events), later + 1, -1):
            # Session.at's words, naming the view's last seq (a seeded session would also hold the
            # end-seed marker at the seq after it).
            expected_error = f'seq {outside!r} is not in session "{view.id}" (last seq: {later})'
            with pytest.raises(SeqOutOfRangeError) as caught:
                view.at(later).at(outside)
            assert str(caught.value) == expected_error
            if outside < 0:  # not a seq of any session: Session.at's refusal
                with pytest.raises(SeqOutOfRangeError) as by_session:
                    seeded.at(outside)
                assert str(by_session.value).split(" (last seq")[0] == expected_error.split(" (last seq")[0]
        for wrong_type in ("1", 1.0, True):  # no seq at all: the same type error from both
            with pytest.raises(ArgumentTypeError) as caught_type:
                view.at(later).at(wrong_type)  # type: ignore[arg-type]
            with pytest.raises(ArgumentTypeError) as by_session_type:
                seeded.at(wrong_type)  # type: ignore[arg-type]
            assert str(caught_type.value) == str(by_session_type.value)


def test_view_at_keeps_a_restored_logs_runs_packed() -> None:
    """An earlier moment of a cold view with packed chunk runs holds them packed too (the old way, a
    second session seeded with ``list(view.events)``, built every chunk event)."""
    script = {
        "turns": [
            {
                "turn": 1,
                "header": True,
                "steps": [
                    {
                        "stretches": [[text_delta(0, f"w{k}") for k in range(30)]],
                        "message": True,
                        "tool": True,
                        "flush": [],
                    }
                ],
            },
            {
                "turn": 2,
                "header": False,
                "steps": [
                    {
                        "stretches": [[text_delta(0, f"v{k}") for k in range(30)]],
                        "message": True,
                        "tool": False,
                        "flush": [],
                    }
                ],
            },
        ],
        "open": None,
        "gaps": [1],
    }
    with lazy_suite.store_root() as root:
        lazy_suite.write("jsonl-zstd", root, script)
        reader = PersistenceCoordinator(al.SessionStore(), lazy_suite.make_backend("jsonl-zstd", root))
        try:
            view = reader.view(lazy_suite.SID)
        finally:
            reader.close()
        assert any(item.__class__ is ChunkRun for item in view._log)
        point = view.at(len(view.events) - 3)
        point.derive_messages()
        point.request_header()
        assert any(item.__class__ is ChunkRun for item in point._log)
        assert any(item.__class__ is ChunkRun for item in view._log)


def test_show_at_in_a_fresh_process_equals_the_seeded_session(tmp_path: Path) -> None:
    """The command as installed: the moment just before the interrupted turn's closers, and a closer."""
    import subprocess
    import sys

    write_case("jsonl-zstd", tmp_path, "compacted-interrupted")
    view, last_stored, _torn = old_read("jsonl-zstd", tmp_path)
    for seq in (last_stored, len(view.events) - 1):
        done = subprocess.run(
            [sys.executable, "-m", "agentlog.cli", "show", SID, "--at", str(seq), "--json", "--store", str(tmp_path)],
            capture_output=True,
            check=True,
        )
        assert done.stdout == expected_at(view, seq)[0]


# --- PostgreSQL (read-only, as the inspection commands open it) -----------------------------------------------


def test_verify_and_show_log_on_a_read_only_postgres_store_print_what_they_printed(
    pg_dsn: str,
    pg_schema: str,
) -> None:
    """An interrupted session in PostgreSQL: the closers are reported, nothing is written (a read-only
    backend refuses every write and lease), and one whole-log read answers each command."""
    from agentlog.persistence.postgres import PostgresBackend

    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, PostgresBackend(pg_dsn, schema=pg_schema))
    try:
        session = store.create(SID, meta={"cwd": "/work"})
        _turn(session, 1)
        _answer(session, 1)
        _turn(session, 2, open_at="call")
        store.flush(session)
        stored_count = len(session.events)
    finally:
        coordinator.close()
    args = ["--backend", "postgres", "--dsn", pg_dsn, "--pg-schema", pg_schema]
    expected = old_verify_on(PostgresBackend(pg_dsn, schema=pg_schema, read_only=True), SID)
    assert expected["status"] == "repairable" and expected["events"] == stored_count
    verified = run("verify", SID, *args, "--json")
    assert verified.exit_code == 0, verified.output
    assert orjson.loads(verified.stdout) == {"sessions": [expected], "ok": True}
    reader = PersistenceCoordinator(al.SessionStore(), PostgresBackend(pg_dsn, schema=pg_schema, read_only=True))
    try:
        view = reader.view(SID)
    finally:
        reader.close()
    shown = orjson.loads(run("show", SID, "--log", "--json", *args).stdout)
    assert shown["events"] == thaw(view.events.to_list())
    assert shown["storedEvents"] == stored_count and shown["tornTail"] is False
    assert shown["wouldBeAddedOnResume"] == list(range(stored_count, len(view.events)))
    assert len(view.events) > stored_count
    for seq in (stored_count - 1, len(view.events) - 1):
        assert run("show", SID, "--at", str(seq), "--json", *args).stdout_bytes == expected_at(view, seq)[0]
    again = PostgresBackend(pg_dsn, schema=pg_schema, read_only=True)
    try:
        stored = again.load_stored(SID)
    finally:
        again.close()
    assert stored is not None and len(stored.events) == stored_count  # nothing was repaired
