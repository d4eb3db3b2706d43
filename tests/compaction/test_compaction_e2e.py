"""Compaction end to end: the real ``openai`` client against the local demo model server (issue 9 "Tests").

The demo server refuses any request over its context window with the provider's HTTP 400 context-length
answer and writes compaction summaries itself, so these tests exercise what a user sees: a long session
with big tool results that stays under a small window on its own (pruning, then summaries), the log that
still holds every original event, ``session.at(seq)`` views from before each compaction, a fork that
derives the same messages; overflow recovery with exactly one retry; and a process killed with SIGKILL
while its summary is being written, whose orphan ``compaction/start`` does not block the next compaction
once the session is resumed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.compaction import (
    CHECKPOINT_PREAMBLE,
    CompactionEngine,
    TokenMeter,
    ToolResultPruner,
    is_checkpoint_source,
)
from agentlog.kernel.session import Session, derive_event_message
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import BIG_FILE, DemoModelServer, Hang, large_result_turns

WINDOW = 4_000
TURNS = 30


def provider_for(server: DemoModelServer, window: int | None = WINDOW) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(
        base_url=server.base_url, api_key="demo", provider="demo", model="demo-model", context_window=window
    )


def big_file(directory: Path) -> str:
    text = "".join(f"big file line {i:05d} ........\n" for i in range(100))  # 2,900 characters ≈ 725 tokens
    (directory / BIG_FILE).write_text(text)
    return text


def log_bytes(session: Session) -> list[bytes]:
    return [orjson.dumps(al.thaw(event)) for event in session.events]


def test_a_30_turn_session_with_large_tool_results_stays_under_a_small_window_on_its_own(tmp_path: Path) -> None:
    """Every turn reads a 2,900-character file; with a 4,000-token window the session would overflow by the
    fifth turn. With the default engine (a smaller pruner so results are prunable) pressure prunes and then
    summarizes by itself: all 30 turns complete, no request (conversation or summary) exceeds the window,
    the log is append-only and keeps every original result, each compaction's shadowed messages are still
    in the ``at()`` view from before it, and a fork derives exactly the parent's messages."""
    content = big_file(tmp_path)
    store = al.SessionStore()
    session = store.create("e2e", meta={"cwd": str(tmp_path)})
    snapshots: list[list[bytes]] = []

    async def drive(server: DemoModelServer) -> list[Any]:
        provider = provider_for(server)
        meter = TokenMeter()
        engine = CompactionEngine(meter=meter, pruner=ToolResultPruner(2_000, 600, 200, meter=meter))
        options = AgentOptions(provider="demo", model="demo-model", cwd=tmp_path)
        agent = Agent(session, provider, options, tools=builtin_registry(), durable=False, compaction=engine)
        outcomes: list[Any] = []
        try:
            for turn in range(TURNS):
                snapshots.append(log_bytes(session))
                agent.followup(f"read it again ({turn})")
                outcomes += await agent.run()
        finally:
            await provider.aclose()
        return outcomes

    with DemoModelServer(large_result_turns(TURNS), context_window=WINDOW) as server:
        outcomes = asyncio.run(drive(server))

    assert [o.reason for o in outcomes] == [{"kind": "completed"}] * TURNS
    answers = [r.answer for r in server.requests]
    assert "context-overflow" not in answers
    assert server.max_estimated_tokens <= WINDOW
    assert answers.count("script") == 2 * TURNS and answers.count("summary") >= 1

    types = [e["type"] for e in session.events]
    assert types.count("compaction/prune") >= 1
    assert types.count("compaction/summary") >= 1
    assert types.count("compaction/start") == types.count("compaction/end") == types.count("compaction/summary")

    # Append-only: every earlier log is a byte-identical prefix of the final one.
    final = log_bytes(session)
    assert all(final[: len(snapshot)] == snapshot for snapshot in snapshots)
    originals = [e for e in session.events if e["type"] == "tool/result" and e.get("surfaceOp") == "append"]
    assert len(originals) == TURNS
    assert all(e["data"]["message"]["content"][0]["content"][0]["text"] == content for e in originals)
    prompts = [e for e in session.events if e["type"] == "user/message" and e["data"]["source"]["kind"] == "user"]
    assert len(prompts) == TURNS

    # The model sees far less than the log holds; what it sees is still well formed.
    derived = session.derive_messages()
    derived_ids = {m["id"] for m in derived}
    assert is_checkpoint_source(derived[0]["source"])
    assert len(derived) < len(originals) + len(prompts)

    # Before each compaction, at() shows what it was about to shadow; after, the shadowed nodes are gone.
    events = session.events
    for summary in (e for e in events if e["type"] == "compaction/summary"):
        start = next(
            e
            for e in events
            if e["type"] == "compaction/start" and e["data"]["compactionId"] == summary["data"]["compactionId"]
        )
        before = session.at(start.seq - 1)
        view_ids = [m["id"] for m in before.derive_messages()]
        shadowed = [derive_event_message(events[seq]) for seq in summary["data"]["shadowedSeqs"]]
        shadowed_ids = [m["id"] for m in shadowed if m is not None]
        assert shadowed_ids and set(shadowed_ids) <= set(view_ids)
        assert view_ids[: len(shadowed_ids)] == shadowed_ids  # a head span, in surface order
        assert not set(shadowed_ids) & derived_ids

    # A fork after compaction derives exactly the parent's messages.
    child = store.fork(session, child_id="e2e-fork")
    assert child.derive_messages().to_list() == derived.to_list()
    assert list(child.surface.nodes) == list(session.surface.nodes)


