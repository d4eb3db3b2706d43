"""Big sessions in the CLI (issue 14): ``show``, ``export``, ``verify`` and ``replay`` write their output
as it is produced, byte for byte what they printed when they built it whole, and ``verify`` shows its
progress on a terminal only.

The session is the benchmark workload W(T) (``benchmarks/workload.py``) plus an interrupted last turn,
so the repair marks (``show --log``'s pending closers, ``verify``'s "repairable") are part of what is
compared. Every expected output is computed here through the library, the way the commands built
their documents before they streamed them.
"""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer

import agentlog as al
from agentlog.cli._marks import CheckpointMark, log_marks, marks_json, seq_ranges, surface_marks
from agentlog.cli._reading import _last_turn
from agentlog.cli.commands import PENDING_MARK, app
from agentlog.cli.render import STREAM_CHUNK_BYTES, _event_line, _transcript
from agentlog.kernel.jsonvalue import thaw
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from workload import build_workload  # noqa: E402

SID = "big"
TURNS = 300


def _write_workload(root: Path, turns: int, *, interrupted: bool, compression: str = "zstd") -> int:
    """W(``turns``) stored on jsonl-zstd as session ``big``, then (``interrupted``) an open turn with a
    few chunks that a load closes in memory only; the number of stored events."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root), compression=compression))
    try:
        session = store.create(SID, meta={"cwd": "/bench"})
        appended = 0
        for type_, data, intent in build_workload(turns):
            session.append(type_, data, intent)
            appended += 1
        if interrupted:
            turn = turns + 1
            session.append("turn/start", {"turn": turn})
            session.append("user/message", al.user_message("one more", id="u-last"), {"surfaceOp": "append"})
            session.append("step/start", {"turn": turn, "step": 1})
            for index in range(3):
                session.append(
                    "assistant/chunk",
                    {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "text": f"partial {index} "}},
                )
            appended += 6
        store.flush(session)
        return appended
    finally:
        coordinator.close()


@pytest.fixture(scope="module")
def store_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("streaming") / "store"
    _write_workload(root, TURNS, interrupted=True)
    return root


def _cold(root: Path) -> tuple[Any, Any, Any]:
    """``(balanced snapshot, view, raw stored prefix)`` of the stored session, read as ``export`` does."""
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(root), compression="auto", read_only=True))
    try:
        return reader.inspect(SID), reader.view(SID), reader.backend.load_stored(SID)
    finally:
        reader.close()


def _pretty(document: Any) -> bytes:
    return orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n"


def _lines(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


# --- the outputs as the commands built them whole ---------------------------------------------------


def _expected(root: Path) -> dict[str, bytes]:
    snapshot, view, stored = _cold(root)
    events = view.events
    header = view.header
    messages = thaw(view.derive_messages().to_list())
    out: dict[str, bytes] = {}
    out["export"] = _pretty(
        {
            "header": thaw(snapshot.meta),
            "events": thaw(snapshot.events.to_list()),
            "surface": list(view.surface.nodes),
            "messages": messages,
            "requestHeader": thaw(view.request_header()),
            "requestContext": thaw(view.request_context()),
        }
    )
    shown = surface_marks(events, view.surface.nodes)
    out["show --json"] = _pretty(
        {
            "sessionId": SID,
            "header": thaw(header),
            "children": [],  # the sessions naming it as parent (forks, subagents): none here
            "events": len(stored.events),  # the stored events, as verify counts them
            "wouldBeAddedOnResume": [event["seq"] for event in events if event["seq"] > stored.events[-1]["seq"]],
            "lastTurn": _last_turn(events),
            "messages": messages,
            "messageSeqs": [seq for seq, _ in shown],
            "compaction": marks_json(shown),
        }
    )
    out["show"] = _lines(
        [
            f"session {SID} ({header.get('cwd')}): {len(stored.events)} stored events, "
            f"+{len(events) - len(stored.events)} closers a resume would add",
            *_transcript(messages, marks=[mark for _, mark in shown]),
        ]
    )
    last_stored = stored.events[-1]["seq"]
    pending = [event["seq"] for event in events if event["seq"] > last_stored]
    marks = {mark.seq: mark for mark in log_marks(events)}
    out["show --log --json"] = _pretty(
        {
            "sessionId": SID,
            "header": thaw(header),
            "events": thaw(events.to_list()),
            "storedEvents": len(events) - len(pending),
            "wouldBeAddedOnResume": pending,
            "tornTail": False,
            "compaction": [mark.to_json() for mark in marks.values()],
        }
    )
    log_lines: list[str] = []
    for event in events:
        line = _event_line(event)
        log_lines.append(f"{line}  {PENDING_MARK}" if event["seq"] > last_stored else line)
        mark = marks.get(event["seq"])
        if isinstance(mark, CheckpointMark):
            log_lines.append(f"{'':>6}  ↳ {mark.label}: shadows seqs {seq_ranges(mark.shadowed_seqs) or 'nothing'}")
        elif mark is not None:
            log_lines.append(f"{'':>6}  ↳ {mark.label}: replaces seq {mark.original_seq}")
    out["show --log"] = _lines(log_lines)
    result = {
        "id": SID,
        "status": "repairable",
        "events": len(stored.events),
        "error": None,
        "note": "interrupted turn (closed on the next load)",
    }
    out["verify --json"] = _pretty({"sessions": [result], "ok": True})
    chunks = sum(1 for event in events if event["type"] == "assistant/chunk")
    summary = {"sessionId": SID, "events": len(events), "chunks": chunks, "lastTurn": _last_turn(events)}
    out["replay --json"] = (
        b"".join(orjson.dumps(thaw(event)) + b"\n" for event in events) + orjson.dumps({"summary": summary}) + b"\n"
    )
    return out


COMMANDS = {
    "export": ["export", SID],
    "show": ["show", SID],
    "show --json": ["show", SID, "--json"],
    "show --log": ["show", SID, "--log"],
    "show --log --json": ["show", SID, "--log", "--json"],
    "verify --json": ["verify", SID, "--json"],
    "replay --json": ["replay", SID, "--json", "--speed", "0"],
}


@pytest.fixture(scope="module")
def expected(store_root: Path) -> dict[str, bytes]:
    return _expected(store_root)


class _CountingStdout(io.TextIOWrapper):
    """Standard output that records every write: how many, and the largest."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", newline="")
        self.sizes: list[int] = []

    def write(self, text: str) -> int:
        self.sizes.append(len(text))
        return super().write(text)

    def value(self) -> bytes:
        self.flush()
        buffer = self.buffer
        assert isinstance(buffer, io.BytesIO)
        return buffer.getvalue()


