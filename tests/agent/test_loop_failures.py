"""Bad input to the agent loop: every failure is a typed error or an error result, the log stays valid."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions, RetryPolicy
from agentlog.agent.tools import FunctionTool, ToolOutcome
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.llm.types import MissingApiKeyError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, ErrorReply, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

FAST = RetryPolicy(max_retries=2, initial_delay_ms=1, max_delay_ms=20)
PATIENT = RetryPolicy(max_retries=5, initial_delay_ms=1, max_delay_ms=20)


def _agent_run(script: list[Any], tmp_path: Path, *, tools: Any = None, base_url: str | None = None) -> Any:
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> Any:
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=base_url or server.base_url, api_key="k", model="m")
            session = store.create("f", meta={"cwd": str(tmp_path)})
            agent = Agent(
                session,
                provider,
                AgentOptions(provider="p", model="m", cwd=tmp_path, retry=FAST),
                tools=tools if tools is not None else builtin_registry(),
                store=store,
            )
            agent.followup("go")
            return session, await agent.run()

    return asyncio.run(main())


def _results(session: al.Session) -> list[Any]:
    return [e["data"] for e in session.events if e["type"] == "tool/result"]


def _assert_loadable(session: al.Session) -> None:
    replay = al.Session.create("copy", list(session.events))
    assert replay.derive_messages() == session.derive_messages()
    assert al.interrupted_turn_closers(session.events) == []


def test_loop__malformed_streamed_tool_arguments_become_an_error_result(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[ScriptedCall("read_file", '{"path": "a', id="c1")]), Reply(text="sorry")]
    session, outcomes = _agent_run(script, tmp_path)
    assert outcomes[0].reason == {"kind": "completed"}
    (result,) = _results(session)
    assert result["error"]["code"] == "INVALID_ARGUMENTS"
    assert result["message"]["content"][0]["isError"] is True
    _assert_loadable(session)


def test_loop__unknown_tool_names_become_an_error_result(tmp_path: Path) -> None:
    script = [Reply(tool_calls=[ScriptedCall("launch_rockets", "{}", id="c1")]), Reply(text="ok")]
    session, outcomes = _agent_run(script, tmp_path)
    (result,) = _results(session)
    assert result["error"]["code"] == "UNKNOWN_TOOL"
    assert "launch_rockets" in result["message"]["content"][0]["content"][0]["text"]
    assert outcomes[0].reason == {"kind": "completed"}
    _assert_loadable(session)


def test_loop__a_tool_that_raises_becomes_an_error_result_not_a_crashed_turn(tmp_path: Path) -> None:
    async def explode(args: Any, ctx: Any) -> ToolOutcome:
        raise RuntimeError("the disk is on fire")

    registry = builtin_registry()
    registry.register(FunctionTool("explode", "always fails", {"type": "object", "properties": {}}, explode))
    script = [Reply(tool_calls=[ScriptedCall("explode", "{}", id="c1")]), Reply(text="noted")]
    session, outcomes = _agent_run(script, tmp_path, tools=registry)
    (result,) = _results(session)
    assert result["error"]["code"] == "TOOL_ERROR"
    assert "the disk is on fire" in result["message"]["content"][0]["content"][0]["text"]
    assert outcomes[0].reason == {"kind": "completed"}
    _assert_loadable(session)


def test_loop__unreachable_endpoint_retries_then_ends_the_turn_with_transport(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    session, outcomes = _agent_run([], tmp_path, base_url=f"http://127.0.0.1:{closed_port}/v1")
    assert outcomes[0].reason["kind"] == "error"
    assert outcomes[0].reason["error"]["code"] == "TRANSPORT"
    assert [e["data"]["retry"] for e in session.events if e["type"] == "llm/retry"] == [1, 2]
    _assert_loadable(session)


def test_loop__missing_api_key_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingApiKeyError) as info:
        OpenAICompatibleProvider()
    assert info.value.code == "MISSING_API_KEY"
    assert "DEEPSEEK_API_KEY" in str(info.value) and "OPENAI_API_KEY" in str(info.value)


def test_loop__retry_events_are_durable_and_counts_continue_from_the_log(tmp_path: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))

    async def main() -> al.Session:
        script = [ErrorReply(429, "busy", retry_after="0.001"), ErrorReply(503, "down"), Reply(text="finally")]
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m")
            session = store.create("r", meta={"cwd": str(tmp_path)})
            agent = Agent(session, provider, AgentOptions(provider="p", model="m", retry=PATIENT), store=store)
            agent.followup("go")
            await agent.run()
            return session

    session = asyncio.run(main())
    store.dispose(session)
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path / "store")))
    events = reader.load("r").events
    retries = [e["data"] for e in events if e["type"] == "llm/retry"]
    assert [(r["retry"], r["failure"]["code"]) for r in retries] == [(1, "RATE_LIMIT"), (2, "SERVER")]
    assert retries[0]["retryId"] == retries[1]["retryId"]
    assert [e["data"]["retry"] for e in events if e["type"] == "llm/retry-started"] == [1, 2]
    # A new loop instance over the same log continues the count for that turn/step instead of restarting.
    restored = reader.resume("r")

    async def continue_count() -> list[int]:
        agent = Agent(
            restored,
            OpenAICompatibleProvider(base_url="http://127.0.0.1:9/v1", api_key="k"),
            AgentOptions(provider="p", model="m", retry=policy),
        )
        await agent._retry(1, 1, {"message": "again", "code": "SERVER"})
        return [e["data"]["retry"] for e in restored.events if e["type"] == "llm/retry"]

    policy = PATIENT
    assert asyncio.run(continue_count()) == [1, 2, 3]
    policy = FAST  # a different policy is a different count (the spec's policyKey): it starts at 1
    assert asyncio.run(continue_count()) == [1, 2, 3, 1]
    reader.close()


def test_loop__error_hooks_hear_a_failed_turn_before_its_turn_end_and_a_raising_hook_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from agentlog.testing.provider import ScriptedProvider, failure_reply

    store = al.SessionStore()
    session = store.create("hooked")
    agent = Agent(
        session,
        ScriptedProvider([failure_reply("AUTH", "bad key")]),
        AgentOptions(provider="p", model="m", retry=RetryPolicy(max_retries=0)),
        store=store,
    )
    heard: list[tuple[int, int, str, int]] = []

    def listen(subject: Any, turn: int, step: int, error: BaseException) -> None:
        assert subject is agent
        heard.append((turn, step, type(error).__name__, len(session.events)))

    def explode(subject: Any, turn: int, step: int, error: BaseException) -> None:
        raise RuntimeError("hook exploded")

    agent.error_hooks.extend([explode, listen])

    async def main() -> Any:
        agent.followup("go")
        return await agent.run()

    (outcome,) = asyncio.run(main())
    assert outcome.reason["kind"] == "error"
    assert session.events[-1]["type"] == "turn/end"
    # Heard once, at turn 1 step 1, while the turn/end was not yet appended.
    assert heard == [(1, 1, "LlmError", len(session.events) - 1)]
    assert any("agent error hook threw: RuntimeError: hook exploded" in r.getMessage() for r in caplog.records)


def test_loop__a_cancelled_turn_is_no_error_for_the_error_hooks() -> None:
    from agentlog.testing.provider import ScriptedProvider, text_reply

    store = al.SessionStore()
    session = store.create("cancelled")
    agent = Agent(session, ScriptedProvider([text_reply("hi")]), AgentOptions(provider="p", model="m"), store=store)
    heard: list[BaseException] = []
    agent.error_hooks.append(lambda subject, turn, step, error: heard.append(error))

    # Cancel inside the turn, as its first step opens: the model request then ends aborted.
    store.on_event(lambda s, event: agent.cancel() if event["type"] == "step/start" else None)

    async def main() -> Any:
        agent.followup("go")
        return await agent.run()

    (outcome,) = asyncio.run(main())
    assert outcome.reason["kind"] == "aborted"
    assert heard == []
