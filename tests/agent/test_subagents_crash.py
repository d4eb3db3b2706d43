"""A parent process with two subagents in flight, ended by a signal (runtime spec §6.8, persistence §6).

kill -9: on resume the parent's open delegate calls are closed with ``TOOL_OUTCOME_UNKNOWN``, each child's
open turn is repaired on its own resume, and the lineage still links them. SIGINT: the cancellation
reaches the children cooperatively and every child ends its turn (``aborted``, cause ``parent``) before
the parent's turn ends; nothing is left for repair.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.subagents import SubagentConfig
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Hang, RecordedRequest, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

PARENT = textwrap.dedent(
    """
    import asyncio, sys
    import agentlog as al
    from agentlog.agent.loop import Agent, AgentOptions
    from agentlog.agent.subagents import SubagentConfig
    from agentlog.llm.openai_compat import OpenAICompatibleProvider
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    root, base_url, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    store = al.SessionStore()
    PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("lead", meta={"cwd": workdir})

    async def main():
        provider = OpenAICompatibleProvider(base_url=base_url, api_key="k", model="m")
        agent = Agent(session, provider, AgentOptions(provider="p", model="m"), subagents=SubagentConfig())
        agent.followup("split the work")
        await agent.run()

    asyncio.run(main())
    """
)


def answer(request: RecordedRequest) -> Any:
    messages = request.body["messages"]
    if messages[-1]["content"] == "split the work":
        return Reply(
            tool_calls=[
                ScriptedCall("delegate", {"task": "part one"}, id="d-1"),
                ScriptedCall("delegate", {"task": "part two", "mode": "continuable", "label": "two"}, id="d-2"),
            ]
        )
    return Hang(seconds=120)  # the children's models never answer: they are in flight when the signal comes


def _run_until_children_ask(root: Path, workdir: Path, server: DemoModelServer, sig: int) -> int:
    """Start the parent, wait for both children's model requests (flushed before they are sent), signal."""
    process = subprocess.Popen([sys.executable, "-c", PARENT, str(root), server.base_url, str(workdir)])
    try:
        deadline = time.monotonic() + 300  # a hang guard; the loop ends at the process's own progress
        while len(server.requests) < 3:  # the parent's request, then one per child
            assert time.monotonic() < deadline, "the children never asked their model"
            assert process.poll() is None, "the parent process exited on its own"
            time.sleep(0.05)
        process.send_signal(sig)
        return process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _child_ids(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.rglob("session.jsonl*") if p.parent.name != "lead")


def test_crash__sigkill_of_a_parent_with_children_in_flight_is_repaired_per_session_with_lineage(
    tmp_path: Path,
) -> None:
    root, workdir = tmp_path / "store", tmp_path / "work"
    workdir.mkdir()
    with DemoModelServer([answer] * 3) as server:
        assert _run_until_children_ask(root, workdir, server, signal.SIGKILL) == -signal.SIGKILL
    children = _child_ids(root)
    assert len(children) == 2
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    try:
        stored = JsonlBackend(str(root)).load_stored("lead")
        assert stored is not None
        expected = [al.thaw(e) for e in al.interrupted_turn_closers(stored.events)]
        lead = coordinator.resume("lead")
        closers = [al.thaw(e) for e in lead.events][len(stored.events) : len(stored.events) + len(expected)]
        assert closers == expected
        results = [c for c in closers if c["type"] == "tool/result"]
        assert [r["data"]["error"]["code"] for r in results] == ["TOOL_OUTCOME_UNKNOWN", "TOOL_OUTCOME_UNKNOWN"]
        assert closers[-1]["type"] == "turn/end" and closers[-1]["data"]["reason"] == {"kind": "interrupted"}
        for child_id in children:
            child = coordinator.resume(child_id)
            assert child.header["parentSession"] == "lead" and child.header["delegationDepth"] == 1
            ends = [al.thaw(e) for e in child.events if e["type"] == "turn/end"]
            assert ends[-1]["data"]["reason"] == {"kind": "interrupted"}  # its own open turn, repaired on its resume
            assert al.interrupted_turn_closers(child.events) == []
        assert asyncio.run(_continue_the_continuable_child(lead)) == "two, continued"
    finally:
        coordinator.close()


async def _continue_the_continuable_child(lead: al.Session) -> str:
    """After the repair the parent delegates to label "two" again: the repaired child is continued."""

    def again(request: RecordedRequest) -> Any:
        messages = request.body["messages"]
        if messages[-1]["role"] == "tool":
            return Reply(text="done")
        if messages[-1]["content"] == "continue part two":
            task = {"task": "more of part two", "mode": "continuable", "label": "two"}
            return Reply(tool_calls=[ScriptedCall("delegate", task, id="d-3")])
        assert "part two" in [m["content"] for m in messages if m["role"] == "user"]  # its own history
        return Reply(text="two, continued")

    with DemoModelServer([again] * 3) as server:
        provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m")
        agent = Agent(lead, provider, AgentOptions(provider="p", model="m"), subagents=SubagentConfig())
        agent.followup("continue part two")
        await agent.run()
    result = [e for e in lead.events if e["type"] == "tool/result"][-1]["data"]
    assert result["meta"]["subagent"]["resumed"] is True
    return str(result["message"]["content"][0]["content"][0]["text"])


def test_sigint_of_a_parent_cancels_its_children_cooperatively_and_every_turn_ends(tmp_path: Path) -> None:
    root, workdir = tmp_path / "store", tmp_path / "work"
    workdir.mkdir()
    with DemoModelServer([answer] * 3) as server:
        code = _run_until_children_ask(root, workdir, server, signal.SIGINT)
    assert code != 0  # KeyboardInterrupt
    children = _child_ids(root)
    assert len(children) == 2
    backend = JsonlBackend(str(root))
    for child_id in children:
        stored = backend.load_stored(child_id)
        assert stored is not None
        last = al.thaw(stored.events[-1])
        assert last["type"] == "turn/end", [e["type"] for e in stored.events]
        assert last["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "parent"}}
        assert al.interrupted_turn_closers(stored.events) == []
    lead = backend.load_stored("lead")
    assert lead is not None
    assert lead.events[-1]["type"] == "turn/end" and lead.events[-1]["data"]["reason"]["kind"] == "aborted"
    assert al.interrupted_turn_closers(lead.events) == []
