"""``run_recorded``: a real ``pydantic_ai.Agent`` recorded while it runs (the demo model over HTTP, or
pydantic-ai's own ``TestModel``), down to a ``kill -9`` inside a tool body and the repair on resume."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any

import pydantic
import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers.openai import OpenAIProvider

import agentlog as al
from _procs import assert_turns_closed_with_every_call_answered
from agentlog.errors import ConversionError
from agentlog.integrations.pydantic_ai import from_model_messages, record_run, run_recorded
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

SYSTEM = "You are terse."


def _agent(server: DemoModelServer) -> Agent[None, str]:
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=server.base_url, api_key="demo"))
    agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def _store() -> al.SessionStore:
    store = al.SessionStore()
    al.SessionInvariants(store).install()  # every turn/step/tool relation is checked at its append
    return store


async def _drain(_ctx: Any, events: AsyncIterable[Any]) -> None:
    async for _ in events:
        pass


def _results_in_call_order(messages: Any) -> list[Any]:
    """The messages' contents, each run of consecutive tool-result messages sorted by call id."""
    out: list[Any] = []
    run: list[Any] = []
    for message in messages:
        content = message["content"]
        if content and all(block.get("type") == "tool-result" for block in content):
            run.append(content)
            continue
        out.extend(sorted(run, key=lambda c: [block["toolCallId"] for block in c]))
        run = []
        out.append(content)
    out.extend(sorted(run, key=lambda c: [block["toolCallId"] for block in c]))
    return out


