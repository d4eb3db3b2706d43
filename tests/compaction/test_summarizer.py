"""The default one-shot summarizer (runtime spec §5.9) against the original's ``compaction-basic.spec.ts``.

One test per case of its ``default one-shot summarizer`` block (19–31), named after the case. The
original's ``ScriptedAdapter`` is :class:`~agentlog.testing.provider.ScriptedProvider` (it records
every :class:`~agentlog.llm.types.GenerateRequest`); :class:`SignalProvider` also records the signal.
The original's ``ExposedCompactionEngine.runSummarize(input, agent)`` — the engine resolving target,
cap and signal for the agent, then one summarize call — is :func:`run_summarize`: the engine's
per-agent template (target, cap, session id, provider, signal) filled with the given input, handed to
the engine's summarizer. The original's adapter registry (one adapter per provider name) is the
summarizer's ``providers=`` routes; its ``llm/stream`` re-routing middleware is an explicit
``ProviderSummarizer(provider=...)`` that serves the call under its own name.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from agentlog.compaction import (
    CHECKPOINT_PREAMBLE,
    COMPACTION_INSTRUCTION,
    CompactionEngine,
    ExtractiveSummarizer,
    ProviderSummarizer,
    SummarizationInput,
    SummaryResult,
    frame_summary,
)
from agentlog.errors import LlmError, SummarizationError
from agentlog.kernel.jsonvalue import thaw
from agentlog.kernel.messages import (
    assistant_message,
    image_block,
    plugin_message,
    text_block,
    tool_call_block,
    tool_result_message,
    user_message,
)
from agentlog.kernel.session import Session
from agentlog.llm.types import GenerateRequest, StreamChunk
from agentlog.testing.provider import ScriptedProvider

from .test_region import MODEL, conversation, make_agent, routed_header, run

NO_TARGET = (
    "no provider/model available for summarization: set both BasicCompactionConfig summarization fields, "
    "route one request, or set both AgentOptions fields"
)


def reply(
    blocks: Sequence[Mapping[str, Any]],
    finish: Mapping[str, Any] | None = None,
    usage: Mapping[str, Any] | None = None,
) -> list[StreamChunk]:
    """The original's ``ScriptedAdapter`` stream: text/reasoning as deltas, other blocks whole."""
    chunks: list[Any] = []
    for index, block in enumerate(blocks):
        chunks.append({"type": "block-start", "index": index, "blockType": block["type"]})
        if block["type"] == "text":
            chunks.append({"type": "text-delta", "index": index, "text": block["text"]})
        elif block["type"] == "reasoning":
            chunks.append({"type": "reasoning-delta", "index": index, "text": block["text"]})
        else:
            chunks.append({"type": "block-end", "index": index, "block": dict(block)})
    if usage is not None:
        chunks.append({"type": "usage", "usage": dict(usage)})
    chunks.append({"type": "finish", "reason": dict(finish or {"kind": "stop"})})
    return chunks


class SignalProvider(ScriptedProvider):
    """The scripted provider, also recording the cancellation signal each call was given."""

    def __init__(self, script: Sequence[Sequence[StreamChunk]], *, name: str = MODEL) -> None:
        super().__init__(script, name=name)
        self.signals: list[asyncio.Event | None] = []

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        self.signals.append(signal)
        async for chunk in super().stream(request, signal=signal):
            yield chunk


def harness(
    blocks: Sequence[Mapping[str, Any]],
    finish: Mapping[str, Any] | None = None,
    model: str = MODEL,
    config: Mapping[str, Any] | None = None,
    *,
    usage: Mapping[str, Any] | None = None,
    summarizer: ProviderSummarizer | None = None,
) -> tuple[SignalProvider, CompactionEngine]:
    """The original's ``summarizerHarness``: one scripted route named ``model`` and a default-summarizer engine."""
    provider = SignalProvider([reply(blocks, finish, usage)], name=model)
    engine = CompactionEngine(
        pruner=None, summarizer=summarizer or ProviderSummarizer(), config=dict(config or {"auto": False})
    )
    return provider, engine


def run_summarize(engine: CompactionEngine, summary_input: SummarizationInput, agent: Any) -> SummaryResult:
    """The original's ``runSummarize``: resolve target/cap/signal for ``agent``, then one summarize call."""
    template = engine._template(agent, agent.session)
    full = dataclasses.replace(
        template, messages=summary_input.messages, system=summary_input.system, tools=summary_input.tools
    )
    return run(engine.summarizer.summarize(full))


