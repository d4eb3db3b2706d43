"""A Claude Code sub-agent's own transcript imported as a subagent child of its parent session: the
header links it (``parentSession``, ``origin``, ``delegationDepth``), its sidechain records become its
conversation, and a parent the store does not have is refused with nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.errors import SessionNotFoundError
from agentlog.interop.transcripts import IMPORT_RECORD, import_transcript
from agentlog.kernel.events import ASSISTANT_MESSAGE, USER_MESSAGE
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

CLAUDE = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "claude-code.jsonl"


def _sidechain_file(tmp_path: Path) -> Path:
    """The fixture's main conversation rewritten as a sub-agent's own file (every record a sidechain's)."""
    records = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    conversation = [r for r in records if r.get("type") in ("user", "assistant") and r.get("isSidechain") is False]
    for record in conversation:
        record["isSidechain"] = True
        record["agentId"] = "a1b2c3"
    path = tmp_path / "agent-a1b2c3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in conversation))
    return path


def _import(root: Path, path: Path, **options: Any) -> Any:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    try:
        return import_transcript(coordinator, "claude-code", path, **options)
    finally:
        coordinator.close()


def _view(root: Path, session_id: str) -> Any:
    reader = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    try:
        return reader.view(session_id)
    finally:
        reader.close()


def test_a_sub_agent_file_is_imported_as_a_linked_child_with_its_conversation(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    report = _import(root, _sidechain_file(tmp_path), session_id="helper", parent_session="lead")
    assert report.session_id == "helper"
    view = _view(root, "helper")
    header = view.header
    assert (header["parentSession"], header["origin"], header["delegationDepth"]) == ("lead", "subagent", 1)
    types = [e["type"] for e in view.events]
    assert USER_MESSAGE in types and ASSISTANT_MESSAGE in types  # mapped, not kept aside
    assert IMPORT_RECORD not in types  # the file holds only its conversation: nothing is kept aside
    assert [m["role"] for m in view.derive_messages()] == [m["role"] for m in _view(root, "lead").derive_messages()]


def test_a_sidechain_of_a_sidechain_is_one_level_deeper(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    side = _sidechain_file(tmp_path)
    _import(root, side, session_id="helper", parent_session="lead")
    _import(root, side, session_id="helper-2", parent_session="helper")
    assert _view(root, "helper-2").header["delegationDepth"] == 2


def test_a_parent_that_is_not_stored_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    with pytest.raises(SessionNotFoundError, match='parent session "ghost" is not in this store'):
        _import(root, _sidechain_file(tmp_path), session_id="helper", parent_session="ghost")
    backend = JsonlBackend(str(root))
    try:
        assert [s.id for s in backend.list_sessions()] == ["lead"]
    finally:
        backend.close()


def test_the_main_file_keeps_its_sidechain_records_aside(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    header = _view(root, "lead").header
    assert "parentSession" not in header and "origin" not in header


def test_import_parent_on_the_command_line(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    runner = CliRunner()
    args = ["import", str(_sidechain_file(tmp_path)), "--from", "claude-code", "--store", str(root)]
    result = runner.invoke(app, [*args, "--id", "helper", "--parent", "lead", "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert orjson.loads(result.stdout)["sessionId"] == "helper"
    result = runner.invoke(app, [*args, "--id", "orphan", "--parent", "ghost", "--json"])
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "SESSION_NOT_FOUND"
