"""The agent loop end to end: the real ``openai`` client talking HTTP to the local scripted model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions, RetryPolicy
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
