"""The agent loop end to end: the real ``openai`` client talking HTTP to the local scripted model."""

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
    RetryPolicy,
)
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry
from agentlog.kernel.invariants import tool_pairing_problems
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, ErrorReply, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

FAST_RETRY = RetryPolicy(initial_delay_ms=1, max_delay_ms=50)


def _types(session: al.Session) -> list[str]:
    return [event["type"] for event in session.events]


def _run(script: list[Any], prompts: list[str], tmp_path: Path, **options: Any) -> tuple[al.Session, Any, Any]:
    store = al.SessionStore()
    al.SessionInvariants(store).install()  # every turn/step/tool relation is checked at its append
    (tmp_path / "notes.txt").write_text("the answer is 42\n")

    async def main() -> tuple[al.Session, Any, Any]:
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="test", model="demo-model")
            session = store.create("s", meta={"cwd": str(tmp_path)})
            agent = Agent(
                session,
                provider,
                AgentOptions(provider="deepseek", model="demo-model", system="You are terse.", cwd=tmp_path, **options),
                tools=builtin_registry(),
                store=store,
            )
            for prompt in prompts:
                agent.followup(prompt)
            outcomes = await agent.run()
            return session, outcomes, server.requests

    return asyncio.run(main())


def test_loop__answers_a_prompt_with_streamed_text(tmp_path: Path) -> None:
    session, outcomes, requests = _run([Reply(text="Hello there, friend.")], ["hi"], tmp_path)
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    types = _types(session)
    assert types[:4] == ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced", "step/start"]
    assert "request/header" in types and "request/context" in types
    assert types[-3:] == ["assistant/message", "step/end", "turn/end"]
    messages = session.derive_messages()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == [{"type": "text", "text": "Hello there, friend."}]
    header = session.request_header()
    assert header["config"] == {"provider": "deepseek", "model": "demo-model"}
    assert header["system"] == "You are terse."
    # What the server received is what the log reconstructs.
    sent = requests[0].body
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
    assert sent["messages"][1]["content"] == "hi"
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file", "list_dir", "write_file", "run_command"]


def test_loop__runs_a_tool_call_and_feeds_the_result_back(tmp_path: Path) -> None:
    script = [
        Reply(text="Reading.", tool_calls=[ScriptedCall("read_file", {"path": "notes.txt"}, id="call-1")]),
        Reply(text="It says 42."),
    ]
    session, outcomes, requests = _run(script, ["what is in notes.txt?"], tmp_path)
    assert outcomes[0].reason == {"kind": "completed"}
    messages = session.derive_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    result_block = messages[2]["content"][0]
    assert result_block["type"] == "tool-result" and result_block["toolCallId"] == "call-1"
    assert "the answer is 42" in result_block["content"][0]["text"]
    call = next(e for e in session.events if e["type"] == "tool/call")
    result = next(e for e in session.events if e["type"] == "tool/result")
    assert result["sourceEventSeqs"] == [call["seq"]]
    steps = [e["data"]["step"] for e in session.events if e["type"] == "step/start"]
    assert steps == [1, 2]
    second = requests[1].body["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call-1", "content": result_block["content"][0]["text"]}


def test_loop__retries_a_rate_limit_and_logs_it(tmp_path: Path) -> None:
    script = [ErrorReply(429, "slow down", retry_after="0.01"), Reply(text="ok")]
    session, outcomes, _ = _run(script, ["hi"], tmp_path, retry=FAST_RETRY)
    assert outcomes[0].reason == {"kind": "completed"}
    retry = next(e for e in session.events if e["type"] == "llm/retry")
    assert retry["data"]["retry"] == 1 and retry["data"]["failure"]["code"] == "RATE_LIMIT"
    assert retry["data"]["delayMs"] == 10
    started = next(e for e in session.events if e["type"] == "llm/retry-started")
    assert started["data"]["retryId"] == retry["data"]["retryId"]