def test_run_recorded__writes_the_loops_protocol_with_the_header_pydantic_ai_sent() -> None:
    attempts: list[int] = []
    script: list[Any] = [
        Reply(tool_calls=[ScriptedCall("add", {"a": 2, "b": 2}, id="a1"), ScriptedCall("flaky", {}, id="f1")]),
        Reply(tool_calls=[ScriptedCall("flaky", {}, id="f2")]),
        "Four, and flaky worked.",
    ]

    async def main() -> tuple[al.Session, Any, list[Any]]:
        with DemoModelServer(script) as server:
            agent = _agent(server)

            @agent.tool_plain
            def flaky() -> str:
                """Works on the second try."""
                attempts.append(1)
                if len(attempts) == 1:
                    raise ModelRetry("try again")
                return "ok"

            session = _store().create("live")
            recorded = await run_recorded(session, agent, "Add 2 and 2, then call flaky.")
            return session, recorded, server.requests

    session, recorded, requests = asyncio.run(main())
    types = [e["type"] for e in session.events]
    protocol = [t for t in types if t not in ("assistant/chunk", "request/context")]
    assert protocol == [
        "turn/start",
        "step/start",
        "user/message",
        "request/header",  # before the first request, as the loop writes it
        "assistant/message",
        "tool/call",  # both calls are durable before either body runs (pydantic-ai runs them in parallel)
        "tool/call",
        "tool/result",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert (recorded.turn, recorded.first_seq, recorded.last_seq) == (1, 0, len(types) - 1)
    assert recorded.result.output == "Four, and flaky worked."
    header = session.request_header()
    assert header["system"] == SYSTEM
    assert header["config"] == {"provider": "openai", "model": "demo-model"}
    sent = requests[0].body["tools"]
    assert [t["name"] for t in header["tools"]] == [t["function"]["name"] for t in sent] == ["add", "flaky"]
    assert [t["parameters"] for t in header["tools"]] == [t["function"]["parameters"] for t in sent]
    # What was recorded live is the conversation pydantic-ai holds, as record_run writes it afterwards, up to
    # the order of parallel calls' results: live, each is written as it arrives (completion order, which
    # depends on the machine); pydantic-ai's messages list them in call order.
    assert _results_in_call_order(session.derive_messages()) == _results_in_call_order(
        from_model_messages(recorded.result.new_messages()).messages
    )
    afterwards = _store().create("afterwards")
    record_run(afterwards, recorded.result)
    assert _results_in_call_order(afterwards.derive_messages()) == _results_in_call_order(session.derive_messages())
    assert_turns_closed_with_every_call_answered(session.events)


def test_run_recorded__the_prompt_and_the_call_are_on_disk_before_the_tool_body_runs(tmp_path: Path) -> None:
    root = tmp_path / "store"
    seen_on_disk: list[list[str]] = []

    async def main() -> al.Session:
        store = _store()
        coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
        session = store.create("durable")
        with DemoModelServer([Reply(tool_calls=[ScriptedCall("probe", {}, id="p1")]), "Done."]) as server:
            agent = _agent(server)

            @agent.tool_plain
            def probe() -> str:
                """Looks at the stored log."""
                stored = JsonlBackend(str(root)).load_stored("durable")
                seen_on_disk.append([] if stored is None else [e["type"] for e in stored.events])
                return "looked"

            await run_recorded(session, agent, "Look at the log.")
        coordinator.close()
        return session

    asyncio.run(main())
    [stored] = seen_on_disk
    assert stored[-1] == "tool/call"  # the body ran after its call was durable, and before its result
    assert stored[:4] == ["turn/start", "step/start", "user/message", "request/header"]
    assert "assistant/message" in stored and "tool/result" not in stored


def test_run_recorded__the_callers_event_handler_sees_every_event_even_when_it_stops_early() -> None:
    seen: list[str] = []

    async def first_only(_ctx: Any, events: AsyncIterable[Any]) -> None:
        async for event in events:
            seen.append(event.event_kind)
            break  # the recording still takes the rest of the node's events

    async def main() -> al.Session:
        script: list[Any] = [Reply(tool_calls=[ScriptedCall("add", {"a": 1, "b": 2}, id="c1")]), "Three."]
        with DemoModelServer(script) as server:
            session = _store().create("handler")
            await run_recorded(session, _agent(server), "1+2?", event_stream_handler=first_only)
            return session

    session = asyncio.run(main())
    assert seen  # the caller's handler was called
    results = [m for m in session.derive_messages() if m["source"]["kind"] == "tool"]
    assert results[0]["content"][0]["content"] == [{"type": "text", "text": "3"}]
    assert_turns_closed_with_every_call_answered(session.events)


def test_run_recorded__a_structured_output_run_is_refused_and_its_turn_ends_with_the_error() -> None:
    class Answer(pydantic.BaseModel):
        value: int

    agent: Agent[None, Answer] = Agent(TestModel(), output_type=Answer)
    session = _store().create("structured")
    with pytest.raises(ConversionError, match="tool-call"):  # an output tool's call has no agentlog form yet
        asyncio.run(run_recorded(session, agent, "Give me a number."))
    ends = [e["data"]["reason"] for e in session.events if e["type"] == "turn/end"]
    assert ends[0]["kind"] == "error" and ends[0]["error"]["code"] == "CONVERSION_UNSUPPORTED"
    assert session.derive_messages()[0]["content"] == [{"type": "text", "text": "Give me a number."}]
    assert al.interrupted_turn_closers(list(session.events)) == []


def test_run_recorded__a_run_that_raises_ends_the_turn_with_the_error_and_every_call_answered() -> None:
    agent: Agent[None, str] = Agent(TestModel())

    @agent.tool_plain
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")

    session = _store().create("raises")
    with pytest.raises(RuntimeError, match="disk on fire"):
        asyncio.run(run_recorded(session, agent, "Try it."))
    end = [e for e in session.events if e["type"] == "turn/end"][-1]
    assert end["data"]["reason"]["kind"] == "error"
    assert "disk on fire" in end["data"]["reason"]["error"]["message"]
    result = next(e for e in session.events if e["type"] == "tool/result")
    assert result["data"]["error"]["code"] == "TOOL_OUTCOME_UNKNOWN"  # it was running when the run failed
    assert_turns_closed_with_every_call_answered(session.events)
    assert al.interrupted_turn_closers(list(session.events)) == []


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    import agentlog as al
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from agentlog.integrations.pydantic_ai import run_recorded
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend

    root, base_url = sys.argv[1], sys.argv[2]
    store = al.SessionStore()
    PersistenceCoordinator(store, JsonlBackend(root))
    session = store.create("killed")
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=base_url, api_key="demo"))
    agent = Agent(model, instructions="You deploy things.")

    @agent.tool_plain
    def deploy(target: str) -> str:
        "Deploys the target (takes a while)."
        print("body-started", flush=True)  # the parent kills the process once it reads this
        sys.stdin.read()  # blocks: the parent never writes
        return "deployed"

    asyncio.run(run_recorded(session, agent, "Deploy to production."))
    """
)


def test_run_recorded__kill_9_inside_a_tool_body_leaves_a_turn_repaired_as_outcome_unknown(tmp_path: Path) -> None:
    root = tmp_path / "store"
    script: list[Any] = [Reply(text="Deploying.", tool_calls=[ScriptedCall("deploy", {"target": "prod"}, id="d1")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with DemoModelServer(script) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), server.base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()  # the child's own report: the tool body is running
            assert line == "body-started\n", f"the child did not reach the tool body (exit {child.poll()})"
            os.kill(child.pid, signal.SIGKILL)
            assert child.wait(60) == -signal.SIGKILL
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()

    stored = JsonlBackend(str(root)).load_stored("killed")
    assert stored is not None
    assert [e["type"] for e in stored.events][-1] == "tool/call"  # the call, durable before the body ran
    call = stored.events[-1]
    assert call["data"]["callId"] == "d1" and call["data"]["name"] == "deploy"
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(root)))
    try:
        session = coordinator.resume("killed")
        closers = [al.thaw(e) for e in session.events][len(stored.events) : len(stored.events) + 3]
        assert [c["type"] for c in closers] == ["tool/result", "step/end", "turn/end"]
        assert closers[0]["data"]["error"] == {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"}
        assert closers[0]["sourceEventSeqs"] == [call["seq"]]
        assert closers[2]["data"]["reason"] == {"kind": "interrupted"}
        messages = session.derive_messages()
        assert messages[0]["content"] == [{"type": "text", "text": "Deploy to production."}]
        assert messages[1]["content"][-1]["id"] == "d1"
        assert messages[2]["source"] == {"kind": "tool", "callId": "d1"}
        assert session.request_header()["system"] == "You deploy things."
        assert_turns_closed_with_every_call_answered(session.events)
    finally:
        coordinator.close()
