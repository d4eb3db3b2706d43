"""Manual compaction, ``Agent.compact_now()`` (spec §5.10, §5.8 classification, §5.3 lock, §6.3 latching).

One test per case of the original's ``manual-compaction.spec.ts`` that our API has (the original's
caller-supplied abort signal is the agent's own ``cancel()`` here, so its "pre-aborted signal" and
"caller reason vs agent reason" cases collapse into the cancellation cases below; its listener
re-entrancy and timing cases have no counterpart). A real, non-durable :class:`Agent` with a recording
summarizer; ``agent.flush`` is replaced by a recorder, so "flushed once" and "flush failed" are observable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from agentlog.agent.loop import Agent
from agentlog.compaction import (
    CompactionBusyError,
    CompactionResult,
    ManualCompactionError,
    TokenMeter,
    is_checkpoint_source,
)
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.session import Session
from agentlog.testing import text_reply
from agentlog.testing.builders import intent, user_msg
from compaction._engine_support import (
    RecordingSummarizer,
    agent_for,
    closed_conversation,
    engine,
    last_of,
    types_of,
)

PROMPT = "older conversation history " * 60


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Flushes:
    """Replaces ``agent.aflush``: records the log length and last event type at each call; ``fail`` makes
    the flush after the closing ``compaction/end`` raise once (a full disk at the durability checkpoint)."""

    def __init__(self, agent: Agent, fail: BaseException | None = None) -> None:
        self.agent = agent
        self.fail = fail
        self.at: list[int] = []
        self.last: list[str] = []
        agent.aflush = self  # type: ignore[method-assign]

    async def __call__(self) -> None:
        events = self.agent.session.events
        self.at.append(len(events))
        self.last.append(events[-1]["type"])
        if self.fail is not None and events[-1]["type"] == "compaction/end":
            failure, self.fail = self.fail, None
            raise failure

    @property
    def count(self) -> int:
        """Flushes of a closed bracket (the durability checkpoint before compact_now returns)."""
        return self.last.count("compaction/end")

    @property
    def of_start(self) -> int:
        """Flushes that made the lock durable before the summary was awaited."""
        return self.last.count("compaction/start")


def manual(
    session: Session, summarizer: RecordingSummarizer | None = None, *, script: Any = ()
) -> tuple[Agent, RecordingSummarizer, Flushes]:
    compact, recorder = engine({"auto": False}, summarizer=summarizer)
    agent = agent_for(session, compact, window=100_000, script=script)
    return agent, recorder, Flushes(agent)


def rejection(agent: Agent) -> ManualCompactionError:
    with pytest.raises(ManualCompactionError) as caught:
        run(agent.compact_now())
    return caught.value


def fail_append_of(monkeypatch: pytest.MonkeyPatch, event_type: str, message: str) -> None:
    """Make every ``session.append(event_type, ...)`` raise (a refused boundary / a full disk)."""
    original: Callable[..., Any] = Session.append

    def append(self: Session, type: str, data: Any, intent: Any = None) -> Any:
        if type == event_type:
            raise RuntimeError(message)
        return original(self, type, data, intent)

    monkeypatch.setattr(Session, "append", append)


def replace_node(session: Session, index: int, text: str) -> None:
    """A rival surface rewrite of one node (another plugin's replacement)."""
    seq = session.surface.nodes[index]
    source = {"kind": "plugin", "plugin": "rival"}
    session.append(
        "user/message", user_msg(text, source=source), intent({"op": "replace", "start": seq, "end": seq}, [seq])
    )


def texts(messages: Any) -> list[str]:
    return ["".join(b.get("text", "") for b in m["content"] if b["type"] == "text") for m in messages]


# --- through the real loop ------------------------------------------------------------------------------


def seeded(
    summarizer: RecordingSummarizer | None = None, replies: int = 1
) -> tuple[Agent, RecordingSummarizer, Flushes]:
    """One real turn so the closed history holds a compactable older span."""
    session = Session.create("manual-compact")
    agent, recorder, flushes = manual(session, summarizer, script=[text_reply("answer") for _ in range(replies + 1)])
    agent.followup(PROMPT)
    run(agent.run())
    return agent, recorder, flushes


def test_a_prompt_sent_during_summarization_runs_after_the_standalone_bracket_is_flushed() -> None:
    """run() waits for the maintenance job; the next request starts with the checkpoint, not the old prompt."""
    gate = asyncio.Event()
    agent, recorder, flushes = seeded(RecordingSummarizer(summary=[{"type": "text", "text": "checkpoint"}], gate=gate))
    session = agent.session
    provider: Any = agent.provider

    async def main() -> tuple[CompactionResult | None, Any]:
        compacting = asyncio.create_task(agent.compact_now())
        await recorder.entered.wait()
        assert types_of(session) == ["compaction/start"]
        agent.followup("after compaction")
        running = asyncio.create_task(agent.run())
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(provider.requests) == 1 and not agent.idle
        assert [e["type"] for e in session.events].count("turn/start") == 1
        gate.set()
        return await compacting, await running

    result, outcomes = run(main())
    assert result is not None and outcomes[0].reason == {"kind": "completed"}
    start, end = last_of(session, "compaction/start"), last_of(session, "compaction/end")
    summary = last_of(session, "compaction/summary")
    next_turn = last_of(session, "turn/start")
    closing = flushes.at[flushes.last.index("compaction/end")]
    assert start.seq < summary.seq < end.seq < closing <= next_turn.seq
    assert flushes.of_start == 1
    assert start["data"]["turn"] is None and end["data"]["turn"] is None
    second = texts(provider.requests[1].messages)
    assert "checkpoint" in second[0]
    assert second[-1] == "after compaction"
    assert not any(PROMPT in text for text in second)


def test_context_injected_during_summarization_stays_pending_for_the_next_step() -> None:
    """Non-waking context queued meanwhile is not appended by the compaction; it rides the next step once."""
    recorder = RecordingSummarizer(summary=[{"type": "text", "text": "checkpoint"}])
    agent, _, _ = seeded(recorder)
    injected: list[dict[str, Any]] = []
    recorder.during = lambda: injected.append(
        agent.inject(user_msg("INJECTED CONTEXT", source={"kind": "plugin", "plugin": "test"}))
    )
    assert run(agent.compact_now()) is not None
    session = agent.session
    assert not any(e["type"] == "user/message" and e["data"]["id"] == injected[0]["id"] for e in session.events)
    assert agent.inbox.has_pending("next-step")

    agent.followup("after compaction")
    run(agent.run())
    derived = texts(session.derive_messages())
    assert "checkpoint" in derived[0]
    assert sum("INJECTED CONTEXT" in text for text in derived) == 1


def test_busy_without_summarizing_while_the_agent_runs_a_turn() -> None:
    """compact_now is refused at once while a turn is in progress (the original's owned next turn)."""

    session = Session.create("busy-turn")
    release = asyncio.Event()
    agent, recorder, _ = manual(session, script=[text_reply("answer")])
    original = agent.provider.stream

    async def slow(request: Any, *, signal: Any = None) -> Any:
        await release.wait()
        async for chunk in original(request, signal=signal):
            yield chunk

    agent.provider.stream = slow  # type: ignore[method-assign]

    async def main() -> ManualCompactionError:
        agent.followup(PROMPT)
        running = asyncio.create_task(agent.run())
        await asyncio.sleep(0)
        try:
            await agent.compact_now()
        except ManualCompactionError as err:
            release.set()
            await running
            return err
        raise AssertionError("compact_now did not refuse a running agent")

    error = run(main())
    assert error.kind == "busy"
    assert "manual compaction requires an idle agent with no waking queued work" in str(error)
    assert recorder.calls == [] and types_of(session) == []


def test_a_summarizer_failure_records_the_failed_attempt_and_releases_the_agent() -> None:
    """kind 'summary'; surface unchanged; one start/end{error} pair; the next prompt runs normally."""
    agent, _, _ = seeded(RecordingSummarizer(error=RuntimeError("summarizer unavailable")))
    session = agent.session
    before = list(session.surface.nodes)
    error = rejection(agent)
    assert error.kind == "summary" and error.code == "COMPACTION_SUMMARY"
    assert list(session.surface.nodes) == before
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert "summarizer unavailable" in last_of(session, "compaction/end")["data"]["error"]

    agent.followup("runs after the failure")
    outcomes = run(agent.run())
    assert outcomes[0].reason == {"kind": "completed"}
    assert len(agent.provider.requests) == 2  # type: ignore[attr-defined]


# --- the transaction and its classification ---------------------------------------------------------------


def test_returns_none_without_writing_a_bracket_when_nothing_can_be_compacted() -> None:
    """An empty history: None, no events, no summarizer call, and the agent is idle again."""
    session = Session.create("empty")
    agent, recorder, flushes = manual(session)
    assert run(agent.compact_now()) is None
    assert len(session.events) == 0 and recorder.calls == [] and flushes.at == []
    assert agent.idle


def test_a_second_compact_now_right_after_one_is_nothing_to_compact() -> None:
    """The surface is then the checkpoint and the newest message: the checkpoint alone is no span to
    summarize again (it would only be re-worded, never smaller), so None, nothing written, no model call."""
    session = closed_conversation(2, 7)
    agent, recorder, flushes = manual(session)
    assert run(agent.compact_now()) is not None
    checkpoint = session.events[session.surface.nodes[0]]
    assert is_checkpoint_source(checkpoint["data"]["source"])
    events, calls, flushed = len(session.events), len(recorder.calls), len(flushes.at)
    assert run(agent.compact_now()) is None
    assert len(session.events) == events and len(recorder.calls) == calls and len(flushes.at) == flushed
    assert agent.idle
    # Once a newer message joins it, the checkpoint is compacted again together with what follows it.
    session.append("user/message", user_msg(PROMPT), intent())
    session.append("user/message", user_msg("newest"), intent())
    again = run(agent.compact_now())
    assert again is not None and again.shadowed_seqs[0] == checkpoint["seq"]


def test_commits_a_standalone_bracket_without_consuming_a_turn_number_and_flushes_it() -> None:
    """turn: null on both markers, the command id correlated everywhere, one flush before returning."""
    session = closed_conversation(2, 7)
    agent, _, flushes = manual(session)
    result = run(agent.compact_now(source_command_id="manual-compact-command"))
    assert isinstance(result, CompactionResult)
    assert result.source_command_id == "manual-compact-command"
    assert flushes.count == 1 and flushes.at[-1] == len(session.events)
    assert flushes.of_start == 1 and flushes.at[0] == last_of(session, "compaction/start").seq + 1
    assert last_of(session, "turn/start")["data"]["turn"] == 7
    correlated = {"compactionId": result.compaction_id, "sourceCommandId": "manual-compact-command"}
    assert dict(last_of(session, "compaction/start")["data"]) == {**correlated, "turn": None}
    assert last_of(session, "compaction/summary")["data"]["sourceCommandId"] == "manual-compact-command"
    checkpoint = next(
        e for e in session.events if e["type"] == "user/message" and is_checkpoint_source(e["data"]["source"])
    )
    assert {k: checkpoint["data"]["source"][k] for k in correlated} == correlated
    assert dict(last_of(session, "compaction/end")["data"]) == {**correlated, "turn": None}
    assert result.to_json()["sourceCommandId"] == "manual-compact-command"


def test_the_checkpoint_is_written_in_the_original_key_order() -> None:
    """``createUserMessage({content, source})`` spreads its input, then role, then the minted id; the
    checkpoint source is kind, plugin, compactionId, sourceCommandId; the event is type, seq, time, data,
    sourceEventSeqs, surfaceOp. The same compaction gives the same bytes as the original."""
    import orjson

    session = closed_conversation(2, 7)
    agent, _, _ = manual(session)
    result = run(agent.compact_now(source_command_id="cmd-1"))
    event = session.events[result.summary_seq + 1]
    data = event["data"]
    content = orjson.dumps(thaw(data["content"])).decode()
    shadowed = ",".join(str(seq) for seq in result.shadowed_seqs)
    expected = (
        f'{{"type":"user/message","seq":{event["seq"]},"time":{event["time"]},"data":{{"content":{content},'
        f'"source":{{"kind":"plugin","plugin":"compact","compactionId":"{result.compaction_id}",'
        f'"sourceCommandId":"cmd-1"}},"role":"user","id":"{data["id"]}"}},'
        f'"sourceEventSeqs":[{result.start_seq},{result.summary_seq},{shadowed}],'
        f'"surfaceOp":{{"op":"replace","start":{result.shadowed_range.start},"end":{result.shadowed_range.end}}}}}'
    )
    assert orjson.dumps(thaw(event)).decode() == expected


def test_a_live_unmatched_bracket_is_busy_without_summarizing() -> None:
    """An unmatched compaction/start after the newest end-seed holds the lock (kind busy, the original's text)."""
    session = closed_conversation(2)
    session.append("compaction/start", {"compactionId": "live-manual-compaction", "turn": None})
    agent, recorder, _ = manual(session)
    error = rejection(agent)
    assert error.kind == "busy" and error.code == CompactionBusyError.code
    assert "compaction lock is already active" in str(error)
    assert recorder.calls == []
    assert types_of(session) == ["compaction/start"]


def test_an_unmatched_bracket_before_a_later_end_seed_is_ignored() -> None:
    """A start inherited from a dead lifecycle (before the reload's end-seed) does not block."""
    original = closed_conversation(2)
    original.append("compaction/start", {"compactionId": "stale-manual-compaction", "turn": None})
    reloaded = Session.create("stale-orphan", [dict(e) for e in original.events])
    boundary = last_of(reloaded, "session/end-seed")
    orphan = next(e for e in reloaded.events if e["type"] == "compaction/start")
    assert boundary.seq > orphan.seq
    agent, recorder, _ = manual(reloaded)
    assert run(agent.compact_now()) is not None
    assert len(recorder.calls) == 1


def test_a_stale_orphan_is_scanned_independently_of_later_repaired_turn_state() -> None:
    """An orphan followed by a repaired (interrupted) turn and then the end-seed is still stale."""
    original = closed_conversation(2)
    original.append("compaction/start", {"compactionId": "reloaded-manual-compaction", "turn": None})
    original.append("turn/start", {"turn": 3})
    original.append("turn/end", {"turn": 3, "reason": {"kind": "interrupted"}})
    reloaded = Session.create("reloaded-orphan", [dict(e) for e in original.events])
    agent, recorder, _ = manual(reloaded)
    assert run(agent.compact_now()) is not None
    assert len(recorder.calls) == 1


def test_an_open_turn_in_the_log_is_refused_as_busy() -> None:
    """Manual compaction runs between turns only."""
    session = closed_conversation(2)
    session.append("turn/start", {"turn": 3})
    agent, recorder, _ = manual(session)
    error = rejection(agent)
    assert error.kind == "busy"
    assert "already has an open turn" in str(error)
    assert recorder.calls == [] and types_of(session) == []


def test_busy_and_no_summarization_when_the_agent_is_reserved_by_another_job() -> None:
    """A second maintenance job cannot start while the first holds the agent."""
    session = closed_conversation(2)
    agent, recorder, _ = manual(session)

    async def main() -> ManualCompactionError:
        async with agent.maintenance():
            try:
                await agent.compact_now()
            except ManualCompactionError as err:
                return err
        raise AssertionError("compact_now did not refuse a reserved agent")

    error = run(main())
    assert error.kind == "busy" and recorder.calls == []
    assert agent.idle


def test_a_span_replaced_during_summarization_is_changed_and_closes_with_an_error() -> None:
    """kind 'changed'; the error close is flushed; the rival replacement stands."""
    session = closed_conversation(2)
    agent, recorder, flushes = manual(session)
    recorder.during = lambda: replace_node(session, 0, "competing replacement")
    error = rejection(agent)
    assert error.kind == "changed"
    assert flushes.count == 1
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert agent.idle


def test_a_span_whose_middle_node_was_replaced_during_summarization_is_changed() -> None:
    """The selected seqs must be the same, not only the ends."""
    session = closed_conversation(3)
    agent, recorder, _ = manual(session)
    recorder.during = lambda: replace_node(session, 1, "rewritten middle node")
    error = rejection(agent)
    assert error.kind == "changed"
    assert "span changed during summarization" in str(error.__cause__)


def test_a_failing_compaction_end_is_a_commit_failure_that_leaves_one_orphan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The body committed but the close was refused: kind 'commit', no flush, and the lock stays held."""
    session = closed_conversation(2)
    agent, recorder, flushes = manual(session)
    fail_append_of(monkeypatch, "compaction/end", "boundary rejected")
    error = rejection(agent)
    monkeypatch.undo()
    assert error.kind == "commit"
    assert str(error.__cause__) == "boundary rejected"
    assert flushes.count == 0
    assert types_of(session)[-1] == "compaction/summary"
    assert types_of(session).count("compaction/start") == 1
    calls = len(recorder.calls)
    assert rejection(agent).kind == "busy"
    assert len(recorder.calls) == calls


def test_a_failed_error_close_stays_the_commit_failure_and_is_not_flushed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summary failed, then its error close failed too: kind 'commit' with the close's error; only the start."""
    session = closed_conversation(2)
    agent, _, flushes = manual(session, RecordingSummarizer(error=RuntimeError("summary rejected")))
    fail_append_of(monkeypatch, "compaction/end", "error boundary rejected")
    error = rejection(agent)
    monkeypatch.undo()
    assert error.kind == "commit"
    assert str(error.__cause__) == "error boundary rejected"
    assert flushes.count == 0
    assert types_of(session) == ["compaction/start"]
    assert agent.idle


def test_a_span_whose_pricing_changed_during_summarization_is_changed() -> None:
    """Same seqs but a different per-node price (the meter's view moved): refused."""
    meter = TokenMeter()
    compact, recorder = engine({"auto": False}, meter=meter)
    session = closed_conversation(2)
    agent = agent_for(session, compact, window=100_000)
    original = meter.measure

    def repriced(target: Any, *args: Any) -> Any:
        measurement = original(target, *args)
        first = measurement.nodes[0]

        shifted = SimpleNamespace(
            nodes=[type(first)(first.seq, first.tokens + 1), *list(measurement.nodes)[1:]],
            total_tokens=measurement.total_tokens,
        )
        meter.measure = original  # type: ignore[method-assign]
        return shifted

    def reprice() -> None:
        meter.measure = repriced  # type: ignore[method-assign, assignment]

    recorder.during = reprice
    assert rejection(agent).kind == "changed"


def test_a_commit_body_failure_is_classified_commit_and_releases_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """compaction/summary refused: kind 'commit', the error close names it, turn null, the agent idle."""
    session = closed_conversation(2)
    agent, _, _ = manual(session)
    fail_append_of(monkeypatch, "compaction/summary", "summary record rejected")
    error = rejection(agent)
    monkeypatch.undo()
    assert error.kind == "commit"
    end = last_of(session, "compaction/end")
    assert "summary record rejected" in end["data"]["error"]
    assert end["data"]["turn"] is None
    assert agent.idle


def test_a_commit_failure_stays_the_failure_when_the_flush_also_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first failure decides the class; a later flush failure does not mask it."""
    session = closed_conversation(2)
    agent, _, _ = manual(session)
    Flushes(agent, fail=OSError("disk full"))
    fail_append_of(monkeypatch, "compaction/summary", "summary record rejected")
    error = rejection(agent)
    monkeypatch.undo()
    assert error.kind == "commit"
    assert str(error.__cause__) == "summary record rejected"


def test_compacts_a_session_with_no_turn_boundary_without_creating_one() -> None:
    """A turnless history (two plain messages) compacts standalone; no turn/start appears."""
    session = Session.create("turnless")
    for text in (PROMPT, "recent tail"):
        session.append("user/message", user_msg(text), intent())
    agent, _, _ = manual(session)
    result = run(agent.compact_now())
    assert result is not None
    assert "turn/start" not in [e["type"] for e in session.events]
    assert dict(last_of(session, "compaction/start")["data"]) == {"compactionId": result.compaction_id, "turn": None}


def test_a_flush_failure_after_the_committed_bracket_is_a_persistence_failure() -> None:
    """kind 'persistence': the compaction is in the log (closed normally), only durability failed."""
    session = closed_conversation(2)
    agent, _, _ = manual(session)
    Flushes(agent, fail=OSError("disk full"))
    error = rejection(agent)
    assert error.kind == "persistence"
    assert "compaction/summary" in types_of(session)
    start, end = last_of(session, "compaction/start"), last_of(session, "compaction/end")
    assert dict(end["data"]) == {"compactionId": start["data"]["compactionId"], "turn": None}


def test_a_flush_failure_before_the_summary_is_a_persistence_failure_and_asks_no_model() -> None:
    """The lock could not be made durable: kind 'persistence', no summarizer call, one error close."""
    session = closed_conversation(2)
    agent, recorder, _ = manual(session)

    async def refuse() -> None:
        raise OSError("disk full")

    agent.aflush = refuse  # type: ignore[method-assign]
    error = rejection(agent)
    assert error.kind == "persistence" and "lock durable" in str(error)
    assert str(error.__cause__) == "disk full"
    assert recorder.calls == []
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert "disk full" in last_of(session, "compaction/end")["data"]["error"]
    assert agent.idle


def test_cancellation_wins_over_the_summarizers_own_failure() -> None:
    """cancel() while summarizing: kind 'cancelled' (cause: what the summarizer raised), closed and flushed."""
    session = closed_conversation(2)
    agent, recorder, flushes = manual(session, RecordingSummarizer(error=RuntimeError("summarizer aborted")))
    recorder.during = agent.cancel
    error = rejection(agent)
    assert error.kind == "cancelled" and error.code == "COMPACTION_CANCELLED"
    assert "summarizer aborted" in str(error.__cause__)
    assert flushes.count == 1
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert "summarizer aborted" in last_of(session, "compaction/end")["data"]["error"]
    assert agent.idle


def test_cancellation_after_a_successful_summary_aborts_before_committing() -> None:
    """A manual compaction cancelled while the summary was produced does not replace the surface."""
    session = closed_conversation(2)
    agent, recorder, _ = manual(session)
    before = list(session.surface.nodes)
    recorder.during = agent.cancel
    error = rejection(agent)
    assert error.kind == "cancelled" and error.__cause__ is not error
    assert types_of(session) == ["compaction/start", "compaction/end"]
    assert last_of(session, "compaction/end")["data"]["error"] == "manual compaction was cancelled"
    assert list(session.surface.nodes) == before


def test_the_manual_summary_event_keeps_raw_output_and_usage() -> None:
    """What a custom summarizer reports is recorded verbatim."""
    raw = [{"type": "text", "text": "checkpoint"}, {"type": "reasoning", "text": "hidden reasoning"}]
    session = closed_conversation(2)
    agent, _, _ = manual(
        session,
        RecordingSummarizer(
            summary=[{"type": "text", "text": "checkpoint"}],
            raw_output=raw,
            usage={"inputTokens": 40, "outputTokens": 5},
        ),
    )
    run(agent.compact_now())
    summary = last_of(session, "compaction/summary")["data"]
    assert summary["rawOutput"] == raw
    assert summary["usage"] == {"inputTokens": 40, "outputTokens": 5}
    assert "llmStreamCall" not in summary


def test_manual_and_explicit_region_compaction_exclude_each_other() -> None:
    """While compact_now summarizes, a region compaction of the same session is refused by the lock."""
    gate = asyncio.Event()
    session = closed_conversation(3)
    agent, recorder, _ = manual(session, RecordingSummarizer(gate=gate))
    compact: Any = agent.compaction

    async def main() -> CompactionResult | None:
        running = asyncio.create_task(agent.compact_now())
        await recorder.entered.wait()
        nodes = session.surface.nodes
        with pytest.raises(CompactionBusyError, match="compaction lock is already active"):
            await compact.compact_region(session, nodes[0], nodes[1], agent=agent)
        gate.set()
        result: CompactionResult | None = await running
        return result

    assert run(main()) is not None


def test_a_manual_request_is_busy_while_an_explicit_region_compaction_runs() -> None:
    """The lock is the log's: an in-turn region compaction makes compact_now busy."""
    gate = asyncio.Event()
    session = closed_conversation(3)
    session.append("turn/start", {"turn": 4})
    agent, recorder, _ = manual(session, RecordingSummarizer(gate=gate))
    compact: Any = agent.compaction
    nodes = list(session.surface.nodes)

    async def main() -> tuple[ManualCompactionError, CompactionResult]:
        region = asyncio.create_task(compact.compact_region(session, nodes[0], nodes[1], agent=agent))
        await recorder.entered.wait()
        try:
            await agent.compact_now()
        except ManualCompactionError as err:
            gate.set()
            return err, await region
        raise AssertionError("compact_now ran during a region compaction")

    error, result = run(main())
    assert error.kind == "busy"
    assert list(result.shadowed_seqs) == nodes[:2]


def test_compact_now_on_an_agent_without_an_engine_is_a_typed_refusal() -> None:
    """Agent.compact_now needs Agent(compaction=...); without one it says how to get it."""
    from agentlog.errors import InvalidAgentOptionError

    session = closed_conversation(2)
    agent = agent_for(session, None)
    with pytest.raises(InvalidAgentOptionError, match=r"Agent\(\.\.\., compaction=CompactionEngine\(\)\)"):
        run(agent.compact_now())
    assert types_of(session) == []