def prompt_input(text: str) -> SummarizationInput:
    return SummarizationInput(messages=[plugin_message(text, plugin="test")])


def image(fill: str) -> dict[str, Any]:
    return image_block(f"sha256:{fill * 64}", "image/png", bytes=1, width=1, height=1)


# --- default one-shot summarizer (19–31) -----------------------------------------------------------


def test_requires_complete_raw_output_when_a_subclass_marks_one_local_llm_stream_call() -> None:
    """A result claiming one provider call (``llm_stream_call``) must carry that call's raw output."""
    with pytest.raises(SummarizationError, match="needs its complete raw_output") as raised:
        SummaryResult(summary=[text_block("s")], provider="p", model="m", llm_stream_call=True)
    assert raised.value.code == "INVALID_SUMMARY_RESULT"
    marked = SummaryResult(summary=[text_block("s")], provider="p", model="m", raw_output=[], llm_stream_call=True)
    assert marked.raw_output == []


def test_uses_configured_model_default_cap_forwards_cancellation_and_keeps_only_safe_text() -> None:
    """The configured pair and cap are used (not the agent's model); the agent's signal reaches the
    provider; only text blocks become the summary while the raw output keeps every block."""
    raw: list[dict[str, Any]] = [
        {"type": "reasoning", "text": "private"},
        {"type": "text", "text": "public summary"},
        dict(tool_call_block("unexpected", "x", "{}")),
    ]
    usage = {"inputTokens": 12, "outputTokens": 3}
    provider, engine = harness(
        raw,
        config={"auto": False, "summarizationProvider": MODEL, "summarizationModel": MODEL, "maxTokens": 321},
        usage=usage,
    )
    session = conversation(1)
    agent = make_agent(session, "fallback", provider=provider)

    output = run_summarize(engine, prompt_input("transcript"), agent)

    assert [thaw(block) for block in output.summary] == [{"type": "text", "text": "public summary"}]
    assert [thaw(block) for block in output.raw_output or ()] == raw
    assert output.llm_stream_call is True
    assert (output.provider, output.model, output.max_tokens) == (MODEL, MODEL, 321)
    assert output.usage is not None and thaw(output.usage) == usage
    request = provider.requests[0]
    assert (request.provider, request.model, request.max_tokens) == (MODEL, MODEL, 321)
    assert request.session_id == session.id
    assert request.purpose == "compaction"
    assert provider.signals[0] is agent.abort_signal
    instruction = request.messages[-1]["content"][0]
    assert instruction["type"] == "text" and "## Primary Request and Intent" in instruction["text"]


def test_replays_the_conversation_prefix_and_appends_the_instruction_as_the_final_message() -> None:
    """System, tools and messages go out verbatim (images included); one final user message carries the
    instruction, byte for byte the original's, with the original's plugin source."""
    provider, engine = harness([text_block("summary")])
    tools = [{"name": "do_thing", "description": "d", "parameters": {"type": "object"}}]
    prefix = plugin_message([text_block("earlier turn"), image("a")], plugin="test")

    run_summarize(
        engine,
        SummarizationInput(system="REPLAYED SYSTEM", tools=tools, messages=[prefix]),
        make_agent(conversation(1), MODEL, provider=provider),
    )

    request = provider.requests[0]
    assert request.system == "REPLAYED SYSTEM"
    assert [thaw(tool) for tool in request.tools] == tools
    assert len(request.messages) == 2
    assert thaw(request.messages[0]) == prefix
    last = request.messages[-1]
    assert last["role"] == "user"
    assert thaw(last["source"]) == {"kind": "plugin", "plugin": "dsh-compaction-basic"}
    text = last["content"][0]["text"]
    assert "Write concise English engineering prose." in text
    assert "numeric values, function signatures, and syntax fragments." in text
    assert "## Primary Request and Intent" in text
    assert text == COMPACTION_INSTRUCTION
    # the original's instruction, hashed from packages/compaction/compaction-basic/src/summarizer.ts
    assert len(COMPACTION_INSTRUCTION) == 1802
    assert (
        hashlib.sha256(COMPACTION_INSTRUCTION.encode()).hexdigest()
        == "3b7aa71f525b9a82afc2f1747c4434ceb7b3bc1fadf8b64c37c4e97db70d074b"
    )


