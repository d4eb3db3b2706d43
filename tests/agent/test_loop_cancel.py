"""Issue 7, defect 1: every way a turn can end leaves every started tool call answered, durably.

Cancelling ``agent.run()`` while a tool runs (``task.cancel()``, ``asyncio.wait_for``, Ctrl-C under
``asyncio.run``), ``agent.cancel()``, and a hook that raises must all commit a ``tool/result`` for every
``tool/call`` before ``turn/end`` and flush it; a request is never sent while the derived messages hold
an unpaired call. Each test reads the stored log back (a fresh backend while the writer is still live,
then a fresh coordinator) and checks it, so nothing depends on ``close()`` flushing for us.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from _procs import assert_turns_closed_with_every_call_answered, running_sleep
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry
from agentlog.errors import PersistenceError
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.kernel.repair import TOOL_OUTCOME_UNKNOWN_TEXT
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

SID = "cancelled"


def check_stored(root: Path, session_id: str = SID) -> list[Any]:
    """The stored log, read by a fresh backend, has every turn closed and every call answered."""
    backend = JsonlBackend(str(root))
    try:
        stored = backend.load_stored(session_id)
    finally:
        backend.close()
    assert stored is not None
    events = [al.thaw(e) for e in stored.events]
    assert_turns_closed_with_every_call_answered(events)
    assert events[-1]["type"] == "turn/end"
    return events


def check_reloaded(root: Path, events: Sequence[Any], session_id: str = SID) -> None:
    """A fresh coordinator resumes the log as stored (no repair) and derives tool-paired messages."""
    fresh = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(root)))
    try:
        session = fresh.resume(session_id)
        added = [e["type"] for e in session.events][len(events) :]
        assert added == ["session/end-seed"], f"resume had to repair the log: {added}"
        assert tool_pairing_problems(session.derive_messages()) == []
    finally:
        fresh.close()


def check_stored_and_reloaded(root: Path, session_id: str = SID) -> list[Any]:
    events = check_stored(root, session_id)
    check_reloaded(root, events, session_id)
    return events


def _results(events: Sequence[Any]) -> dict[str, Any]:
    return {e["data"]["message"]["source"]["callId"]: e for e in events if e["type"] == "tool/result"}


class Blocker:
    """A tool whose body signals that it started, then waits forever, ignoring the cancel signal."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.runs = 0

    async def body(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        self.runs += 1
        self.started.set()
        await asyncio.Event().wait()
        return ToolOutcome.text("unreachable")

    def tool(self) -> FunctionTool:
        return FunctionTool("block", "Blocks until cancelled.", {"type": "object", "properties": {}}, self.body)


def _tools(blocker: Blocker) -> ToolRegistry:
    registry = builtin_registry()
    registry.register(blocker.tool())
    return registry


def _scenario(
    tmp_path: Path,
    script: list[Any],
    drive: Callable[[Agent, Blocker, DemoModelServer], Any],
    *,
    tools: Callable[[Blocker], ToolRegistry] = _tools,
    setup: Callable[[al.SessionStore], Any] | None = None,
) -> tuple[Path, Any, DemoModelServer]:
    root = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "notes.txt").write_text("the answer is 42\n")
    store = al.SessionStore()
    al.SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    if setup is not None:
        setup(store)
    blocker = Blocker()

    async def main() -> Any:
        with DemoModelServer(script) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create(SID, meta={"cwd": str(work)})
                agent = Agent(session, provider, AgentOptions(provider="p", model="m", cwd=work), tools=tools(blocker))
                agent.followup("go")
                outcome = await drive(agent, blocker, server)
                return outcome, server

    try:
        outcome, server = asyncio.run(main())
        events = check_stored(root)  # while the writer is still live: the flush was the loop's own
    finally:
        coordinator.close()
    check_reloaded(root, events)
    return root, (outcome, events), server


