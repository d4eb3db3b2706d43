"""The pydantic-ai adapter with a real ``pydantic_ai.Agent`` on its OpenAI chat model, talking HTTP to the
local scripted model (``DemoModelServer``), and hypothesis round trips of the two converters.

The agent is run with an ``event_stream_handler``: that makes pydantic-ai stream its requests, which is
what the demo server speaks (it always answers with server-sent events).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterable, Sequence
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent, DeferredToolRequests, ModelRetry
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import agentlog as al
from agentlog.errors import ConversionError
from agentlog.integrations.pydantic_ai import (
    from_model_messages,
    record_run,
    session_to_model_messages,
    to_model_messages,
)
from agentlog.kernel.seeds import check_message_shape
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, Reply
from agentlog.testing.demo_server import ToolCall as ScriptedCall

SYSTEM = "You are terse."


async def _drain(_ctx: Any, events: AsyncIterable[Any]) -> None:
    async for _ in events:
        pass


def _agent(server: DemoModelServer) -> Agent[None, str]:
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=server.base_url, api_key="demo"))
    agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def _types(session: al.Session) -> list[str]:
    return [event["type"] for event in session.events]


def _store() -> al.SessionStore:
    store = al.SessionStore()
    al.SessionInvariants(store).install()  # every turn/step/tool relation is checked at its append
    return store


# --- against the real agent ---------------------------------------------------------------------------


def test_history_round_trip__rebuilt_history_sends_what_pydantic_ai_sends_for_its_own(tmp_path: Path) -> None:
    root = tmp_path / "store"
    script: list[Any] = [
        Reply(reasoning="Add them.", tool_calls=[ScriptedCall("add", {"a": 1, "b": 2}, id="c1")]),
        "It is 3.",
        "Still 3.",  # the run from the agentlog-rebuilt history
        "Still 3.",  # the same run from pydantic-ai's own history (the control)
    ]

    async def main() -> tuple[Any, Any, list[Any]]:
        with DemoModelServer(script) as server:
            agent = _agent(server)
            first = await agent.run("What is 1+2?", event_stream_handler=_drain)

            store = _store()
            coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
            try:
                session = store.create("pai")
                record_run(session, first)
                store.flush(session)
            finally:
                coordinator.close()

            reloaded_store = _store()
            coordinator = PersistenceCoordinator(reloaded_store, JsonlBackend(str(root)))
            try:
                reloaded = coordinator.resume("pai")  # from the files, not from memory
                history = session_to_model_messages(reloaded)
                second = await agent.run("And now?", message_history=history, event_stream_handler=_drain)
                record_run(reloaded, second)
                reloaded_store.flush(reloaded)
                derived = list(reloaded.derive_messages())
                header = reloaded.request_header()
                headers = [e["data"] for e in reloaded.events if e["type"] == "request/header"]
                assert [h["reason"] for h in headers] == ["initial", "resume"]
                assert all(h["header"]["system"] == SYSTEM for h in headers)  # the second run kept the prompt
                types = _types(reloaded)
            finally:
                coordinator.close()
            await agent.run("And now?", message_history=first.all_messages(), event_stream_handler=_drain)
            return (derived, header, types), first, server.requests

    (derived, header, types), first, requests = asyncio.run(main())
    rebuilt, control = requests[2].body, requests[3].body
    assert rebuilt["messages"] == control["messages"]
    assert rebuilt["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What is 1+2?"},
        {
            "role": "assistant",
            "reasoning_content": "Add them.",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
        {"role": "assistant", "content": "It is 3."},
        {"role": "user", "content": "And now?"},
    ]
    assert rebuilt["tools"] == control["tools"]

    assert header["system"] == SYSTEM and header["config"] == {"provider": "openai", "model": "demo-model"}
    assert [m["role"] for m in derived] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert derived[1]["content"][0] == {"type": "reasoning", "text": "Add them."}
    assert derived[1]["content"][1] == {"type": "tool-call", "id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'}
    assert derived[2]["content"] == [
        {"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "3"}]}
    ]
    assert derived[5]["content"] == [{"type": "text", "text": "Still 3."}]
    assert types.count("turn/start") == 2 and types[-1] == "turn/end"
    assert types.count("assistant/chunk") > 0  # recorded replies replay like streamed ones

    # The log gives pydantic-ai its own history back: same model-facing content, same ids.
    again = from_model_messages(first.all_messages())
    assert again.system == SYSTEM
    assert [m["content"] for m in again.messages] == [m["content"] for m in derived[:4]]


def test_history_round_trip__an_agent_with_instructions_gets_its_prompt_once() -> None:
    async def main() -> tuple[al.Session, list[Any]]:
        with DemoModelServer(["One.", "Two.", "Two."]) as server:
            model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=server.base_url, api_key="demo"))
            agent: Agent[None, str] = Agent(model, instructions=SYSTEM)
            first = await agent.run("Count.", event_stream_handler=_drain)
            session = _store().create("instr")
            record_run(session, first)
            history = session_to_model_messages(session, system_as="instructions")
            second = await agent.run("More.", message_history=history, event_stream_handler=_drain)
            record_run(session, second)
            await agent.run("More.", message_history=first.all_messages(), event_stream_handler=_drain)
            return session, server.requests

    session, requests = asyncio.run(main())
    assert (
        requests[1].body["messages"]
        == requests[2].body["messages"]
        == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Count."},
            {"role": "assistant", "content": "One."},
            {"role": "user", "content": "More."},
        ]
    )
    assert session.request_header()["system"] == SYSTEM  # the instructions the model saw
    assert [m["content"][0]["text"] for m in session.derive_messages()] == ["Count.", "One.", "More.", "Two."]


def test_record_run__keeps_each_requests_instructions_in_the_request_header() -> None:
    calls = iter(["first rules", "second rules"])

    async def main() -> al.Session:
        with DemoModelServer([Reply(tool_calls=[ScriptedCall("add", {"a": 1, "b": 1}, id="k1")]), "Two."]) as server:
            model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=server.base_url, api_key="demo"))
            agent: Agent[None, str] = Agent(model)

            @agent.instructions
            def rules() -> str:
                return next(calls)  # dynamic instructions: each request has its own

            @agent.tool_plain
            def add(a: int, b: int) -> int:
                """Add two numbers."""
                return a + b

            result = await agent.run("1+1?", event_stream_handler=_drain)
            with pytest.raises(ConversionError) as caught:
                from_model_messages(result.new_messages())  # one system prompt cannot hold both
            assert caught.value.path == "$[2].instructions"
            session = _store().create("rules")
            record_run(session, result)
            return session

    session = asyncio.run(main())
    headers = [e["data"] for e in session.events if e["type"] == "request/header"]
    assert [(h["reason"], h["header"]["system"]) for h in headers] == [
        ("initial", "first rules"),
        ("change", "second rules"),
    ]


def test_history_round_trip__output_retry_feedback_reaches_the_model_as_pydantic_ai_frames_it() -> None:
    async def main() -> tuple[al.Session, list[Any]]:
        with DemoModelServer(["bad", "good", "fine", "fine"]) as server:
            agent = _agent(server)

            @agent.output_validator
            def no_bad(output: str) -> str:
                if output == "bad":
                    raise ModelRetry("say something else")
                return output

            first = await agent.run("Say something.", event_stream_handler=_drain)
            session = _store().create("feedback")
            record_run(session, first)
            await agent.run("Again.", message_history=session_to_model_messages(session), event_stream_handler=_drain)
            await agent.run("Again.", message_history=first.all_messages(), event_stream_handler=_drain)
            return session, server.requests

    session, requests = asyncio.run(main())
    assert requests[2].body["messages"] == requests[3].body["messages"]
    feedback = session.derive_messages()[2]
    assert feedback["source"] == {"kind": "plugin", "plugin": "pydantic-ai", "form": "retry-feedback/model_retry"}
    assert feedback["content"] == [{"type": "text", "text": "say something else"}]


def test_history_round_trip__a_tool_call_with_invalid_arguments_is_retried_as_pydantic_ai_sent_it() -> None:
    script: list[Any] = [
        Reply(tool_calls=[ScriptedCall("add", {"a": "one", "b": 2}, id="bad")]),
        Reply(tool_calls=[ScriptedCall("add", {"a": 1, "b": 2}, id="good")]),
        "3.",
        "Yes.",
        "Yes.",
    ]

    async def main() -> tuple[al.Session, list[Any]]:
        with DemoModelServer(script) as server:
            agent = _agent(server)
            first = await agent.run("1+2?", event_stream_handler=_drain)
            session = _store().create("invalid-args")
            record_run(session, first)
            await agent.run("Sure?", message_history=session_to_model_messages(session), event_stream_handler=_drain)
            await agent.run("Sure?", message_history=first.all_messages(), event_stream_handler=_drain)
            return session, server.requests

    session, requests = asyncio.run(main())
    assert requests[3].body["messages"] == requests[4].body["messages"]
    refused = session.derive_messages()[2]["content"][0]
    assert refused["isError"] is True and json.loads(refused["content"][0]["text"])[0]["loc"] == ["a"]


def test_tool_call__recorded_as_the_loops_turn_step_and_tool_protocol() -> None:
    attempts: list[int] = []
    script: list[Any] = [
        Reply(tool_calls=[ScriptedCall("add", {"a": 2, "b": 2}, id="a1"), ScriptedCall("flaky", {}, id="f1")]),
        Reply(tool_calls=[ScriptedCall("flaky", {}, id="f2")]),
        "Four, and flaky worked.",
    ]

    async def main() -> tuple[al.Session, Any]:
        with DemoModelServer(script) as server:
            agent = _agent(server)

            @agent.tool_plain
            def flaky() -> str:
                """Works on the second try."""
                attempts.append(1)
                if len(attempts) == 1:
                    raise ModelRetry("try again")
                return "ok"

            result = await agent.run("Add 2 and 2, then call flaky.", event_stream_handler=_drain)
            session = _store().create("tools")
            record_run(session, result)
            return session, result

    session, result = asyncio.run(main())
    protocol = [t for t in _types(session) if t not in ("assistant/chunk", "request/header", "request/context")]
    assert protocol == [
        "turn/start",
        "step/start",
        "user/message",
        "assistant/message",
        "tool/call",
        "tool/result",
        "tool/call",
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
    assert _types(session).count("request/header") == 1  # written before the first request, then on change
    events = list(session.events)
    calls = {e["data"]["callId"]: e.seq for e in events if e["type"] == "tool/call"}
    for event in events:
        if event["type"] == "tool/result":
            call_id = event["data"]["message"]["source"]["callId"]
            assert list(event["sourceEventSeqs"]) == [calls[call_id]]
    results = {
        m["source"]["callId"]: m["content"][0] for m in session.derive_messages() if m["source"]["kind"] == "tool"
    }
    assert results["a1"] == {"type": "tool-result", "toolCallId": "a1", "content": [{"type": "text", "text": "4"}]}
    assert results["f1"]["isError"] is True and "try again" in results["f1"]["content"][0]["text"]
    assert results["f2"] == {"type": "tool-result", "toolCallId": "f2", "content": [{"type": "text", "text": "ok"}]}
    usage = [e["data"].get("usage") for e in events if e["type"] == "assistant/message"]
    assert all(u is not None and u["inputTokens"] > 0 for u in usage)
    # The recorded turn derives the same model-facing conversation pydantic-ai holds.
    assert [m["content"] for m in session.derive_messages()] == [
        m["content"] for m in from_model_messages(result.new_messages()).messages
    ]


def test_record_run__refuses_a_run_it_cannot_represent_and_appends_nothing() -> None:
    async def main() -> Any:
        with DemoModelServer(["A cat."]) as server:
            agent = _agent(server)
            prompt = ["What is this?", ImageUrl(url="https://example.com/cat.png")]
            return await agent.run(prompt, event_stream_handler=_drain)

    result = asyncio.run(main())
    session = _store().create("refused")
    session.append("turn/start", {"turn": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    before = list(session.events)
    with pytest.raises(ConversionError) as caught:
        record_run(session, result)
    assert caught.value.index == 0 and caught.value.path == "$[0].parts[1].content[1]"
    assert "image-url" in str(caught.value)
    assert list(session.events) == before


def test_record_run__refuses_a_run_that_ends_on_a_deferred_tool_call() -> None:
    async def main() -> Any:
        with DemoModelServer([Reply(tool_calls=[ScriptedCall("delete", {"path": "/tmp/x"}, id="d1")])]) as server:
            model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=server.base_url, api_key="demo"))
            agent: Agent[None, str | DeferredToolRequests] = Agent(model, output_type=[str, DeferredToolRequests])

            @agent.tool_plain(requires_approval=True)
            def delete(path: str) -> str:
                """Delete a file (needs approval)."""
                return f"deleted {path}"

            return await agent.run("Delete /tmp/x.", event_stream_handler=_drain)

    result = asyncio.run(main())
    assert isinstance(result.output, DeferredToolRequests)
    session = _store().create("deferred")
    with pytest.raises(ConversionError) as caught:
        record_run(session, result)
    assert caught.value.index == 1 and caught.value.path == "$[1].parts[0]" and "'d1'" in str(caught.value)
    assert len(session.events) == 0
    # The conversation itself converts: the call waits for its approval in pydantic-ai, not in the log.
    assert from_model_messages(result.new_messages()).messages[-1]["content"][0]["id"] == "d1"


# --- refusals -------------------------------------------------------------------------------------------


def test_from_model_messages__refuses_what_agentlog_cannot_hold() -> None:
    mid_system = [
        ModelRequest(parts=[UserPromptPart("hi")]),
        ModelResponse(parts=[TextPart("hello")], model_name="m", provider_name="p"),
        ModelRequest(parts=[SystemPromptPart("now be loud"), UserPromptPart("again")]),
    ]
    with pytest.raises(ConversionError) as caught:
        from_model_messages(mid_system)
    assert (caught.value.index, caught.value.path) == (2, "$[2].parts[0]")

    two_systems = [ModelRequest(parts=[SystemPromptPart("a"), SystemPromptPart("b"), UserPromptPart("hi")])]
    with pytest.raises(ConversionError) as caught:
        from_model_messages(two_systems)
    assert caught.value.path == "$[0].parts[1]"


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_from_model_messages__reads_the_deprecated_retry_prompt_part_as_pydantic_ai_does() -> None:
    from pydantic_ai.messages import RetryPromptPart

    history = [
        ModelRequest(parts=[UserPromptPart("hi")]),
        ModelResponse(parts=[ToolCallPart("lookup", "{}", tool_call_id="c")], model_name="m", provider_name="p"),
        ModelRequest(parts=[RetryPromptPart("bad args", tool_name="lookup", tool_call_id="c"), RetryPromptPart("no")]),
    ]
    call_retry, feedback = from_model_messages(history).messages[2:]
    assert call_retry["content"] == [
        {"type": "tool-result", "toolCallId": "c", "content": [{"type": "text", "text": "bad args"}], "isError": True}
    ]
    assert feedback["source"] == {"kind": "plugin", "plugin": "pydantic-ai", "form": "retry-feedback/model_retry"}
    rebuilt = to_model_messages(from_model_messages(history).messages)[-1]
    assert isinstance(rebuilt, ModelRequest)
    assert [type(p).__name__ for p in rebuilt.parts] == ["ToolReturnPart", "RetryFeedbackPart"]


def test_to_model_messages__refuses_what_pydantic_ai_cannot_hold() -> None:
    image = al.user_message([al.image_block("att-1", "image/png", bytes=10, width=1, height=1)])
    with pytest.raises(ConversionError) as caught:
        to_model_messages([image])
    assert (caught.value.index, caught.value.path) == (0, "$[0].content[0]")

    orphan = al.tool_result_message("nowhere", "result")
    with pytest.raises(ConversionError) as caught:
        to_model_messages([al.user_message("hi"), orphan])
    assert (caught.value.index, caught.value.path) == (1, "$[1].content[0].toolCallId")


# --- hypothesis: agentlog -> pydantic-ai -> agentlog is exact ---------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_name = st.text(st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=8)
_json_leaf = st.none() | st.booleans() | st.integers(-1000, 1000) | _text
_json = st.recursive(
    _json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(_name.filter(lambda k: k != "pydanticAi"), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def agentlog_conversations(draw: st.DrawFn) -> tuple[str | None, list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    open_calls: list[str] = []
    ids = iter(range(10_000))
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["user", "assistant", "tool"] if open_calls else ["user", "assistant"]))
        mid = f"m{next(ids)}"
        if kind == "user":
            source = draw(
                st.sampled_from(
                    [
                        {"kind": "user"},
                        {"kind": "plugin", "plugin": "memory"},
                        {"kind": "plugin", "plugin": "pydantic-ai", "form": "retry-feedback"},
                        {"kind": "plugin", "plugin": "pydantic-ai", "form": "retry-feedback/model_retry"},
                        {"kind": "plugin", "plugin": "pydantic-ai", "form": "retry-feedback/validation_error/json"},
                    ]
                )
            )
            texts = draw(st.lists(_text, max_size=3))
            if source.get("form", "").endswith("/json"):
                detail = st.fixed_dictionaries(
                    {
                        "type": _name,
                        "loc": st.lists(_name | st.integers(0, 9), max_size=2),
                        "msg": _text,
                        "input": _json,
                    }
                )
                errors = draw(st.lists(detail | st.dictionaries(_name, _json, max_size=2), max_size=2))
                texts = [pydantic_core.to_json(errors).decode()]  # canonical or not: both round trip
            messages.append(al.user_message([al.text_block(t) for t in texts], id=mid, source=source))
        elif kind == "assistant":
            blocks: list[dict[str, Any]] = []
            extras: list[dict[str, Any] | None] = []
            for _ in range(draw(st.integers(0, 4))):
                block_kind = draw(st.sampled_from(["text", "reasoning", "tool-call"]))
                extra: dict[str, Any] | None = None
                if draw(st.booleans()):
                    extra = {"provider_name": draw(_name)}
                    if draw(st.booleans()):
                        extra["id"] = draw(_name)
                    if block_kind == "reasoning" and draw(st.booleans()):
                        extra["signature"] = draw(_text)
                    if draw(st.booleans()):
                        extra["provider_details"] = draw(st.dictionaries(_name, _json, max_size=2))
                extras.append(extra)
                if block_kind == "text":
                    blocks.append(al.text_block(draw(_text)))
                elif block_kind == "reasoning":
                    blocks.append(al.reasoning_block(draw(_text)))
                else:
                    call_id = f"call{next(ids)}"
                    open_calls.append(call_id)
                    blocks.append(al.tool_call_block(call_id, draw(_name), draw(_text)))
            replay: Any = None
            if any(extras):
                replay = {"pydanticAi": {"parts": extras}}
            elif draw(st.booleans()):
                replay = draw(_json)
            messages.append(
                al.assistant_message(blocks, provider=draw(_name), model=draw(_name), id=mid, replay_state=replay)
            )
        else:
            call_id = draw(st.sampled_from(open_calls))
            open_calls.remove(call_id)
            texts = draw(st.lists(_text, max_size=2))
            is_error = draw(st.sampled_from([None, True, False]))
            if is_error and draw(st.booleans()):  # argument validation errors, as from_model_messages writes them
                details = [{"type": "missing", "loc": [draw(_name)], "msg": draw(_text), "input": draw(_json)}]
                texts = [pydantic_core.to_json(details).decode()]
            messages.append(
                al.tool_result_message(call_id, [al.text_block(t) for t in texts], is_error=is_error, id=mid)
            )
    system = draw(st.none() | _text)
    return system, messages


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agentlog_conversations(), st.sampled_from(["part", "instructions"]))
def test_property__agentlog_to_pydantic_ai_and_back_is_exact(
    conversation: tuple[str | None, list[Any]], system_as: Any
) -> None:
    system, messages = conversation
    model_messages = to_model_messages(messages, system=system, system_as=system_as)
    back = from_model_messages(model_messages)
    assert back.system == system
    assert back.messages == messages
    # ... and it survives pydantic-ai's own JSON serialization (how pydantic-ai users store histories).
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    stored = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(model_messages))
    assert from_model_messages(stored).messages == messages


# --- hypothesis: pydantic-ai -> agentlog -> pydantic-ai keeps every model-facing field ---------------------


@st.composite
def pydantic_histories(draw: st.DrawFn) -> list[ModelMessage]:
    history: list[ModelMessage] = []
    ids = iter(range(10_000))
    open_calls: list[tuple[str, str]] = []
    for turn in range(draw(st.integers(1, 4))):
        parts: list[Any] = []
        if turn == 0 and draw(st.booleans()):
            parts.append(SystemPromptPart(draw(_text)))
        for call_id, name in open_calls:
            content: Any = draw(_text | st.lists(_text, max_size=2))
            outcome = draw(st.sampled_from(["success", "failed", "retried"]))
            if outcome == "retried":  # pydantic-ai retries with a message or argument validation errors
                content = (
                    draw(_text)
                    if draw(st.booleans())
                    else [{"type": "int_parsing", "loc": [draw(_name)], "msg": draw(_text), "input": draw(_json)}]
                )
            parts.append(ToolReturnPart(tool_name=name, content=content, tool_call_id=call_id, outcome=outcome))
        open_calls = []
        if turn > 0 and draw(st.booleans()):
            cause = draw(st.sampled_from(["model_retry", "no_output", "validation_error"]))
            content: Any = (
                draw(_text)
                if cause != "validation_error"
                else [{"type": "missing", "loc": ("x",), "msg": "Field required", "input": {}}]
            )
            parts.append(RetryFeedbackPart(content=content, retry=RetryInfo(cause=cause)))
        if not parts or draw(st.booleans()):
            parts.append(UserPromptPart(draw(_text | st.lists(_text, max_size=3))))
        history.append(ModelRequest(parts=parts))
        if turn > 0 and not draw(st.booleans()):
            break
        response_parts: list[Any] = []
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from(["text", "thinking", "call"]))
            if kind == "text":
                response_parts.append(TextPart(draw(_text)))
            elif kind == "thinking":
                signed = draw(st.booleans())
                response_parts.append(
                    ThinkingPart(
                        draw(_text),
                        id="reasoning_content" if signed else None,
                        signature=draw(_text) if signed else None,
                        provider_name="openai" if signed else None,
                    )
                )
            else:
                call_id, name = f"c{next(ids)}", draw(_name)
                args: Any = draw(st.dictionaries(_name, _json_leaf, max_size=2) | st.just('{"x": 1}'))
                response_parts.append(ToolCallPart(tool_name=name, args=args, tool_call_id=call_id))
                open_calls.append((call_id, name))
        history.append(ModelResponse(parts=response_parts, model_name=draw(_name), provider_name=draw(_name)))
    if open_calls:  # close the history with the last response's returns
        history.append(
            ModelRequest(parts=[ToolReturnPart(tool_name=n, content="done", tool_call_id=c) for c, n in open_calls])
        )
    return history


def _seen(history: Sequence[ModelMessage]) -> list[Any]:
    """The model-facing fields of a history (what a provider is sent), normalised where forms are equal."""

    def texts(content: Any) -> list[str]:
        return [content] if isinstance(content, str) else list(content)

    out: list[Any] = []
    for message in history:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    out.append(("system", part.content))
                elif isinstance(part, UserPromptPart):
                    out.append(("user", texts(part.content)))
                elif isinstance(part, RetryFeedbackPart):
                    details = pydantic_core.to_json(part.content).decode()  # a tuple loc is a JSON list
                    out.append(("feedback", part.retry.cause, details, part.model_response()))
                else:
                    assert isinstance(part, ToolReturnPart)
                    error = part.outcome in ("failed", "retried")
                    out.append(("return", part.tool_name, part.tool_call_id, part.model_response_str(), error))
        else:
            parts: list[Any] = []
            for part in message.parts:
                if isinstance(part, TextPart):
                    parts.append(("text", part.content, part.id, part.provider_name))
                elif isinstance(part, ThinkingPart):
                    parts.append(("thinking", part.content, part.id, part.signature, part.provider_name))
                else:
                    assert isinstance(part, ToolCallPart)
                    parts.append(("call", part.tool_name, part.tool_call_id, part.args_as_dict()))
            out.append(("response", message.model_name, message.provider_name, parts))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pydantic_histories())
def test_property__pydantic_ai_to_agentlog_and_back_keeps_what_the_model_sees(history: list[ModelMessage]) -> None:
    imported = from_model_messages(history)
    for message in imported.messages:  # every message is one the session would accept
        etype = "assistant/message" if message["role"] == "assistant" else "user/message"
        if message["source"]["kind"] == "tool":
            etype = "tool/result"
        data = message if etype == "user/message" else {"turn": 1, "step": 1, "message": message}
        check_message_shape(etype, data, "converted", ConversionError)
    rebuilt = to_model_messages(imported.messages, system=imported.system)
    assert _seen(rebuilt) == _seen(history)
    assert json.loads(json.dumps(imported.messages)) == imported.messages  # plain JSON, as the log stores it
