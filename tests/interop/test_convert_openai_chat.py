"""agentlog ⇄ OpenAI chat-completions: round trips both ways, located refusals, a session's request
header, the SDK's own message types, and a real request through the ``openai`` client to the demo server."""

from __future__ import annotations

from typing import Any

import openai
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam

from agentlog.errors import ConversionError
from agentlog.interop.openai_chat import from_openai_chat, session_to_openai_chat, to_openai_chat
from agentlog.kernel import messages as m
from agentlog.kernel.events import ASSISTANT_MESSAGE, REQUEST_HEADER, TOOL_RESULT, USER_MESSAGE
from agentlog.kernel.session import Session
from agentlog.testing.demo_server import DemoModelServer, Reply, ToolCall

PROVIDER, MODEL = "prov", "mod"
SDK_TYPE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ChatCompletionMessageParam)
texts = st.text(max_size=12)
nonempty = st.text(min_size=1, max_size=12)
ids = st.text(min_size=1, max_size=8)


def strip_ids(messages: list[Any]) -> list[Any]:
    return [{k: v for k, v in dict(msg).items() if k != "id"} for msg in messages]


# --- agentlog side: what the chat format can express ------------------------------------------------

user_msgs = st.lists(texts, max_size=3).map(lambda ts: m.user_message([m.text_block(t) for t in ts]))
tool_msgs = st.builds(
    lambda i, ts: m.tool_result_message(i, [m.text_block(t) for t in ts]), ids, st.lists(texts, max_size=3)
)
assistant_msgs = st.builds(
    lambda thought, ts, calls: m.assistant_message(
        ([m.reasoning_block(thought)] if thought else [])
        + [m.text_block(t) for t in ts]
        + [m.tool_call_block(i, n, a) for i, n, a in calls],
        provider=PROVIDER,
        model=MODEL,
    ),
    st.one_of(st.none(), nonempty),
    st.lists(texts, max_size=3),
    st.lists(st.tuples(ids, nonempty, texts), max_size=3),
)
conversations = st.lists(st.one_of(user_msgs, tool_msgs, assistant_msgs), max_size=8)


@settings(max_examples=150, deadline=None)
@given(conversations, st.one_of(st.none(), texts))
def test_agentlog_to_chat_to_agentlog_is_the_identity(messages: list[Any], system: str | None) -> None:
    wire = to_openai_chat(messages, system=system)
    back = from_openai_chat(wire, provider=PROVIDER, model=MODEL)
    assert back.system == system
    assert strip_ids(back.messages) == strip_ids(messages)
    for entry in wire:  # what the SDK's own types accept (required keys, value types)
        SDK_TYPE.validate_python(entry)


# --- chat side: canonical chat messages ------------------------------------------------------------

canonical_content = st.one_of(
    st.just(""),
    nonempty,
    st.lists(texts, max_size=3)
    .filter(lambda ts: bool(ts) and not (len(ts) == 1 and ts[0]))
    .map(lambda ts: [{"type": "text", "text": t} for t in ts]),
)


def _assistant(content: Any, reasoning: str | None, calls: list[tuple[str, str, str]]) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        entry["reasoning_content"] = reasoning
    if calls:
        entry["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    return entry


chat_messages = st.one_of(
    canonical_content.map(lambda c: {"role": "user", "content": c}),
    st.builds(lambda i, c: {"role": "tool", "tool_call_id": i, "content": c}, ids, canonical_content),
    st.builds(
        _assistant,
        canonical_content,
        st.one_of(st.none(), nonempty),
        st.lists(st.tuples(ids, nonempty, texts), max_size=3),
    ),
)
chat_conversations = st.builds(
    lambda system, rest: ([{"role": "system", "content": system}] if system is not None else []) + rest,
    st.one_of(st.none(), texts),
    st.lists(chat_messages, max_size=8),
)


@settings(max_examples=150, deadline=None)
@given(chat_conversations)
def test_chat_to_agentlog_to_chat_is_the_identity(wire: list[dict[str, Any]]) -> None:
    imported = from_openai_chat(wire)
    assert to_openai_chat(imported.messages, system=imported.system) == wire


def test_imported_messages_append_to_a_session_unchanged() -> None:
    wire = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        _assistant("", "add them", [("c1", "add", '{"a": 2, "b": 2}')]),
        {"role": "tool", "tool_call_id": "c1", "content": "4"},
        _assistant("4", None, []),
    ]
    imported = from_openai_chat(wire, provider="deepseek", model="deepseek-chat")
    session = Session.create("chat-import")
    for msg in imported.messages:
        if msg["role"] == "assistant":
            session.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": msg}, {"surfaceOp": "append"})
        elif msg["source"]["kind"] == "tool":
            session.append(TOOL_RESULT, {"turn": 1, "step": 1, "message": msg}, {"surfaceOp": "append"})
        else:
            session.append(USER_MESSAGE, msg, {"surfaceOp": "append"})
    assert list(session.derive_messages()) == imported.messages
    assert to_openai_chat(session.derive_messages(), system=imported.system) == wire


