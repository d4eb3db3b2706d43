"""What people see of compaction: ``agentlog show`` marks checkpoints and pruned results, ``show --log``
says what each checkpoint shadowed, ``show --at`` before a compaction shows the uncompacted view.

The logs are built with the kernel by appending the events exactly in the order the spec fixes
(runtime §5.2 for a summary checkpoint, §5.11 for a prune), then stored and read back by the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli._marks import seq_ranges
from agentlog.cli.commands import app
from agentlog.compaction.estimate import estimate_message
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import BIG_FILE, DemoModelServer, large_result_turns

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


def show(root: Path, *args: str, session: str = SID) -> Any:
    result = runner.invoke(app, ["show", session, "--store", str(root), *args])
    assert result.exit_code == 0, result.output
    return result


def test_show_marks_the_checkpoint_and_the_pruned_result(tmp_path: Path) -> None:
    """The transcript labels the checkpoint with what it shadowed (messages, shadow price) and the pruned
    result with its size before and after, in the lines where they appear."""
    facts = write_compacted_session(tmp_path)
    lines = show(tmp_path).output.splitlines()
    assert lines[1] == f"user (plugin): [compaction checkpoint: shadowed 4 messages, ~{facts['tokens']:,} tokens]"
    assert lines[2] == "user (plugin): ## Primary Request and Intent - read big.txt"  # the summary, without framing
    assert not any("compacted-summary" in line for line in lines)
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


# --- run / resume / compact against the local model with a small window ---------------------------------

WINDOW = 4000


def _agent_store(tmp_path: Path) -> tuple[Path, Path]:
    work = tmp_path / "work"
    work.mkdir()
    (work / BIG_FILE).write_text(BIG)  # 5,000 characters: about 1,250 tokens a read
    return work, tmp_path / "store"


def _turns(
    server: DemoModelServer, work: Path, store: Path, count: int, *extra: str, first: tuple[str, ...] = ()
) -> list[Any]:
    """``run`` (with ``first`` too) then ``resume`` with a prompt, ``count`` turns in all (each reads the
    big file); ``extra`` options go to every command."""
    base = ["--store", str(store), "--base-url", server.base_url, "--json", *extra]
    run = ["run", "Read big.txt.", "--session-id", "big", "--cwd", str(work), *base, *first]
    results = [runner.invoke(app, run)]
    for turn in range(2, count + 1):
        results.append(runner.invoke(app, ["resume", "big", f"Read it again ({turn}).", *base]))
    return results


def _stored(store: Path) -> list[Any]:
    backend = JsonlBackend(str(store), compression="auto", read_only=True)
    try:
        stored = backend.load_stored("big")
    finally:
        backend.close()
    assert stored is not None
    return list(stored.events)


def test_run_and_resume_compact_on_their_own_and_keep_every_request_under_the_window(tmp_path: Path) -> None:
    """Three turns of 1,250-token tool results in a 4,000-token window: before the step that would not
    fit, the agent compacts (a checkpoint appears), no request ever exceeds the window, the log still
    holds every original result, and ``resume`` keeps the window ``run`` was given."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(3), context_window=WINDOW) as server:
        first, *later = _turns(server, work, store, 3, first=("--context-window", str(WINDOW)))
        assert first.exit_code == 0, first.stderr
        for result in later:
            assert result.exit_code == 0, result.stderr
    assert server.max_estimated_tokens <= WINDOW
    assert all(request.answer != "context-overflow" for request in server.requests)
    assert any(request.answer == "summary" for request in server.requests)
    events = _stored(store)
    assert sum(1 for e in events if e["type"] == "tool/result") == 3  # nothing removed from the log
    assert [e["data"]["contextWindow"] for e in events if e["type"] == "request/context"][-1] == WINDOW
    document = orjson.loads(show(store, "--json", session="big").output)
    assert document["compaction"][0]["kind"] == "checkpoint"
    start = next(e["seq"] for e in events if e["type"] == "compaction/start")
    before = orjson.loads(show(store, "--at", str(start - 1), "--json", session="big").output)
    assert before["compaction"] == [] and before["messages"][0]["content"][0]["text"] == "Read big.txt."