def test_applies_the_routed_model_policy_without_changing_the_replayed_prefix() -> None:
    """The routed model's policy names another summarization route and cap; the call goes to that
    route with the conversation's own system prompt and prefix unchanged."""
    policy_provider = SignalProvider([reply([text_block("policy summary")])], name="policy-summary")
    provider, engine = harness(
        [text_block("unused default summary")],
        config={
            "auto": False,
            "maxTokens": 111,
            "modelPolicies": [
                {
                    "provider": MODEL,
                    "model": MODEL,
                    "summarizationProvider": "policy-summary",
                    "summarizationModel": "policy-summary",
                    "maxTokens": 222,
                }
            ],
        },
        summarizer=ProviderSummarizer(providers=[policy_provider]),
    )
    prefix = plugin_message("warm prefix", plugin="test")

    output = run_summarize(
        engine,
        SummarizationInput(system="WARM SYSTEM", messages=[prefix]),
        make_agent(conversation(1), "fallback", provider=provider),
    )

    assert (output.provider, output.model, output.max_tokens) == ("policy-summary", "policy-summary", 222)
    assert provider.requests == []
    request = policy_provider.requests[0]
    assert (request.provider, request.model, request.max_tokens) == ("policy-summary", "policy-summary", 222)
    assert request.system == "WARM SYSTEM"
    assert thaw(request.messages[0]) == prefix
    assert [thaw(block) for block in output.summary] == [{"type": "text", "text": "policy summary"}]


def test_resolves_the_latest_routed_provider_model_before_the_agent_options_pair() -> None:
    """Without a configured pair the latest request header's route wins over the agent's options."""
    provider, engine = harness([text_block("summary")], model="routed")
    session = conversation(1)
    session.append("request/header", {"header": routed_header("routed", "routed"), "reason": "initial"})

    output = run_summarize(engine, prompt_input("history"), make_agent(session, "fallback", provider=provider))
    assert (output.provider, output.model) == ("routed", "routed")
    assert (provider.requests[0].provider, provider.requests[0].model) == ("routed", "routed")


def test_records_the_model_actually_dispatched_after_one_shot_stream_routing() -> None:
    """When the summarizer's own provider serves the call in place of the routed one, the request and
    the ``compaction/summary`` record name the route and model that actually served it."""
    routed = SignalProvider([reply([text_block("routed summary")])], name="routed-summary-provider")
    routed.model = "routed-summary-model"  # type: ignore[attr-defined]
    agent_provider, engine = harness([text_block("unused")], summarizer=ProviderSummarizer(provider=routed))
    session = conversation(3, "large history " * 500)
    nodes = list(session.surface.nodes)

    run(
        engine.compact_region(
            session, nodes[0], nodes[3], agent=make_agent(session, window=None, provider=agent_provider)
        )
    )

    summary = next(event for event in reversed(session.events) if event["type"] == "compaction/summary")
    assert thaw(summary["data"]["summary"]) == [{"type": "text", "text": "routed summary"}]
    assert summary["data"]["llmStreamCall"] is True
    assert thaw(summary["data"]["rawOutput"]) == [{"type": "text", "text": "routed summary"}]
    assert (summary["data"]["provider"], summary["data"]["model"]) == (
        "routed-summary-provider",
        "routed-summary-model",
    )
    assert (routed.requests[0].provider, routed.requests[0].model) == (
        "routed-summary-provider",
        "routed-summary-model",
    )
    assert agent_provider.requests == []


def test_fails_clearly_when_no_complete_summarization_target_can_be_resolved() -> None:
    """No configured pair, no routed header and no agent model: a typed refusal with the original's text."""
    provider, engine = harness([text_block("unused")])
    agent = make_agent(Session.create("model-less"), None, provider=provider)
    with pytest.raises(SummarizationError) as raised:
        run_summarize(engine, prompt_input("history"), agent)
    assert str(raised.value) == NO_TARGET
    assert raised.value.code == "NO_SUMMARIZATION_TARGET"
    assert provider.requests == []


def test_uses_a_complete_agent_options_target_when_no_durable_route_exists() -> None:
    """A headerless session summarizes with the agent's provider/model pair."""
    provider, engine = harness([text_block("summary")])
    output = run_summarize(
        engine, prompt_input("history"), make_agent(Session.create("headerless-summary"), MODEL, provider=provider)
    )
    assert (output.provider, output.model) == (MODEL, MODEL)
    assert (provider.requests[0].provider, provider.requests[0].model) == (MODEL, MODEL)


