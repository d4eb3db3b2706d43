"""``export --to claude-code`` / ``--to codex`` write files in the tool's own layout; importing one gives
the same events as the session it was written from, up to ids (message ids, compaction ids, the import's
own bookkeeping records)."""

from __future__ import annotations

import io
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from agentlog.cli.commands import app
from agentlog.interop.transcripts import export_session, import_transcript
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
CASES = [
    ("claude-code", "claude-code.jsonl"),
    ("claude-code", "claude-code-compact.jsonl"),
    ("claude-code", "claude-code-rewind.jsonl"),
    ("codex", "codex.jsonl"),
    ("codex", "codex-current.jsonl"),
    ("codex", "codex-2025-09.jsonl"),
]
_IDS = frozenset({"id", "compactionId"})


def _strip(value: Any) -> Any:
    """``value`` without ids (message and compaction ids are minted anew by each import)."""
    if isinstance(value, dict):
        return {key: _strip(inner) for key, inner in value.items() if key not in _IDS}
    if isinstance(value, list):
        return [_strip(inner) for inner in value]
    return value


def _import(root: Path, source: str, path: Path, session_id: str) -> Any:
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))
    try:
        import_transcript(coordinator, source, path, session_id=session_id)
        return coordinator.view(session_id)
    finally:
        coordinator.close()


@pytest.mark.parametrize(("source", "name"), CASES)
def test_import_export_import_gives_the_same_conversation(tmp_path: Path, source: str, name: str) -> None:
    first = _import(tmp_path / "a", source, FIXTURES / name, "first")
    out = io.StringIO()
    export_session(first, source, out)
    exported = tmp_path / f"exported-{name}"
    exported.write_text(out.getvalue())
    second = _import(tmp_path / "b", source, exported, "second")
    assert thaw(_strip(second.derive_messages().to_list())) == thaw(_strip(first.derive_messages().to_list()))
    kinds = [e["type"] for e in first.events if e["type"] not in ("import/record", "import/done")]
    assert [e["type"] for e in second.events if e["type"] not in ("import/record", "import/done")] == kinds
    assert [e["time"] for e in second.events if e["type"] not in ("import/record", "import/done")] == [
        e["time"] for e in first.events if e["type"] not in ("import/record", "import/done")
    ]


def test_the_command_writes_the_file_and_the_title_survives(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    runner = CliRunner()
    args = ["import", str(FIXTURES / "claude-code.jsonl"), "--from", "claude-code", "--store", store, "--id", "cc"]
    assert runner.invoke(app, args).exit_code == 0
    result = runner.invoke(app, ["export", "cc", "--store", store, "--to", "claude-code"])
    assert result.exit_code == 0, result.stderr
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert lines[-1] == {"type": "ai-title", "aiTitle": "Reading the notes file", "sessionId": lines[0]["sessionId"]}
    assert sum(1 for r in lines if r.get("subtype") == "compact_boundary") == 0
    chained = [r for r in lines if "uuid" in r and r.get("isSidechain") is not True]
    assert all(b["parentUuid"] == a["uuid"] for a, b in itertools.pairwise(chained))


def test_a_compaction_is_written_once_as_boundary_and_summary(tmp_path: Path) -> None:
    view = _import(tmp_path / "a", "claude-code", FIXTURES / "claude-code-compact.jsonl", "cc")
    out = io.StringIO()
    export_session(view, "claude-code", out)
    records = [orjson.loads(line) for line in out.getvalue().splitlines()]
    boundaries = [i for i, r in enumerate(records) if r.get("subtype") == "compact_boundary"]
    assert len(boundaries) == 1
    summary = records[boundaries[0] + 1]
    assert summary["isCompactSummary"] is True and summary["parentUuid"] == records[boundaries[0]]["uuid"]
    assert records[boundaries[0]]["logicalParentUuid"] == records[boundaries[0] - 1]["uuid"]
