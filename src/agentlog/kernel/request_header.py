"""Request-header utilities: the non-history part of a model request, as logged full snapshots.

A ``request/header`` event carries the complete envelope (call config, system prompt, tool schemas);
there is no delta composition, so the current header is simply the last snapshot, canonicalised.
Canonical form drops empty optional fields so that "no tools" and "tools: []" cannot look like a
header change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .events import REQUEST_HEADER, EpochHeader

_MISSING: Any = object()


def canonical_header(header: Mapping[str, Any]) -> EpochHeader:
    """Return a new header with keys ``config, adapterDefaults?, system?, tools?`` (input untouched)."""
    config: Any = header.get("config")  # a mapping on every logged header (the session checks it on append)
    out: EpochHeader = {"config": config}
    defaults = header.get("adapterDefaults")
    if isinstance(defaults, Mapping) and (
        defaults.get("reasoningEffort") is True or defaults.get("maxTokens") is True
    ):
        out["adapterDefaults"] = header["adapterDefaults"]  # the same value as ``defaults``, read untyped
    system = header.get("system")
    if isinstance(system, str) and system:
        out["system"] = system
    tools = header.get("tools")
    if isinstance(tools, list) and tools:
        out["tools"] = tools
    return out


def _same_scalar(a: Any, b: Any) -> bool:
    """JavaScript ``===`` on JSON scalars (absent is its own value; ``True`` is not ``1``)."""
    if a is _MISSING or b is _MISSING:
        return a is b
    if type(a) is bool or type(b) is bool:
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def call_config_equals(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    for key in ("provider", "model", "reasoningEffort", "temperature", "maxTokens"):
        if not _same_scalar(a.get(key, _MISSING), b.get(key, _MISSING)):
            return False
    stop_a = a.get("stop", _MISSING)
    stop_b = b.get("stop", _MISSING)
    if stop_a is _MISSING or stop_b is _MISSING:
        return stop_a is stop_b
    if not isinstance(stop_a, list) or not isinstance(stop_b, list) or len(stop_a) != len(stop_b):
        return False
    return all(_same_scalar(x, y) for x, y in zip(stop_a, stop_b, strict=True))


def _marker(header: Mapping[str, Any], key: str) -> Any:
    defaults = header.get("adapterDefaults")
    if not isinstance(defaults, Mapping):
        return _MISSING
    return defaults.get(key, _MISSING)


def _same_json_text(a: Any, b: Any) -> bool:
    """Would ``JSON.stringify`` write ``a`` and ``b`` identically? (key order matters; ``1 == 1.0``)."""
    work = [(a, b)]
    while work:
        x, y = work.pop()
        if isinstance(x, dict):
            if not isinstance(y, dict) or list(x) != list(y):
                return False
            work.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            work.extend(zip(x, y, strict=True))
        elif not _same_scalar(x, y):
            return False
    return True


def header_equals(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equality of canonical headers; tool schemas compare as ordered JSON text."""
    config_a, config_b = a.get("config"), b.get("config")
    if not isinstance(config_a, Mapping) or not isinstance(config_b, Mapping):
        return False
    if not call_config_equals(config_a, config_b):
        return False
    for key in ("reasoningEffort", "maxTokens"):
        if not _same_scalar(_marker(a, key), _marker(b, key)):
            return False
    if not _same_scalar(a.get("system", _MISSING), b.get("system", _MISSING)):
        return False
    tools_a = a.get("tools") or []
    tools_b = b.get("tools") or []
    if len(tools_a) != len(tools_b):
        return False
    return all(_same_json_text(x, y) for x, y in zip(tools_a, tools_b, strict=True))


def fold_request_header(events: Iterable[Mapping[str, Any]], base: Any = None) -> Any:
    """The last ``request/header`` snapshot in ``events`` (canonical), else ``base`` itself."""
    state = base
    for event in events:
        if event.get("type") == REQUEST_HEADER:
            data = event.get("data")
            header = data.get("header") if isinstance(data, Mapping) else None
            if isinstance(header, Mapping):
                state = canonical_header(header)
    return state
