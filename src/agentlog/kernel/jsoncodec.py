"""JSON text for storage: orjson speed, with iterative fallbacks for what orjson refuses.

Whatever the JSON gate accepts must persist and load back unchanged. orjson refuses to *write* values
nested deeper than 254 levels and to *read* text nested deeper than 1024; the gate accepts any depth.
For those rare values this module falls back to explicit-stack encoders and parsers, so depth is
bounded by ``max_depth`` (a typed error beyond it), never by the interpreter's recursion limit.

Output is compact JSON with keys in insertion order, as the original writes it. Numbers differ from
the original's bytes in one way only: an integral float is written ``1.0`` (the original writes ``1``);
both parse to the same value in either implementation.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from ..errors import JsonDecodeError as JsonDecodeError
from ..errors import ResourceExhaustedError

scanstring = json.decoder.scanstring  # type: ignore[attr-defined]

DEFAULT_MAX_DEPTH = 100_000
"""Nesting accepted by :func:`loads` (the gate accepts deeper values only when memory allows)."""


# --- encoding --------------------------------------------------------------------------------------


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of a gate-accepted value, at any nesting depth."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as err:
        if "Recursion limit" not in str(err):
            raise
    return _dumps_iterative(value)


def _dumps_iterative(value: Any) -> bytes:
    out: list[bytes] = []
    # Work items: ("v", value) to emit a value, or ("raw", bytes) to emit literal text.
    work: list[tuple[str, Any]] = [("v", value)]
    while work:
        kind, item = work.pop()
        if kind == "raw":
            out.append(item)
            continue
        if isinstance(item, dict):
            if not item:
                out.append(b"{}")
                continue
            out.append(b"{")
            entries = list(item.items())
            work.append(("raw", b"}"))
            for index in range(len(entries) - 1, -1, -1):
                key, child = entries[index]
                work.append(("v", child))
                work.append(("raw", (b"," if index else b"") + orjson.dumps(key) + b":"))
            continue
        if isinstance(item, list):
            if not item:
                out.append(b"[]")
                continue
            out.append(b"[")
            work.append(("raw", b"]"))
            for index in range(len(item) - 1, -1, -1):
                work.append(("v", item[index]))
                if index:
                    work.append(("raw", b","))
            continue
        out.append(orjson.dumps(item))
    return b"".join(out)


# --- decoding --------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WS = re.compile(r"[ \t\n\r]*")


def out_of_memory(size: int) -> ResourceExhaustedError:
    """The typed refusal for a parse that ran out of memory: never a JSON (or corruption) problem."""
    return ResourceExhaustedError(
        f"out of memory while parsing {size} bytes of JSON; nothing was read or modified. Retry with more "
        "memory available (or a smaller load budget, so the limit is reported before memory runs out)"
    )


def is_out_of_memory(err: orjson.JSONDecodeError) -> bool:
    """orjson reports its parser's allocation failure as a decode error; tell the two apart."""
    return "memory" in str(err)


def loads(data: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse JSON text of any nesting up to ``max_depth``; raise :class:`JsonDecodeError` otherwise.

    Bytes must be valid UTF-8 (invalid bytes are an error, never replaced); running out of memory is a
    :class:`~agentlog.errors.ResourceExhaustedError`, never a decode error.
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        if is_out_of_memory(err):
            raise out_of_memory(len(data)) from None
        if "depth limit" not in str(err):
            raise JsonDecodeError(f"invalid JSON: {err}") from None
    except MemoryError:
        raise out_of_memory(len(data)) from None
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as err:
            raise JsonDecodeError(f"invalid JSON: not valid UTF-8 at byte {err.start}") from None
    else:
        text = data
    return _loads_iterative(text, max_depth)


def _loads_iterative(text: str, max_depth: int) -> Any:
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    n = len(text)
    # Stack of open containers: (container, pending_key_or_None)
    stack: list[list[Any]] = []
    result: Any = None
    have_result = False

    def fail(message: str) -> JsonDecodeError:
        return JsonDecodeError(f"invalid JSON at char {pos}: {message}")

    def read_key(at: int) -> tuple[str, int]:
        """An object key and its colon at ``at``; returns the key and the position of its value."""
        if at >= n or text[at] != '"':
            raise JsonDecodeError(f"invalid JSON at char {at}: expected an object key")
        try:
            key, at = scanstring(text, at + 1, True)
        except json.JSONDecodeError as err:
            raise JsonDecodeError(f"invalid JSON at char {at}: {err.msg}") from None
        at = _WS.match(text, at).end()  # type: ignore[union-attr]
        if at >= n or text[at] != ":":
            raise JsonDecodeError(f"invalid JSON at char {at}: expected ':'")
        return key, _WS.match(text, at + 1).end()  # type: ignore[union-attr]

    while True:
        if pos >= n:
            raise fail("unexpected end of text")
        ch = text[pos]
        value: Any
        is_value = True
        if ch == "{" or ch == "[":
            if len(stack) >= max_depth:
                raise JsonDecodeError(f"JSON nesting exceeds {max_depth} levels at char {pos}")
            container: Any = {} if ch == "{" else []
            stack.append([container, None])
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            closer = "}" if ch == "{" else "]"
            if pos < n and text[pos] == closer:
                stack.pop()
                value = container
                pos += 1
            else:
                if ch == "{":
                    stack[-1][1], pos = read_key(pos)
                continue
        elif ch == '"':
            try:
                value, pos = scanstring(text, pos + 1, True)
            except json.JSONDecodeError as err:
                raise fail(err.msg) from None
        elif text.startswith("true", pos):
            value, pos = True, pos + 4
        elif text.startswith("false", pos):
            value, pos = False, pos + 5
        elif text.startswith("null", pos):
            value, pos = None, pos + 4
        else:
            match = _NUMBER.match(text, pos)
            if match is None or match.end() == pos:
                raise fail("unexpected character")
            literal = match.group(0)
            value = float(literal) if match.group(1) or match.group(2) else int(literal)
            pos = match.end()
        # Attach the completed value, then close as many containers as the text closes.
        while is_value:
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if not stack:
                if pos != n:
                    raise fail("extra data after the value")
                result, have_result = value, True
                break
            top = stack[-1]
            if isinstance(top[0], dict):
                top[0][top[1]] = value
            else:
                top[0].append(value)
            if pos >= n:
                raise fail("unexpected end of text")
            sep = text[pos]
            if sep == ",":
                pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
                if isinstance(top[0], dict):
                    top[1], pos = read_key(pos)
                break
            expected = "}" if isinstance(top[0], dict) else "]"
            if sep != expected:
                raise fail(f"expected ',' or '{expected}'")
            pos += 1
            value = stack.pop()[0]
        if have_result:
            return result