def test_loop__exhausted_server_errors_end_the_turn_with_an_error(tmp_path: Path) -> None:
    script = [ErrorReply(500, "boom")] * 4
    session, outcomes, _ = _run(script, ["hi"], tmp_path, retry=RetryPolicy(max_retries=3, initial_delay_ms=1))
    assert outcomes[0].reason["kind"] == "error"
    assert outcomes[0].reason["error"]["code"] == "SERVER"
    assert [e["data"]["retry"] for e in session.events if e["type"] == "llm/retry"] == [1, 2, 3]
    assert _types(session)[-2:] == ["step/end", "turn/end"]
    # The log is still valid and loadable: a seeded replay derives the same messages.
    assert al.Session.create("copy", list(session.events)).derive_messages() == session.derive_messages()


def test_loop__steering_enters_the_next_step_and_followups_start_turns(tmp_path: Path) -> None:
    script = [
        Reply(text="Listing.", tool_calls=[ScriptedCall("list_dir", {"path": "."}, id="c1")]),
        Reply(text="Done with one."),
        Reply(text="Second turn."),
    ]
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> tuple[al.Session, Any]:
        with DemoModelServer(script) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            session = store.create("s", meta={"cwd": str(tmp_path)})
            agent = Agent(
                session,
                provider,
                AgentOptions(provider="p", model="m", cwd=tmp_path),
                tools=builtin_registry(),
                store=store,
            )
            agent.followup("first")
            agent.followup("second")
            agent.steer("also check the size")
            outcomes = await agent.run()
            return session, outcomes

    session, outcomes = asyncio.run(main())
    assert [o.turn for o in outcomes] == [1, 2]
    users = [e for e in session.events if e["type"] == "user/message"]
    # the steering message was claimed with the first turn's prompt, at the first step boundary
    assert [u["data"]["content"][0]["text"] for u in users] == ["also check the size", "first", "second"]


def test_loop__resumed_agent_continues_turn_numbers_and_logs_a_resume_header(tmp_path: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))

    async def first() -> None:
        with DemoModelServer([Reply(text="one")]) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            session = store.create("r", meta={"cwd": str(tmp_path)})
            agent = Agent(session, provider, AgentOptions(provider="p", model="m"), store=store)
            agent.followup("hello")
            await agent.run()
            store.dispose(session)

    asyncio.run(first())
    resumed = coordinator.resume("r")

    async def second() -> None:
        with DemoModelServer([Reply(text="two")]) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            agent = Agent(resumed, provider, AgentOptions(provider="p", model="m"), store=store)
            agent.followup("again")
            outcomes = await agent.run()
            assert outcomes[0].turn == 2

    asyncio.run(second())
    reasons = [e["data"]["reason"] for e in resumed.events if e["type"] == "request/header"]
    assert reasons == ["initial", "resume"]
    coordinator.close()
    reloaded = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path / "store")))
    assert [m["role"] for m in reloaded.view("r").derive_messages()] == ["user", "assistant", "user", "assistant"]
    reloaded.close()


def test_loop__cancel_mid_stream_keeps_the_streamed_text_and_aborts_the_turn(tmp_path: Path) -> None:
    store = al.SessionStore()

    async def main() -> tuple[al.Session, Any]:
        slow = Reply(text="a fairly long answer that streams slowly", chunk_chars=4, delay_s=0.02)
        with DemoModelServer([slow]) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            session = store.create("c", meta={"cwd": str(tmp_path)})
            agent = Agent(session, provider, AgentOptions(provider="p", model="m"), store=store)
            agent.followup("talk")
            task = asyncio.create_task(agent.run())
            while not any(
                e["type"] == "assistant/chunk" and e["data"]["chunk"]["type"] == "text-delta" for e in session.events
            ):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            agent.cancel()
            return session, await task

    session, outcomes = asyncio.run(main())
    assert outcomes[0].reason == {"kind": "aborted", "reason": {"kind": "user"}}
    interrupted = [e for e in session.events if e["type"] == "assistant/message"]
    assert len(interrupted) == 1 and interrupted[0]["data"]["interrupted"] is True
    assert interrupted[0]["data"]["message"]["content"][0]["text"]
    assert _types(session)[-1] == "turn/end"


