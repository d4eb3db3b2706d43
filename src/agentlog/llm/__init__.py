"""The LLM provider layer: a provider-neutral streaming contract, the assembler, and an
OpenAI-compatible (DeepSeek by default) provider plus a scripted local model server for tests and demos.

``agentlog.llm`` itself imports neither ``openai`` nor ``http.server``: the types and the assembler are
what the agent loop and replay code need, and they stay cheap to import. ``OpenAICompatibleProvider``
and ``DemoModelServer`` load their modules on first access.
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
    from .demo_server import DemoModelServer
    from .openai_compat import OpenAICompatibleProvider
    from .replay import ReplayExhaustedError, ReplayMismatchError, ReplayProvider

__all__ = [
    "DEFAULT_RETRYABLE_CODES",
    "FAILURE_CODES",
    "AssembledResponse",
    "Assembler",
    "DemoModelServer",
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
    ".demo_server": ("DemoModelServer",),
    ".replay": ("ReplayExhaustedError", "ReplayMismatchError", "ReplayProvider"),
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
