"""What people see of compaction: ``agentlog show`` marks checkpoints and pruned results, ``show --log``
says what each checkpoint shadowed, ``show --at`` before a compaction shows the uncompacted view.

The logs are built with the kernel by appending the events exactly in the order the spec fixes
(runtime §5.2 for a summary checkpoint, §5.11 for a prune), then stored and read back by the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli._marks import seq_ranges
from agentlog.cli.commands import app
from agentlog.compaction.estimate import estimate_message
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend

runner = CliRunner()
SID = "compacted"
BIG = "0123456789" * 500  # 5,000 characters
PRUNE_MARKER = "\n\n[... tool result middle pruned ...]\n\n"
PRUNED = BIG[:100] + PRUNE_MARKER + BIG[-20:]
COMPACTION_ID = "2f0c4d8e-0000-4000-8000-000000000001"
CHECKPOINT_TEXT = "This is an automatically generated checkpoint …\n\n<compacted-summary>"


def _assistant(blocks: list[Any], turn: int, step: int) -> dict[str, Any]:
    return {
        "turn": turn,
        "step": step,
        "message": al.assistant_message(blocks, provider="deepseek", model="deepseek-chat"),
    }


def _tool_turn_start(session: al.Session, turn: int, prompt: str, call_id: str) -> None:
    session.append("turn/start", {"turn": turn})
    session.append("user/message", al.user_message(prompt), {"surfaceOp": "append"})
    session.append("step/start", {"turn": turn, "step": 1})
    if turn == 1:
        header = {"config": {"provider": "deepseek", "model": "deepseek-chat"}, "system": "Be careful."}
        session.append("request/header", {"header": header, "reason": "initial"})
    call = al.tool_call_block(call_id, "read_file", '{"path": "big.txt"}')
    session.append("assistant/message", _assistant([call], turn, 1), {"surfaceOp": "append"})
    session.append("tool/call", {"turn": turn, "step": 1, "callId": call_id, "name": "read_file", "arguments": "{}"})
    result = {"turn": turn, "step": 1, "message": al.tool_result_message(call_id, BIG)}
    session.append("tool/result", result, {"surfaceOp": "append"})
    session.append("step/end", {"turn": turn, "step": 1})


def _prune(session: al.Session, seq: int) -> None:
    """§5.11: ``compaction/prune`` with the shadow price, then the replacement result (same data, the
    content pruned), ``replace`` of exactly that node."""
    original = session.events[seq]
    price = estimate_message(original["data"]["message"])
    session.append(
        "compaction/prune",
        {"shadowedRange": {"start": seq, "end": seq}, "shadowedSeqs": [seq], "shadowedTokenCount": price},
    )
    data = al.thaw(original["data"])
    data["message"]["content"][0]["content"] = [{"type": "text", "text": PRUNED}]
    session.append(
        "tool/result", data, {"surfaceOp": {"op": "replace", "start": seq, "end": seq}, "sourceEventSeqs": [seq]}
    )


def _compact(session: al.Session, turn: int, shadowed: list[int]) -> int:
    """§5.2: start, summary, the checkpoint replacing the span, end. Returns the checkpoint's seq."""
    tokens = sum(estimate_message(al.Session.derive_event_message(session.events[s])) for s in shadowed)
    start = session.append("compaction/start", {"compactionId": COMPACTION_ID, "turn": turn})
    summary_blocks = [{"type": "text", "text": "## Primary Request and Intent\n- read big.txt"}]
    summary = session.append(
        "compaction/summary",
        {
            "compactionId": COMPACTION_ID,
            "summary": summary_blocks,
            "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
            "shadowedSeqs": shadowed,
            "shadowedTokenCount": tokens,
            "provider": "deepseek",
            "model": "deepseek-chat",
        },
    )
    checkpoint = al.user_message(
        [{"type": "text", "text": CHECKPOINT_TEXT}, *summary_blocks, {"type": "text", "text": "</compacted-summary>"}],
        source={"kind": "plugin", "plugin": "compact", "compactionId": COMPACTION_ID},
    )
    event = session.append(
        "user/message",
        checkpoint,
        {
            "surfaceOp": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
            "sourceEventSeqs": [start.seq, summary.seq, *shadowed],
        },
    )
    session.append("compaction/end", {"compactionId": COMPACTION_ID, "turn": turn})
    return event.seq


def write_compacted_session(root: Path) -> dict[str, Any]:
    """Turn 1 reads a big file; turn 2 reads it again, prunes that result, compacts turn 1, answers."""
    store = al.SessionStore(now=lambda: 1_700_000_000_000)
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    try:
        session = store.create(SID, meta={"cwd": "/work/project"})
        _tool_turn_start(session, 1, "What does big.txt say?", "c1")
        session.append("step/start", {"turn": 1, "step": 2})
        session.append("assistant/message", _assistant([al.text_block("It is digits.")], 1, 2), {"surfaceOp": "append"})
        session.append("step/end", {"turn": 1, "step": 2})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        turn_one = list(session.surface.nodes)
        _tool_turn_start(session, 2, "Read it again.", "c2")
        result_seq = session.surface.nodes[-1]
        before_prune = session.events[-1].seq
        _prune(session, result_seq)
        replacement = session.events[-1].seq
        before_compaction = session.events[-1].seq
        checkpoint = _compact(session, 2, turn_one)
        session.append("step/start", {"turn": 2, "step": 2})
        session.append("assistant/message", _assistant([al.text_block("Still digits.")], 2, 2), {"surfaceOp": "append"})
        session.append("step/end", {"turn": 2, "step": 2})
        session.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
        store.flush(session)
        return {
            "turnOne": turn_one,
            "resultSeq": result_seq,
            "replacement": replacement,
            "beforePrune": before_prune,
            "beforeCompaction": before_compaction,
            "checkpoint": checkpoint,
            "surface": list(session.surface.nodes),
            "tokens": orjson.loads(orjson.dumps(session.events[checkpoint - 1]["data"]))["shadowedTokenCount"],
            "events": len(session.events),
        }
    finally:
        coordinator.close()


