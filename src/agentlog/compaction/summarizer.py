"""Producing the summary a checkpoint carries (runtime spec §5.9).

The default summarizer makes one direct streamed call that replays the last request's ``system`` and
``tools`` verbatim and the shadowed messages in surface order, then appends one user message with
:data:`COMPACTION_INSTRUCTION`: the call is a genuine prefix of the conversation, so the provider's
prompt cache is reused and only the instruction is new input. Its output is refused when it is
truncated, failed, contains an image, or has no text — a checkpoint must never be half a summary.

Any object with ``async summarize(input) -> SummaryResult`` can replace it (:class:`Summarizer`);
:class:`ExtractiveSummarizer` needs no model at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from ..errors import LlmError, SummarizationError
from ..kernel.events import TokenUsage
from ..kernel.jsonvalue import thaw
from ..kernel.messages import user_message
from ..llm.assembler import Assembler
from ..llm.compaction_protocol import COMPACTION_MARKER, SUMMARY_CLOSE_TAG, SUMMARY_OPEN_TAG, SUMMARY_SECTIONS
from ..llm.types import GenerateRequest, Provider

_SECTION_GUIDES: Final = (
    "- [the user's original and evolving goals; quote verbatim where the exact wording matters]",
    "- [technologies, frameworks, patterns, and conventions in play]",
    "- [exact path: why it matters, key changes or snippets]",
    "- [error: how it was resolved, plus any related user feedback]",
    "- [explicitly requested work not yet completed]",
    "- [precisely what was in progress at this checkpoint]",
    '- [the single next action, directly in line with the most recent request, or "(none)"]',
    "- [decisions and their rationale, constraints, user preferences, open questions, data needed to continue]",
)
"""What each of :data:`~agentlog.llm.compaction_protocol.SUMMARY_SECTIONS` holds, in the same order."""

COMPACTION_INSTRUCTION: Final = "\n".join(
    [
        f"{COMPACTION_MARKER} for this AI coding assistant. Condense the conversation "
        "ABOVE into a structured checkpoint that lets another model resume the work with no loss of essential "
        "context.",
        "",
        "Output EXACTLY the Markdown structure below: keep every section, in order. Use terse bullets, not prose "
        'paragraphs. Write "(none)" for an empty section — never drop a section.',
        "",
        *(
            line
            for name, guide in zip(SUMMARY_SECTIONS, _SECTION_GUIDES, strict=True)
            for line in (f"## {name}", guide, "")
        ),
        "Rules:",
        "- Write concise English engineering prose. Preserve exact file paths, commands, error strings, "
        "identifiers, numeric values, function signatures, and syntax fragments.",
        "- Capture user feedback and explicit instructions faithfully, especially corrections.",
        "- Do NOT mention this summarization request or that the context was compacted.",
        "- Output only the checkpoint text: do not call any tool or take any other action.",
        f"- If the conversation already contains a {SUMMARY_OPEN_TAG} block, it is a PRIOR checkpoint. Do not "
        "copy it forward verbatim: preserve still-true facts, drop stale ones, and merge newer information into "
        "a single consolidated summary under the same structure.",
    ]
)
"""The summarization directive, sent as the final user message (byte for byte the original's)."""

CHECKPOINT_PREAMBLE: Final = (
    "This is an automatically generated checkpoint condensing an earlier span of the conversation to free up "
    "context. Treat the captured context as established background and build on it without restating it. "
    "Continue the task directly from the messages that follow, without acknowledging this checkpoint."
)
"""Framing that makes the replacement user message established context."""

INSTRUCTION_SOURCE: Final = {"kind": "plugin", "plugin": "dsh-compaction-basic"}
"""The source of the instruction message (the original's plugin name, so requests stay comparable)."""

NO_TARGET_MESSAGE: Final = (
    "no provider/model available for summarization: set both BasicCompactionConfig summarization fields, "
    "route one request, or set both AgentOptions fields"
)


@dataclass(frozen=True)
class SummaryTarget:
    """The provider route and model a summary is requested from."""

    provider: str
    model: str


@dataclass(frozen=True)
class SummarizationInput:
    """What a summarizer condenses: the replayed prefix plus the context of the call.

    ``system``/``tools``/``messages`` are the conversation's own (the last request header's system prompt
    and tools, then the shadowed messages in surface order). The remaining fields are for summarizers that
    call a model; a model-independent summarizer ignores them.
    """

    messages: Sequence[Mapping[str, Any]]
    system: str | None = None
    tools: Sequence[Mapping[str, Any]] | None = None
    session_id: str | None = None
    target: SummaryTarget | None = None
    max_tokens: int | None = None
    provider: Provider | None = None
    signal: asyncio.Event | None = None


@dataclass(frozen=True)
class SummaryResult:
    """A summary plus the facts of the call that produced it (recorded in ``compaction/summary``).

    ``llm_stream_call=True`` states that exactly one call through the provider produced ``raw_output``, so
    the one-shot request can be reconstructed from the log; it therefore requires ``raw_output``.
    """

    summary: Sequence[Mapping[str, Any]]
    provider: str
    model: str
    max_tokens: int | None = None
    usage: TokenUsage | None = None
    raw_output: Sequence[Mapping[str, Any]] | None = None
    llm_stream_call: bool = False
    calls: int = field(default=1, compare=False)

    def __post_init__(self) -> None:
        if self.llm_stream_call and self.raw_output is None:
            raise SummarizationError(
                "a summary marked llm_stream_call needs its complete raw_output", code="INVALID_SUMMARY_RESULT"
            )
        if not isinstance(self.provider, str) or not isinstance(self.model, str):
            raise SummarizationError(
                "a summary names the provider and model that wrote it", code="INVALID_SUMMARY_RESULT"
            )


@runtime_checkable
class Summarizer(Protocol):
    """Turns the shadowed region into summary content blocks (text blocks; never images)."""

    async def summarize(self, input: SummarizationInput) -> SummaryResult: ...


def frame_summary(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The checkpoint message's content: preamble, the summary inside ``<compacted-summary>`` tags."""
    return [
        {"type": "text", "text": f"{CHECKPOINT_PREAMBLE}\n\n{SUMMARY_OPEN_TAG}"},
        *(dict(thaw(block)) for block in summary),
        {"type": "text", "text": SUMMARY_CLOSE_TAG},
    ]


def content_has_image(blocks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any block, or any block nested in a tool result, is an image."""
    for block in blocks:
        kind = block.get("type")
        if kind == "image":
            return True
        if kind == "tool-result" and content_has_image(block.get("content") or ()):
            return True
    return False


def safe_summary_text(blocks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Only the text blocks of a model's output; an image anywhere refuses the whole output."""
    if content_has_image(blocks):
        raise LlmError("compaction summary cannot contain image output", code="UNSUPPORTED_CONTENT")
    return [dict(block) for block in blocks if block.get("type") == "text"]


def instruction_message() -> dict[str, Any]:
    """A fresh final user message carrying :data:`COMPACTION_INSTRUCTION`."""
    return dict(user_message([{"type": "text", "text": COMPACTION_INSTRUCTION}], source=dict(INSTRUCTION_SOURCE)))


class ProviderSummarizer:
    """The default summarizer: one streamed call through a :class:`~agentlog.llm.types.Provider`.

    The call goes to the route the target names (the original's adapter registry): the first of
    ``provider`` and ``providers`` whose ``name`` is the target's provider. Otherwise an explicit
    ``provider`` serves it under its own name (and its own default ``model``, if it has one), and the
    request and the logged ``compaction/summary`` name what actually served it; without one, the
    provider the input carries (the agent's, which serves every route the agent's options name) does.
    """

    def __init__(self, provider: Provider | None = None, *, providers: Sequence[Provider] = ()) -> None:
        self.provider = provider
        self.providers = tuple(providers)

    def route(self, target: SummaryTarget, fallback: Provider | None) -> tuple[Provider, str, str] | None:
        """The provider that serves ``target``, and the provider name and model the request carries."""
        for candidate in (self.provider, *self.providers):
            if candidate is not None and getattr(candidate, "name", None) == target.provider:
                return candidate, target.provider, target.model
        if self.provider is not None:
            own_model = getattr(self.provider, "model", None)
            name = getattr(self.provider, "name", None) or target.provider
            return self.provider, name, own_model if isinstance(own_model, str) and own_model else target.model
        if fallback is not None:
            return fallback, target.provider, target.model
        return None

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        target = input.target
        routed = self.route(target, input.provider) if target is not None else None
        if target is None or routed is None:
            raise SummarizationError(NO_TARGET_MESSAGE, code="NO_SUMMARIZATION_TARGET")
        provider, provider_name, model = routed
        messages = [*(thaw(m) for m in input.messages), instruction_message()]
        request = GenerateRequest(
            provider=provider_name,
            model=model,
            messages=messages,
            system=input.system,
            tools=list(thaw(t) for t in (input.tools or ())),
            max_tokens=input.max_tokens,
            session_id=input.session_id,
            purpose="compaction",
        )
        assembler = Assembler()
        async for chunk in provider.stream(request, signal=input.signal):
            assembler.push(chunk)
        finish = assembler.finish
        if finish["kind"] in ("error", "aborted"):
            failure = finish["failure"]
            raise LlmError(failure["message"], code=failure["code"])
        if finish["kind"] == "max-tokens":
            raise LlmError("summarization truncated at the token cap (incomplete checkpoint)", code="MAX_TOKENS")
        raw = assembler.blocks()
        summary = safe_summary_text(raw)
        if not any(str(block.get("text", "")).strip() for block in summary):
            raise SummarizationError("summarization produced no text summary content", code="EMPTY_SUMMARY")
        return SummaryResult(
            summary=summary,
            provider=request.provider,
            model=request.model or getattr(provider, "model", "") or "",
            max_tokens=input.max_tokens,
            usage=assembler.usage,
            raw_output=raw,
            llm_stream_call=True,
        )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _texts(content: Sequence[Mapping[str, Any]]) -> str:
    return " ".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


class ExtractiveSummarizer:
    """A model-independent summarizer: the checkpoint structure filled from the messages themselves.

    Deterministic and free: the first and latest user requests, the tools that were called (name and
    clipped arguments), failed tool results, and the latest assistant text, each clipped to ``clip``
    characters. Useful offline, in tests and benchmarks, and as a fallback when no model is reachable;
    it keeps much less than a model would.
    """

    provider_name: Final = "agentlog"
    model_name: Final = "extractive"

    def __init__(self, *, clip: int = 200, max_items: int = 8) -> None:
        self.clip = clip
        self.max_items = max_items

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        users: list[str] = []
        calls: list[str] = []
        errors: list[str] = []
        latest_assistant = ""
        for message in input.messages:
            role = message.get("role")
            content = message.get("content") or ()
            for block in content:
                if block.get("type") == "tool-result" and block.get("isError"):
                    errors.append(_clip(_texts(block.get("content") or ()), self.clip))
            if role == "user":
                text = _texts(content)
                if SUMMARY_OPEN_TAG in text or any(SUMMARY_OPEN_TAG in str(b.get("text", "")) for b in content):
                    continue  # a prior checkpoint: its facts are summarized again below only if repeated
                if text.strip():
                    users.append(text)
            elif role == "assistant":
                text = _texts(content)
                if text.strip():
                    latest_assistant = text
                for block in content:
                    if block.get("type") == "tool-call":
                        calls.append(f"{block.get('name', '')}({_clip(str(block.get('arguments', '')), 80)})")
        clip, most = self.clip, self.max_items
        body = {
            "Primary Request and Intent": [_clip(users[0], clip)] if users else [],
            "Key Technical Concepts": [],
            "Files and Code": [],
            "Errors and Fixes": errors[-most:],
            "Pending Jobs": [_clip(users[-1], clip)] if len(users) > 1 else [],
            "Current Work": [_clip(latest_assistant, clip)] if latest_assistant else [],
            "Next Step": [],
            "Critical Context": [f"tools called: {', '.join(calls[-most:])}"] if calls else [],
        }
        lines: list[str] = []
        for section in SUMMARY_SECTIONS:
            lines.append(f"## {section}")
            items = body[section]
            lines.extend(f"- {item}" for item in items) if items else lines.append("- (none)")
            lines.append("")
        return SummaryResult(
            summary=[{"type": "text", "text": "\n".join(lines).rstrip()}],
            provider=self.provider_name,
            model=self.model_name,
        )
