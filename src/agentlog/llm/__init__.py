"""The LLM provider layer: a provider-neutral streaming contract, the assembler, and an
OpenAI-compatible (DeepSeek by default) provider and a replay provider. (The scripted local model server
for tests and demos is a test double: :class:`agentlog.testing.demo_server.DemoModelServer`.)

``agentlog.llm`` itself imports neither ``openai`` nor ``http.server``: the types and the assembler are
what the agent loop and replay code need, and they stay cheap to import. ``OpenAICompatibleProvider``
and the replay provider load their modules on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .assembler import AssembledResponse, Assembler, assemble, collect
from .types import (
    DEFAULT_RETRYABLE_CODES,
    FAILURE_CODES,
    FinishChunk,
    FinishReason,
    GenerateRequest,
    LlmError,
    MissingApiKeyError,
    Provider,
    StreamChunk,
    failure_chunk,
)

if TYPE_CHECKING:
    from .openai_compat import OpenAICompatibleProvider
    from .replay import ReplayExhaustedError, ReplayMismatchError, ReplayProvider

__all__ = [
    "DEFAULT_RETRYABLE_CODES",
    "FAILURE_CODES",
    "AssembledResponse",
    "Assembler",
    "FinishChunk",
    "FinishReason",
    "GenerateRequest",
    "LlmError",
    "MissingApiKeyError",
    "OpenAICompatibleProvider",
    "Provider",
    "ReplayExhaustedError",
    "ReplayMismatchError",
    "ReplayProvider",
    "StreamChunk",
    "assemble",
    "collect",
    "failure_chunk",
]

_EXPORTS = {
    ".openai_compat": ("OpenAICompatibleProvider",),
    ".replay": ("ReplayExhaustedError", "ReplayMismatchError", "ReplayProvider"),
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
