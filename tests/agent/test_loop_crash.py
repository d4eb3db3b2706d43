"""kill -9 of a real agent process while a tool body runs, then resume (persistence §6, runtime §6.6)."""

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

import agentlog as al
from _procs import running_sleep
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, RecordedRequest, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    import agentlog as al
    from agentlog.agent.builtin_tools import builtin_registry
    from agentlog.agent.loop import Agent, AgentOptions
    from agentlog.llm.openai_compat import OpenAICompatibleProvider
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    root, base_url, workdir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    store = al.SessionStore()
    PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("crashy", meta={"cwd": str(workdir)})

    async def main():
        provider = OpenAICompatibleProvider(base_url=base_url, api_key="k", model="m")
        # No store=: the agent checkpoints through the session's own store (issue 7, defect 6).
        agent = Agent(session, provider, AgentOptions(provider="p", model="m", cwd=workdir),
                      tools=builtin_registry())
        agent.followup("please run the slow command")
        await agent.run()

    asyncio.run(main())
    """
)


def _stored_types(root: Path) -> list[str]:
    stored = JsonlBackend(str(root)).load_stored("crashy")
    return [] if stored is None else [event["type"] for event in stored.events]


def test_crash__sigkill_during_a_tool_body_is_repaired_as_outcome_unknown_and_the_next_request_is_valid(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    workdir = tmp_path / "work"
    workdir.mkdir()
    script = [Reply(text="Running it.", tool_calls=[ScriptedCall("run_command", {"command": "sleep 8"}, id="slow-1")])]
    with DemoModelServer(script) as server:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(root), server.base_url, str(workdir)])
        try:
            deadline = time.monotonic() + 300  # a hang guard; the loop ends at the child's progress
            # The loop flushes before the tool body runs: once tool/call is durable, the body is running.
            while "tool/call" not in _stored_types(root):
                assert time.monotonic() < deadline, "the child never reached the tool body"
                assert child.poll() is None, "the child exited on its own"
                time.sleep(0.05)
            while not running_sleep(child.pid):  # the body's `sleep 8` runs (a fixed pause raced under load)
                assert time.monotonic() < deadline, "the tool body never started its command"
                assert child.poll() is None, "the child exited on its own"
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    stored = JsonlBackend(str(root)).load_stored("crashy")
    assert stored is not None
    call = next(e for e in stored.events if e["type"] == "tool/call")
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    try:
        session = coordinator.resume("crashy")
        closers = [al.thaw(e) for e in session.events][len(stored.events) : len(stored.events) + 3]
        expected = al.interrupted_turn_closers(stored.events)
        assert closers == [al.thaw(e) for e in expected]  # exactly the spec's repair
        assert closers[0]["data"]["error"] == {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
        assert closers[0]["sourceEventSeqs"] == [call["seq"]]
        assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
        assert closers[2]["data"]["reason"] == {"kind": "interrupted"}

        checked: list[bool] = []

        def answer(request: RecordedRequest) -> Any:
            messages = request.body["messages"]
            calls = {c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []}
            answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
            checked.append(calls == answered == {"slow-1"})
            return Reply(text="The earlier command's outcome is unknown; I will verify before retrying.")

        async def next_turn() -> Any:
            with DemoModelServer([answer]) as server:
                provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m")
                agent = Agent(session, provider, AgentOptions(provider="p", model="m"), store=store)
                agent.followup("what happened?")
                return await agent.run()

        outcomes = asyncio.run(next_turn())
        assert outcomes[0].turn == 2 and outcomes[0].reason == {"kind": "completed"}
        assert checked == [True]
    finally:
        coordinator.close()
