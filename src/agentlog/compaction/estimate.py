"""The token heuristic compaction prices with (runtime spec §5.4); defined in :mod:`agentlog.llm.tokens`."""

from ..llm.tokens import (
    BLOCK_OVERHEAD,
    CHARS_PER_TOKEN,
    ROLE_OVERHEAD,
    estimate_content,
    estimate_header,
    estimate_message,
    estimate_system_tokens,
    estimate_tools_tokens,
    js_json,
    js_json_length,
    js_length,
)

__all__ = [
    "BLOCK_OVERHEAD",
    "CHARS_PER_TOKEN",
    "ROLE_OVERHEAD",
    "estimate_content",
    "estimate_header",
    "estimate_message",
    "estimate_system_tokens",
    "estimate_tools_tokens",
    "js_json",
    "js_json_length",
    "js_length",
]
