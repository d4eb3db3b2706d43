"""``import --update`` appends what a live transcript added since its import: the stored events stay as
they were (the log is append-only), the new records are mapped after them as a fresh import of the whole
file would map them, and a transcript that was rewritten rather than appended to is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.errors import TranscriptError
from agentlog.interop.transcripts import IMPORT_DONE, import_transcript, update_transcript
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "claude-code-rewind.jsonl"
LINES = FIXTURE.read_text().splitlines(keepends=True)
FIRST = 4  # two whole turns: "What is 2+2?" and "And 3+3?"


def _linear() -> list[str]:
    """The fixture without its rewind: u1 a1 u2 a2, then u4 a4 re-linked after a2."""
    import json

    records = [json.loads(line) for line in LINES]
    kept = [r for r in records if r.get("uuid") in ("u1", "a1", "u2", "a2", "u4", "a4")]
    kept[4]["parentUuid"] = "a2"
    return [json.dumps(r) + "\n" for r in kept]


def _coordinator(root: Path) -> PersistenceCoordinator:
    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))


def _texts(view: Any) -> list[tuple[str, str]]:
    return [
        (m["role"], "".join(b.get("text", "") for b in m["content"] if b.get("type") == "text"))
        for m in view.derive_messages()
    ]


def test_the_new_records_are_appended_after_the_stored_events(tmp_path: Path) -> None:
    lines = _linear()
    path = tmp_path / "live.jsonl"
    path.write_text("".join(lines[:FIRST]))
    root = tmp_path / "store"
    coordinator = _coordinator(root)
    try:
        import_transcript(coordinator, "claude-code", path, session_id="s")
        before = thaw(coordinator.view("s").events.to_list())
        path.write_text("".join(lines))
        report = update_transcript(coordinator, "claude-code", path, session_id="s")
        after = coordinator.view("s")
        assert thaw(after.events.to_list())[: len(before)] == before  # append-only
        assert report.appended == len(after.events) - len(before) > 0
        assert after.events[-1]["type"] == IMPORT_DONE and after.events[-1]["data"]["lines"] == len(lines)
        fresh = _coordinator(tmp_path / "fresh")
        try:
            import_transcript(fresh, "claude-code", path, session_id="s")
            assert _texts(after) == _texts(fresh.view("s"))
        finally:
            fresh.close()
    finally:
        coordinator.close()


def test_an_unchanged_transcript_appends_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_linear()))
    coordinator = _coordinator(tmp_path / "store")
    try:
        import_transcript(coordinator, "claude-code", path, session_id="s")
        count = len(coordinator.view("s").events)
        assert update_transcript(coordinator, "claude-code", path, session_id="s").appended == 0
        assert len(coordinator.view("s").events) == count
    finally:
        coordinator.close()


def test_a_rewritten_transcript_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    lines = _linear()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:FIRST]))
    coordinator = _coordinator(tmp_path / "store")
    try:
        import_transcript(coordinator, "claude-code", path, session_id="s")
        count = len(coordinator.view("s").events)
        path.write_text("".join(lines).replace("2+2", "9+9"))
        with pytest.raises(TranscriptError, match="rewritten, not appended to"):
            update_transcript(coordinator, "claude-code", path, session_id="s")
        assert len(coordinator.view("s").events) == count
    finally:
        coordinator.close()


def test_a_torn_line_completed_later_is_imported_by_the_update(tmp_path: Path) -> None:
    lines = _linear()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:FIRST]) + lines[FIRST][:20])
    coordinator = _coordinator(tmp_path / "store")
    try:
        assert import_transcript(coordinator, "claude-code", path, session_id="s").torn_last_line == FIRST + 1
        path.write_text("".join(lines))
        update_transcript(coordinator, "claude-code", path, session_id="s")
        assert _texts(coordinator.view("s"))[-2:] == [("user", "Thanks"), ("assistant", "You're welcome")]
    finally:
        coordinator.close()


def test_a_session_that_is_no_import_of_the_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_linear()))
    coordinator = _coordinator(tmp_path / "store")
    try:
        codex = FIXTURE.with_name("codex.jsonl")
        import_transcript(coordinator, "codex", codex, session_id="other")
        count = len(coordinator.view("other").events)
        with pytest.raises(TranscriptError, match="is not an import of a claude-code transcript"):
            update_transcript(coordinator, "claude-code", path, session_id="other")
        assert len(coordinator.view("other").events) == count
    finally:
        coordinator.close()


def test_the_command_updates_by_the_transcript_s_own_id(tmp_path: Path) -> None:
    lines = _linear()
    path = tmp_path / "t.jsonl"
    path.write_text("".join(lines[:FIRST]))
    store = str(tmp_path / "store")
    runner = CliRunner()
    assert runner.invoke(app, ["import", str(path), "--store", store]).exit_code == 0
    path.write_text("".join(lines))
    result = runner.invoke(app, ["import", str(path), "--store", store, "--update", "--json"])
    assert result.exit_code == 0, result.stdout + result.stderr
    document = orjson.loads(result.stdout)
    assert document["sessionId"] == "7a1b2c3d-0000-4000-8000-00000000000b" and document["appended"] > 0
