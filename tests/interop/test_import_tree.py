"""``agentlog import DIR`` imports every transcript under a directory (recursive, sorted, each file's
format detected), parents before their sub-agents so each links to its parent, a transcript imported
before skipped, a bad file reported without stopping the rest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.errors import ConversionError
from agentlog.interop import detect_transcript_format, import_tree
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CLAUDE = FIXTURES / "claude-code.jsonl"
CODEX = FIXTURES / "codex.jsonl"
CLAUDE_ID = "5f0c1d2e-0000-4000-8000-000000000001"


def _tree(root: Path) -> Path:
    """``~/.claude/projects/<project>/`` and ``~/.codex/sessions/YYYY/MM/DD/`` side by side, with a
    sub-agent file in the layout Claude Code writes it (``<session>/subagents/agent-<id>.jsonl``)."""
    project = root / "claude" / "-home-dev-project"
    project.mkdir(parents=True)
    shutil.copy(CLAUDE, project / f"{CLAUDE_ID}.jsonl")
    records = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    side = [dict(r, isSidechain=True, agentId="a1b2c3") for r in records if r.get("type") in ("user", "assistant")]
    sub = project / CLAUDE_ID / "subagents"
    sub.mkdir(parents=True)
    # named to sort before the parent file: the parents-first order must not depend on names
    (sub / "agent-a1b2c3.jsonl").write_text("".join(json.dumps(r) + "\n" for r in side))
    day = root / "codex" / "2025" / "09" / "10"
    day.mkdir(parents=True)
    shutil.copy(CODEX, day / "rollout-2025-09-10T08-00-00-0199a000.jsonl")
    (root / "notes.txt").write_text("not a transcript")
    return root


def _coordinator(store: Path) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(store)))


def test_the_format_of_each_file_is_detected(tmp_path: Path) -> None:
    assert detect_transcript_format(CLAUDE) == "claude-code"
    assert detect_transcript_format(CODEX) == "codex"
    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": "world"}\n')
    with pytest.raises(ConversionError, match="--from"):
        detect_transcript_format(other)


def test_a_directory_imports_every_transcript_parents_first(tmp_path: Path) -> None:
    root = _tree(tmp_path / "home")
    coordinator = _coordinator(tmp_path / "store")
    try:
        result = import_tree(coordinator, root)
        imported = [report.session_id for report in result.imported]
        assert imported == [CLAUDE_ID, "0199a000-0000-7000-8000-000000000002", f"{CLAUDE_ID}-agent-a1b2c3"]
        assert result.imported[2].parent_session == CLAUDE_ID
        assert result.skipped == [] and result.failed == []
    finally:
        coordinator.close()


def test_a_second_run_skips_what_was_imported(tmp_path: Path) -> None:
    root = _tree(tmp_path / "home")
    coordinator = _coordinator(tmp_path / "store")
    try:
        import_tree(coordinator, root)
        again = import_tree(coordinator, root)
        assert again.imported == []
        assert sorted(item.session_id for item in again.skipped) == sorted(
            [CLAUDE_ID, "0199a000-0000-7000-8000-000000000002", f"{CLAUDE_ID}-agent-a1b2c3"]
        )
    finally:
        coordinator.close()


def test_a_bad_file_is_reported_and_the_others_are_imported(tmp_path: Path) -> None:
    root = _tree(tmp_path / "home")
    bad = root / "claude" / "-home-dev-project" / "broken.jsonl"
    bad.write_text('{"type": "user", "uuid": "x", "message": {"role": "user", "content": 7}}\n')
    coordinator = _coordinator(tmp_path / "store")
    try:
        result = import_tree(coordinator, root)
        assert len(result.imported) == 3
        assert [(item.path, item.error.code) for item in result.failed] == [(str(bad), "TRANSCRIPT_INVALID")]
    finally:
        coordinator.close()


def _run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_the_command_imports_a_directory_and_prints_a_summary(tmp_path: Path) -> None:
    root = _tree(tmp_path / "home")
    store = str(tmp_path / "store")
    result = _run("import", str(root), "--store", store)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "imported 3 transcripts, skipped 0, failed 0" in result.stdout
    assert CLAUDE_ID in result.stdout
    again = _run("import", str(root), "--store", store, "--json")
    assert again.exit_code == 0
    document = orjson.loads(again.stdout)
    assert document["imported"] == [] and len(document["skipped"]) == 3 and document["failed"] == []


def test_a_failed_file_makes_the_command_fail_after_importing_the_rest(tmp_path: Path) -> None:
    root = _tree(tmp_path / "home")
    (root / "codex" / "broken.jsonl").write_text('{"timestamp": "x", "type": "response_item", "payload": 3}\n')
    result = _run("import", str(root), "--store", str(tmp_path / "store"), "--json")
    assert result.exit_code == 1
    document = orjson.loads(result.stdout)
    assert len(document["imported"]) == 3 and document["failed"][0]["error"]["code"] == "TRANSCRIPT_INVALID"


def test_id_is_refused_for_a_directory(tmp_path: Path) -> None:
    result = _run("import", str(_tree(tmp_path / "home")), "--store", str(tmp_path / "store"), "--id", "x", "--json")
    assert result.exit_code == 1
    assert orjson.loads(result.stderr)["error"]["code"] == "INVALID_OPTION"


def test_a_single_file_with_from_auto(tmp_path: Path) -> None:
    result = _run("import", str(CODEX), "--store", str(tmp_path / "store"), "--json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["source"] == "codex"