BLOCK_THEN_READ = [
    Reply(
        text="Working.",
        tool_calls=[ScriptedCall("block", {}, id="b1"), ScriptedCall("read_file", {"path": "notes.txt"}, id="r1")],
    )
]


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_task_cancel_during_a_tool_body_answers_every_call_durably(tmp_path: Path) -> None:
    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        task = asyncio.create_task(agent.run())
        await asyncio.wait_for(blocker.started.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return "cancelled"

    _root, (_outcome, events), _server = _scenario(tmp_path, BLOCK_THEN_READ, drive)
    results = _results(events)
    # The running call's outcome is unknown (same text and code as crash repair); the call that never
    # started has the canonical aborted pair.
    assert results["b1"]["data"]["error"] == {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
    assert results["b1"]["data"]["message"]["content"][0]["content"][0]["text"] == TOOL_OUTCOME_UNKNOWN_TEXT
    assert results["r1"]["data"]["error"] == {"name": "AbortError", "code": "ABORTED_BEFORE_DISPATCH"}
    calls = {e["data"]["callId"]: e["seq"] for e in events if e["type"] == "tool/call"}
    assert results["b1"]["sourceEventSeqs"] == [calls["b1"]] and results["r1"]["sourceEventSeqs"] == [calls["r1"]]
    end = events[-1]
    assert end["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
    assert [e["type"] for e in events[-2:]] == ["step/end", "turn/end"]


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_wait_for_timeout_during_a_tool_body_answers_the_call_durably(tmp_path: Path) -> None:
    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        async def run_until_blocked() -> None:
            run = asyncio.ensure_future(agent.run())
            try:
                await blocker.started.wait()
                await run
            finally:
                if not run.done():
                    run.cancel()
                    await asyncio.gather(run, return_exceptions=True)

        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run_until_blocked(), timeout=3)
        assert blocker.runs == 1, "the tool body never started within the timeout"
        return "timeout"

    _root, (_outcome, events), _server = _scenario(
        tmp_path, [Reply(tool_calls=[ScriptedCall("block", {}, id="b1")])], drive
    )
    assert _results(events)["b1"]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"


def test_wait_for_directly_on_run_answers_the_call_durably(tmp_path: Path) -> None:
    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(agent.run(), timeout=3)
        assert blocker.runs == 1, "the tool body never started within the timeout"
        return "timeout"

    _root, (_outcome, events), _server = _scenario(
        tmp_path, [Reply(tool_calls=[ScriptedCall("block", {}, id="b1")])], drive
    )
    assert _results(events)["b1"]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"


@pytest.mark.subprocess  # the agent's shell tool starts the command
def test_agent_cancel_during_run_command_answers_the_call_and_ends_the_turn(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[ScriptedCall("run_command", {"command": "sleep 30"}, id="slow")]), Reply(text="x")]

    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        task = asyncio.create_task(agent.run())
        deadline = time.monotonic() + 60
        while not any(e["type"] == "tool/call" for e in agent.session.events) or not running_sleep(os.getpid()):
            assert time.monotonic() < deadline, "the tool body never started its command"
            await asyncio.sleep(0.02)
        started = time.monotonic()
        agent.cancel()
        outcomes = await asyncio.wait_for(task, 20)
        assert time.monotonic() - started < 10, "the command was not killed on cancel"
        assert len(server.requests) == 1, "a request was sent after the cancel"
        return outcomes

    _root, (outcomes, events), _server = _scenario(tmp_path, script, drive)
    assert [o.reason for o in outcomes] == [{"kind": "aborted", "reason": {"kind": "user"}}]
    assert _results(events)["slow"]["data"]["error"]["code"] == "ABORTED"  # the real, killed outcome
    assert [e["type"] for e in events].count("step/start") == 1  # no empty step after the cancel


def test_a_raising_flush_hook_before_the_tool_body_answers_the_call_unrun(tmp_path: Path) -> None:
    failed: list[bool] = []

    def setup(store: al.SessionStore) -> None:
        def flaky(session: al.Session) -> None:
            if not failed and session.events[-1]["type"] == "tool/call":
                failed.append(True)
                raise PersistenceError("disk on fire (once)")

        store.on_flush(flaky)

    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        return await agent.run()

    _root, (outcomes, events), _server = _scenario(tmp_path, BLOCK_THEN_READ, drive, setup=setup)
    assert failed == [True]
    assert outcomes[0].reason["kind"] == "error" and outcomes[0].reason["error"]["code"] == "PERSISTENCE_ERROR"
    results = _results(events)
    # The checkpoint failed closed: the body never ran, and both calls say so.
    assert results["b1"]["data"]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert results["r1"]["data"]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"


def test_a_vetoing_event_hook_on_tool_call_leaves_every_call_answered(tmp_path: Path) -> None:
    vetoed: list[str] = []

    def setup(store: al.SessionStore) -> None:
        def veto_once(session: al.Session, candidate: Any) -> None:
            if not vetoed and candidate["type"] == "tool/call":
                vetoed.append(candidate["data"]["callId"])
                raise RuntimeError("policy hook failed")

        store.before_event(veto_once)

    async def drive(agent: Agent, blocker: Blocker, server: DemoModelServer) -> Any:
        return await agent.run()

    _root, (outcomes, events), _server = _scenario(tmp_path, BLOCK_THEN_READ, drive, setup=setup)
    assert vetoed == ["b1"]
    assert outcomes[0].reason["kind"] == "error"
    assert {k: v["data"]["error"]["code"] for k, v in _results(events).items()} == {
        "b1": "ABORTED_BEFORE_DISPATCH",
        "r1": "ABORTED_BEFORE_DISPATCH",
    }


def test_a_request_is_never_sent_with_an_unpaired_tool_call(tmp_path: Path) -> None:
    """A log written by an older build (closed turn, unanswered call) is refused before any network I/O."""
    poisoned = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 1, "data": {"turn": 1, "step": 1}},
        {
            "type": "assistant/message",
            "seq": 2,
            "time": 1,
            "data": {
                "turn": 1,
                "step": 1,
                "message": al.assistant_message(
                    [al.tool_call_block("c1", "run_command", "{}")], provider="p", model="m"
                ),
            },
            "surfaceOp": "append",
            "sourceEventSeqs": [],
        },
        {
            "type": "tool/call",
            "seq": 3,
            "time": 1,
            "data": {"turn": 1, "step": 1, "callId": "c1", "name": "run_command", "arguments": "{}"},
        },
        {"type": "step/end", "seq": 4, "time": 1, "data": {"turn": 1, "step": 1}},
        {
            "type": "turn/end",
            "seq": 5,
            "time": 1,
            "data": {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}},
        },
    ]
    store = al.SessionStore()  # no invariant checker: the old build's log is taken as it is

    async def main() -> Any:
        with DemoModelServer([Reply(text="never")]) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create("old", seed=poisoned)
                agent = Agent(session, provider, AgentOptions(provider="p", model="m"), durable=False)
                agent.followup("hello again")
                return await agent.run(), server.requests

    outcomes, requests = asyncio.run(main())
    assert requests == []
    assert outcomes[0].reason["kind"] == "error"
    assert outcomes[0].reason["error"]["code"] == "UNPAIRED_TOOL_CALL"
    assert "c1" in outcomes[0].reason["error"]["message"]
    assert "first turn is damaged" in outcomes[0].reason["error"]["message"]


