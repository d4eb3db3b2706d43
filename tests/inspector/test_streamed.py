"""The streamed load (:mod:`agentlog.inspector.streamed`): a JSONL session read, checked and paged a batch
at a time answers exactly as the whole validated read does, holds no restored session, and every log the
whole read refuses or repairs is left to the whole read (the same error, the same closers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentlog.errors import AgentlogError
from agentlog.inspector import streamed
from agentlog.inspector.views import Inspector

from .stores import open_read_only, write_store

KINDS = ("jsonl", "jsonl-zstd")


def _answers(inspector: Inspector, session_id: str) -> list[bytes]:
    """Everything the pages ask of a session, at every seq, as JSON."""
    summary = inspector.summary(session_id)
    last = summary["lastSeq"]
    out = [orjson.dumps(summary), orjson.dumps(inspector.charts(session_id))]
    for seq in range(last + 1):
        out.append(orjson.dumps(inspector.state_at(session_id, seq, shadowed_between=(0, last))))
        out.append(orjson.dumps(inspector.log_page(session_id, seq, 7)))
        out.append(orjson.dumps(inspector.event(session_id, seq)))
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batch_bytes", [64, streamed.BATCH_BYTES])
def test_a_streamed_load_answers_as_the_whole_read(
    tmp_path: Path, kind: str, batch_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session of the test store (a pruned result and a compaction: replacements; chunks; a crashed
    turn with closers; hostile content), in batches of a few events and in the default batches."""
    write_store(tmp_path, kind)
    monkeypatch.setattr(streamed, "BATCH_BYTES", batch_bytes)
    fast = Inspector(open_read_only(tmp_path, kind), page_after=None, search=False)
    whole = Inspector(open_read_only(tmp_path, kind), page_after=None, search=False, stream=False)
    try:
        for session_id in ("main", "main-fork", "crashed", "hostile"):
            loaded = fast.load(session_id)
            assert loaded.stored is None and loaded.paged is not None  # streamed: never restored whole
            assert whole.load(session_id).stored is not None
            assert _answers(fast, session_id) == _answers(whole, session_id), session_id
        assert fast.summary("crashed")["closers"] > 0
    finally:
        fast.close()
        whole.close()


def _rewrite(root: Path, session_id: str, change: Any) -> None:
    """A raw JSONL log with ``change(records)`` applied to its parsed records (the header first)."""
    [path] = [p for p in root.rglob("session.jsonl") if p.parent.name == session_id]
    records = [json.loads(line) for line in path.read_bytes().splitlines()]
    change(records)
    path.write_bytes(b"".join(json.dumps(record).encode() + b"\n" for record in records))


def _refusal(inspector: Inspector, session_id: str) -> tuple[str, str] | None:
    try:
        inspector.summary(session_id)
    except AgentlogError as err:
        return err.code, str(err)
    return None


def _first(records: list[Any], etype: str) -> dict[str, Any]:
    return next(record for record in records[1:] if record.get("type") == etype)


DAMAGE = {
    "a log-only event carrying a surface op": lambda r: _first(r, "step/start").update(surfaceOp="append"),
    "a message without its surface op": lambda r: _first(r, "user/message").pop("surfaceOp"),
    "a message with a null surface op": lambda r: _first(r, "user/message").update(surfaceOp=None),
    "a message with a numeric surface op": lambda r: _first(r, "assistant/message").update(surfaceOp=1),
    "sources on a log-only event": lambda r: _first(r, "turn/end").update(sourceEventSeqs=[0]),
    "a source seq from the future": lambda r: _first(r, "user/message").update(sourceEventSeqs=[10_000]),
    "a replacement of a node not on the surface": lambda r: (
        _first(r, "compaction/checkpoint").update(surfaceOp={"op": "replace", "start": 10_000, "end": 10_001})
        if any(x.get("type") == "compaction/checkpoint" for x in r)
        else _first(r, "user/message").update(surfaceOp={"op": "replace", "start": 10_000, "end": 10_001})
    ),
    "a seq gap": lambda r: _first(r, "turn/end").update(seq=99_999),
    "a seq written as a float": lambda r: _first(r, "turn/end").update(seq=float(_first(r, "turn/end")["seq"])),
    "an unknown event type": lambda r: _first(r, "turn/end").update(type="no/such-type"),
    "bad data": lambda r: _first(r, "step/start").update(data={"turn": "one", "step": 1}),
    "an invalid message": lambda r: _first(r, "user/message")["data"].update(content=42),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_log_the_whole_read_refuses_is_refused_the_same_way(tmp_path: Path, damage: str) -> None:
    """The streamed load leaves what it cannot accept to the whole read: the same typed refusal."""
    write_store(tmp_path, "jsonl")
    _rewrite(tmp_path, "main", DAMAGE[damage])
    fast = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False)
    whole = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False, stream=False)
    try:
        refusal = _refusal(whole, "main")
        assert refusal is not None, damage
        assert _refusal(fast, "main") == refusal
    finally:
        fast.close()
        whole.close()


def test_a_torn_tail_is_left_to_the_whole_read(tmp_path: Path) -> None:
    """A raw log cut inside its last record: the whole read reports the torn tail (repairable)."""
    write_store(tmp_path, "jsonl")
    [path] = [p for p in tmp_path.rglob("session.jsonl") if p.parent.name == "main"]
    path.write_bytes(path.read_bytes() + b'{"type": "turn/st')
    fast = Inspector(open_read_only(tmp_path, "jsonl"), page_after=None, search=False)
    try:
        assert fast.summary("main")["tornTail"] is True
        assert fast.load("main").stored is not None  # read whole
    finally:
        fast.close()
