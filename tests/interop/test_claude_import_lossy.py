"""What a Claude Code import maps only approximately is counted in the report's ``lossy``."""

from __future__ import annotations

import json
from pathlib import Path

from agentlog.interop.transcripts import import_transcript
from agentlog.kernel.store import SessionStore
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

CLAUDE = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts" / "claude-code.jsonl"


def test_a_thinking_block_without_its_signature_is_counted(tmp_path: Path) -> None:
    records = [json.loads(line) for line in CLAUDE.read_text().splitlines() if line.strip()]
    for record in records:
        for block in (record.get("message") or {}).get("content") or ():
            if isinstance(block, dict) and block.get("type") == "thinking":
                block.pop("signature", None)
    path = tmp_path / "unsigned.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    coordinator = PersistenceCoordinator(SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        report = import_transcript(coordinator, "claude-code", path, session_id="cc")
        signed = import_transcript(coordinator, "claude-code", CLAUDE, session_id="signed")
    finally:
        coordinator.close()
    assert report.lossy == {"thinking without a signature": 1}
    assert signed.lossy == {}