@pytest.mark.parametrize(
    "options",
    [{"provider": "", "model": MODEL}, {"provider": MODEL}, {"provider": MODEL, "model": ""}],
    ids=["empty-provider", "missing-model", "empty-model"],
)
def test_rejects_incomplete_agent_options_target(options: dict[str, str]) -> None:
    """A half-set AgentOptions pair is no target (a plain context object, as in the original)."""
    provider, engine = harness([text_block("unused")])
    owner = SimpleNamespace(
        session=Session.create(f"incomplete-{options.get('model')}"),
        options=SimpleNamespace(**{"provider": None, "model": None, **options}),
        provider=provider,
    )
    with pytest.raises(SummarizationError, match=r"no provider/model available for summarization"):
        run_summarize(engine, prompt_input("history"), owner)
    assert provider.requests == []


@pytest.mark.parametrize(
    ("finish", "code", "pattern"),
    [
        (
            {"kind": "error", "failure": {"message": "provider failed", "code": "PROVIDER"}},
            "PROVIDER",
            "^provider failed$",
        ),
        ({"kind": "error", "failure": {"message": "opaque", "code": "UNKNOWN"}}, "UNKNOWN", "^opaque$"),
        (
            {"kind": "aborted", "failure": {"message": "summarization aborted", "code": "ABORTED"}},
            "ABORTED",
            "aborted",
        ),
        ({"kind": "max-tokens"}, "MAX_TOKENS", r"^summarization truncated at the token cap \(incomplete checkpoint\)$"),
    ],
    ids=["error-provider", "error-unknown", "aborted", "max-tokens"],
)
def test_rejects_terminal_finish(finish: dict[str, Any], code: str, pattern: str) -> None:
    """A failed, aborted or truncated call is refused with its message and code — never half a summary."""
    provider, engine = harness([], finish)
    with pytest.raises(LlmError, match=pattern) as raised:
        run_summarize(engine, prompt_input("history"), make_agent(conversation(1), MODEL, provider=provider))
    assert raised.value.code == code


def test_rejects_empty_or_reasoning_only_successful_output() -> None:
    """A successful call with no non-blank text is refused."""
    provider, engine = harness([{"type": "reasoning", "text": "private"}])
    with pytest.raises(SummarizationError, match=r"^summarization produced no text summary content$") as raised:
        run_summarize(engine, prompt_input("history"), make_agent(conversation(1), MODEL, provider=provider))
    assert raised.value.code == "EMPTY_SUMMARY"
    blank, blank_engine = harness([text_block("  \n\t ")])
    with pytest.raises(SummarizationError, match="no text summary content"):
        run_summarize(blank_engine, prompt_input("history"), make_agent(conversation(1), MODEL, provider=blank))


def test_rejects_image_summary_output_instead_of_silently_dropping_it() -> None:
    """An image anywhere in the output refuses it (``UNSUPPORTED_CONTENT``), even beside usable text."""
    provider, engine = harness([image("b"), text_block("partial summary")])
    with pytest.raises(LlmError, match=r"^compaction summary cannot contain image output$") as raised:
        run_summarize(engine, prompt_input("history"), make_agent(conversation(1), MODEL, provider=provider))
    assert raised.value.code == "UNSUPPORTED_CONTENT"


def test_rejects_image_summary_output_nested_in_a_tool_result() -> None:
    """An image nested in a tool-result block of the output is refused too."""
    provider, engine = harness([{"type": "tool-result", "toolCallId": "summary-tool", "content": [image("c")]}])
    with pytest.raises(LlmError) as raised:
        run_summarize(engine, prompt_input("history"), make_agent(conversation(1), MODEL, provider=provider))
    assert raised.value.code == "UNSUPPORTED_CONTENT"


# --- framing and the default path end to end ---------------------------------------------------------


def test_frame_summary_wraps_the_summary_in_the_checkpoint_preamble_and_tags() -> None:
    """The checkpoint content is the preamble and opening tag, the summary blocks, the closing tag."""
    assert CHECKPOINT_PREAMBLE == (
        "This is an automatically generated checkpoint condensing an earlier span of the conversation to free "
        "up context. Treat the captured context as established background and build on it without restating "
        "it. Continue the task directly from the messages that follow, without acknowledging this checkpoint."
    )
    assert frame_summary([text_block("a"), text_block("b")]) == [
        {"type": "text", "text": f"{CHECKPOINT_PREAMBLE}\n\n<compacted-summary>"},
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
        {"type": "text", "text": "</compacted-summary>"},
    ]