def test_no_compaction_lets_the_window_overflow_and_the_turn_fail(tmp_path: Path) -> None:
    """With --no-compaction the third turn's request exceeds the window: the server's context-length
    400 ends the command with CONTEXT_WINDOW_EXCEEDED (exit 1), and no compaction event is written."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(3), context_window=WINDOW) as server:
        results = _turns(server, work, store, 3, "--context-window", str(WINDOW), "--no-compaction")
    assert [r.exit_code for r in results[:2]] == [0, 0]
    assert results[2].exit_code == 1
    assert orjson.loads(results[2].stderr)["error"]["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert server.requests[-1].answer == "context-overflow"
    assert not any(e["type"].startswith("compaction/") for e in _stored(store))


def test_compact_json_prints_the_result_and_the_log_only_grows_by_the_compaction_events(tmp_path: Path) -> None:
    """``agentlog compact`` on an idle session: --json is the result's camelCase document; the surface
    shrinks to the checkpoint and the kept tail; the log gains exactly start, summary, checkpoint, end."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(2)) as server:
        assert all(r.exit_code == 0 for r in _turns(server, work, store, 2))
        before = _stored(store)
        result = runner.invoke(app, ["compact", "big", "--store", str(store), "--base-url", server.base_url, "--json"])
    assert result.exit_code == 0, result.stderr
    document = orjson.loads(result.stdout)
    assert set(document) == {
        "compactionId",
        "startSeq",
        "summarySeq",
        "summary",
        "shadowedRange",
        "shadowedSeqs",
        "shadowedTokenCount",
        "endSeq",
    }
    after = _stored(store)
    assert after[: len(before)] == before
    assert [e["type"] for e in after[len(before) :]] == [
        "session/end-seed",  # compact resumed the session
        "compaction/start",
        "compaction/summary",
        "user/message",
        "compaction/end",
    ]
    assert document["startSeq"] == len(before) + 1 and document["endSeq"] == len(after) - 1
    marks = orjson.loads(show(store, "--json", session="big").output)
    assert marks["compaction"][0]["shadowedSeqs"] == document["shadowedSeqs"]
    assert len(marks["messages"]) == 2  # the checkpoint and the newest message


def test_compact_text_reports_surface_and_log_sizes(tmp_path: Path) -> None:
    """For people: what was shadowed, and that the log only grew."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(2)) as server:
        assert all(r.exit_code == 0 for r in _turns(server, work, store, 2))
        count = len(_stored(store))
        result = runner.invoke(app, ["compact", "big", "--store", str(store), "--base-url", server.base_url])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("session big: compacted 7 messages (~")
    resumed = count + 1  # compact resumes the session first: its session/end-seed
    log = f"log: {resumed} → {resumed + 4} events (+4 compaction events, nothing removed)"
    assert lines[1] == f"surface: 8 → 2 messages; {log}"


def test_compact_with_nothing_to_compact_prints_null_and_writes_nothing(tmp_path: Path) -> None:
    """One message on the surface is the newest balanced unit: nothing to compact, nothing written."""
    store = tmp_path / "store"
    sessions = al.SessionStore()
    coordinator = PersistenceCoordinator(sessions, JsonlBackend(str(store)))
    session = sessions.create("big", meta={"cwd": str(tmp_path)})
    session.append("user/message", al.user_message("only this"), {"surfaceOp": "append"})
    sessions.flush(session)
    coordinator.close()
    with DemoModelServer() as server:
        args = ["compact", "big", "--store", str(store), "--base-url", server.base_url]
        result = runner.invoke(app, [*args, "--json"])
        text = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "null"
    assert server.requests == []
    assert text.stdout == "session big: nothing to compact (the newest message is always kept whole)\n"
    assert len(_stored(store)) == 1


def test_compact_right_after_a_compaction_is_nothing_to_compact_and_writes_nothing(tmp_path: Path) -> None:
    """After a compaction the surface is the checkpoint and the newest message: summarizing the checkpoint
    alone again is nothing to compact (null, no model call), not a failed attempt left in the log."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(2)) as server:
        assert all(r.exit_code == 0 for r in _turns(server, work, store, 2))
        args = ["compact", "big", "--store", str(store), "--base-url", server.base_url]
        assert runner.invoke(app, [*args, "--json"]).exit_code == 0
        asked = len(server.requests)
        before = {path: path.read_bytes() for path in store.rglob("*") if path.is_file()}
        again = runner.invoke(app, [*args, "--json"])
        text = runner.invoke(app, args)
        assert len(server.requests) == asked
    assert again.exit_code == 0, again.stderr
    assert again.stdout.strip() == "null"
    assert text.exit_code == 0 and "nothing to compact" in text.stdout
    assert {path: path.read_bytes() for path in store.rglob("*") if path.is_file()} == before


