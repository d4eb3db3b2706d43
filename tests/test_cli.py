"""The ``agentlog`` command (ls, export, verify) through typer's runner, over real stores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator

runner = CliRunner()

BACKENDS = [("jsonl", "zstd"), ("jsonl", "none"), ("sqlite", "zstd")]


def _backend(root: Path, kind: str, compression: str) -> Any:
    if kind == "sqlite":
        from agentlog.persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(str(root / "sessions.sqlite3"))
    from agentlog.persistence.jsonl.backend import JsonlBackend

    return JsonlBackend(str(root), compression=compression)


def _write_sessions(root: Path, kind: str, compression: str, count: int = 3, open_last: bool = False) -> None:
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, _backend(root, kind, compression))
    try:
        for index in range(count):
            session = store.create(f"s{index}", meta={"cwd": "/work/project"})
            session.append("turn/start", {"turn": 1})
            session.append("user/message", al.user_message(f"hello {index}", id=f"u{index}"), {"surfaceOp": "append"})
            session.append("step/start", {"turn": 1, "step": 1})
            session.append(
                "request/header",
                {"header": {"config": {"provider": "deepseek", "model": "deepseek-chat"}}, "reason": "initial"},
            )
            session.append(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": al.assistant_message(
                        [al.tool_call_block("c1", "read_file", "{}")],
                        provider="deepseek",
                        model="deepseek-chat",
                        id="a",
                    ),
                },
                {"surfaceOp": "append"},
            )
            session.append("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read_file", "arguments": "{}"})
            if not (open_last and index == count - 1):
                session.append(
                    "tool/result",
                    {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "content", id="r")},
                    {"surfaceOp": "append"},
                )
                session.append("step/end", {"turn": 1, "step": 1})
                session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
            store.flush(session)
        fork = store.fork("s0", child_id="s0-fork")
        store.flush(fork)
    finally:
        coordinator.close()


def _args(root: Path, kind: str, compression: str) -> list[str]:
    return ["--store", str(root), "--backend", kind, "--compression", compression]


def _tree_snapshot(root: Path) -> dict[str, bytes]:
    files = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                files[path] = handle.read()
    return files


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__ls_lists_sessions_as_json_and_table_without_writing(tmp_path: Path, kind: str, compression: str) -> None:
    """``ls`` of sessions written without the projection cache folds their logs in memory (the figures
    are the logs') and writes nothing: no cache file, no ``-wal``/``-shm`` beside a SQLite store."""
    _write_sessions(tmp_path, kind, compression)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["ls", *_args(tmp_path, kind, compression), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    ids = [row["id"] for row in document["sessions"]]
    assert ids == ["s0", "s0-fork", "s1", "s2"]
    by_id = {row["id"]: row for row in document["sessions"]}
    assert by_id["s0"]["events"] == 9 and by_id["s0"]["turns"] == 1
    assert by_id["s0"]["tokens"] is None  # a step, and no usage reported: unknown, not 0
    assert by_id["s0"]["cwd"] == "/work/project"
    assert by_id["s0-fork"]["parentSession"] == "s0"
    assert by_id["s1"]["createdAt"] == 1_700_000_000_000
    assert by_id["s1"]["lastActivity"] == 1_700_000_000_000  # the clock every event was written with
    assert document["nextCursor"] is None
    table = runner.invoke(app, ["ls", *_args(tmp_path, kind, compression)])
    assert table.exit_code == 0
    assert "s0-fork" in table.stdout and "/work/project" in table.stdout
    assert _tree_snapshot(tmp_path) == before


def test_cli__ls_is_cursor_paged(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=5)
    first = orjson.loads(runner.invoke(app, ["ls", "--store", str(tmp_path), "--json", "--limit", "2"]).stdout)
    assert [row["id"] for row in first["sessions"]] == ["s0", "s0-fork"]
    assert first["nextCursor"] == "s0-fork"
    second = orjson.loads(
        runner.invoke(app, ["ls", "--store", str(tmp_path), "--json", "--limit", "2", "--cursor", "s0-fork"]).stdout
    )
    assert [row["id"] for row in second["sessions"]] == ["s1", "s2"]
    table = runner.invoke(app, ["ls", "--store", str(tmp_path), "--limit", "2"])
    assert "agentlog ls --cursor s0-fork" in table.stdout


def test_cli__store_defaults_to_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=1)
    monkeypatch.setenv("AGENTLOG_STORE", str(tmp_path))
    result = runner.invoke(app, ["ls", "--json"])
    assert result.exit_code == 0
    assert [row["id"] for row in orjson.loads(result.stdout)["sessions"]] == ["s0", "s0-fork"]


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__export_prints_header_events_surface_messages_and_request_state(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_sessions(tmp_path, kind, compression)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["export", "s1", *_args(tmp_path, kind, compression)])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    assert set(document) == {"header", "events", "surface", "messages", "requestHeader", "requestContext"}
    assert document["header"]["id"] == "s1"
    assert [event["seq"] for event in document["events"]] == list(range(9))
    assert document["surface"] == [1, 4, 6]
    assert [message["role"] for message in document["messages"]] == ["user", "assistant", "user"]
    assert document["requestHeader"] == {"config": {"provider": "deepseek", "model": "deepseek-chat"}}
    assert document["requestContext"] is None
    assert _tree_snapshot(tmp_path) == before


def test_cli__export_of_an_interrupted_session_shows_the_repair_without_writing(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=2, open_last=True)
    before = _tree_snapshot(tmp_path)
    document = orjson.loads(runner.invoke(app, ["export", "s1", "--store", str(tmp_path)]).stdout)
    kinds = [event["type"] for event in document["events"]][-3:]
    assert kinds == ["tool/result", "step/end", "turn/end"]
    assert document["events"][-3]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert _tree_snapshot(tmp_path) == before


@pytest.mark.parametrize(("kind", "compression"), BACKENDS)
def test_cli__verify_passes_a_healthy_store_and_reports_repairable_sessions(
    tmp_path: Path, kind: str, compression: str
) -> None:
    _write_sessions(tmp_path, kind, compression, open_last=True)
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["verify", *_args(tmp_path, kind, compression), "--json"])
    assert result.exit_code == 0, result.output
    document = orjson.loads(result.stdout)
    status = {row["id"]: row["status"] for row in document["sessions"]}
    assert status == {"s0": "ok", "s0-fork": "ok", "s1": "ok", "s2": "repairable"}
    assert document["ok"] is True
    assert runner.invoke(app, ["verify", "s0", *_args(tmp_path, kind, compression)]).exit_code == 0
    assert _tree_snapshot(tmp_path) == before


