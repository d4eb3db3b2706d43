"""Issue 7, defect 6 (the agent checkpoints through its session's store unless told not to) and
defect 7 (``max_steps`` per turn, ending with a typed error the model-facing history can carry)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import (
    DEFAULT_MAX_STEPS,
    Agent,
    AgentNotDurableError,
    AgentOptions,
    InvalidAgentOptionError,
)
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall


def _stored_types(root: Path, session_id: str) -> list[str]:
    backend = JsonlBackend(str(root))
    try:
        stored = backend.load_stored(session_id)
    finally:
        backend.close()
    return [] if stored is None else [e["type"] for e in stored.events]


def test_issue7_d6_agent_checkpoints_through_the_sessions_store_without_store_argument(tmp_path: Path) -> None:
    """No ``store=``: the tool/call is still durable before the tool body runs (seen from the body)."""
    root = tmp_path / "store"
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    seen: list[list[str]] = []

    async def look(args: Any, ctx: ToolContext) -> ToolOutcome:
        seen.append(_stored_types(root, "d6"))  # what a kill -9 right now would leave on disk
        return ToolOutcome.text("looked")

    tools = ToolRegistry([FunctionTool("look", "Look at the disk.", {"type": "object", "properties": {}}, look)])

    async def main() -> Any:
        with DemoModelServer([Reply(tool_calls=[ScriptedCall("look", {}, id="l1")]), Reply(text="done")]) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create("d6")
                agent = Agent(session, provider, AgentOptions(provider="p", model="m"), tools=tools)
                assert agent.store is store
                agent.followup("look")
                return await agent.run()

    try:
        outcomes = asyncio.run(main())
    finally:
        coordinator.close()
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    assert len(seen) == 1 and seen[0][-1] == "tool/call"
    assert "request/header" in seen[0] and "assistant/message" in seen[0]


def test_issue7_d6_a_non_durable_agent_is_an_explicit_choice() -> None:
    options = AgentOptions(provider="p", model="m")
    loose = al.Session.create("loose")  # not live in any store: nothing could checkpoint it
    with pytest.raises(AgentNotDurableError) as excinfo:
        Agent(loose, None, options)  # type: ignore[arg-type]
    assert excinfo.value.code == "AGENT_NOT_DURABLE"
    assert "durable=False" in str(excinfo.value)
    agent = Agent(loose, None, options, durable=False)  # type: ignore[arg-type]
    assert agent.checkpoint is None and agent.store is None

    store, other = al.SessionStore(), al.SessionStore()
    session = store.create("s")
    with pytest.raises(AgentNotDurableError, match="not live in the store given"):
        Agent(session, None, options, store=other)  # type: ignore[arg-type]
    assert Agent(session, None, options, store=store).store is store  # type: ignore[arg-type]
    assert Agent(session, None, options, durable=False).checkpoint is None  # type: ignore[arg-type]
    store.dispose(session)
    with pytest.raises(AgentNotDurableError):
        Agent(session, None, options)  # type: ignore[arg-type]


def _always_a_tool(count: int) -> list[Any]:
    return [Reply(tool_calls=[ScriptedCall("read_file", {"path": "n.txt"}, id=f"c{i}")]) for i in range(count)]


def _loop_run(tmp_path: Path, script: list[Any], prompts: list[str], **options: Any) -> tuple[al.Session, Any, int]:
    (tmp_path / "n.txt").write_text("42\n")
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> tuple[al.Session, Any, int]:
        with DemoModelServer(script) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create("steps")
                agent = Agent(
                    session,
                    provider,
                    AgentOptions(provider="p", model="m", cwd=tmp_path, **options),
                    tools=builtin_registry(),
                )
                outcomes = []
                for prompt in prompts:
                    agent.followup(prompt)
                    outcomes.extend(await agent.run())
                return session, outcomes, len(server.requests)

    return asyncio.run(main())


def test_issue7_d7_a_model_that_always_calls_a_tool_stops_at_the_default_max_steps(tmp_path: Path) -> None:
    assert DEFAULT_MAX_STEPS == 50
    session, outcomes, requests = _loop_run(tmp_path, _always_a_tool(60), ["loop forever"])
    assert requests == 50
    [outcome] = outcomes
    assert outcome.reason["kind"] == "error"
    assert outcome.reason["error"]["code"] == "MAX_STEPS_EXCEEDED"
    assert "50" in outcome.reason["error"]["message"] and "--max-steps" in outcome.reason["error"]["message"]
    assert outcome.error is not None and outcome.error.code == "MAX_STEPS_EXCEEDED"  # type: ignore[attr-defined]
    assert [e["type"] for e in session.events].count("step/start") == 50
    assert tool_pairing_problems(session.derive_messages()) == []


def test_issue7_d7_after_the_step_limit_a_new_prompt_continues_the_session(tmp_path: Path) -> None:
    script = [*_always_a_tool(2), Reply(text="Stopping, as asked.")]
    session, outcomes, requests = _loop_run(tmp_path, script, ["loop", "please stop"], max_steps=2)
    assert [o.reason.get("error", {}).get("code", o.reason["kind"]) for o in outcomes] == [
        "MAX_STEPS_EXCEEDED",
        "completed",
    ]
    assert requests == 3
    assert session.derive_messages()[-1]["content"] == [{"type": "text", "text": "Stopping, as asked."}]


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "5"])
def test_issue7_d7_max_steps_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidAgentOptionError) as excinfo:
        AgentOptions(provider="p", model="m", max_steps=bad)
    assert excinfo.value.code == "INVALID_AGENT_OPTION"
