"""agentlog ⇄ OpenAI Responses input items: round trips both ways, located refusals, a session's
request header, and the SDK's own input-item types."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseInputItemParam

from agentlog.errors import ConversionError
from agentlog.interop.openai_chat import from_openai_chat
from agentlog.interop.openai_responses import (
    from_openai_responses,
    session_to_openai_responses,
    to_openai_responses,
)
from agentlog.kernel import messages as m
from agentlog.kernel.events import ASSISTANT_MESSAGE, REQUEST_HEADER, USER_MESSAGE
from agentlog.kernel.session import Session

PROVIDER, MODEL = "prov", "mod"
SDK_TYPE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseInputItemParam)
texts = st.text(max_size=12)
ids = st.text(min_size=1, max_size=8)


def strip_ids(messages: list[Any]) -> list[Any]:
    return [{k: v for k, v in dict(msg).items() if k != "id"} for msg in messages]


# --- agentlog side ---------------------------------------------------------------------------------

blocks = st.one_of(
    texts.map(m.text_block),
    texts.map(m.reasoning_block),
    st.builds(m.tool_call_block, ids, ids, texts),
)
user_msgs = st.lists(texts, max_size=3).map(lambda ts: m.user_message([m.text_block(t) for t in ts]))
tool_msgs = st.builds(
    lambda i, ts: m.tool_result_message(i, [m.text_block(t) for t in ts]), ids, st.lists(texts, max_size=3)
)
assistant_msgs = st.lists(blocks, min_size=1, max_size=5).map(
    lambda bs: m.assistant_message(bs, provider=PROVIDER, model=MODEL)
)


def no_adjacent_assistants(messages: list[Any]) -> list[Any]:
    """Two assistant messages in a row are one run of items in this format (its only blind spot)."""
    out: list[Any] = []
    for msg in messages:
        if not (out and out[-1]["role"] == "assistant" and msg["role"] == "assistant"):
            out.append(msg)
    return out


conversations = st.lists(st.one_of(user_msgs, tool_msgs, assistant_msgs), max_size=8).map(no_adjacent_assistants)


@settings(max_examples=150, deadline=None)
@given(conversations, st.one_of(st.none(), texts))
def test_agentlog_to_responses_to_agentlog_is_the_identity(messages: list[Any], system: str | None) -> None:
    items = to_openai_responses(messages, system=system, reasoning="item")
    back = from_openai_responses(items, provider=PROVIDER, model=MODEL)
    assert back.system == system
    assert strip_ids(back.messages) == strip_ids(messages)


@settings(max_examples=60, deadline=None)
@given(conversations)
def test_the_default_rendering_is_what_the_sdk_types_accept(messages: list[Any]) -> None:
    for item in to_openai_responses(messages, system="s"):
        assert item.get("type") != "reasoning"
        SDK_TYPE.validate_python(item)


# --- Responses side: canonical input items -----------------------------------------------------------


def _input_text(ts: list[str]) -> list[dict[str, Any]]:
    return [{"type": "input_text", "text": t} for t in ts]


user_items = st.lists(texts, max_size=3).map(lambda ts: {"type": "message", "role": "user", "content": _input_text(ts)})
output_items = st.builds(
    lambda i, ts: {"type": "function_call_output", "call_id": i, "output": ts[0] if len(ts) == 1 else _input_text(ts)},
    ids,
    st.lists(texts, max_size=3),
)
assistant_side = st.one_of(
    texts.map(lambda t: {"type": "message", "role": "assistant", "content": t}),
    texts.map(lambda t: {"type": "reasoning", "summary": [{"type": "summary_text", "text": t}]}),
    st.builds(lambda i, n, a: {"type": "function_call", "call_id": i, "name": n, "arguments": a}, ids, ids, texts),
)


input_items = st.builds(
    lambda system, rest: (
        ([{"type": "message", "role": "system", "content": _input_text([system])}] if system is not None else []) + rest
    ),
    st.one_of(st.none(), texts),
    st.lists(st.one_of(user_items, output_items, assistant_side), max_size=10),
)


@settings(max_examples=150, deadline=None)
@given(input_items)
def test_responses_to_agentlog_to_responses_is_the_identity(items: list[dict[str, Any]]) -> None:
    imported = from_openai_responses(items)
    assert to_openai_responses(imported.messages, system=imported.system, reasoning="item") == items


def test_lenient_spellings_read_the_same() -> None:
    """A string input, string contents, SDK dumps with nulls, and item ids/statuses (bookkeeping)."""
    assert strip_ids(from_openai_responses("hi").messages) == strip_ids([m.user_message("hi")])
    imported = from_openai_responses(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "add"}],
                "encrypted_content": None,
            },
            {
                "id": "fc_1",
                "type": "function_call",
                "call_id": "c1",
                "name": "add",
                "arguments": "{}",
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "4", "id": None, "status": None},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "4", "annotations": [], "logprobs": []}],
            },
        ]
    )
    assert imported.system == "Be brief."
    assert strip_ids(imported.messages) == strip_ids(
        [
            m.user_message("2+2?"),
            m.assistant_message(
                [m.reasoning_block("add"), m.tool_call_block("c1", "add", "{}")], provider="openai", model="unknown"
            ),
            m.tool_result_message("c1", "4"),
            m.assistant_message("4", provider="openai", model="unknown"),
        ]
    )


@pytest.mark.parametrize(
    ("items", "index", "path"),
    [
        (
            [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}]}],
            0,
            "$[0].content[0]",
        ),
        (
            [{"role": "user", "content": "a"}, {"type": "web_search_call", "id": "ws", "status": "completed"}],
            1,
            "$[1].type",
        ),
        ([{"type": "item_reference", "id": "msg_1"}], 0, "$[0].type"),
        ([{"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "gAAA"}], 0, "$[0].encrypted_content"),
        (
            [{"type": "reasoning", "id": "rs", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]}],
            0,
            "$[0].content",
        ),
        (
            [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "x", "annotations": [{"type": "url_citation"}]}],
                }
            ],
            0,
            "$[0].content[0].annotations",
        ),
        (
            [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
            0,
            "$[0].content[0]",
        ),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "late"}], 1, "$[1]"),
        ([{"type": "function_call_output", "output": "x"}], 0, "$[0].call_id"),
        ([42], 0, "$[0]"),
    ],
)
def test_from_refuses_what_agentlog_cannot_hold_naming_the_item(items: list[Any], index: int, path: str) -> None:
    with pytest.raises(ConversionError) as caught:
        from_openai_responses(items)
    assert caught.value.index == index and caught.value.path == path


def test_instructions_and_a_system_item_together_are_refused() -> None:
    with pytest.raises(ConversionError) as caught:
        from_openai_responses([{"role": "system", "content": "b"}], instructions="a")
    assert caught.value.index == 0


def test_to_refuses_an_image_unless_told_to_omit_it() -> None:
    image = m.image_block("att-1", "image/png", bytes=10, width=1, height=1)
    messages = [m.tool_result_message("c1", [m.text_block("see"), image])]
    with pytest.raises(ConversionError) as caught:
        to_openai_responses(messages)
    assert (caught.value.index, caught.value.path) == (0, "$[0].content[0].content[1]")
    assert to_openai_responses(messages, unsupported="omit") == [
        {"type": "function_call_output", "call_id": "c1", "output": "see"}
    ]


def test_session_body_puts_the_system_prompt_in_instructions() -> None:
    session = Session.create("responses")
    header = {
        "config": {"provider": "openai", "model": "gpt-x"},
        "system": "Be brief.",
        "tools": [{"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}}],
    }
    session.append(REQUEST_HEADER, {"header": header, "reason": "initial"})
    session.append(USER_MESSAGE, m.user_message("hi"), {"surfaceOp": "append"})
    reply = m.assistant_message([m.reasoning_block("r"), m.text_block("hello")], provider="openai", model="gpt-x")
    session.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": reply}, {"surfaceOp": "append"})
    assert session_to_openai_responses(session) == {
        "model": "gpt-x",
        "instructions": "Be brief.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "message", "role": "assistant", "content": "hello"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "add",
                "description": "Add.",
                "parameters": {"type": "object", "properties": {}},
                "strict": False,
            }
        ],
    }
    body = session_to_openai_responses(session, reasoning="item")
    back = from_openai_responses(body["input"], instructions=body["instructions"], provider="openai", model="gpt-x")
    assert back.system == "Be brief." and strip_ids(back.messages) == strip_ids(list(session.derive_messages()))


# --- a real framework reads the items ------------------------------------------------------------

words = st.text(min_size=1, max_size=8)
sdk_blocks = st.one_of(words.map(m.text_block), st.builds(m.tool_call_block, ids, words, words))
sdk_conversations = st.lists(
    st.one_of(
        st.lists(words, min_size=1, max_size=2).map(lambda ts: m.user_message([m.text_block(t) for t in ts])),
        st.builds(m.tool_result_message, ids, words),
        st.lists(sdk_blocks, min_size=1, max_size=4).map(
            lambda bs: m.assistant_message(bs, provider=PROVIDER, model=MODEL)
        ),
    ),
    max_size=6,
).map(no_adjacent_assistants)


def merge_adjacent_assistants(messages: list[Any]) -> list[Any]:
    out: list[Any] = []
    for msg in messages:
        if out and out[-1]["role"] == "assistant" and msg["role"] == "assistant":
            out[-1] = {**out[-1], "content": out[-1]["content"] + msg["content"]}
        else:
            out.append(msg)
    return out


@settings(max_examples=60, deadline=None)
@given(sdk_conversations, words)
def test_the_openai_agents_converter_reads_the_items_as_the_same_conversation(messages: list[Any], system: str) -> None:
    """openai-agents turns Responses input items into chat messages for chat-completions models; fed our
    items, it must produce the same conversation (it starts a new assistant message where the Responses
    form has no boundary, so adjacent assistant messages are merged before comparing)."""
    from agents.models.chatcmpl_converter import Converter

    chat = Converter.items_to_messages(to_openai_responses(messages, system=system))  # type: ignore[arg-type]
    imported = from_openai_chat([dict(entry) for entry in chat], provider=PROVIDER, model=MODEL)
    assert imported.system == system
    assert strip_ids(merge_adjacent_assistants(imported.messages)) == strip_ids(messages)
