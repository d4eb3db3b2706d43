"""agentlog ⇄ Anthropic Messages: round trips both ways (thinking signatures and tool results
included), located refusals, and a session's request header."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import ConversionError
from agentlog.interop.anthropic import canonical_arguments, from_anthropic, session_to_anthropic, to_anthropic
from agentlog.kernel import messages as m
from agentlog.kernel.events import ASSISTANT_MESSAGE, REQUEST_HEADER, TOOL_RESULT, USER_MESSAGE
from agentlog.kernel.session import Session

PROVIDER, MODEL = "prov", "mod"
texts = st.text(max_size=12)
ids = st.text(min_size=1, max_size=8)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**60), 2**60), st.floats(allow_nan=False, allow_infinity=False), texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)
objects = st.dictionaries(texts, json_values, max_size=4)


def strip_ids(messages: list[Any]) -> list[Any]:
    return [{k: v for k, v in dict(msg).items() if k != "id"} for msg in messages]


# --- agentlog side ---------------------------------------------------------------------------------

assistant_parts = st.one_of(
    texts.map(lambda t: (m.text_block(t), None)),
    st.tuples(texts.map(m.reasoning_block), st.one_of(st.none(), ids)),
    st.builds(lambda i, n, o: (m.tool_call_block(i, n, canonical_arguments(o)), None), ids, ids, objects),
)


def _assistant(parts: list[Any]) -> Any:
    signatures = [sig for block, sig in parts if block["type"] == "reasoning"]
    state = {"anthropic": {"signatures": signatures}} if any(s is not None for s in signatures) else None
    return m.assistant_message([block for block, _ in parts], provider=PROVIDER, model=MODEL, replay_state=state)


assistant_msgs = st.lists(assistant_parts, max_size=5).map(_assistant)
user_msgs = st.lists(texts, max_size=3).map(lambda ts: m.user_message([m.text_block(t) for t in ts]))
tool_msgs = st.builds(
    lambda i, ts, err: m.tool_result_message(i, [m.text_block(t) for t in ts], is_error=err),
    ids,
    st.lists(texts, max_size=3),
    st.one_of(st.none(), st.booleans()),
)
conversations = st.lists(st.one_of(user_msgs, tool_msgs, assistant_msgs), max_size=8)


@settings(max_examples=150, deadline=None)
@given(conversations, st.one_of(st.none(), texts))
def test_agentlog_to_anthropic_to_agentlog_is_the_identity(messages: list[Any], system: str | None) -> None:
    body = to_anthropic(messages, system=system, reasoning="thinking")
    json.dumps(body)  # plain JSON, ready for the SDK or an HTTP body
    back = from_anthropic(body["messages"], system=body.get("system"), provider=PROVIDER, model=MODEL)
    assert back.system == system
    assert strip_ids(back.messages) == strip_ids(messages)


# --- Anthropic side: canonical messages --------------------------------------------------------------

thinking = st.builds(
    lambda t, sig: {"type": "thinking", "thinking": t, **({"signature": sig} if sig is not None else {})},
    texts,
    st.one_of(st.none(), ids),
)
assistant_blocks = st.one_of(
    texts.map(lambda t: {"type": "text", "text": t}),
    thinking,
    st.builds(lambda i, n, o: {"type": "tool_use", "id": i, "name": n, "input": o}, ids, ids, objects),
)


def _result(call_id: str, ts: list[str], err: bool | None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": call_id,
        "content": [{"type": "text", "text": t} for t in ts],
    }
    if err is not None:
        block["is_error"] = err
    return block


wire_messages = st.one_of(
    st.lists(assistant_blocks, max_size=5).map(lambda bs: {"role": "assistant", "content": bs}),
    st.lists(texts, max_size=3).map(lambda ts: {"role": "user", "content": [{"type": "text", "text": t} for t in ts]}),
    st.lists(
        st.builds(_result, ids, st.lists(texts, max_size=2), st.one_of(st.none(), st.booleans())),
        min_size=1,
        max_size=3,
    ).map(lambda rs: {"role": "user", "content": rs}),
)


def _results_only(message: dict[str, Any]) -> bool:
    return message["role"] == "user" and bool(message["content"]) and message["content"][0]["type"] == "tool_result"


def no_adjacent_result_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All the results that follow one assistant message belong in one user message (the format's rule)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if not (out and _results_only(out[-1]) and _results_only(message)):
            out.append(message)
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(wire_messages, max_size=8).map(no_adjacent_result_messages), st.one_of(st.none(), texts))
def test_anthropic_to_agentlog_to_anthropic_is_the_identity(messages: list[dict[str, Any]], system: str | None) -> None:
    imported = from_anthropic(messages, system=system)
    body = to_anthropic(imported.messages, system=imported.system, reasoning="thinking")
    assert body == ({"system": system} if system is not None else {}) | {"messages": messages}


def test_string_contents_and_a_one_block_system_read_the_same_as_blocks() -> None:
    a = from_anthropic(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "out"}]},
        ],
        system=[{"type": "text", "text": "Be brief."}],
    )
    assert a.system == "Be brief."
    assert strip_ids(a.messages) == strip_ids(
        [
            m.user_message("hi"),
            m.assistant_message("hello", provider="anthropic", model="unknown"),
            m.tool_result_message("c", "out"),
        ]
    )


def test_results_with_a_prompt_split_into_one_message_each() -> None:
    imported = from_anthropic(
        [
            {
                "role": "user",
                "content": [_result("a", ["1"], None), _result("b", ["2"], True), {"type": "text", "text": "next?"}],
            }
        ]
    )
    assert strip_ids(imported.messages) == strip_ids(
        [m.tool_result_message("a", "1"), m.tool_result_message("b", "2", is_error=True), m.user_message("next?")]
    )


def test_default_reasoning_keeps_only_signed_thinking() -> None:
    signed = from_anthropic(
        [
            {
                "role": "assistant",
                "content": [{"type": "thinking", "thinking": "t", "signature": "sig"}, {"type": "text", "text": "x"}],
            }
        ]
    ).messages
    foreign = [
        m.assistant_message([m.reasoning_block("deepseek thought"), m.text_block("y")], provider="deepseek", model="d")
    ]
    assert to_anthropic(signed)["messages"][0]["content"][0] == {
        "type": "thinking",
        "thinking": "t",
        "signature": "sig",
    }
    assert to_anthropic(foreign)["messages"] == [{"role": "assistant", "content": [{"type": "text", "text": "y"}]}]
    assert to_anthropic(signed, reasoning="omit")["messages"][0]["content"] == [{"type": "text", "text": "x"}]


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "index", "path"),
    [
        (
            [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}],
            0,
            "$[0].content[0]",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xx"}]},
            ],
            1,
            "$[1].content[0]",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}],
                }
            ],
            0,
            "$[0].content[0]",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "x", "citations": [{"type": "char_location"}]}],
                }
            ],
            0,
            "$[0].content[0].citations",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}],
            0,
            "$[0].content[0].cache_control",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}, _result("c", [], None)]}], 0, "$[0].content[1]"),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "image", "source": {}}]}
                    ],
                }
            ],
            0,
            "$[0].content[0].content[0]",
        ),
        (
            [{"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "f", "input": [1]}]}],
            0,
            "$[0].content[0].input",
        ),
        ([{"role": "system", "content": "x"}], 0, "$[0].role"),
        ([{"role": "user", "content": [{"type": "document", "source": {}}]}], 0, "$[0].content[0]"),
    ],
)
def test_from_refuses_what_agentlog_cannot_hold_naming_the_item(messages: list[Any], index: int, path: str) -> None:
    with pytest.raises(ConversionError) as caught:
        from_anthropic(messages)
    assert caught.value.index == index and caught.value.path == path


def test_a_system_prompt_of_several_blocks_is_refused() -> None:
    with pytest.raises(ConversionError) as caught:
        from_anthropic([], system=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
    assert caught.value.path == "system"


def test_to_refuses_arguments_that_are_not_an_object_a_system_message_and_images() -> None:
    bad = m.assistant_message([m.text_block("x"), m.tool_call_block("c", "f", "[1, 2")], provider="p", model="x")
    with pytest.raises(ConversionError) as caught:
        to_anthropic([m.user_message("hi"), bad])
    assert (caught.value.index, caught.value.path) == (1, "$[1].content[1].arguments")
    with pytest.raises(ConversionError) as caught:
        to_anthropic([{"id": "s", "role": "system", "content": [m.text_block("x")], "source": {"kind": "compaction"}}])
    assert caught.value.path == "$[0].role"
    image = m.image_block("att", "image/png", bytes=1, width=1, height=1)
    with pytest.raises(ConversionError) as caught:
        to_anthropic([m.user_message([image])])
    assert caught.value.path == "$[0].content[0]"
    assert to_anthropic([m.user_message([image, m.text_block("t")])], unsupported="omit")["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "t"}]}
    ]


# --- sessions ----------------------------------------------------------------------------------


def test_session_body_merges_the_steps_results_and_reads_the_header() -> None:
    session = Session.create("anthropic")
    header = {
        "config": {"provider": "anthropic", "model": "claude-x"},
        "system": "Be brief.",
        "tools": [{"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}}],
    }
    session.append(REQUEST_HEADER, {"header": header, "reason": "initial"})
    session.append(USER_MESSAGE, m.user_message("2+2 and 3+3?"), {"surfaceOp": "append"})
    calls = m.assistant_message(
        [m.tool_call_block("a", "add", '{"x": 2, "y": 2}'), m.tool_call_block("b", "add", '{"x":3,"y":3}')],
        provider="anthropic",
        model="claude-x",
    )
    session.append(ASSISTANT_MESSAGE, {"turn": 1, "step": 1, "message": calls}, {"surfaceOp": "append"})
    for call_id, out in (("a", "4"), ("b", "6")):
        result = m.tool_result_message(call_id, out)
        session.append(TOOL_RESULT, {"turn": 1, "step": 1, "message": result}, {"surfaceOp": "append"})
    assert session_to_anthropic(session) == {
        "model": "claude-x",
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "2+2 and 3+3?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "add", "input": {"x": 2, "y": 2}},
                    {"type": "tool_use", "id": "b", "name": "add", "input": {"x": 3, "y": 3}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": [{"type": "text", "text": "4"}]},
                    {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "6"}]},
                ],
            },
        ],
        "tools": [{"name": "add", "description": "Add.", "input_schema": {"type": "object", "properties": {}}}],
    }


def test_empty_argument_text_is_an_empty_input() -> None:
    call = m.assistant_message([m.tool_call_block("c", "now", "")], provider="deepseek", model="d")
    assert to_anthropic([call])["messages"][0]["content"] == [
        {"type": "tool_use", "id": "c", "name": "now", "input": {}}
    ]


def test_a_malformed_header_tool_is_refused_naming_it() -> None:
    session = Session.create("bad-tools")
    header = {"config": {"provider": "p", "model": "x"}, "tools": [{"name": "ok", "parameters": {}}, {"name": "bad"}]}
    session.append(REQUEST_HEADER, {"header": header, "reason": "initial"})
    with pytest.raises(ConversionError) as caught:
        session_to_anthropic(session)
    assert (caught.value.index, caught.value.path) == (1, "tools[1].parameters")
