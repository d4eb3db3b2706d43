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
CODEX = CLAUDE.with_name("codex.jsonl")


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


# ---------------------------------------------------------------- linked from the file's own parent session id

PARENT_CLAUDE_ID = "5f0c1d2e-0000-4000-8000-000000000001"  # the fixture's sessionId, which its sub-agent records share


def _sqlite_import(db: Path, path: Path, **options: Any) -> Any:
    from agentlog.persistence.sqlite.backend import SqliteBackend

    coordinator = PersistenceCoordinator(SessionStore(), SqliteBackend(str(db)))
    try:
        return import_transcript(coordinator, "claude-code", path, **options)
    finally:
        coordinator.close()


def test_a_sub_agent_file_links_itself_to_the_session_imported_from_its_parent_transcript(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    _import(root, CODEX, session_id="other")  # another tool's session in the same store is never taken
    report = _import(root, _sidechain_file(tmp_path), session_id="helper")
    assert report.parent_session == "lead"
    assert report.to_json()["parentSession"] == "lead"
    header = _view(root, "helper").header
    assert (header["parentSession"], header["origin"], header["delegationDepth"]) == ("lead", "subagent", 1)


def test_the_link_is_found_in_a_sqlite_store_too(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    _sqlite_import(db, CLAUDE, session_id="lead")
    report = _sqlite_import(db, _sidechain_file(tmp_path), session_id="helper")
    assert report.parent_session == "lead"


def test_each_import_records_the_transcript_s_own_session_id(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    _import(root, _sidechain_file(tmp_path), session_id="helper")
    lead_done = _view(root, "lead").events[-1]
    helper_done = _view(root, "helper").events[-1]
    assert lead_done["data"]["sessionId"] == PARENT_CLAUDE_ID and "agentId" not in lead_done["data"]
    assert helper_done["data"]["sessionId"] == PARENT_CLAUDE_ID and helper_done["data"]["agentId"] == "a1b2c3"


def test_a_sub_agent_file_whose_parent_was_never_imported_is_imported_unlinked_and_says_so(tmp_path: Path) -> None:
    root = tmp_path / "store"
    report = _import(root, _sidechain_file(tmp_path), session_id="helper")
    assert report.parent_session is None
    assert "parentSession" not in _view(root, "helper").header
    note = report.to_json()["parentNote"]
    assert PARENT_CLAUDE_ID in note and "--parent" in note


def test_a_parent_transcript_imported_twice_is_not_guessed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead-1")
    _import(root, CLAUDE, session_id="lead-2")
    report = _import(root, _sidechain_file(tmp_path), session_id="helper")
    assert report.parent_session is None
    note = report.to_json()["parentNote"]
    assert "lead-1" in note and "lead-2" in note and "--parent" in note


def test_a_sub_agent_is_not_linked_to_another_sub_agent_of_the_same_parent(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    _import(root, _sidechain_file(tmp_path), session_id="helper-1")
    report = _import(root, _sidechain_file(tmp_path), session_id="helper-2")
    assert report.parent_session == "lead"


def test_a_main_file_is_never_linked(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    report = _import(root, CLAUDE, session_id="again")
    assert report.parent_session is None and "parentNote" not in report.to_json()
    assert "parentSession" not in _view(root, "again").header


def test_the_command_line_prints_the_link_it_found(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _import(root, CLAUDE, session_id="lead")
    runner = CliRunner()
    args = ["import", str(_sidechain_file(tmp_path)), "--from", "claude-code", "--store", str(root), "--id", "helper"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"linked as a subagent of lead (the session imported from Claude Code session {PARENT_CLAUDE_ID})" in (
        result.stdout
    )