def test_loop__reasoning_is_kept_and_sent_back_to_the_model(tmp_path: Path) -> None:
    script = [
        Reply(
            reasoning="Think first.", text="Checking.", tool_calls=[ScriptedCall("list_dir", {"path": "."}, id="c1")]
        ),
        Reply(text="Done."),
    ]
    session, outcomes, requests = _run(script, ["look around"], tmp_path)
    assert outcomes[0].reason == {"kind": "completed"}
    first_answer = session.derive_messages()[1]
    assert [block["type"] for block in first_answer["content"]] == ["reasoning", "text", "tool-call"]
    assistant_sent = next(m for m in requests[1].body["messages"] if m["role"] == "assistant")
    assert assistant_sent["reasoning_content"] == "Think first."


def _headers(session: al.Session) -> list[dict[str, Any]]:
    return [al.thaw(e["data"]) for e in session.events if e["type"] == "request/header"]


def test_loop__adapter_defaults_are_flagged_and_rematerialised_not_frozen(tmp_path: Path) -> None:
    defaults = {"reasoningEffort": "high", "maxTokens": 256000}
    script = [
        Reply(tool_calls=[ScriptedCall("list_dir", {"path": "."}, id="c1")]),
        Reply(text="done"),
    ]
    session, _, requests = _run(script, ["go"], tmp_path, adapter_defaults=defaults)
    headers = _headers(session)
    assert len(headers) == 1  # the second step proposes the same header: no "change"
    assert headers[0]["header"]["config"] == {
        "provider": "deepseek",
        "model": "demo-model",
        "reasoningEffort": "high",
        "maxTokens": 256000,
    }
    assert headers[0]["header"]["adapterDefaults"] == {"reasoningEffort": True, "maxTokens": True}
    assert requests[0].body["max_tokens"] == 256000
    # The flagged fields are re-derived by a new route instead of being inherited.
    agent = Agent(session, None, AgentOptions(provider="other", model="x"))  # type: ignore[arg-type]
    assert agent._proposed_config(session.request_header()) == {"provider": "other", "model": "x"}


def test_loop__an_explicit_effort_is_restored_for_the_same_route_on_resume(tmp_path: Path) -> None:
    session, _, _ = _run([Reply(text="one")], ["go"], tmp_path, reasoning_effort="low")
    same = Agent(session, None, AgentOptions(provider="deepseek", model="demo-model"))  # type: ignore[arg-type]
    assert same._proposed_config(session.request_header())["reasoningEffort"] == "low"
    other = Agent(session, None, AgentOptions(provider="deepseek", model="another"))  # type: ignore[arg-type]
    assert "reasoningEffort" not in other._proposed_config(session.request_header())


def test_loop__injected_context_waits_for_a_waking_boundary(tmp_path: Path) -> None:
    store = al.SessionStore()

    async def main() -> tuple[al.Session, Any, Any, Any]:
        with DemoModelServer([Reply(text="noted")]) as server:
            provider = OpenAICompatibleProvider(base_url=server.base_url, api_key="t", model="m")
            session = store.create("i", meta={"cwd": str(tmp_path)})
            agent = Agent(session, provider, AgentOptions(provider="p", model="m"), store=store)
            agent.inject("background: the user prefers short answers")
            idle = await agent.run()  # nothing woke the agent: no turn
            agent.followup("hello")
            busy = await agent.run()
            return session, idle, busy, server.requests

    _session, idle, busy, requests = asyncio.run(main())
    assert idle == []
    assert [o.turn for o in busy] == [1]
    sent = [m["content"] for m in requests[0].body["messages"] if m["role"] == "user"]
    assert sent == ["background: the user prefers short answers", "hello"]


# Issue 7, defect 6 (the agent checkpoints through its session's store unless told not to) and
# defect 7 (``max_steps`` per turn, ending with a typed error the model-facing history can carry).


def _stored_types(root: Path, session_id: str) -> list[str]:
    backend = JsonlBackend(str(root))
    try:
        stored = backend.load_stored(session_id)
    finally:
        backend.close()
    return [] if stored is None else [e["type"] for e in stored.events]