def show(root: Path, *args: str) -> Any:
    result = runner.invoke(app, ["show", SID, "--store", str(root), *args])
    assert result.exit_code == 0, result.output
    return result


def test_show_marks_the_checkpoint_and_the_pruned_result(tmp_path: Path) -> None:
    """The transcript labels the checkpoint with what it shadowed (messages, shadow price) and the pruned
    result with its size before and after, in the lines where they appear."""
    facts = write_compacted_session(tmp_path)
    lines = show(tmp_path).output.splitlines()
    assert lines[1] == f"user (plugin): [compaction checkpoint: shadowed 4 messages, ~{facts['tokens']:,} tokens]"
    pruned = [line for line in lines if "[pruned:" in line]
    assert pruned == [f"  ← read_file ok: [pruned: 5,000 → {len(PRUNED):,} chars] " + " ".join(PRUNED.split())]
    assert not any("What does big.txt say?" in line for line in lines)


def test_show_json_adds_the_marks_and_the_seq_of_every_message(tmp_path: Path) -> None:
    """--json keeps ``messages`` as derived and adds ``messageSeqs`` (the surface node of each message)
    and ``compaction`` (one entry per marked message, with its index)."""
    facts = write_compacted_session(tmp_path)
    document = orjson.loads(show(tmp_path, "--json").output)
    assert document["messageSeqs"] == facts["surface"]
    assert len(document["messages"]) == len(facts["surface"])
    checkpoint, pruned = document["compaction"]
    assert checkpoint == {
        "messageIndex": 0,
        "kind": "checkpoint",
        "seq": facts["checkpoint"],
        "compactionId": COMPACTION_ID,
        "startSeq": facts["checkpoint"] - 2,
        "summarySeq": facts["checkpoint"] - 1,
        "shadowedSeqs": facts["turnOne"],
        "shadowedMessages": 4,
        "shadowedTokenCount": facts["tokens"],
    }
    assert pruned["kind"] == "pruned" and pruned["messageIndex"] == 3
    assert pruned["originalSeq"] == facts["resultSeq"] and pruned["seq"] == facts["replacement"]
    assert (pruned["charsBefore"], pruned["charsAfter"]) == (5000, len(PRUNED))
    assert pruned["pruneSeq"] == facts["replacement"] - 1


def test_show_log_says_which_seqs_each_checkpoint_shadowed(tmp_path: Path) -> None:
    """Every event is still listed (the log keeps everything); the checkpoint's line is followed by the
    seqs it shadows, the replacement result's by the seq it replaces; --json lists both marks."""
    facts = write_compacted_session(tmp_path)
    lines = show(tmp_path, "--log").output.splitlines()
    event_lines = [line for line in lines if "↳" not in line]
    assert len(event_lines) == facts["events"]
    shadows = seq_ranges(facts["turnOne"])
    marks = [line.strip() for line in lines if "↳" in line]
    assert marks == [
        f"↳ [pruned: 5,000 → {len(PRUNED):,} chars]: replaces seq {facts['resultSeq']}",
        f"↳ [compaction checkpoint: shadowed 4 messages, ~{facts['tokens']:,} tokens]: shadows seqs {shadows}",
    ]
    document = orjson.loads(show(tmp_path, "--log", "--json").output)
    assert [m["kind"] for m in document["compaction"]] == ["pruned", "checkpoint"]
    assert document["compaction"][1]["shadowedSeqs"] == facts["turnOne"]


def test_show_at_a_seq_before_the_compaction_shows_the_full_earlier_view(tmp_path: Path) -> None:
    """Just before the compaction started, the view has the original turn-1 messages and no checkpoint;
    before the prune, the result is whole and unmarked."""
    facts = write_compacted_session(tmp_path)
    before = orjson.loads(show(tmp_path, "--at", str(facts["beforeCompaction"]), "--json").output)
    assert before["messageSeqs"][:4] == facts["turnOne"]
    assert [m["kind"] for m in before["compaction"]] == ["pruned"]
    text = show(tmp_path, "--at", str(facts["beforeCompaction"])).output
    assert "What does big.txt say?" in text and "compaction checkpoint" not in text
    whole = orjson.loads(show(tmp_path, "--at", str(facts["beforePrune"]), "--json").output)
    assert whole["compaction"] == []
    block = whole["messages"][-1]["content"][0]
    assert block["content"][0]["text"] == BIG
    after = orjson.loads(show(tmp_path, "--at", str(facts["checkpoint"]), "--json").output)
    assert after["compaction"][0]["kind"] == "checkpoint" and after["messageSeqs"][0] == facts["checkpoint"]


def test_seq_ranges_groups_consecutive_runs_in_the_given_order() -> None:
    """Shadowed seqs are in surface order (after earlier replaces not ascending): runs are kept in order."""
    assert seq_ranges([3, 4, 5, 9]) == "3–5, 9"
    assert seq_ranges([40, 3, 4]) == "40, 3–4"
    assert seq_ranges([7]) == "7"
    assert seq_ranges([]) == ""
