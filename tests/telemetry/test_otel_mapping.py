"""The pure mapping (agentlog.telemetry.spans) over generated logs: whatever the shape of the turns, steps,
chunks, tool calls and failures, the spans form one tree per turn, their ids depend only on the log, a
replay describes exactly the same spans, interleaving another session changes nothing, and the chat
spans' usage adds up to the session total the turns report."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.telemetry.spans import SpanDescription, SpanMapper, span_id_of, trace_id_of

Turn = tuple[list[tuple[int, int, int]], bool]  # steps as (chunks, tool calls, input tokens); failed?

turns_strategy = st.lists(
    st.tuples(
        st.lists(
            st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(0, 1000)),
            min_size=1,
            max_size=3,
        ),
        st.booleans(),
    ),
    min_size=1,
    max_size=4,
)


def _log(turns: list[Turn], start_time: int = 1_700_000_000_000) -> list[dict[str, Any]]:
    """A well-formed log: request header, then per turn its steps with chunks, message, tool pairs."""
    events: list[dict[str, Any]] = []
    clock = iter(range(start_time, start_time + 10_000_000, 7))

    def add(type_: str, data: dict[str, Any]) -> None:
        events.append({"type": type_, "seq": len(events), "time": next(clock), "data": data})

    add("request/header", {"header": {"config": {"provider": "deepseek", "model": "m1"}}, "reason": "initial"})
    for number, (steps, failed) in enumerate(turns, start=1):
        add("turn/start", {"turn": number})
        for step, (chunks, calls, tokens) in enumerate(steps, start=1):
            add("step/start", {"turn": number, "step": step})
            for _ in range(chunks):
                add("assistant/chunk", {"turn": number, "step": step, "chunk": {"type": "text-delta", "text": "x"}})
            if failed and step == len(steps):
                break  # the request fails: no message, the turn ends with the failure
            content = [
                {"type": "tool-call", "id": f"c{number}-{step}-{i}", "name": f"t{i}", "arguments": "{}"}
                for i in range(calls)
            ]
            message = {"id": f"m{number}-{step}", "role": "assistant", "content": content, "source": {"kind": "model"}}
            usage = {"inputTokens": tokens, "outputTokens": 1}
            add("assistant/message", {"turn": number, "step": step, "message": message, "usage": usage})
            for i in range(calls):
                call_id = f"c{number}-{step}-{i}"
                add("tool/call", {"turn": number, "step": step, "callId": call_id, "name": f"t{i}", "arguments": "{}"})
                result = {
                    "id": f"r{call_id}",
                    "role": "user",
                    "content": [{"type": "tool-result", "toolCallId": call_id, "content": []}],
                    "source": {"kind": "tool", "callId": call_id},
                }
                add("tool/result", {"turn": number, "step": step, "message": result})
            add("step/end", {"turn": number, "step": step})
        reason = {"kind": "error", "error": {"message": "m", "code": "SERVER"}} if failed else {"kind": "completed"}
        add("turn/end", {"turn": number, "reason": reason})
    return events


def _spans(sessions: dict[str, list[dict[str, Any]]], order: Iterator[str]) -> list[SpanDescription]:
    mapper = SpanMapper()
    for session_id in sessions:
        mapper.add_session(session_id, {"id": session_id})
    cursors = dict.fromkeys(sessions, 0)
    spans: list[SpanDescription] = []
    for session_id in order:
        log = sessions[session_id]
        if cursors[session_id] < len(log):
            spans.extend(mapper.feed(session_id, log[cursors[session_id]]))
            cursors[session_id] += 1
    for session_id, log in sessions.items():
        for event in log[cursors[session_id] :]:
            spans.extend(mapper.feed(session_id, event))
    spans.extend(mapper.drain())
    return spans


def _key(span: SpanDescription) -> tuple[Any, ...]:
    return (
        span.name,
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        span.start_ns,
        span.end_ns,
        span.all_attributes(),
    )


@settings(deadline=None)
@given(turns_strategy)
def test_each_turn_is_one_tree_with_ids_from_the_log(turns: list[Turn]) -> None:
    log = _log(turns)
    spans = _spans({"s": log}, iter(()))
    assert len({s.span_id for s in spans}) == len(spans)
    roots = [s for s in spans if s.parent_span_id is None]
    assert [r.name for r in roots] == ["invoke_agent agentlog"] * len(turns)
    starts = [e["seq"] for e in log if e["type"] == "turn/start"]
    assert {r.trace_id for r in roots} == {trace_id_of("s", seq) for seq in starts}
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        assert span.span_id == span_id_of("s", span.start_attributes["agentlog.seq.start"])  # type: ignore[arg-type]
        assert span.start_ns <= span.end_ns
        assert span.start_attributes["gen_ai.conversation.id"] == "s"
        if span.parent_span_id is not None:
            parent = by_id[span.parent_span_id]
            assert parent.parent_span_id is None and parent.trace_id == span.trace_id
    chats = [s for s in spans if s.name == "chat m1"]
    assert len(chats) == sum(len(steps) for steps, _ in turns)
    failed = [s for s in spans if s.error_type is not None]
    assert {s.error_type for s in failed} <= {"SERVER"}
    assert len([s for s in failed if s.parent_span_id is None]) == sum(1 for _, f in turns if f)


@settings(deadline=None)
@given(turns_strategy, turns_strategy, st.lists(st.sampled_from(["a", "b"]), max_size=200))
def test_replaying_or_interleaving_another_session_describes_the_same_spans(
    turns_a: list[Turn], turns_b: list[Turn], order: list[str]
) -> None:
    a, b = _log(turns_a), _log(turns_b, start_time=1_800_000_000_000)
    alone_a = sorted(map(_key, _spans({"a": a}, iter(()))))
    alone_b = sorted(map(_key, _spans({"b": b}, iter(()))))
    assert sorted(map(_key, _spans({"a": a}, iter(())))) == alone_a  # a replay: the very same spans
    together = _spans({"a": a, "b": b}, iter(order))
    assert sorted(_key(s) for s in together if s.session_id == "a") == alone_a
    assert sorted(_key(s) for s in together if s.session_id == "b") == alone_b


@settings(deadline=None)
@given(turns_strategy)
def test_usage_is_counted_once_and_the_turns_carry_the_running_session_total(turns: list[Turn]) -> None:
    spans = _spans({"s": _log(turns)}, iter(()))
    chat_total = sum(int(s.attributes.get("gen_ai.usage.input_tokens", 0)) for s in spans)  # type: ignore[arg-type]
    turn_spans = sorted((s for s in spans if s.parent_span_id is None), key=lambda s: s.start_ns)
    assert sum(int(t.attributes.get("agentlog.usage.turn.input_tokens", 0)) for t in turn_spans) == chat_total  # type: ignore[arg-type]
    assert int(turn_spans[-1].attributes.get("agentlog.usage.session.input_tokens", 0)) == chat_total  # type: ignore[arg-type]
    for span in turn_spans:
        assert not [k for k in span.all_attributes() if k.startswith("gen_ai.usage.")]