def _zstd_log(root: Path, session_id: str) -> Path:
    matches = list(root.glob(f"*/{session_id}/session.jsonl.zstd"))
    assert len(matches) == 1
    return matches[0]


def test_cli__verify_fails_with_session_corrupt_on_a_damaged_frame_and_leaves_it_untouched(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd")
    log = _zstd_log(tmp_path, "s1")
    data = bytearray(log.read_bytes())
    header_frame_end = data.index(b"\x28\xb5\x2f\xfd", 4)  # second frame: the first batch
    data[header_frame_end + 12] ^= 0xFF
    log.write_bytes(bytes(data))
    before = _tree_snapshot(tmp_path)
    result = runner.invoke(app, ["verify", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 1
    rows = {row["id"]: row for row in orjson.loads(result.stdout)["sessions"]}
    assert rows["s1"]["status"] == "failed"
    assert rows["s1"]["error"]["code"] == "SESSION_CORRUPT"
    assert rows["s0"]["status"] == "ok"
    exported = runner.invoke(app, ["export", "s1", "--store", str(tmp_path), "--json"])
    assert exported.exit_code == 1
    assert orjson.loads(exported.stderr)["error"]["code"] == "SESSION_CORRUPT"
    assert _tree_snapshot(tmp_path) == before


def test_cli__missing_session_is_session_not_found(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "zstd", count=1)
    result = runner.invoke(app, ["export", "nope", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 1
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "SESSION_NOT_FOUND"
    assert 'session "nope" not found' in error["message"]
    plain = runner.invoke(app, ["export", "nope", "--store", str(tmp_path)])
    assert plain.exit_code == 1 and "SESSION_NOT_FOUND" in plain.stderr
    verify = runner.invoke(app, ["verify", "nope", "--store", str(tmp_path), "--json"])
    assert verify.exit_code == 1


def test_cli__future_format_version_is_reported_by_ls_and_refused_by_export(tmp_path: Path) -> None:
    _write_sessions(tmp_path, "jsonl", "none", count=1)
    log = next(tmp_path.glob("*/s0/session.jsonl"))
    lines = log.read_bytes().split(b"\n")
    header = orjson.loads(lines[0])
    header["version"] = 7
    log.write_bytes(b"\n".join([orjson.dumps(header), *lines[1:]]))
    listing = runner.invoke(app, ["ls", "--store", str(tmp_path), "--compression", "none", "--json"])
    assert listing.exit_code == 0
    rows = {row["id"]: row for row in orjson.loads(listing.stdout)["sessions"]}
    assert "s0" in rows  # reported, not hidden
    exported = runner.invoke(app, ["export", "s0", "--store", str(tmp_path), "--compression", "none", "--json"])
    assert exported.exit_code == 1
    error = orjson.loads(exported.stderr)["error"]
    assert error["code"] == "SESSION_FORMAT_UNSUPPORTED"
    assert "v7" in error["message"]
