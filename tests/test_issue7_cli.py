"""Issue 7, defect 9 (CLI truth): what the read-only commands say and leave behind, over real stores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator

runner = CliRunner()

LONG_ID = "a-rather-long-session-identifier-that-a-narrow-table-would-cut-0123456789"
LONG_CWD = "/work/projects/with/a/deeply/nested/and/long/working/directory/name"


def _backend(root: Path, kind: str, compression: Any = "zstd") -> Any:
    if kind == "sqlite":
        from agentlog.persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / "sessions.sqlite3"))
    from agentlog.persistence.jsonl.backend import JsonlBackend

    return JsonlBackend(str(root), compression=compression)


def _write(
    root: Path,
    kind: str = "jsonl",
    compression: str = "zstd",
    *,
    ids: tuple[str, ...] = ("s0", "s1"),
    open_last: bool = False,
    cwd: str = "/work/project",
) -> None:
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        for index, session_id in enumerate(ids):
            session = store.create(session_id, meta={"cwd": cwd})
            session.append("turn/start", {"turn": 1})
            session.append("user/message", al.user_message(f"hello {index}", id=f"u{index}"), {"surfaceOp": "append"})
            session.append("step/start", {"turn": 1, "step": 1})
            session.append(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": al.assistant_message(
                        [al.tool_call_block("c1", "read_file", "{}")],
                        provider="deepseek",
                        model="deepseek-chat",
                        id=f"a{index}",
                    ),
                },
                {"surfaceOp": "append"},
            )
            session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
            if not (open_last and index == len(ids) - 1):
                session.append(
                    "tool/result",
                    {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "content", id=f"r{index}")},
                    {"surfaceOp": "append"},
                )
                session.append("step/end", {"turn": 1, "step": 1})
                session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            store.flush(session)
    finally:
        coordinator.close()


def _tree(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for dirpath, dirs, names in os.walk(root):
        for name in dirs:
            files[os.path.join(dirpath, name) + "/"] = b""
        for name in names:
            path = os.path.join(dirpath, name)
            files[path] = Path(path).read_bytes()
    return files


def _zstd_log(root: Path, session_id: str) -> Path:
    (match,) = root.glob(f"*/{session_id}/session.jsonl.zstd")
    return match


def _damage_second_frame(root: Path, session_id: str) -> None:
    log = _zstd_log(root, session_id)
    data = bytearray(log.read_bytes())
    second = data.index(b"\x28\xb5\x2f\xfd", 4)
    data[second + 12] ^= 0xFF
    log.write_bytes(bytes(data))


# --- --version ------------------------------------------------------------------------------------------


def test_issue7_d9_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"agentlog {version('agentlog')}"


def test_issue7_d9_version_through_the_console_script() -> None:
    from importlib.metadata import version

    exe = Path(sys.executable).with_name("agentlog")
    if not exe.exists():
        pytest.skip(f"the agentlog console script is not installed next to {sys.executable}")
    done = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentlog {version('agentlog')}"


# --- ls: headers only, full ids -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_ls_without_a_cache_reports_the_figures_of_each_log(tmp_path: Path, kind: str) -> None:
    """No projection cache (these logs were written without one): ``ls`` folds each log in memory and
    reports what it holds, never a blank that reads as "nothing happened"."""
    _write(tmp_path, kind)
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--backend", kind, "--json"])
    assert result.exit_code == 0, result.output
    rows = orjson.loads(result.stdout)["sessions"]
    assert [row["id"] for row in rows] == ["s0", "s1"]
    for row in rows:
        assert row["events"] == 8 and row["lastActivity"] == 1_700_000_000_000
        assert row["createdAt"] == 1_700_000_000_000 and row["cwd"] == "/work/project"
        assert row["error"] is None


def test_ls_leaves_the_figures_of_a_damaged_body_unknown_the_damage_is_for_verify(tmp_path: Path) -> None:
    _write(tmp_path)
    _damage_second_frame(tmp_path, "s1")
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["s1"]["error"] is None  # the header is fine
    assert rows["s1"]["events"] is None and rows["s1"]["lastActivity"] is None  # unknown, not 0
    assert rows["s0"]["events"] == 8
    verify = runner.invoke(app, ["verify", "s1", "--store", str(tmp_path), "--json"])
    assert verify.exit_code == 1
    assert orjson.loads(verify.stdout)["sessions"][0]["error"]["code"] == "SESSION_CORRUPT"


def test_issue7_d9_ls_table_keeps_full_ids_when_not_a_terminal(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID, LONG_ID + "-b"), cwd=LONG_CWD)
    result = runner.invoke(app, ["ls", "--store", str(tmp_path)], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.stdout and LONG_ID + "-b" in result.stdout
    assert LONG_CWD in result.stdout
    assert "…" not in result.stdout


def test_issue7_d9_ls_table_keeps_full_ids_through_a_real_pipe(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID,), cwd=LONG_CWD)
    env = {**os.environ, "COLUMNS": "50"}
    done = subprocess.run(
        [sys.executable, "-m", "agentlog.cli", "ls", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert LONG_ID in done.stdout and LONG_CWD in done.stdout


def test_issue7_d9_ls_table_reports_a_damaged_header_in_its_status_column(tmp_path: Path) -> None:
    _write(tmp_path)
    log = _zstd_log(tmp_path, "s1")
    log.write_bytes(b"\x00" * 16 + log.read_bytes()[16:])
    result = runner.invoke(app, ["ls", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "SESSION_CORRUPT" in result.stdout
    assert "status" in result.stdout


# --- show --log: closers of an unrepaired session ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_issue7_d9_show_log_marks_closers_that_would_be_added_on_resume(tmp_path: Path, kind: str) -> None:
    _write(tmp_path, kind, open_last=True)
    before = _tree(tmp_path)
    result = runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--backend", kind, "--log"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    stored = [line for line in lines if line.strip()[:1].isdigit()]
    assert len(stored) == 8  # five stored events + three closers
    assert not any("would be added on resume" in line for line in stored[:5])
    closers = stored[5:]
    assert [line.split()[1] for line in closers] == ["tool/result", "step/end", "turn/end"]
    assert all("would be added on resume" in line for line in closers)
    document = orjson.loads(
        runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--backend", kind, "--log", "--json"]).stdout
    )
    assert document["storedEvents"] == 5
    assert document["wouldBeAddedOnResume"] == [5, 6, 7]
    assert [event["seq"] for event in document["events"]] == list(range(8))
    assert document["events"][5]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert _tree(tmp_path) == before


def test_issue7_d9_show_log_of_a_balanced_session_marks_nothing(tmp_path: Path) -> None:
    _write(tmp_path)
    result = runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--log"])
    assert result.exit_code == 0, result.output
    assert "would be added on resume" not in result.stdout
    document = orjson.loads(runner.invoke(app, ["show", "s1", "--store", str(tmp_path), "--log", "--json"]).stdout)
    assert document["wouldBeAddedOnResume"] == []
    assert document["storedEvents"] == 8


# --- a store that does not exist; read commands create nothing ---------------------------------------------

READ_COMMANDS = [["ls"], ["verify"], ["verify", "s0"], ["export", "s0"], ["show", "s0"], ["show", "s0", "--log"]]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.parametrize("command", READ_COMMANDS, ids=" ".join)
def test_issue7_d9_a_mistyped_store_is_store_not_found_and_nothing_is_created(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    missing = tmp_path / "no-such-store"
    result = runner.invoke(app, [*command, "--store", str(missing), "--backend", kind, "--json"])
    assert result.exit_code == 1, result.output
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "STORE_NOT_FOUND"
    assert "does not exist" in error["message"]
    assert not missing.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_issue7_d9_replay_of_a_missing_store_is_store_not_found(tmp_path: Path, kind: str) -> None:
    missing = tmp_path / "nope"
    result = runner.invoke(app, ["replay", "s0", "--store", str(missing), "--backend", kind, "--speed", "0"])
    assert result.exit_code == 1
    assert "STORE_NOT_FOUND" in result.stderr
    assert not missing.exists()


def test_issue7_d9_sqlite_read_commands_never_create_the_database(tmp_path: Path) -> None:
    _write(tmp_path, "jsonl")  # a JSONL store: no sessions.sqlite3 in it
    before = _tree(tmp_path)
    for command in READ_COMMANDS:
        result = runner.invoke(app, [*command, "--store", str(tmp_path), "--backend", "sqlite", "--json"])
        assert result.exit_code == 1, (command, result.output)
        assert orjson.loads(result.stderr)["error"]["code"] == "STORE_NOT_FOUND", command
    assert _tree(tmp_path) == before
    assert not (tmp_path / "sessions.sqlite3").exists()


def test_issue7_d9_an_existing_empty_jsonl_store_lists_nothing_and_stays_empty(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout) == {"sessions": [], "nextCursor": None}
    assert runner.invoke(app, ["verify", "--store", str(tmp_path), "--json"]).exit_code == 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_issue7_d9_read_commands_leave_an_existing_store_byte_identical(tmp_path: Path, kind: str) -> None:
    _write(tmp_path, kind, open_last=True)
    before = _tree(tmp_path)
    for command in [*READ_COMMANDS, ["show", "s1", "--at", "2"], ["export", "s1"]]:
        result = runner.invoke(app, [*command, "--store", str(tmp_path), "--backend", kind, "--json"])
        assert result.exit_code == 0, (command, result.output)
    replay = runner.invoke(app, ["replay", "s1", "--store", str(tmp_path), "--backend", kind, "--speed", "0"])
    assert replay.exit_code == 0, replay.output
    assert _tree(tmp_path) == before


# --- read commands detect the JSONL encoding -------------------------------------------------------------


@pytest.mark.parametrize(("stored", "flag"), [("zstd", "none"), ("none", "zstd")])
def test_issue7_d9_read_commands_detect_the_jsonl_encoding(tmp_path: Path, stored: str, flag: str) -> None:
    _write(tmp_path, "jsonl", stored)
    before = _tree(tmp_path)
    args = ["--store", str(tmp_path), "--compression", flag, "--json"]
    listing = runner.invoke(app, ["ls", *args])
    assert listing.exit_code == 0, listing.output
    assert [row["id"] for row in orjson.loads(listing.stdout)["sessions"]] == ["s0", "s1"]
    assert all(row["error"] is None for row in orjson.loads(listing.stdout)["sessions"])
    verify = runner.invoke(app, ["verify", *args])
    assert verify.exit_code == 0, verify.output
    assert orjson.loads(verify.stdout)["ok"] is True
    exported = runner.invoke(app, ["export", "s1", *args])
    assert exported.exit_code == 0, exported.output
    assert len(orjson.loads(exported.stdout)["events"]) == 8
    shown = runner.invoke(app, ["show", "s1", *args])
    assert shown.exit_code == 0, shown.output
    assert _tree(tmp_path) == before


# --- export --partial --------------------------------------------------------------------------------------


def _write_two_turns(root: Path, kind: str, compression: str = "zstd") -> None:
    """Session "s" with two turns, each flushed on its own (zstd: header frame + one frame per turn)."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        session = store.create("s", meta={"cwd": "/work/project"})
        for turn in (1, 2):
            session.append("turn/start", {"turn": turn})
            session.append("user/message", al.user_message(f"q{turn}", id=f"u{turn}"), {"surfaceOp": "append"})
            session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            store.flush(session)
    finally:
        coordinator.close()


