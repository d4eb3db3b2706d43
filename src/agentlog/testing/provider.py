"""An in-process scripted model: a :class:`~agentlog.llm.Provider` that streams prepared replies.

:class:`ScriptedProvider` is the test double for agent tests that need no HTTP server (for the wire-level
fake, see :class:`~agentlog.testing.demo_server.DemoModelServer`). Each call to ``stream`` takes the next reply of the
script and yields its chunks; the requests are kept in :attr:`ScriptedProvider.requests` for assertions.
A reply is a list of :data:`~agentlog.llm.StreamChunk` dicts, built by hand or with :func:`text_reply`,
:func:`tool_call_reply` and :func:`failure_reply`, which follow the provider contract (deltas, every
``block-end``, ``usage`` if given, exactly one ``finish``)::

    provider = ScriptedProvider([tool_call_reply(("call-1", "bash", '{"command": "ls"}')), text_reply("done")])

A call beyond the script raises :class:`AssertionError` (a test that asked the model once more than it
meant to); it is not turned into a failure ``finish``, so the agent loop never retries it.
This module does not need pytest.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Literal

from ..errors import LlmError
from ..kernel.events import TokenUsage
from ..llm.types import ABORTED, GenerateRequest, StreamChunk, failure_chunk, finish_chunk

__all__ = ["ScriptedProvider", "failure_reply", "text_reply", "tool_call_reply"]


def _usage(usage: TokenUsage | None) -> list[StreamChunk]:
    return [] if usage is None else [{"type": "usage", "usage": usage}]


def text_reply(
    text: str,
    *,
    pieces: int = 1,
    usage: TokenUsage | None = None,
    finish: Literal["stop", "tool-calls", "max-tokens"] = "stop",
) -> list[StreamChunk]:
    """One text block streamed in ``pieces`` deltas (of about equal size), then ``finish`` (``stop``)."""
    if pieces < 1:
        raise ValueError(f"pieces must be at least 1, got {pieces!r}")
    size = max(1, -(-len(text) // pieces))
    deltas = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    chunks: list[StreamChunk] = [{"type": "block-start", "index": 0, "blockType": "text"}]
    chunks.extend({"type": "text-delta", "index": 0, "text": delta} for delta in deltas)
    chunks.append({"type": "block-end", "index": 0, "block": {"type": "text", "text": text}})
    return [*chunks, *_usage(usage), finish_chunk(finish)]


def tool_call_reply(
    *calls: tuple[str, str, str], text: str | None = None, usage: TokenUsage | None = None
) -> list[StreamChunk]:
    """An optional text block, then one tool-call block per ``(call_id, name, arguments_json)``, then a
    ``tool-calls`` finish."""
    chunks: list[StreamChunk] = []
    ends: list[StreamChunk] = []
    if text is not None:
        chunks.append({"type": "block-start", "index": 0, "blockType": "text"})
        chunks.append({"type": "text-delta", "index": 0, "text": text})
        ends.append({"type": "block-end", "index": 0, "block": {"type": "text", "text": text}})
    for call_id, name, arguments in calls:
        index = len(ends)
        chunks.append({"type": "block-start", "index": index, "blockType": "tool-call"})
        chunks.append(
            {"type": "tool-call-delta", "index": index, "id": call_id, "name": name, "argumentsDelta": arguments}
        )
        block = {"type": "tool-call", "id": call_id, "name": name, "arguments": arguments}
        ends.append({"type": "block-end", "index": index, "block": block})
    return [*chunks, *ends, *_usage(usage), finish_chunk("tool-calls")]


def failure_reply(code: str, message: str = "scripted model failure") -> list[StreamChunk]:
    """A call that fails at once: only an error ``finish`` carrying an ``LlmFailure`` with ``code``."""
    return [failure_chunk(LlmError(message, code=code).failure)]


class ScriptedProvider:
    """Streams the replies of ``script`` in order, one per ``stream`` call (see the module docstring).

    ``signal`` is honoured like a real provider: once set, the stream ends with an ``aborted`` finish.
    Each chunk is a fresh copy, so a consumer may keep or mutate it.
    """

    def __init__(self, script: Iterable[Sequence[StreamChunk]], *, name: str = "scripted") -> None:
        self.name = name
        self.script: list[list[StreamChunk]] = [list(reply) for reply in script]
        self.requests: list[GenerateRequest] = []

    @property
    def remaining(self) -> int:
        """Replies not yet served."""
        return len(self.script) - len(self.requests)

    def __repr__(self) -> str:
        return f"ScriptedProvider(name={self.name!r}, replies={len(self.script)}, served={len(self.requests)})"

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Yield the next scripted reply's chunks."""
        number = len(self.requests) + 1
        if number > len(self.script):
            raise AssertionError(f"ScriptedProvider: model call {number} requested, the script has {len(self.script)}")
        self.requests.append(request)
        for chunk in self.script[number - 1]:
            if signal is not None and signal.is_set():
                yield failure_chunk(LlmError("model request aborted by caller", code=ABORTED).failure)
                return
            yield copy.deepcopy(chunk)
            await asyncio.sleep(0)