def test_the_default_summarizer_compacts_a_region_through_the_agents_provider() -> None:
    """``compact_region`` with the default summarizer: one compaction request replaying the routed
    prefix, and a ``compaction/summary`` marked as that one call with its raw output and usage."""
    usage = {"inputTokens": 900, "outputTokens": 4}
    provider, engine = harness([{"type": "reasoning", "text": "thinking"}, text_block("the summary")], usage=usage)
    session = conversation(3)
    session.append("request/header", {"header": routed_header(system="SYS"), "reason": "resume"})
    nodes = list(session.surface.nodes)
    expected = [thaw(session.derive_event_message(session.events[seq])) for seq in nodes[:4]]

    result = run(
        engine.compact_region(session, nodes[0], nodes[3], agent=make_agent(session, window=None, provider=provider))
    )

    request = provider.requests[0]
    assert request.system == "SYS"
    assert [thaw(message) for message in request.messages[:-1]] == expected
    assert request.messages[-1]["content"][0]["text"] == COMPACTION_INSTRUCTION
    assert (request.provider, request.model, request.max_tokens, request.purpose) == (MODEL, MODEL, 8192, "compaction")
    data = session.events[result.summary_seq]["data"]
    assert list(data) == [
        "compactionId",
        "summary",
        "rawOutput",
        "llmStreamCall",
        "shadowedRange",
        "shadowedSeqs",
        "shadowedTokenCount",
        "provider",
        "model",
        "maxTokens",
        "usage",
    ]
    assert thaw(data["rawOutput"]) == [
        {"type": "reasoning", "text": "thinking"},
        {"type": "text", "text": "the summary"},
    ]
    assert thaw(data["summary"]) == [{"type": "text", "text": "the summary"}]
    assert thaw(data["usage"]) == usage


# --- the model-independent summarizer ----------------------------------------------------------------


def test_the_extractive_summarizer_fills_every_section_in_order_without_a_model() -> None:
    """The model-free summarizer answers the instruction's structure (all eight sections, in order, "(none)"
    when empty) from the messages: first and latest request, tool calls, failed results, latest answer;
    a prior checkpoint's text is not copied forward; the result is deterministic."""
    messages = [
        plugin_message(
            [text_block(f"{CHECKPOINT_PREAMBLE}\n\n<compacted-summary>"), text_block("old")], plugin="compact"
        ),
        user_message("fix the parser"),
        dict(
            assistant_message(
                [text_block("looking"), tool_call_block("c1", "read", '{"path": "a.py"}')], provider="p", model="m"
            )
        ),
        tool_result_message("c1", "no such file", is_error=True),
        dict(assistant_message("it is fixed now", provider="p", model="m")),
        user_message("now add tests"),
    ]
    summarizer = ExtractiveSummarizer()
    first = run(summarizer.summarize(SummarizationInput(messages=messages)))
    again = run(summarizer.summarize(SummarizationInput(messages=messages)))
    assert first == again
    assert (first.provider, first.model, first.llm_stream_call) == ("agentlog", "extractive", False)
    text = first.summary[0]["text"]
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [line for line in COMPACTION_INSTRUCTION.splitlines() if line.startswith("## ")]
    assert "- fix the parser" in text
    assert "- now add tests" in text
    assert "- no such file" in text
    assert "- it is fixed now" in text
    assert 'read({"path": "a.py"})' in text
    assert "old" not in text
    assert "- (none)" in text


def test_the_extractive_summarizer_compacts_a_region_and_the_checkpoint_is_smaller() -> None:
    """Plugged into the engine, it commits a checkpoint that is cheaper than what it shadows."""
    engine = CompactionEngine(pruner=None, summarizer=ExtractiveSummarizer(), config={"auto": False})
    session = conversation(4)
    nodes = list(session.surface.nodes)
    result = run(engine.compact_region(session, nodes[0], nodes[5]))
    checkpoint = session.events[result.summary_seq + 1]
    assert engine.meter.estimate_message(checkpoint["data"]) < result.shadowed_token_count
    assert session.events[result.summary_seq]["data"]["provider"] == "agentlog"