def _damage(root: Path, kind: str, compression: str) -> None:
    """Damage turn 2 (seqs 3..5) of session "s" with complete, valid-looking records around it."""
    if kind == "sqlite":
        import sqlite3

        with sqlite3.connect(root / "sessions.sqlite3") as con:
            con.execute("UPDATE events SET data = '{\"broken\":' WHERE seq = 4")
        con.close()
    elif compression == "zstd":
        log = _zstd_log(root, "s")
        data = bytearray(log.read_bytes())
        frames = [i for i in range(len(data)) if data.startswith(b"\x28\xb5\x2f\xfd", i)]
        assert len(frames) == 3
        data[frames[2] + 12] ^= 0xFF
        log.write_bytes(bytes(data))
    else:
        (log,) = root.glob("*/s/session.jsonl")
        lines = log.read_bytes().split(b"\n")
        assert orjson.loads(lines[5])["seq"] == 4
        lines[5] = lines[5][:-1]  # seq 4: a complete but unparsable line, with seq 5 complete after it
        log.write_bytes(b"\n".join(lines))


PARTIAL_CASES = [("jsonl", "zstd"), ("jsonl", "none"), ("sqlite", "zstd")]


@pytest.mark.parametrize(("kind", "compression"), PARTIAL_CASES)
def test_issue7_d9_export_partial_writes_the_readable_prefix_and_says_where_it_stopped(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_two_turns(tmp_path, kind, compression)
    _damage(tmp_path, kind, compression)
    before = _tree(tmp_path)
    args = ["--store", str(tmp_path), "--backend", kind, "--compression", compression]
    refused = runner.invoke(app, ["export", "s", *args, "--json"])
    assert refused.exit_code == 1
    error = orjson.loads(refused.stderr)["error"]
    assert error["code"] == "SESSION_CORRUPT"
    assert "agentlog export --partial" in error["message"]  # the advice names a command that works

    result = runner.invoke(app, ["export", "s", *args, "--partial"])
    assert result.exit_code == 3, result.output  # documented: the export is partial
    document = orjson.loads(result.stdout)
    assert document["header"]["id"] == "s"
    seqs = [event["seq"] for event in document["events"]]
    assert seqs == list(range(len(seqs))) and 3 <= len(seqs) < 6  # turn 1 whole, nothing after the damage
    damage = document["damage"]
    assert damage["code"] == "SESSION_CORRUPT"
    assert damage["location"] and damage["offset"] is not None
    assert damage["afterSeq"] == seqs[-1]
    assert "partial export" in result.stderr and str(damage["location"]) in result.stderr
    as_json = runner.invoke(app, ["export", "s", *args, "--partial", "--json"])
    assert as_json.exit_code == 3
    assert orjson.loads(as_json.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert orjson.loads(as_json.stderr)["partial"]["events"] == len(seqs)
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("kind", "compression"), PARTIAL_CASES)
def test_issue7_d9_export_partial_of_a_healthy_session_is_the_full_export(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_two_turns(tmp_path, kind, compression)
    args = ["export", "s", "--store", str(tmp_path), "--backend", kind, "--compression", compression]
    full = runner.invoke(app, args)
    partial = runner.invoke(app, [*args, "--partial"])
    assert full.exit_code == 0 and partial.exit_code == 0, partial.output
    assert orjson.loads(partial.stdout) == orjson.loads(full.stdout)


def test_issue7_d9_verify_table_keeps_full_ids_when_not_a_terminal(tmp_path: Path) -> None:
    _write(tmp_path, ids=(LONG_ID,), cwd=LONG_CWD)
    result = runner.invoke(app, ["verify", "--store", str(tmp_path)], env={"COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.stdout


def test_issue7_d9_export_partial_with_a_damaged_header_has_nothing_to_salvage(tmp_path: Path) -> None:
    _write_two_turns(tmp_path, "jsonl", "zstd")
    log = _zstd_log(tmp_path, "s")
    log.write_bytes(b"\x00" * 16 + log.read_bytes()[16:])
    before = _tree(tmp_path)
    result = runner.invoke(app, ["export", "s", "--store", str(tmp_path), "--partial", "--json"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert _tree(tmp_path) == before
