"""Message and content-block constructors produce exactly the shapes strict loading accepts."""

from __future__ import annotations

import pytest

import agentlog as al


def _turn_events() -> list[tuple[str, dict[str, object], dict[str, object] | None]]:
    call_args = '{"path": "README.md"}'
    return [
        ("turn/start", {"turn": 1}, None),
        ("user/message", al.user_message("read it", id="u1"), {"surfaceOp": "append"}),
        ("step/start", {"turn": 1, "step": 1}, None),
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": al.reasoning_delta(0, "thinking")}, None),
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": al.tool_call_delta(1, "c1", call_args, name="read")}, None),
        (
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "message": al.assistant_message(
                    [al.reasoning_block("thinking"), al.tool_call_block("c1", "read", call_args)],
                    provider="deepseek",
                    model="deepseek-chat",
                    id="a1",
                ),
                "usage": al.token_usage(10, 5, cache_read_tokens=2, reasoning_tokens=1),
            },
            {"surfaceOp": "append", "sourceEventSeqs": [3, 4]},
        ),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "read", "arguments": call_args}, None),
        (
            "tool/result",
            {"turn": 1, "step": 1, "message": al.tool_result_message("c1", "# agentlog", id="t1")},
            {"surfaceOp": "append"},
        ),
        ("step/end", {"turn": 1, "step": 1}, None),
        (
            "user/message",
            al.plugin_message("context", plugin="memory", form="notice", id="p1"),
            {"surfaceOp": "append"},
        ),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}, None),
    ]


def test_messages__constructed_turn_passes_strict_seed_validation_and_derives() -> None:
    session = al.Session.create("s", now=lambda: 1)
    for etype, data, intent in _turn_events():
        session.append(etype, data, intent)
    replay = al.Session.create("r", list(session.events))
    restored = al.Session.from_restore("x", al.thaw(list(session.events)), al.thaw(dict(session.header, id="x")))
    assert replay.derive_messages() == session.derive_messages()
    assert restored.derive_messages() == session.derive_messages()
    roles = [m["role"] for m in session.derive_messages()]
    assert roles == ["user", "assistant", "user", "user"]


def test_messages__shapes_match_the_wire_vocabulary() -> None:
    assert al.tool_result_message("c9", "boom", is_error=True, id="t9") == {
        "id": "t9",
        "role": "user",
        "content": [
            {"type": "tool-result", "toolCallId": "c9", "content": [{"type": "text", "text": "boom"}], "isError": True}
        ],
        "source": {"kind": "tool", "callId": "c9"},
    }
    assert al.assistant_message("hi", provider="p", model="m", id="a")["source"] == {
        "kind": "model",
        "provider": "p",
        "model": "m",
    }
    assert al.tool_call_delta(0, "c", "{") == {"type": "tool-call-delta", "index": 0, "id": "c", "argumentsDelta": "{"}
    assert al.token_usage(1, 2) == {"inputTokens": 1, "outputTokens": 2}
    assert al.image_block("att", "image/png", bytes=10, width=2, height=3)["attachment"]["mediaType"] == "image/png"


def test_messages__ids_are_unique() -> None:
    ids = {al.new_message_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert al.user_message("a")["id"] != al.user_message("a")["id"]


def test_messages__are_written_in_the_original_factories_key_order() -> None:
    """The original's factories spread their input and mint the id last (``createUserMessage``:
    content, source, role, id; ``createToolResultMessage``: source, content, role, id;
    ``createAssistantMessage``: role, content, source, id), and the log stores those bytes."""
    import orjson

    assert orjson.dumps(al.user_message("hi", id="u1")) == (
        b'{"content":[{"type":"text","text":"hi"}],"source":{"kind":"user"},"role":"user","id":"u1"}'
    )
    assert orjson.dumps(al.plugin_message("ctx", plugin="memory", form="notice", id="p1")) == (
        b'{"content":[{"type":"text","text":"ctx"}],"source":{"kind":"plugin","plugin":"memory","form":"notice"},'
        b'"role":"user","id":"p1"}'
    )
    assert orjson.dumps(al.tool_result_message("c1", "out", is_error=True, id="t1")) == (
        b'{"source":{"kind":"tool","callId":"c1"},'
        b'"content":[{"type":"tool-result","toolCallId":"c1","content":[{"type":"text","text":"out"}],"isError":true}],'
        b'"role":"user","id":"t1"}'
    )
    assert orjson.dumps(al.assistant_message("ok", provider="deepseek", model="deepseek-chat", id="a1")) == (
        b'{"role":"assistant","content":[{"type":"text","text":"ok"}],'
        b'"source":{"kind":"model","provider":"deepseek","model":"deepseek-chat"},"id":"a1"}'
    )


def test_messages__content_of_the_wrong_type_is_a_typed_error_with_the_remedy() -> None:
    """``tool_result_message("c1", 42)`` used to fail inside ``list(42)`` with a bare TypeError."""

    for build in (
        lambda: al.tool_result_message("c1", 42),  # type: ignore[arg-type]
        lambda: al.user_message(42),  # type: ignore[arg-type]
        lambda: al.assistant_message(None, provider="p", model="m"),  # type: ignore[arg-type]
    ):
        with pytest.raises(al.ArgumentTypeError) as caught:
            build()
        assert isinstance(caught.value, TypeError) and caught.value.code == "INVALID_ARGUMENT_TYPE"
        assert str(caught.value).startswith("message content must be a str or a list of content blocks, got ")
        assert "pass str(value) or [text_block(...)]" in str(caught.value)