CTRL_C_CHILD = textwrap.dedent(
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
    session = store.create("cancelled", meta={"cwd": str(workdir)})

    async def main():
        provider = OpenAICompatibleProvider(base_url=base_url, api_key="k", model="m")
        agent = Agent(session, provider, AgentOptions(provider="p", model="m", cwd=workdir), tools=builtin_registry())
        agent.followup("please run the slow command")
        await agent.run()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def _stored_types(root: Path) -> list[str]:
    backend = JsonlBackend(str(root))
    try:
        stored = backend.load_stored(SID)
    finally:
        backend.close()
    return [] if stored is None else [event["type"] for event in stored.events]


def test_ctrl_c_under_asyncio_run_answers_the_running_call(tmp_path: Path) -> None:
    """A real SIGINT to a real process: asyncio.run cancels the main task, the loop closes the turn."""
    root = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()
    script = [Reply(tool_calls=[ScriptedCall("run_command", {"command": "sleep 30"}, id="slow")])]
    with DemoModelServer(script) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CTRL_C_CHILD, str(root), server.base_url, str(work)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 300  # a hang guard; the loop ends at the child's progress
            while "tool/call" not in _stored_types(root):  # durable before the body runs
                assert time.monotonic() < deadline, "the child never reached the tool body"
                assert child.poll() is None, "the child exited on its own"
                time.sleep(0.05)
            while not running_sleep(child.pid):  # the body's `sleep 30` runs (a fixed pause raced under load)
                assert time.monotonic() < deadline, "the tool body never started its command"
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGINT)
            out, _ = child.communicate(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == 130 and "interrupted" in out
    events = check_stored_and_reloaded(root)
    assert _results(events)["slow"]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
    assert events[-1]["data"]["reason"]["kind"] == "aborted"


def test_a_call_that_cannot_be_answered_leaves_the_turn_open_for_crash_repair(tmp_path: Path) -> None:
    """Never close a turn over an unanswered call: if no result can be written, repair answers it later."""
    root = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("42\n")
    store = al.SessionStore()
    al.SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))

    def refuse_results(session: al.Session, candidate: Any) -> None:
        if candidate["type"] == "tool/result":
            raise RuntimeError("result policy hook is broken")

    unsubscribe = store.before_event(refuse_results)
    script = [Reply(tool_calls=[ScriptedCall("read_file", {"path": "notes.txt"}, id="r1")])]

    async def main() -> Any:
        with DemoModelServer(script) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create(SID, meta={"cwd": str(work)})
                agent = Agent(
                    session, provider, AgentOptions(provider="p", model="m", cwd=work), tools=builtin_registry()
                )
                agent.followup("read it")
                outcomes = await agent.run()
                agent.followup("again")
                with pytest.raises(al.agent.OpenTurnError):
                    await agent.run()  # the same live session cannot start a turn inside the open one
                return outcomes

    try:
        outcomes = asyncio.run(main())
        stored = [e["type"] for e in JsonlBackend(str(root)).load_stored(SID).events]  # type: ignore[union-attr]
    finally:
        unsubscribe()
        coordinator.close()
    assert outcomes[0].reason["kind"] == "error"
    assert "turn/end" not in stored and stored[-1] == "tool/call"  # flushed, and left open
    fresh = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(root)))
    try:
        session = fresh.resume(SID)
        events = [al.thaw(e) for e in session.events]
        assert_turns_closed_with_every_call_answered([e for e in events if e["type"] != "session/end-seed"])
        assert _results(events)["r1"]["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"
        assert tool_pairing_problems(session.derive_messages()) == []
    finally:
        fresh.close()
