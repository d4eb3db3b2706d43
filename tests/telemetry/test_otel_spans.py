"""GenAI spans of real agent runs, through the SDK's in-memory exporter: the span tree and its attributes,
times from the log, usage counted once, subagent turns under the delegating tool span, the same ids live
and offline, content off by default (every exported byte scanned for canaries) and on in each mode."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

import agentlog as al
from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.tools import FunctionTool, ToolRegistry
from agentlog.llm.types import GenerateRequest, StreamChunk, failure_chunk
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.telemetry.otel import attach_otel, export_otlp
from agentlog.telemetry.spans import span_id_of, trace_id_of
from agentlog.testing.provider import text_reply, tool_call_reply

from ._otel_scenarios import (
    CANARIES,
    CANARY_ANSWER,
    CANARY_ARGS,
    CANARY_PROMPT,
    CANARY_RESULT,
    CANARY_SYSTEM,
    RoutedProvider,
    run_parent_with_child,
)


class RecordingSampler(Sampler):
    """Samples everything and keeps the attributes each span had when it started."""

    def __init__(self) -> None:
        self.at_start: list[tuple[str, dict[str, Any]]] = []

    def should_sample(self, parent_context: Any, trace_id: int, name: str, *args: Any, **kwargs: Any) -> SamplingResult:
        attributes = kwargs.get("attributes", args[1] if len(args) > 1 else None)
        self.at_start.append((name, dict(attributes or {})))
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "RecordingSampler"


def provider_with_memory(sampler: Sampler | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def live_spans(
    store: al.SessionStore, **options: Any
) -> tuple[list[ReadableSpan], al.Session, al.Session, RecordingSampler]:
    sampler = RecordingSampler()
    provider, memory = provider_with_memory(sampler)
    exporter = attach_otel(store, provider, **options)
    parent, child = run_parent_with_child(store)
    exporter.close()
    return list(memory.get_finished_spans()), parent, child, sampler


def by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    grouped: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        grouped.setdefault(span.name, []).append(span)
    return grouped


def exported_bytes(spans: Sequence[ReadableSpan]) -> bytes:
    """What an OTLP exporter puts on the wire for these spans."""
    return bytes(encode_spans(spans).SerializeToString())


# --- the span tree ----------------------------------------------------------------------------------------


def test_a_turn_is_an_invoke_agent_span_over_its_chat_and_execute_tool_spans_with_the_logs_times() -> None:
    spans, parent, _child, _ = live_spans(al.SessionStore())
    parent_spans = [s for s in spans if s.attributes["agentlog.session.id"] == parent.id]
    names = by_name(parent_spans)
    (turn,) = names["invoke_agent agentlog"]
    assert len(names["chat deepseek-chat"]) == 3
    assert sorted(names) == [
        "chat deepseek-chat",
        "execute_tool delegate",
        "execute_tool lookup",
        "invoke_agent agentlog",
    ]
    events = parent.events
    start = next(e for e in events if e["type"] == "turn/start")
    end = next(e for e in events if e["type"] == "turn/end")
    assert turn.parent is None
    assert turn.context.trace_id == trace_id_of(parent.id, start["seq"])
    assert turn.context.span_id == span_id_of(parent.id, start["seq"])
    assert (turn.start_time, turn.end_time) == (start["time"] * 1_000_000, end["time"] * 1_000_000)
    assert turn.attributes["agentlog.seq.start"] == start["seq"] and turn.attributes["agentlog.seq.end"] == end["seq"]
    for span in parent_spans:
        assert span.context.trace_id == turn.context.trace_id
        assert span.attributes["gen_ai.conversation.id"] == parent.id
        if span is not turn:
            assert span.parent is not None and span.parent.span_id == turn.context.span_id
        opening = events[span.attributes["agentlog.seq.start"]]
        closing = events[span.attributes["agentlog.seq.end"]]
        assert span.start_time == opening["time"] * 1_000_000 and span.end_time == closing["time"] * 1_000_000
    (lookup,) = names["execute_tool lookup"]
    assert events[lookup.attributes["agentlog.seq.start"]]["type"] == "tool/call"
    assert events[lookup.attributes["agentlog.seq.end"]]["type"] == "tool/result"
    assert {
        k: lookup.attributes[k]
        for k in ("gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.type")
    } == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    first_chat = min(names["chat deepseek-chat"], key=lambda s: s.start_time)
    assert first_chat.attributes["gen_ai.operation.name"] == "chat"
    assert first_chat.attributes["gen_ai.provider.name"] == "deepseek"
    assert first_chat.attributes["gen_ai.request.model"] == "deepseek-chat"
    assert first_chat.attributes["gen_ai.response.model"] == "deepseek-chat"
    assert first_chat.attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
    message = events[first_chat.attributes["agentlog.seq.end"]]
    assert message["type"] == "assistant/message"
    assert first_chat.attributes["gen_ai.response.id"] == message["data"]["message"]["id"]
    first_chunk = next(e for e in events if e["type"] == "assistant/chunk")
    step_start = events[first_chat.attributes["agentlog.seq.start"]]
    assert (
        first_chat.attributes["gen_ai.response.time_to_first_chunk"]
        == (first_chunk["time"] - step_start["time"]) / 1000
    )


def test_conversation_id_and_the_log_pointers_are_set_when_each_span_starts() -> None:
    spans, parent, child, sampler = live_spans(al.SessionStore())
    assert len(sampler.at_start) == len(spans) == 8
    for name, attributes in sampler.at_start:
        assert attributes["gen_ai.conversation.id"] in (parent.id, child.id), name
        assert attributes["agentlog.session.id"] == attributes["gen_ai.conversation.id"]
        assert isinstance(attributes["agentlog.seq.start"], int)
        assert attributes["gen_ai.operation.name"] in ("invoke_agent", "chat", "execute_tool")


def test_usage_is_on_chat_spans_only_and_the_turn_carries_turn_and_session_totals() -> None:
    spans, parent, _child, _ = live_spans(al.SessionStore())
    for span in spans:
        usage = {k for k in span.attributes if k.startswith("gen_ai.usage.")}
        assert bool(usage) == (span.attributes["gen_ai.operation.name"] == "chat"), span.name
    chats = [s for s in spans if s.name.startswith("chat") and s.attributes["agentlog.session.id"] == parent.id]
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == [100, 100, 100]
    assert chats[0].attributes["gen_ai.usage.cache_read.input_tokens"] == 30
    assert chats[0].attributes["gen_ai.usage.cache_creation.input_tokens"] == 5
    assert chats[0].attributes["gen_ai.usage.reasoning.output_tokens"] == 7
    (turn,) = [s for s in spans if s.name == "invoke_agent agentlog"]
    assert turn.attributes["agentlog.usage.turn.input_tokens"] == 300
    assert turn.attributes["agentlog.usage.turn.output_tokens"] == 60
    assert turn.attributes["agentlog.usage.session.input_tokens"] == 300


def test_a_subagent_turn_joins_the_delegating_trace_under_the_parents_tool_span() -> None:
    spans, parent, child, _ = live_spans(al.SessionStore())
    (delegate,) = [s for s in spans if s.name == "execute_tool delegate"]
    child_spans = [s for s in spans if s.attributes["agentlog.session.id"] == child.id]
    (child_turn,) = [s for s in child_spans if s.attributes["gen_ai.operation.name"] == "invoke_agent"]
    assert child_turn.parent is not None and child_turn.parent.span_id == delegate.context.span_id
    assert {s.context.trace_id for s in child_spans} == {delegate.context.trace_id}
    for span in child_spans:
        assert span.attributes["agentlog.session.parent_id"] == parent.id
        assert span.attributes["gen_ai.conversation.id"] == child.id
    result = next(e for e in parent.events if e["type"] == "tool/result" and "meta" in e["data"])
    assert child_turn.attributes["agentlog.seq.start"] == result["data"]["meta"]["subagent"]["seqs"][0]


def test_a_failed_request_ends_the_turn_and_the_chat_span_with_the_failure_code_and_no_message() -> None:
    class Failing:
        async def stream(self, request: GenerateRequest, *, signal: Any = None) -> AsyncIterator[StreamChunk]:
            yield failure_chunk({"message": f"upstream said {CANARY_ANSWER}", "code": "AUTH"})

    store = al.SessionStore()
    provider, memory = provider_with_memory()
    exporter = attach_otel(store, provider)
    session = store.create("failing")
    agent = Agent(session, Failing(), AgentOptions(provider="deepseek", model="deepseek-chat"), durable=False)
    agent.followup(f"hi {CANARY_PROMPT}")
    asyncio.run(agent.run())
    exporter.close()
    spans = memory.get_finished_spans()
    assert sorted(s.name for s in spans) == ["chat deepseek-chat", "invoke_agent agentlog"]
    for span in spans:
        assert span.attributes["error.type"] == "AUTH"
        assert span.status.status_code.name == "ERROR" and not span.status.description
    wire = exported_bytes(spans)
    assert CANARY_ANSWER.encode() not in wire and CANARY_PROMPT.encode() not in wire


# --- content --------------------------------------------------------------------------------------------


def test_no_prompt_answer_argument_or_result_text_leaves_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    spans, parent, _child, _ = live_spans(al.SessionStore())
    wire = exported_bytes(spans)
    for canary in CANARIES:
        assert canary.encode() not in wire, canary
    assert b"tool_call" in wire  # the scan reads real content: the finish reasons are in these bytes
    for span in spans:
        assert not span.events
        assert not any(k in span.attributes for k in ("gen_ai.input.messages", "gen_ai.output.messages"))
    chats = [s for s in spans if s.name.startswith("chat") and s.attributes["agentlog.session.id"] == parent.id]
    ref = chats[0].attributes["gen_ai.input.messages.ref"]
    assert isinstance(ref, str) and ref.startswith(f"agentlog://{parent.id}/")
    seq = int(ref.rsplit("/", 1)[1])
    sent = parent.at(seq).derive_messages()  # the reference leads to what the model was sent
    assert CANARY_PROMPT in json.dumps([al.thaw(m) for m in sent])
    assert parent.events[seq + 1]["type"] == "assistant/chunk"


@pytest.mark.parametrize("value", ["", "false", "true", "SPAN", "no_content"])
def test_content_stays_off_for_any_other_value_of_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", value)
    spans, *_ = live_spans(al.SessionStore())
    wire = exported_bytes(spans)
    assert not [c for c in CANARIES if c.encode() in wire]


def test_span_only_puts_content_in_the_genai_message_schemas_on_the_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    spans, parent, _child, _ = live_spans(al.SessionStore())
    chats = sorted(
        (s for s in spans if s.name.startswith("chat") and s.attributes["agentlog.session.id"] == parent.id),
        key=lambda s: s.start_time,
    )
    inputs = json.loads(chats[0].attributes["gen_ai.input.messages"])
    assert inputs == [{"role": "user", "parts": [{"type": "text", "content": f"please {CANARY_PROMPT}"}]}]
    assert json.loads(chats[0].attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": f"You help. {CANARY_SYSTEM}"}
    ]
    (output,) = json.loads(chats[0].attributes["gen_ai.output.messages"])
    assert output["role"] == "assistant" and output["finish_reason"] == "tool_call"
    assert output["parts"] == [
        {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": json.dumps({"q": CANARY_ARGS})}
    ]
    second_inputs = json.loads(chats[1].attributes["gen_ai.input.messages"])
    assert [m["role"] for m in second_inputs] == ["user", "assistant", "tool"]
    assert second_inputs[2]["parts"] == [
        {"type": "tool_call_response", "id": "c1", "response": f"found {CANARY_RESULT}"}
    ]
    (final,) = json.loads(chats[2].attributes["gen_ai.output.messages"])
    assert final["parts"] == [{"type": "text", "content": f"final {CANARY_ANSWER}"}]
    (lookup,) = [s for s in spans if s.name == "execute_tool lookup"]
    assert lookup.attributes["gen_ai.tool.call.arguments"] == json.dumps({"q": CANARY_ARGS})
    assert lookup.attributes["gen_ai.tool.call.result"] == f"found {CANARY_RESULT}"
    assert all(not s.events for s in spans)
    assert "gen_ai.input.messages.ref" not in chats[0].attributes


def test_event_only_puts_the_same_content_in_span_events_and_none_in_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "event_only")
    spans, *_ = live_spans(al.SessionStore())
    for span in spans:
        assert not [
            k
            for k in span.attributes
            if k.startswith(("gen_ai.input.messages", "gen_ai.output", "gen_ai.tool.call.a", "gen_ai.tool.call.r"))
        ]
    (lookup,) = [s for s in spans if s.name == "execute_tool lookup"]
    (event,) = lookup.events
    assert event.name == "gen_ai.client.inference.operation.details"
    assert event.attributes["gen_ai.tool.call.result"] == f"found {CANARY_RESULT}"
    chat = next(s for s in spans if s.name.startswith("chat"))
    assert "gen_ai.output.messages" in chat.events[0].attributes


def test_span_and_event_gives_both_and_redact_reaches_every_content_string(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_and_event")

    def redact(text: str) -> str:
        for canary in CANARIES:
            text = text.replace(canary, "[redacted]")
        return text

    spans, *_ = live_spans(al.SessionStore(), redact=redact)
    wire = exported_bytes(spans)
    assert b"[redacted]" in wire
    assert not [c for c in CANARIES if c.encode() in wire]
    (lookup,) = [s for s in spans if s.name == "execute_tool lookup"]
    assert lookup.attributes["gen_ai.tool.call.result"] == "found [redacted]"
    assert lookup.events[0].attributes["gen_ai.tool.call.result"] == "found [redacted]"


# --- live and offline -------------------------------------------------------------------------------------


def _identity(spans: Sequence[ReadableSpan]) -> set[tuple[str, int, int, int | None, int, int]]:
    return {
        (
            s.name,
            s.context.trace_id,
            s.context.span_id,
            s.parent.span_id if s.parent else None,
            s.start_time or 0,
            s.end_time or 0,
        )
        for s in spans
    }


def test_live_then_offline_and_offline_twice_give_the_same_ids_parents_and_times(tmp_path: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    live, parent, child, _ = live_spans(store)
    coordinator.close()
    offline = []
    for _ in range(2):
        memory = InMemorySpanExporter()
        summary = export_otlp(JsonlBackend(str(tmp_path / "store")), parent.id, span_exporter=memory)
        assert summary.sessions == [parent.id, child.id] and summary.spans == 8
        offline.append(list(memory.get_finished_spans()))
    assert _identity(live) == _identity(offline[0]) == _identity(offline[1])
    assert len(_identity(live)) == 8
    # A subagent session exported alone still joins its parent's trace, and brings no parent span.
    memory = InMemorySpanExporter()
    summary = export_otlp(JsonlBackend(str(tmp_path / "store")), child.id, span_exporter=memory)
    assert summary.sessions == [child.id]
    alone = list(memory.get_finished_spans())
    assert _identity(alone) == {i for i in _identity(live) if i[2] in {s.context.span_id for s in alone}}
    assert {s.attributes["agentlog.session.id"] for s in alone} == {child.id}


def test_offline_export_of_an_unknown_session_is_a_typed_error(tmp_path: Path) -> None:
    JsonlBackend(str(tmp_path / "store"))
    with pytest.raises(al.errors.SessionNotFoundError):
        export_otlp(JsonlBackend(str(tmp_path / "store")), "nope", span_exporter=InMemorySpanExporter())


def test_without_an_sdk_tracer_provider_the_listener_maps_nothing() -> None:
    store = al.SessionStore()
    exporter = attach_otel(store)  # the API's default provider: nothing recording anywhere
    assert not exporter.enabled
    run_parent_with_child(store)
    exporter.close()
    assert exporter.spans_started == 0


def test_a_tool_that_raises_ends_its_span_with_the_error_code_and_none_of_its_message() -> None:
    async def explode(args: dict[str, Any], ctx: Any) -> Any:
        raise RuntimeError(f"disk said {CANARY_RESULT}")

    def reply(request: GenerateRequest) -> list[StreamChunk]:
        done = any(b.get("type") == "tool-result" for m in request.messages for b in m["content"])
        return text_reply("ok") if done else tool_call_reply(("c1", "explode", json.dumps({"q": CANARY_ARGS})))

    store = al.SessionStore()
    provider, memory = provider_with_memory()
    exporter = attach_otel(store, provider)
    agent = Agent(
        store.create("tool-error"),
        RoutedProvider(reply),
        AgentOptions(provider="deepseek", model="deepseek-chat"),
        tools=ToolRegistry([FunctionTool("explode", "Fails.", {"type": "object"}, explode)]),
        durable=False,
    )
    agent.followup("go")
    asyncio.run(agent.run())
    exporter.close()
    (tool,) = [s for s in memory.get_finished_spans() if s.name == "execute_tool explode"]
    result = next(e for e in agent.session.events if e["type"] == "tool/result")
    expected = result["data"].get("error", {}).get("code", "tool_error")
    assert tool.attributes["error.type"] == expected and tool.status.status_code.name == "ERROR"
    wire = exported_bytes(memory.get_finished_spans())
    assert CANARY_RESULT.encode() not in wire and CANARY_ARGS.encode() not in wire
    assert CANARY_RESULT in json.dumps(al.thaw(result["data"]))  # the log has the message; the spans do not
