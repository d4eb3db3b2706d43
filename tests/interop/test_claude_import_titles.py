"""Claude Code's title records become the imported session's title: a ``custom-title`` (the user's
rename) wins over an ``ai-title``, which wins over a ``summary``; the latest of a kind wins, as Claude
Code shows it. ``ls`` and ``title`` show it without reading anything else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.interop.transcripts import IMPORT_RECORD, import_transcript
from agentlog.kernel.events import USER_MESSAGE
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.projection.events import SESSION_TITLE

CLAUDE = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "claude-code.jsonl"
SID = "5f0c1d2e-0000-4000-8000-000000000001"


def _with(tmp_path: Path, *extra: dict[str, Any], drop_summary: bool = False) -> Path:
    lines = CLAUDE.read_text().splitlines()
    if drop_summary:
        lines = [line for line in lines if '"type":"summary"' not in line]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([*lines, *(json.dumps(r) for r in extra)]) + "\n")
    return path


def _imported(tmp_path: Path, path: Path) -> tuple[Any, list[Any]]:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        report = import_transcript(coordinator, "claude-code", path, session_id="cc")
        return report, list(coordinator.view("cc").events)
    finally:
        coordinator.close()


def _titles(events: list[Any]) -> list[Any]:
    return [e["data"] for e in events if e["type"] == SESSION_TITLE]


def _human_prompts(events: list[Any]) -> list[int]:
    return [e["seq"] for e in events if e["type"] == USER_MESSAGE and e["data"]["source"]["kind"] == "user"]


def test_a_summary_becomes_the_title_cited_by_the_prompts_it_summarises(tmp_path: Path) -> None:
    report, events = _imported(tmp_path, CLAUDE)
    source = {"kind": "provider", "provider": "claude-code"}
    prompts = _human_prompts(events)
    assert _titles(events) == [{"title": "Reading the notes file", "messageSeqs": prompts, "source": source}]
    assert not any(e["type"] == IMPORT_RECORD and e["data"]["record"]["type"] == "summary" for e in events)
    assert "summary" not in report.to_json()["keptRecords"]
    assert events[-2]["type"] == SESSION_TITLE  # after the last turn, before import/done


def test_an_ai_title_wins_over_a_summary_and_the_latest_wins(tmp_path: Path) -> None:
    path = _with(
        tmp_path,
        {"type": "ai-title", "aiTitle": "First guess", "sessionId": SID},
        {"type": "ai-title", "aiTitle": "Read notes and list files", "sessionId": SID},
    )
    _report, events = _imported(tmp_path, path)
    assert [t["title"] for t in _titles(events)] == ["Read notes and list files"]


def test_a_custom_title_is_the_user_s_rename(tmp_path: Path) -> None:
    path = _with(
        tmp_path,
        {"type": "custom-title", "customTitle": "my notes \x1b[31mred\x1b[0m   session", "sessionId": SID},
        {"type": "ai-title", "aiTitle": "Later AI title", "sessionId": SID},
    )
    _report, events = _imported(tmp_path, path)
    assert _titles(events) == [{"title": "my notes red session", "messageSeqs": [], "source": {"kind": "user"}}]


def test_a_long_title_is_cut_to_the_title_budget(tmp_path: Path) -> None:
    path = _with(tmp_path, {"type": "custom-title", "customTitle": "é" * 100, "sessionId": SID}, drop_summary=True)
    _report, events = _imported(tmp_path, path)
    assert _titles(events)[0]["title"] == "é" * 40  # 80 UTF-8 bytes, the original's maxTitleBytes


def test_a_title_record_without_text_is_counted_as_dropped(tmp_path: Path) -> None:
    path = _with(tmp_path, {"type": "ai-title", "aiTitle": "   ", "sessionId": SID}, drop_summary=True)
    report, events = _imported(tmp_path, path)
    assert _titles(events) == []
    assert report.to_json()["dropped"]["ai-title without text"] == 1


def test_ls_and_title_show_the_imported_title(tmp_path: Path) -> None:
    path = _with(tmp_path, {"type": "ai-title", "aiTitle": "Read notes and list files", "sessionId": SID})
    store = tmp_path / "store"
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(path), "--from", "claude-code", "--store", str(store), "--id", "cc"])
    assert result.exit_code == 0, result.stdout + result.stderr
    listed = runner.invoke(app, ["ls", "--store", str(store), "--json"])
    assert listed.exit_code == 0, listed.stderr
    rows = orjson.loads(listed.stdout)
    rows = rows if isinstance(rows, list) else rows.get("sessions", rows)
    assert any(row.get("title") == "Read notes and list files" for row in rows), rows
    titled = runner.invoke(app, ["title", "cc", "--store", str(store)])
    assert titled.exit_code == 0, titled.stderr
    assert "Read notes and list files" in titled.stdout