def test_lossy_renderings_are_documented_choices() -> None:
    """isError, plugin sources and interleaving have no chat spelling; the rendering is still the API's."""
    plugin = m.plugin_message("ctx", plugin="p")
    failed = m.tool_result_message("c1", "boom", is_error=True)
    mixed = m.user_message([m.tool_result_block("c2", "ok"), m.text_block("and then")])
    assert to_openai_chat([plugin, failed, mixed]) == [
        {"role": "user", "content": "ctx"},
        {"role": "tool", "tool_call_id": "c1", "content": "boom"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
        {"role": "user", "content": "and then"},
    ]
    assert to_openai_chat(
        [m.assistant_message([m.reasoning_block("r"), m.text_block("t")], provider="p", model="x")],
        reasoning="omit",
    ) == [{"role": "assistant", "content": "t"}]


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "index", "path"),
    [
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}],
            0,
            "$[0].content[0]",
        ),
        ([{"role": "user", "content": "hi"}, {"role": "user", "content": "x", "name": "bob"}], 1, "$[1].name"),
        ([{"role": "assistant", "content": None, "refusal": "no"}], 0, "$[0].refusal"),
        (
            [{"role": "assistant", "content": "", "function_call": {"name": "f", "arguments": "{}"}}],
            0,
            "$[0].function_call",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}],
                }
            ],
            0,
            "$[0].tool_calls[0]",
        ),
        ([{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}], 1, "$[1]"),
        (
            [{"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
            0,
            "$[0].content",
        ),
        ([{"role": "function", "name": "f", "content": "x"}], 0, "$[0].role"),
        ([{"role": "tool", "content": "x"}], 0, "$[0].tool_call_id"),
        (["not a message"], 0, "$[0]"),
    ],
)
def test_from_refuses_what_agentlog_cannot_hold_naming_the_item(items: list[Any], index: int, path: str) -> None:
    with pytest.raises(ConversionError) as caught:
        from_openai_chat(items)
    assert caught.value.index == index and caught.value.path == path
    assert caught.value.code == "CONVERSION_UNSUPPORTED" and path in str(caught.value)


def test_to_refuses_an_image_unless_told_to_omit_it() -> None:
    image = m.image_block("att-1", "image/png", bytes=10, width=1, height=1)
    messages = [m.user_message("hi"), m.user_message([m.text_block("look"), image])]
    with pytest.raises(ConversionError) as caught:
        to_openai_chat(messages)
    assert (caught.value.index, caught.value.path) == (1, "$[1].content[1]")
    assert to_openai_chat(messages, unsupported="omit")[1] == {"role": "user", "content": "look"}


def test_to_refuses_a_foreign_shape_naming_it() -> None:
    with pytest.raises(ConversionError) as caught:
        to_openai_chat([m.user_message("ok"), {"role": "user", "content": "not blocks"}])
    assert (caught.value.index, caught.value.path) == (1, "$[1].content")
    with pytest.raises(ConversionError) as caught:
        to_openai_chat([{"role": "robot", "content": [], "source": {"kind": "user"}}])
    assert caught.value.path == "$[0].role"


# --- sessions ----------------------------------------------------------------------------------

HEADER = {
    "config": {"provider": "deepseek", "model": "deepseek-chat"},
    "system": "Be brief.",
    "tools": [
        {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        }
    ],
}


def _session() -> Session:
    session = Session.create("chat")
    session.append(REQUEST_HEADER, {"header": HEADER, "reason": "initial"})
    session.append(USER_MESSAGE, m.user_message("2+2?"), {"surfaceOp": "append"})
    return session


def test_session_body_takes_system_and_tools_from_the_request_header_and_views_see_their_past() -> None:
    session = _session()
    before = session.events[-1].seq
    call = m.assistant_message(
        [m.tool_call_block("c1", "add", '{"a":2,"b":2}')], provider="deepseek", model="deepseek-chat"
    )
    session.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": call}, {"surfaceOp": "append"})
    body = session_to_openai_chat(session)
    assert body["model"] == "deepseek-chat"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["tools"] == [{"type": "function", "function": dict(HEADER["tools"][0])}]  # type: ignore[index]
    assert len(body["messages"]) == 3
    assert session_to_openai_chat(session.at(before))["messages"] == body["messages"][:2]
    bare = Session.create("bare")
    assert session_to_openai_chat(bare) == {"messages": []}


def test_a_session_body_is_a_real_request_and_the_reply_imports_back() -> None:
    """The rendered body goes through the real ``openai`` client over HTTP; the streamed reply, assembled
    into a chat message, comes back in as an agentlog message and renders to the same wire."""
    session = _session()
    body = session_to_openai_chat(session)
    reply = Reply("", reasoning="sum", tool_calls=[ToolCall("add", {"a": 2, "b": 2}, id="call-1")])
    with DemoModelServer([reply]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test-key")
        stream = client.chat.completions.create(stream=True, **body)
        text, reasoning = "", ""
        calls: dict[int, dict[str, str]] = {}
        for chunk in stream:
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            text += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
        client.close()
        sent = server.requests[0].body
    assert sent["messages"] == body["messages"] and sent["tools"] == body["tools"]
    assistant = _assistant(text, reasoning, [(c["id"], c["name"], c["arguments"]) for c in calls.values()])
    imported = from_openai_chat([assistant], provider="deepseek", model="deepseek-chat").messages[0]
    session.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": imported}, {"surfaceOp": "append"})
    assert imported["content"][0] == m.reasoning_block("sum")
    assert imported["content"][1]["name"] == "add"
    assert session_to_openai_chat(session)["messages"][-1] == assistant