def test_compact_refusals_are_typed_errors(tmp_path: Path) -> None:
    """A missing session is SESSION_NOT_FOUND; a summary that is not smaller than what it would replace is
    COMPACTION_SUMMARY with the reason, and the failed attempt is visible as one compaction/end {error}."""
    work, store = _agent_store(tmp_path)
    (work / BIG_FILE).write_text("tiny")
    with DemoModelServer(large_result_turns(1)) as server:
        assert _turns(server, work, store, 1)[0].exit_code == 0
        args = ["--store", str(store), "--base-url", server.base_url, "--json"]
        missing = runner.invoke(app, ["compact", "nope", *args])
        refused = runner.invoke(app, ["compact", "big", *args])
    assert missing.exit_code == 1 and orjson.loads(missing.stderr)["error"]["code"] == "SESSION_NOT_FOUND"
    error = orjson.loads(refused.stderr)["error"]
    assert refused.exit_code == 1 and error["code"] == "COMPACTION_SUMMARY"
    assert "summary is not smaller than the shadowed content" in error["message"]
    tail = _stored(store)[-2:]
    assert [e["type"] for e in tail] == ["compaction/start", "compaction/end"] and "error" in tail[1]["data"]


def test_without_a_window_an_overflow_is_recovered_by_one_compaction_and_one_retry(tmp_path: Path) -> None:
    """No --context-window for a local endpoint: no pressure compaction, so the third turn's second step
    overflows; the agent compacts once and retries once, and the turn completes."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(3), context_window=WINDOW) as server:
        assert [r.exit_code for r in _turns(server, work, store, 3)] == [0, 0, 0]
    answers = [r.answer for r in server.requests]
    overflow = answers.index("context-overflow")
    assert answers.count("context-overflow") == 1
    assert set(answers[overflow + 1 : -1]) == {"summary"} and answers[-1] == "script"
    events = _stored(store)
    assert sum(1 for e in events if e["type"] == "compaction/start") == 1


def test_an_overflow_after_the_retry_is_the_original_error(tmp_path: Path) -> None:
    """The overflow budget is one retry: when the retried request overflows again (forced here), the turn
    fails with the provider's CONTEXT_WINDOW_EXCEEDED after exactly one compaction."""
    work, store = _agent_store(tmp_path)
    with DemoModelServer(large_result_turns(2)) as server:
        assert [r.exit_code for r in _turns(server, work, store, 2)] == [0, 0]
        server.overflow_next = 2
        base = ["--store", str(store), "--base-url", server.base_url, "--json"]
        failed = runner.invoke(app, ["resume", "big", "Once more.", *base])
    assert failed.exit_code == 1
    error = orjson.loads(failed.stderr)["error"]
    assert error["code"] == "CONTEXT_WINDOW_EXCEEDED" and "maximum context length" in error["message"]
    answers = [r.answer for r in server.requests]
    assert answers[-1] == "context-overflow" and answers.count("context-overflow") == 2
    assert sum(1 for e in _stored(store) if e["type"] == "compaction/start") == 1


