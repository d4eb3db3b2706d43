"""Importing the same transcript twice does not make a second session silently: the default id is the
transcript's own session id, and a second import of it is refused with a message naming the session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.errors import TranscriptAlreadyImportedError
from agentlog.interop.transcripts import import_transcript
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code.jsonl"
CODEX = FIXTURES / "codex.jsonl"
CLAUDE_ID = "5f0c1d2e-0000-4000-8000-000000000001"


def _import(root: Path, source: str, path: Path, **options: Any) -> Any:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    try:
        return import_transcript(coordinator, source, path, **options)
    finally:
        coordinator.close()


def _codex_id() -> str:
    for line in CODEX.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("type") == "session_meta":
            return str(record["payload"]["id"])
    raise AssertionError("the fixture has a session_meta line")


def test_the_default_id_is_the_transcript_s_own_session_id(tmp_path: Path) -> None:
    assert _import(tmp_path / "store", "claude-code", CLAUDE).session_id == CLAUDE_ID
    assert _import(tmp_path / "store", "codex", CODEX).session_id == _codex_id()


def test_a_second_import_is_refused_naming_the_session_and_the_way_out(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, "claude-code", CLAUDE)
    with pytest.raises(TranscriptAlreadyImportedError) as caught:
        _import(root, "claude-code", CLAUDE)
    err = caught.value
    assert err.code == "TRANSCRIPT_ALREADY_IMPORTED" and err.session_id == CLAUDE_ID
    assert CLAUDE_ID in str(err) and "--id" in str(err)
    backend = JsonlBackend(str(root))
    try:
        assert [s.id for s in backend.list_sessions()] == [CLAUDE_ID]
    finally:
        backend.close()


def test_an_explicit_id_imports_a_copy(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, "claude-code", CLAUDE)
    assert _import(root, "claude-code", CLAUDE, session_id="copy").session_id == "copy"


def test_a_sub_agent_file_s_default_id_names_its_agent(tmp_path: Path) -> None:
    records = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    side = [dict(r, isSidechain=True, agentId="a1b2c3") for r in records if r.get("type") in ("user", "assistant")]
    path = tmp_path / "agent-a1b2c3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in side if r.get("isSidechain") is True))
    root = tmp_path / "store"
    _import(root, "claude-code", CLAUDE)
    report = _import(root, "claude-code", path)
    assert report.session_id == f"{CLAUDE_ID}-agent-a1b2c3" and report.parent_session == CLAUDE_ID


def test_a_transcript_without_a_session_id_gets_a_fresh_one_each_time(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    for record in lines:
        record.pop("sessionId", None)
    path = tmp_path / "anonymous.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    first = _import(tmp_path / "store", "claude-code", path).session_id
    second = _import(tmp_path / "store", "claude-code", path).session_id
    assert first != second


def test_the_command_line_refusal_is_typed(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    runner = CliRunner()
    args = ["import", str(CLAUDE), "--from", "claude-code", "--store", store, "--json"]
    assert runner.invoke(app, args).exit_code == 0
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    error = orjson.loads(result.stderr)["error"]
    assert error["code"] == "TRANSCRIPT_ALREADY_IMPORTED" and CLAUDE_ID in error["message"]
