"""``agentlog tail SESSION_ID [--follow] [--from-seq N] [--json]``: what it prints, beside a real writer
process; its typed errors; Ctrl-C ends a follow cleanly (exit 0, nothing on stderr)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli import app
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.testing.builders import closed_turn, header

runner = CliRunner()

KINDS = ("jsonl", "sqlite")
TURNS = 30

WRITER = textwrap.dedent(
    """
    import sys
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend
    from agentlog.testing.builders import closed_turn, header

    kind, root, session_id, turns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    backend = SqliteBackend(root + "/sessions.sqlite3") if kind == "sqlite" else JsonlBackend(root)
    meta = header(session_id)
    backend.append_batch(meta, closed_turn(0, 1), False)
    print("ready", flush=True)
    sys.stdin.readline()
    for turn in range(2, turns + 1):
        events = closed_turn((turn - 1) * 6, turn)
        backend.append_batch(meta, events[:2], True)
        backend.append_batch(meta, events[2:], True)
    backend.close()
    print("done", flush=True)
    """
)


def _store(kind: str, root: Path, session_id: str, turns: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    backend = SqliteBackend(str(root / "sessions.sqlite3")) if kind == "sqlite" else JsonlBackend(str(root))
    try:
        events = [event for turn in range(1, turns + 1) for event in closed_turn((turn - 1) * 6, turn)]
        backend.append_batch(header(session_id), events, False)
    finally:
        backend.close()


def _options(kind: str, root: Path) -> list[str]:
    return ["--store", str(root), "--backend", kind]


def _exported(kind: str, root: Path, session_id: str) -> list[Any]:
    result = runner.invoke(app, ["export", session_id, *_options(kind, root)])
    assert result.exit_code == 0, result.stdout + result.stderr
    events: list[Any] = orjson.loads(result.stdout)["events"]
    return events


def _tail_process(kind: str, root: Path, session_id: str, *extra: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "agentlog.cli", "tail", session_id, *_options(kind, root), *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("kind", KINDS)
def test_tail_cli__follow_json_beside_a_writer_prints_every_event_once_in_order_then_ctrl_c(
    tmp_path: Path, kind: str
) -> None:
    root = tmp_path / "store"
    root.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, kind, str(root), "live", str(TURNS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    tail = None
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline().strip() == "ready"
        tail = _tail_process(kind, root, "live", "--follow", "--json")
        assert tail.stdout is not None
        lines = [orjson.loads(tail.stdout.readline()) for _ in range(6)]  # following now
        writer.stdin.write("go\n")
        writer.stdin.flush()
        lines += [orjson.loads(tail.stdout.readline()) for _ in range(TURNS * 6 - 6)]
        assert writer.stdout.readline().strip() == "done"
        assert writer.wait() == 0
        tail.send_signal(signal.SIGINT)
        rest, err = tail.communicate(timeout=300)
        assert tail.returncode == 0, err
        assert err == b""
        assert rest == b""  # nothing past the last event: no duplicate
    finally:
        for process in (writer, tail):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert [line["seq"] for line in lines] == list(range(TURNS * 6))
    assert lines == _exported(kind, root, "live")


@pytest.mark.parametrize("kind", KINDS)
def test_tail_cli__ctrl_c_while_waiting_for_events_ends_cleanly(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    _store(kind, root, "idle", 1)
    tail = _tail_process(kind, root, "idle", "--follow")
    try:
        assert tail.stdout is not None
        first = [tail.stdout.readline().decode() for _ in range(6)]
        assert first[0].split()[:2] == ["0", "turn/start"]
        assert first[5].split()[:2] == ["5", "turn/end"]
        os.kill(tail.pid, signal.SIGINT)
        rest, err = tail.communicate(timeout=300)
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()
    assert tail.returncode == 0
    assert err == b"" and rest == b""


@pytest.mark.parametrize("kind", KINDS)
def test_tail_cli__without_follow_prints_the_stored_log_and_ends(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    _store(kind, root, "s1", 2)
    exported = _exported(kind, root, "s1")
    result = runner.invoke(app, ["tail", "s1", *_options(kind, root), "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == exported
    result = runner.invoke(app, ["tail", "s1", *_options(kind, root), "--json", "--from-seq", "9"])
    assert result.exit_code == 0
    assert [orjson.loads(line) for line in result.stdout.splitlines()] == exported[9:]
    plain = runner.invoke(app, ["tail", "s1", *_options(kind, root), "--from-seq", "9"])
    assert plain.exit_code == 0
    assert [line.split()[:2] for line in plain.stdout.splitlines()] == [
        [str(event["seq"]), event["type"]] for event in exported[9:]
    ]
    assert "assistant-9" in plain.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_tail_cli__a_session_that_does_not_exist_is_a_typed_error(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    _store(kind, root, "s1", 1)
    for follow in ([], ["--follow"]):
        result = runner.invoke(app, ["tail", "nope", *_options(kind, root), "--json", *follow])
        assert result.exit_code == 1
        assert result.stdout == ""
        assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_NOT_FOUND"
    plain = runner.invoke(app, ["tail", "nope", *_options(kind, root)])
    assert plain.exit_code == 1 and "SESSION_NOT_FOUND" in plain.stderr and "Traceback" not in plain.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_tail_cli__a_store_that_does_not_exist_is_store_not_found(tmp_path: Path, kind: str) -> None:
    result = runner.invoke(app, ["tail", "s1", *_options(kind, tmp_path / "missing"), "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND"
    assert not (tmp_path / "missing").exists()


def test_tail_cli__a_negative_from_seq_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tail", "s1", "--store", str(tmp_path), "--from-seq", "-1"])
    assert result.exit_code == 2