def seeded_agent(server: DemoModelServer, session: Session) -> tuple[Agent, OpenAICompatibleProvider]:
    provider = provider_for(server, window=100_000)  # pressure never triggers: only the overflow does
    engine = CompactionEngine(config={"maxOverflowRetries": 1})
    agent = Agent(
        session, provider, AgentOptions(provider="demo", model="demo-model"), durable=False, compaction=engine
    )
    return agent, provider


def test_a_context_overflow_answer_leads_to_one_compaction_and_one_retry() -> None:
    """HTTP 400 with the context-length text → CONTEXT_WINDOW_EXCEEDED → one summary → one resend, which
    no longer carries the old history; the turn completes."""
    session = Session.create("overflow-once")

    async def drive(server: DemoModelServer) -> list[Any]:
        agent, provider = seeded_agent(server, session)
        try:
            for prompt in ("OLD HISTORY SENTINEL " + "context " * 300, "recent " * 300):
                agent.followup(prompt)
                await agent.run()
            server.overflow_next = 1
            agent.followup("continue")
            return await agent.run()
        finally:
            await provider.aclose()

    with DemoModelServer(["first answer", "second answer", "recovered"]) as server:
        outcomes = asyncio.run(drive(server))
    assert outcomes[-1].reason == {"kind": "completed"}
    assert [r.answer for r in server.requests] == ["script", "script", "context-overflow", "summary", "script"]
    assert server.requests[3].compaction and server.requests[3].headers.get("x-deepseek-harness-compact") is None
    assert "OLD HISTORY SENTINEL" in orjson.dumps(server.requests[2].body).decode()
    retry = orjson.dumps(server.requests[4].body).decode()
    assert "context " * 300 not in retry and "<compacted-summary>" in retry  # the summary quotes only a clip
    types = [e["type"] for e in session.events]
    assert types.count("compaction/summary") == 1 and "llm/retry" not in types