def test_agent_checkpoints_through_the_sessions_store_without_store_argument(tmp_path: Path) -> None:
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


def test_a_non_durable_agent_is_an_explicit_choice() -> None:
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


def _loop_run(
    tmp_path: Path, script: list[Any], prompts: list[str], *, tools: Any = None, **options: Any
) -> tuple[al.Session, Any, list[Any]]:
    """Run ``prompts`` through an agent over the scripted model; the session, the outcomes and the
    requests the model received. ``tools`` defaults to the built-in registry."""
    (tmp_path / "n.txt").write_text("42\n")
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> tuple[al.Session, Any, list[Any]]:
        with DemoModelServer(script) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="k", model="m") as provider:
                session = store.create("steps")
                agent = Agent(
                    session,
                    provider,
                    AgentOptions(provider="p", model="m", cwd=tmp_path, **options),
                    tools=builtin_registry() if tools is None else tools,
                )
                outcomes = []
                for prompt in prompts:
                    agent.followup(prompt)
                    outcomes.extend(await agent.run())
                return session, outcomes, list(server.requests)

    return asyncio.run(main())


def test_a_model_that_always_calls_a_tool_stops_at_the_default_max_steps(tmp_path: Path) -> None:
    assert DEFAULT_MAX_STEPS == 50
    session, outcomes, requests = _loop_run(tmp_path, _always_a_tool(60), ["loop forever"])
    assert len(requests) == 50
    [outcome] = outcomes
    assert outcome.reason["kind"] == "error"
    assert outcome.reason["error"]["code"] == "MAX_STEPS_EXCEEDED"
    assert "50" in outcome.reason["error"]["message"] and "--max-steps" in outcome.reason["error"]["message"]
    assert outcome.error is not None and outcome.error.code == "MAX_STEPS_EXCEEDED"  # type: ignore[attr-defined]
    assert [e["type"] for e in session.events].count("step/start") == 50
    assert tool_pairing_problems(session.derive_messages()) == []


def test_after_the_step_limit_a_new_prompt_continues_the_session(tmp_path: Path) -> None:
    script = [*_always_a_tool(2), Reply(text="Stopping, as asked.")]
    session, outcomes, requests = _loop_run(tmp_path, script, ["loop", "please stop"], max_steps=2)
    assert [o.reason.get("error", {}).get("code", o.reason["kind"]) for o in outcomes] == [
        "MAX_STEPS_EXCEEDED",
        "completed",
    ]
    assert len(requests) == 3
    assert session.derive_messages()[-1]["content"] == [{"type": "text", "text": "Stopping, as asked."}]


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "5"])
def test_max_steps_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidAgentOptionError) as excinfo:
        AgentOptions(provider="p", model="m", max_steps=bad)
    assert excinfo.value.code == "INVALID_AGENT_OPTION"


def test_a_plain_list_of_tools_is_offered_like_a_registry(tmp_path: Path) -> None:
    """``tools=[...]`` is the natural spelling; it used to fail mid-turn with an AttributeError."""
    script = [Reply(tool_calls=[ScriptedCall("read_file", {"path": "n.txt"}, id="c1")]), Reply(text="42.")]
    session, outcomes, requests = _loop_run(tmp_path, script, ["read n.txt"], tools=list(builtin_registry()))
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    assert [t["function"]["name"] for t in requests[0].body["tools"]] == [
        "read_file",
        "list_dir",
        "write_file",
        "run_command",
    ]
    result = next(e for e in session.events if e["type"] == "tool/result")
    assert "42" in str(result["data"])


@pytest.mark.parametrize("bad", ["read_file", 42, {"read_file": None}])
def test_tools_of_another_type_are_refused_when_the_agent_is_built(bad: Any) -> None:
    session = al.SessionStore().create("s")
    with pytest.raises(al.ArgumentTypeError, match="tools=") as excinfo:
        Agent(session, None, AgentOptions(provider="p", model="m"), tools=bad)  # type: ignore[arg-type]
    assert excinfo.value.code == "INVALID_ARGUMENT_TYPE"
