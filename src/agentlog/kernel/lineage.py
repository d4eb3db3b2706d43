"""Subagent lineage as data: the delegation events' validators and the header's depth rule (runtime
spec §6.8, core-session §3).

Pure functions of JSON values, in the kernel so every reader has them: the default event-type registry
(:data:`agentlog.kernel.events.event_types`) validates ``subagent/descriptor``, ``approval/policy`` and
``sandbox/mode`` data with them on append and on load, and the CLI reads a session's lineage with
:func:`delegation_depth_of` without importing the agent. The names and ``TypedDict`` shapes live in
:mod:`agentlog.agent.events` (the delegation's vocabulary); the rules that write them in
:mod:`agentlog.agent.subagents`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .jsonvalue import MAX_SAFE_INTEGER

__all__ = [
    "SUBAGENT_DESCRIPTOR_VERSION",
    "check_approval_policy",
    "check_sandbox_mode",
    "check_subagent_descriptor",
    "delegation_depth_of",
    "is_depth",
]

SUBAGENT_DESCRIPTOR_VERSION: Final = 2
"""The descriptor version this library writes and reads (the spec's; any other version is refused)."""

_DESCRIPTOR_KEYS: Final = frozenset(
    {"version", "mode", "provider", "label", "agentProvider", "agentModel", "persona", "toolFilter"}
)
_CONTINUABLE_ONLY: Final = ("agentProvider", "agentModel", "persona", "toolFilter")
_SANDBOX_MODES: Final = ("read-only", "workspace-write", "danger-full-access")


def _record(data: Any, what: str, keys: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be an object")
    extra = sorted(set(data) - keys)
    if extra:
        raise ValueError(f"{what} has unknown field {extra[0]!r}")
    return data


def _source(data: Mapping[str, Any], what: str) -> None:
    if "source" in data and data["source"] != "delegation":
        raise ValueError(f'{what} source must be "delegation" when present, got {data["source"]!r}')


def check_subagent_descriptor(data: Any) -> None:
    """Refuse a ``subagent/descriptor`` that is not the spec's version-2 shape (``ValueError``)."""
    record = _record(data, "a subagent descriptor", _DESCRIPTOR_KEYS)
    version = record.get("version")
    if type(version) is not int or version != SUBAGENT_DESCRIPTOR_VERSION:
        raise ValueError(f"unknown descriptor version {version!r} (this library reads version 2)")
    mode = record.get("mode")
    if mode not in ("one-shot", "continuable"):
        raise ValueError(f'mode must be "one-shot" or "continuable", got {mode!r}')
    provider = record.get("provider")
    # The original's descriptor parser asks strings of provider and label, not non-empty ones.
    if not isinstance(provider, str):
        raise ValueError("provider must be a string")
    if "label" in record and not isinstance(record["label"], str):
        raise ValueError("label must be a string when present")
    if mode == "continuable" and "label" not in record:
        raise ValueError("a continuable descriptor requires a label")
    for key in _CONTINUABLE_ONLY:
        if key not in record:
            continue
        if mode != "continuable":
            raise ValueError(f"{key} belongs to continuable descriptors only")
        if key == "toolFilter":
            _check_tool_filter(record[key])
        elif not isinstance(record[key], str):
            raise ValueError(f"{key} must be a string")


def _names(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)


def _check_tool_filter(value: Any) -> None:
    """The original's ``ToolRestriction``: ``{allow?: string[], deny?: string[]}`` with at least one of
    them (what its descriptor parser accepts); a plain array of tool names, which agentlog wrote before it
    wrote the original's shape, is still read."""
    if _names(value):
        return
    if not isinstance(value, Mapping):
        raise ValueError("toolFilter must be an object {allow?, deny?} of tool-name arrays")
    extra = sorted(set(value) - {"allow", "deny"})
    if extra:
        raise ValueError(f"toolFilter has unknown field {extra[0]!r}")
    if "allow" not in value and "deny" not in value:
        raise ValueError("toolFilter must declare allow and/or deny")
    for key in ("allow", "deny"):
        if key in value and not _names(value[key]):
            raise ValueError(f"toolFilter.{key} must be an array of strings")


def check_approval_policy(data: Any) -> None:
    """Refuse an ``approval/policy`` that is not ``{policy: "ask"|"never", source?: "delegation"}``."""
    record = _record(data, "an approval policy", frozenset({"policy", "source"}))
    if record.get("policy") not in ("ask", "never"):
        raise ValueError(f'policy must be "ask" or "never", got {record.get("policy")!r}')
    _source(record, "the approval policy")


def check_sandbox_mode(data: Any) -> None:
    """Refuse a ``sandbox/mode`` that is not ``{mode, source?: "delegation"}`` with a known mode."""
    record = _record(data, "a sandbox mode", frozenset({"mode", "source"}))
    if record.get("mode") not in _SANDBOX_MODES:
        raise ValueError(f"mode must be one of {', '.join(_SANDBOX_MODES)}, got {record.get('mode')!r}")
    _source(record, "the sandbox mode")


def is_depth(value: object) -> bool:
    """A non-negative safe integer (``bool`` is not one): a valid ``delegationDepth`` or ``max_depth``."""
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def delegation_depth_of(header: Mapping[str, Any], option_depth: int = 0) -> int:
    """The spec's ``delegationDepthOf``: ``max(header.delegationDepth or 0, option_depth)``.

    The header is authoritative and monotone: a resumed child keeps its recorded depth, whatever the
    caller believes (``option_depth``, the depth an embedding says the agent runs at, can only raise it).
    """
    recorded = header.get("delegationDepth")
    return max(recorded if type(recorded) is int and recorded >= 0 else 0, option_depth)