def test_a_repeated_context_overflow_ends_the_turn_with_the_original_error() -> None:
    """After the one compaction-and-retry, a second overflow is not compacted again: the turn ends with the
    provider's own context-length failure."""
    session = Session.create("overflow-twice")

    async def drive(server: DemoModelServer) -> list[Any]:
        agent, provider = seeded_agent(server, session)
        try:
            for prompt in ("old " * 300, "recent " * 300):
                agent.followup(prompt)
                await agent.run()
            server.overflow_next = 2
            agent.followup("continue")
            return await agent.run()
        finally:
            await provider.aclose()

    with DemoModelServer(["first answer", "second answer"]) as server:
        outcomes = asyncio.run(drive(server))
    reason = outcomes[-1].reason
    assert reason["kind"] == "error" and reason["error"]["code"] == "CONTEXT_WINDOW_EXCEEDED"
    assert "maximum context length" in reason["error"]["message"]
    assert [r.answer for r in server.requests] == [
        "script",
        "script",
        "context-overflow",
        "summary",
        "context-overflow",
    ]
    assert [e["type"] for e in session.events].count("compaction/summary") == 1


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import agentlog as al
    from agentlog.agent.loop import Agent, AgentOptions
    from agentlog.compaction import CompactionEngine
    from agentlog.llm.openai_compat import OpenAICompatibleProvider
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    root, base_url = sys.argv[1], sys.argv[2]
    store = al.SessionStore()
    PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("crashy")

    async def main():
        provider = OpenAICompatibleProvider(base_url=base_url, api_key="k", provider="demo", model="demo-model")
        agent = Agent(session, provider, AgentOptions(provider="demo", model="demo-model"),
                      compaction=CompactionEngine(config={"auto": False}))
        for prompt in ("first request " * 200, "second request " * 200):
            agent.followup(prompt)
            await agent.run()
        await agent.compact_now()  # the summary request hangs: the parent kills us here

    asyncio.run(main())
    """
)


def test_sigkill_during_summarization_leaves_an_orphan_that_does_not_block_the_resumed_session(
    tmp_path: Path,
) -> None:
    """A real agent process is killed while the server withholds its summary. The durable log ends with an
    unmatched compaction/start (the lock was durable while held). After resume, the new session/end-seed
    retires it: the surface is exactly the one before the attempt, and the next compaction succeeds."""
    root = tmp_path / "store"
    with DemoModelServer(["answer one", "answer two", Hang(seconds=60)], auto_compaction=False) as server:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), server.base_url])
        try:
            deadline = time.monotonic() + 300  # a hang guard; the loop ends at the child's progress
            while not any(r.compaction for r in server.requests):
                assert time.monotonic() < deadline, "the child never asked for a summary"
                assert child.poll() is None, "the child exited on its own"
                time.sleep(0.02)
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    stored = JsonlBackend(str(root)).load_stored("crashy")
    assert stored is not None
    stored_types = [e["type"] for e in stored.events]
    assert stored_types[-1] == "compaction/start", "the lock must be durable before the summary is awaited"
    assert "compaction/end" not in stored_types
    orphan = stored.events[-1]
    before = Session.create("before", [dict(e) for e in stored.events[: orphan["seq"]]])

    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    try:
        session = coordinator.resume("crashy")
        end_seed = [e for e in session.events if e["type"] == "session/end-seed"][-1]
        assert end_seed.seq > orphan["seq"]
        assert list(session.surface.nodes) == list(before.surface.nodes)
        assert session.derive_messages().to_list() == before.derive_messages().to_list()

        async def compact_again() -> Any:
            with DemoModelServer([]) as fresh:
                provider = provider_for(fresh, window=None)
                agent = Agent(
                    session,
                    provider,
                    AgentOptions(provider="demo", model="demo-model"),
                    store=store,
                    compaction=CompactionEngine(config={"auto": False}),
                )
                try:
                    return await agent.compact_now()
                finally:
                    await provider.aclose()

        result = asyncio.run(compact_again())
        assert result is not None
        assert result.start_seq > end_seed.seq
        assert is_checkpoint_source(session.derive_messages()[0]["source"])
    finally:
        coordinator.close()
    reloaded = JsonlBackend(str(root)).load_stored("crashy")
    assert reloaded is not None and reloaded.events[-1]["type"] == "compaction/end"


def test_a_span_three_times_the_window_compacts_in_balanced_parts_merged_into_one_summary(tmp_path: Path) -> None:
    """Beyond the original (which sends the span whole and fails): a surface about three times the context
    window is summarized in consecutive parts cut at balanced boundaries, each request (prior summary + one
    part + the instruction) under the window, the later parts carrying the summary so far as a prior
    ``<compacted-summary>`` checkpoint; one checkpoint lands, recorded without ``llmStreamCall`` (it took
    several calls), and the request after it fits the window."""
    big_file(tmp_path)
    window = 3_000
    turns = 12
    session = al.SessionStore().create("split", meta={"cwd": str(tmp_path)})
    result: Any = None

    async def drive(server: DemoModelServer) -> None:
        nonlocal result
        provider = provider_for(server, window=window)
        engine = CompactionEngine(pruner=None, config={"auto": False})  # let the surface grow past the window
        options = AgentOptions(provider="demo", model="demo-model", cwd=tmp_path)
        agent = Agent(session, provider, options, tools=builtin_registry(), durable=False, compaction=engine)
        try:
            for turn in range(turns):
                agent.followup(f"read it again ({turn})")
                await agent.run()
            assert engine.meter.measure(session).total_tokens > 3 * window
            server.context_window = window  # from now on the model refuses anything over the window
            result = await agent.compact_now()
        finally:
            await provider.aclose()

    with DemoModelServer(large_result_turns(turns)) as server:
        asyncio.run(drive(server))

    summaries = [r for r in server.requests if r.answer == "summary"]
    assert len(summaries) >= 3
    assert all(r.estimated_tokens <= window for r in summaries)
    assert "context-overflow" not in [r.answer for r in server.requests]
    preamble = orjson.dumps(CHECKPOINT_PREAMBLE).decode()[1:-1]  # the text as the JSON body carries it
    texts = [orjson.dumps(r.body["messages"]).decode() for r in summaries]
    assert preamble not in texts[0]
    assert all(preamble in text for text in texts[1:])  # each later part carries the summary so far

    assert result is not None
    events = session.events
    summary_events = [e for e in events if e["type"] == "compaction/summary"]
    assert len(summary_events) == 1 and "llmStreamCall" not in summary_events[0]["data"]
    assert summary_events[0]["data"]["shadowedSeqs"] == list(result.shadowed_seqs)
    derived = session.derive_messages()
    assert is_checkpoint_source(derived[0]["source"])
    assert TokenMeter().measure(session).total_tokens < window