@pytest.mark.subprocess  # agentlog demo starts the agent in a child process
def test_the_demo_compacts_and_the_log_only_grows_by_the_compaction_events(tmp_path: Path) -> None:
    """``agentlog demo``'s compaction step: after a turn that reads a large log, ``compact_now`` shrinks the
    surface to the checkpoint and the newest message, the log gains exactly start, summary, checkpoint
    and end, every earlier event is unchanged and the view before them derives every earlier message;
    the stored session then shows the checkpoint and still verifies."""
    from agentlog.cli.demo import COMPACTION_EVENTS

    result = runner.invoke(app, ["demo", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    facts = orjson.loads(result.stdout)["compaction"]
    assert tuple(facts["added"]) == COMPACTION_EVENTS
    assert facts["eventsAfter"] == facts["eventsBefore"] + 4
    assert facts["earlierEventsUnchanged"] is True and facts["earlierViewIntact"] is True
    assert facts["surfaceAfter"]["messages"] == 2 < facts["surfaceBefore"]["messages"]
    assert facts["surfaceAfter"]["tokens"] < facts["surfaceBefore"]["tokens"]
    assert facts["result"]["startSeq"] == facts["eventsBefore"]
    session_id = orjson.loads(result.stdout)["session"]["id"]
    shown = orjson.loads(runner.invoke(app, ["show", session_id, "--store", str(tmp_path), "--json"]).stdout)
    assert shown["compaction"][0]["kind"] == "checkpoint"
    assert shown["compaction"][0]["shadowedSeqs"] == facts["result"]["shadowedSeqs"]
    verified = runner.invoke(app, ["verify", session_id, "--store", str(tmp_path), "--json"])
    assert verified.exit_code == 0 and orjson.loads(verified.stdout)["ok"] is True


def test_run_and_replay_show_what_compaction_did_as_it_happens(tmp_path: Path) -> None:
    """For people watching ``resume`` (and later ``replay``): a pruned result and a checkpoint appear as
    their marks in the stream, where a tool result would say "← ok"."""
    work, store = _agent_store(tmp_path)
    (work / BIG_FILE).write_text("0123456789" * 1000)  # 10,000 characters: over the pruner's 8,192
    with DemoModelServer(large_result_turns(2), context_window=WINDOW) as server:
        run = ["run", "Read big.txt.", "--session-id", "big", "--cwd", str(work), "--store", str(store)]
        first = runner.invoke(app, [*run, "--base-url", server.base_url, "--context-window", str(WINDOW)])
        second = runner.invoke(app, ["resume", "big", "Again.", "--store", str(store), "--base-url", server.base_url])
    assert first.exit_code == 0 and second.exit_code == 0, second.output
    assert server.max_estimated_tokens <= WINDOW
    marks = [line for line in second.stdout.splitlines() if line.startswith("⋯ ")]
    assert marks[0] == "⋯ [pruned: 10,000 → 5,159 chars]"
    assert marks[-1].startswith("⋯ [compaction checkpoint: shadowed ")
    replayed = runner.invoke(app, ["replay", "big", "--store", str(store), "--speed", "0"])
    assert [line for line in replayed.stdout.splitlines() if line.startswith("⋯ ")] == marks


def _expand(text: str) -> list[int]:
    seqs: list[int] = []
    for part in filter(None, text.split(", ")):
        first, _, last = part.partition("–")
        seqs.extend(range(int(first), int(last or first) + 1))
    return seqs


@given(st.lists(st.integers(0, 200), unique=True, max_size=40))
def test_seq_ranges_lists_exactly_the_given_seqs(seqs: list[int]) -> None:
    """Whatever the order (after earlier replacements shadowed seqs need not ascend), the ranges ``show
    --log`` prints expand back to exactly the shadowed seqs, in order."""
    assert _expand(seq_ranges(seqs)) == seqs
