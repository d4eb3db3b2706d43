"""Chunks → assistant content (spec runtime §9.1, "Assembler").

This is the one assembly algorithm: the agent loop logs every raw chunk as ``assistant/chunk`` and feeds
the same chunks here to build the ``assistant/message``, so a replay of the logged chunks reproduces the
message exactly. It is pure (no I/O, no clock) and tolerant of imperfect providers:

* blocks come out in first-seen index order, whether a block was announced by ``block-start`` or only
  by its deltas;
* a ``block-end`` block is authoritative — the first one for an index wins and later deltas for that
  index are ignored, so a straggling delta cannot make the streamed text and the stored block disagree;
* blocks never closed are assembled from their deltas (a tool call without an id gets ``call-<index>``);
* on a ``max-tokens`` finish tool calls are dropped: their arguments may be cut off, and executing a
  truncated call would demand a result for a request the model never finished;
* a stream without ``finish`` counts as ``stop``; chunks after ``finish`` are ignored.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..kernel.events import LlmFailure, Message, TokenUsage
from ..kernel.messages import assistant_message
from .types import FinishReason, LlmError, StreamChunk

_STOP: FinishReason = {"kind": "stop"}


class _Partial:
    __slots__ = ("args", "block", "block_type", "call_id", "name", "text")

    def __init__(self, block_type: str) -> None:
        self.block_type = block_type
        self.text = ""
        self.args = ""
        self.call_id: str | None = None
        self.name: str | None = None
        self.block: dict[str, Any] | None = None


@dataclass(frozen=True)
class AssembledResponse:
    """The outcome of one model call: content blocks, usage and how it finished."""

    content: list[dict[str, Any]]
    usage: TokenUsage | None
    finish: FinishReason
    replay_state: Any = None
    finished: bool = field(default=True)
    """False when the stream ended without a ``finish`` chunk (``finish`` then reads ``stop``)."""

    @property
    def failure(self) -> LlmFailure | None:
        """The ``LlmFailure`` of an ``error``/``aborted`` finish, else ``None``."""
        reason = self.finish
        if reason["kind"] == "error" or reason["kind"] == "aborted":
            return reason["failure"]
        return None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool-call"]

    def raise_for_failure(self) -> None:
        """Raise the failure as :class:`LlmError` (the exception-style way to consume a call)."""
        failure = self.failure
        if failure is not None:
            raise LlmError.from_failure(failure)

    def message(self, *, provider: str, model: str, id: str | None = None) -> Message:
        """The ``assistant/message`` payload's message (source ``{kind: model, provider, model}``)."""
        return assistant_message(
            list(self.content), provider=provider, model=model, id=id, replay_state=self.replay_state
        )


class Assembler:
    """Incremental assembly: :meth:`push` each chunk in stream order, then read :meth:`result`."""

    def __init__(self) -> None:
        self._partials: dict[int, _Partial] = {}
        self._order: list[int] = []
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self._replay_state: Any = None

    def _ensure(self, index: int, block_type: str) -> _Partial:
        partial = self._partials.get(index)
        if partial is None:
            partial = self._partials[index] = _Partial(block_type)
            self._order.append(index)
        return partial

    def push(self, chunk: StreamChunk | Mapping[str, Any]) -> None:
        """Feed one chunk. Unknown chunk types are ignored (the vocabulary is merge-extensible)."""
        if self._finish is not None:
            return
        c: Mapping[str, Any] = chunk
        kind = c.get("type")
        if kind == "block-start":
            self._ensure(c["index"], c["blockType"])
        elif kind == "text-delta" or kind == "reasoning-delta":
            partial = self._ensure(c["index"], "text" if kind == "text-delta" else "reasoning")
            if partial.block is None:
                partial.text += c["text"]
        elif kind == "tool-call-delta":
            partial = self._ensure(c["index"], "tool-call")
            if partial.block is None:
                if c.get("id"):
                    partial.call_id = c["id"]
                if c.get("name"):
                    partial.name = c["name"]
                partial.args += c.get("argumentsDelta", "")
        elif kind == "block-end":
            block = c["block"]
            partial = self._ensure(c["index"], block.get("type", ""))
            if partial.block is None:
                partial.block = dict(block)
        elif kind == "usage":
            self._usage = c["usage"]
        elif kind == "finish":
            self._finish = c["reason"]
            self._replay_state = c.get("replayState")

    @staticmethod
    def _assemble(index: int, partial: _Partial) -> dict[str, Any] | None:
        if partial.block is not None:
            return partial.block
        if partial.block_type in ("text", "reasoning"):
            return {"type": partial.block_type, "text": partial.text}
        if partial.block_type == "tool-call":
            return {
                "type": "tool-call",
                "id": partial.call_id if partial.call_id is not None else f"call-{index}",
                "name": partial.name if partial.name is not None else "",
                "arguments": partial.args,
            }
        return None  # an unknown block type never closed: there is nothing to assemble

    @property
    def finish(self) -> FinishReason:
        return self._finish if self._finish is not None else _STOP

    @property
    def usage(self) -> TokenUsage | None:
        return self._usage

    def blocks(self) -> list[dict[str, Any]]:
        blocks = [b for i in self._order if (b := self._assemble(i, self._partials[i])) is not None]
        if self.finish["kind"] == "max-tokens":
            blocks = [b for b in blocks if b.get("type") != "tool-call"]
        return blocks

    def interrupted_blocks(self) -> list[dict[str, Any]]:
        """The prefix an interrupted call can keep: non-blank text and reasoning only.

        Tool calls are dropped whole because interruption precedes dispatch — keeping one would demand a
        fabricated result. Used for an ``assistant/message`` with ``interrupted: true``.
        """
        kept: list[dict[str, Any]] = []
        for index in self._order:
            block = self._assemble(index, self._partials[index])
            if block is not None and block.get("type") in ("text", "reasoning") and str(block["text"]).strip():
                kept.append(block)
        return kept

    def result(self) -> AssembledResponse:
        return AssembledResponse(
            content=self.blocks(),
            usage=self._usage,
            finish=self.finish,
            replay_state=self._replay_state,
            finished=self._finish is not None,
        )


def assemble(chunks: Iterable[StreamChunk | Mapping[str, Any]]) -> AssembledResponse:
    """Assemble a complete chunk sequence (e.g. the logged ``assistant/chunk`` payloads of one step)."""
    assembler = Assembler()
    for chunk in chunks:
        assembler.push(chunk)
    return assembler.result()


async def collect(
    chunks: AsyncIterable[StreamChunk], *, on_chunk: Callable[[StreamChunk], object] | None = None
) -> AssembledResponse:
    """Drain a provider stream into an :class:`AssembledResponse`, calling ``on_chunk`` for each chunk first
    (where the loop appends ``assistant/chunk``). Failures stay in ``finish``; call
    :meth:`AssembledResponse.raise_for_failure` to get them raised."""
    assembler = Assembler()
    async for chunk in chunks:
        if on_chunk is not None:
            on_chunk(chunk)
        assembler.push(chunk)
    return assembler.result()
