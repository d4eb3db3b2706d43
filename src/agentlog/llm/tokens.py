"""The fixed token heuristic (runtime spec §5.4): the compaction meter, pruner and display folds price with it.

It lives in ``agentlog.llm`` (beside the model vocabulary it prices) so that the local demo model server can
price requests exactly as compaction does; ``agentlog.compaction.estimate`` re-exports it.

Every price here must equal the original's on the same content, because logged shadow prices
(``compaction/prune``, ``compaction/summary.shadowedTokenCount``) are read by other implementations.
The original measures JavaScript ``string.length`` — UTF-16 code units — so a character outside the
Basic Multilingual Plane (an emoji) counts 2, and ``JSON.stringify`` output (not Python's) is what an
unknown block or the tool list is priced by. Both are reproduced exactly here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from ..kernel._js import js_number

CHARS_PER_TOKEN: Final = 4
BLOCK_OVERHEAD: Final = 4
ROLE_OVERHEAD: Final = 4


def js_length(text: str) -> int:
    """JavaScript ``text.length``: UTF-16 code units (a non-BMP code point counts 2)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _tokens(length: int) -> int:
    return -(-length // CHARS_PER_TOKEN)  # ceil for non-negative ints, no float rounding


def js_json(value: Any) -> str:
    """``JSON.stringify(value)`` for a JSON value: compact, keys in order, JavaScript number text.

    orjson writes strings exactly as JavaScript does (the same escapes, non-ASCII kept) but numbers
    differently (``1.0`` vs ``1``, ``1e21`` vs ``1e+21``), so only numbers are rendered by hand.
    """
    if isinstance(value, str):
        try:
            return orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # a lone surrogate: JavaScript writes it as a \uXXXX escape
            return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False))
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return "null"
        return js_number(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{js_json(str(k))}:{js_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(js_json(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, Mapping):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_float(v) for v in value)
    return False


def js_json_length(value: Any) -> int:
    """UTF-16 length of ``JSON.stringify(value)`` (fast path: orjson when no float can differ)."""
    if not _has_float(value):
        try:
            return js_length(orjson.dumps(value).decode())
        except orjson.JSONEncodeError:
            pass  # a lone surrogate somewhere: the exact (slower) rendering below
    return js_length(js_json(value))


def estimate_content(blocks: Sequence[Mapping[str, Any]]) -> int:
    """Heuristic tokens of content blocks, recursing into tool results."""
    tokens = 0
    for block in blocks:
        kind = block.get("type")
        if kind == "text" or kind == "reasoning":
            tokens += _tokens(js_length(block["text"])) + BLOCK_OVERHEAD
        elif kind == "tool-call":
            tokens += _tokens(js_length(block["name"])) + _tokens(js_length(block["arguments"])) + BLOCK_OVERHEAD
        elif kind == "tool-result":
            tokens += estimate_content(block["content"]) + BLOCK_OVERHEAD
        else:  # an image or a plugin block: a conservative price of its JSON
            tokens += BLOCK_OVERHEAD + _tokens(js_json_length(block))
    return tokens


def estimate_message(message: Mapping[str, Any]) -> int:
    """Heuristic tokens of one model-visible message (content plus role framing)."""
    return estimate_content(message["content"]) + ROLE_OVERHEAD


def estimate_system_tokens(header: Mapping[str, Any] | None) -> int:
    """The system prompt's price; 0 without one."""
    if header is None or header.get("system") is None:
        return 0
    return _tokens(js_length(header["system"])) + ROLE_OVERHEAD


def estimate_tools_tokens(header: Mapping[str, Any] | None) -> int:
    """The tool schemas' price; 0 without tools."""
    if header is None:
        return 0
    tools = header.get("tools")
    if not tools:
        return 0
    return _tokens(js_json_length(tools)) + BLOCK_OVERHEAD


def estimate_header(header: Mapping[str, Any] | None) -> int:
    """The request envelope's price outside the surface: system prompt plus tools."""
    return estimate_system_tokens(header) + estimate_tools_tokens(header)