def _run_in_process(args: list[str], monkeypatch: pytest.MonkeyPatch) -> _CountingStdout:
    stdout = _CountingStdout()
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        typer.main.get_command(app).main(args=args, prog_name="agentlog", standalone_mode=False)
    finally:
        monkeypatch.undo()
    return stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_output_is_unchanged_and_written_in_pieces(
    name: str, store_root: Path, expected: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command prints exactly the document or lines it printed when it built them whole, but in
    many writes, none of them anywhere near the whole output (a W(300) session's output is several
    hundred KB to several MB; a write is about one chunk). ``verify`` prints one small result."""
    stdout = _run_in_process([*COMMANDS[name], "--store", str(store_root)], monkeypatch)
    output = stdout.value()
    assert output == expected[name]
    if name == "verify --json":  # a result per session: nothing to stream
        return
    assert len(stdout.sizes) >= 4
    assert max(stdout.sizes) < len(output) // 3
    assert max(stdout.sizes) < 2 * STREAM_CHUNK_BYTES  # replay --json too: chunks, flushed before each wait


def test_the_first_line_arrives_while_the_command_is_still_writing(
    store_root: Path, expected: dict[str, bytes]
) -> None:
    """Through a pipe, in a fresh process: the document's first line can be read while ``export`` has
    not finished (it is still writing the events), and the whole stream is the expected document."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlog.cli", "export", SID, "--store", str(store_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        first = process.stdout.readline()
        assert first == b"{\n"
        assert process.poll() is None
        rest = process.stdout.read()
    finally:
        process.stdout.close()
        stderr = process.stderr.read() if process.stderr is not None else b""
        process.wait()
    assert process.returncode == 0, stderr
    assert first + rest == expected["export"]


def test_show_at_prints_the_same_transcript_in_pieces(store_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``show --at`` (the model's view at a seq): the header lines, then the transcript of that moment."""
    _snapshot, view, _stored = _cold(store_root)
    seq = 200
    point = al.Session.create(SID, seed=list(view.events), header=view.header).at(seq)
    messages = thaw(point.derive_messages().to_list())
    marks = surface_marks(point.events, point.surface.nodes)
    stdout = _run_in_process(["show", SID, "--at", str(seq), "--store", str(store_root)], monkeypatch)
    text = stdout.value().decode()
    head = f"session {SID} at seq {seq} ({view.events[seq]['type']}): {len(messages)} messages\n"
    assert text.startswith(head)
    assert text.endswith(_lines(_transcript(messages, marks=[mark for _, mark in marks])).decode())


def test_a_partial_export_of_a_damaged_big_session_is_unchanged_and_streamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export --partial`` of a W(300) log damaged in the middle: the readable prefix and the damage
    report, byte for byte the document built whole from :meth:`read_prefix`, in many writes."""
    root = tmp_path / "store"
    _write_workload(root, TURNS, interrupted=False, compression="none")
    (log,) = root.glob(f"*/{SID}/session.jsonl")
    lines = log.read_bytes().split(b"\n")
    middle = len(lines) // 2
    first_lost = orjson.loads(lines[middle])["seq"]  # (a record may hold a packed run of chunks)
    lines[middle] = lines[middle][:-1]  # a complete but unparsable record, complete ones after it
    log.write_bytes(b"\n".join(lines))
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(root), compression="auto", read_only=True))
    try:
        prefix = reader.read_prefix(SID)
    finally:
        reader.close()
    damage = prefix.damage
    assert damage is not None
    events = list(prefix.events)
    report = {
        "code": damage.code,
        "message": str(damage),
        "location": getattr(damage, "location", None),
        "offset": getattr(damage, "offset", None),
        "afterSeq": events[-1]["seq"],
    }
    stdout = _run_in_process(["export", SID, "--partial", "--store", str(root)], monkeypatch)
    output = stdout.value()
    assert output == _pretty({"header": prefix.meta, "events": events, "damage": report})
    assert len(events) == first_lost > 5000
    assert len(stdout.sizes) >= 4 and max(stdout.sizes) < 2 * STREAM_CHUNK_BYTES


# --- verify's progress ------------------------------------------------------------------------------


def _verify_on_a_terminal(store_root: Path, *extra: str) -> tuple[bytes, bytes, int]:
    """``agentlog verify`` in a fresh process whose standard error is a pseudo-terminal: ``(what the
    terminal showed, standard output, exit code)``."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "agentlog.cli", "verify", SID, "--store", str(store_root), *extra],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    shown = bytearray()
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal (EIO on Linux)
            break
        if not data:
            break
        shown += data
    os.close(master)
    assert process.stdout is not None
    stdout = process.stdout.read()
    process.stdout.close()
    return bytes(shown), stdout, process.wait()


def test_verify_shows_progress_on_a_terminal_only(store_root: Path, expected: dict[str, bytes]) -> None:
    shown, stdout, code = _verify_on_a_terminal(store_root)
    assert code == 0
    assert b"verifying" in shown
    assert f"{SID}: ".encode() in shown  # the session and its stage
    assert b"1/1" in shown
    assert b"repairable" in stdout  # the table itself goes to standard output, not the terminal
    # --json: the document only, nothing drawn on the terminal.
    shown, stdout, code = _verify_on_a_terminal(store_root, "--json")
    assert code == 0
    assert shown == b""
    assert stdout == expected["verify --json"]


def test_verify_draws_nothing_when_stderr_is_not_a_terminal(store_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentlog.cli", "verify", SID, "--store", str(store_root)],
        capture_output=True,
    )
    assert done.returncode == 0
    assert done.stderr == b""
    assert b"repairable" in done.stdout
