"""``agentlog.testing.ScriptedProvider``: scripted replies through the provider protocol, driving the real loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.llm import GenerateRequest, assemble, collect
from agentlog.testing import ScriptedProvider, failure_reply, text_reply, tool_call_reply


def _request() -> GenerateRequest:
    return GenerateRequest(provider="scripted", model="m", messages=[])


def test_replies_follow_the_provider_contract() -> None:
    text = assemble(text_reply("Hello there", pieces=3, usage={"inputTokens": 3, "outputTokens": 2}))
    assert text.ok and text.content == [{"type": "text", "text": "Hello there"}]
    assert text.finish == {"kind": "stop"} and text.usage == {"inputTokens": 3, "outputTokens": 2}
    calls = assemble(tool_call_reply(("call-1", "read_file", '{"path": "a"}'), text="looking"))
    assert calls.finish == {"kind": "tool-calls"}
    call = {"type": "tool-call", "id": "call-1", "name": "read_file", "arguments": '{"path": "a"}'}
    assert calls.content == [{"type": "text", "text": "looking"}, call]
    failed = assemble(failure_reply("SERVER"))
    assert not failed.ok and failed.failure is not None and failed.failure["code"] == "SERVER"


def test_streams_the_script_in_order_records_requests_and_refuses_a_call_beyond_it() -> None:
    provider = ScriptedProvider([text_reply("one"), text_reply("two")])

    async def main() -> list[Any]:
        first = await collect(provider.stream(_request()))
        second = await collect(provider.stream(_request()))
        with pytest.raises(AssertionError, match="model call 3 requested, the script has 2"):
            await collect(provider.stream(_request()))
        return [first, second]

    first, second = asyncio.run(main())
    assert first.content == [{"type": "text", "text": "one"}]
    assert second.content == [{"type": "text", "text": "two"}]
    assert len(provider.requests) == 2 and provider.remaining == 0


def test_a_set_signal_ends_the_stream_with_an_aborted_finish() -> None:
    async def main() -> Any:
        signal = asyncio.Event()
        signal.set()
        return await collect(ScriptedProvider([text_reply("never")]).stream(_request(), signal=signal))

    result = asyncio.run(main())
    assert result.finish["kind"] == "aborted"


def test_drives_the_agent_loop_through_a_tool_call(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("the answer is 42\n")
    arguments = json.dumps({"path": "notes.txt"})
    provider = ScriptedProvider([tool_call_reply(("call-1", "read_file", arguments)), text_reply("It is 42.")])
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> tuple[al.Session, Any]:
        session = store.create("s", meta={"cwd": str(tmp_path)})
        agent = Agent(
            session,
            provider,
            AgentOptions(provider="scripted", model="m", cwd=tmp_path),
            tools=builtin_registry(),
            store=store,
        )
        agent.followup("what is the answer?")
        return session, await agent.run()

    session, outcomes = asyncio.run(main())
    assert [o.reason for o in outcomes] == [{"kind": "completed"}]
    messages = session.derive_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "the answer is 42" in json.dumps(messages[2]["content"])
    assert messages[3]["content"] == [{"type": "text", "text": "It is 42."}]
    assert provider.remaining == 0
