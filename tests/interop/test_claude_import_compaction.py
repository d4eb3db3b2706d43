"""A Claude Code compaction (``system``/``compact_boundary`` then the ``isCompactSummary`` user record) is
imported as what it was: a compaction whose checkpoint holds the summary and shadows the surface before
it, the history still in the log, so ``at(seq)`` shows both sides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentlog.compaction.invariants import replay
from agentlog.interop.transcripts import IMPORT_RECORD, import_transcript
from agentlog.kernel.events import USER_MESSAGE
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "claude-code-compact.jsonl"


def _imported(tmp_path: Path, path: Path = FIXTURE) -> tuple[Any, Any, PersistenceCoordinator]:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "store")))
    report = import_transcript(coordinator, "claude-code", path, session_id="cc")
    return report, coordinator.view("cc"), coordinator


def _texts(messages: Any) -> list[tuple[str, str]]:
    return [
        (m["role"], "".join(b.get("text", "") for b in m["content"] if b.get("type") == "text")) for m in messages
    ]


def test_the_summary_becomes_a_checkpoint_over_the_history(tmp_path: Path) -> None:
    report, view, coordinator = _imported(tmp_path)
    try:
        types = [e["type"] for e in view.events]
        start = types.index("compaction/start")
        assert types[start : start + 4] == ["compaction/start", "compaction/summary", USER_MESSAGE, "compaction/end"]
        checkpoint = view.events[start + 2]
        assert checkpoint["surfaceOp"]["op"] == "replace"
        assert checkpoint["data"]["source"]["kind"] == "plugin" and checkpoint["data"]["source"]["plugin"] == "compact"
        summary = view.events[start + 1]["data"]
        assert summary["provider"] == "anthropic" and summary["model"] == "claude-sonnet-4-5-20250929"
        assert summary["shadowedTokenCount"] > 0
        assert replay(list(view.events)).compaction is None  # a closed, well-formed bracket
        after = _texts(view.derive_messages())
        assert after[0][0] == "user" and "the user set up the project" in after[0][1]
        assert after[1:] == [("user", "Now add CI"), ("assistant", "CI added.")]
        before = _texts(view.at(start - 1).derive_messages())
        assert before == [
            ("user", "Set up the project"),
            ("assistant", "Done: the project is set up."),
            ("user", "Add tests"),
            ("assistant", "Added three tests."),
        ]
        # the summary record is the checkpoint, not a prompt; the boundary record is kept verbatim
        prompts = [e for e in view.events if e["type"] == USER_MESSAGE and e["data"]["source"]["kind"] == "user"]
        assert len(prompts) == 3
        kept = [e["data"]["record"] for e in view.events if e["type"] == IMPORT_RECORD]
        assert [r.get("subtype") for r in kept] == ["compact_boundary"]
        assert report.messages["checkpoint"] == 1
        assert report.lossy == {"compact summary: shadowed price estimated": 1}
    finally:
        coordinator.close()


def test_a_summary_without_a_boundary_is_a_compaction_too(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    without = [r for r in lines if r.get("subtype") != "compact_boundary"]
    without[4]["parentUuid"] = "a2"  # older files: the summary follows the history directly
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in without))
    _report, view, coordinator = _imported(tmp_path, path)
    try:
        assert "compaction/start" in [e["type"] for e in view.events]
        assert _texts(view.derive_messages())[1:] == [("user", "Now add CI"), ("assistant", "CI added.")]
    finally:
        coordinator.close()


def test_a_call_left_open_before_the_compaction_is_closed_first(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    lines[3]["message"]["content"] = [{"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "ls"}}]
    path = tmp_path / "open.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    report, view, coordinator = _imported(tmp_path, path)
    try:
        types = [e["type"] for e in view.events]
        start = types.index("compaction/start")
        assert "tool/result" in types[:start] and types[start - 1] == "turn/end"
        assert report.synthesized_results == 1
        assert _texts(view.derive_messages())[1:] == [("user", "Now add CI"), ("assistant", "CI added.")]
    finally:
        coordinator.close()
