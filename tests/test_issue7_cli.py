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
from agentlog.cli import app
from agentlog.persistence.coordinator import PersistenceCoordinator

runner = CliRunner()

LONG_ID = "a-rather-long-session-identifier-that-a-narrow-table-would-cut-0123456789"
LONG_CWD = "/work/projects/with/a/deeply/nested/and/long/working/directory/name"


def _backend(root: Path, kind: str, compression: str = "zstd") -> Any:
    if kind == "sqlite":
        from agentlog.persistence.sqlite import SqliteBackend

        return SqliteBackend(str(root / "sessions.sqlite3"))
    from agentlog.persistence.jsonl import JsonlBackend

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
    done = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"agentlog {version('agentlog')}"


# --- ls: headers only, full ids -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_issue7_d9_ls_reads_headers_only(tmp_path: Path, kind: str) -> None:
    _write(tmp_path, kind)
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--backend", kind, "--json"])
    assert result.exit_code == 0, result.output
    rows = orjson.loads(result.stdout)["sessions"]
    assert [row["id"] for row in rows] == ["s0", "s1"]
    for row in rows:
        # Counting would decode the whole log; ls reads headers, so counts are not reported (null).
        assert row["events"] is None and row["lastActivity"] is None
        assert row["createdAt"] == 1_700_000_000_000 and row["cwd"] == "/work/project"
        assert row["error"] is None


def test_issue7_d9_ls_does_not_decode_bodies_a_damaged_body_is_for_verify(tmp_path: Path) -> None:
    _write(tmp_path)
    _damage_second_frame(tmp_path, "s1")
    result = runner.invoke(app, ["ls", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["s1"]["error"] is None  # the header is fine; ls never read the body
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
        timeout=60,
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
