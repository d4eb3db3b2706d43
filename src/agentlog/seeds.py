"""Seed and load validation: what a borrowed or restored log must satisfy before it becomes a session.

Appends are deliberately lenient (the original accepts a ``user/message`` without an id), but a log
that is *loaded* is checked strictly, because a malformed stored message would otherwise be sent to a
model. Every check runs in the original's order so the first failure reported is the same one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._js import UNDEFINED, js_string
from .errors import AgentlogError, InvalidSeedError, MessageShapeError, SessionHeaderError
from .events import SESSION_FORMAT_VERSION, Event, new_event
from .jsonvalue import MAX_SAFE_INTEGER, FrozenDict, freeze_in_place, freeze_tree, snapshot_json, thaw

_MISSING: Any = UNDEFINED

ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})
MESSAGE_EVENT_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})


def is_safe_int(value: object) -> bool:
    return type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER


def is_nonneg_safe_int(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SAFE_INTEGER


def _nonempty_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


# --- header ----------------------------------------------------------------------------------------


def check_header_fields(header: Any, session_id: str) -> None:
    """The ten header rules of the original, first failure wins."""
    if not isinstance(header, dict):
        raise SessionHeaderError("session header is not a plain JSON record")
    version = header.get("version", _MISSING)
    if type(version) not in (int, float) or version != SESSION_FORMAT_VERSION:
        raise SessionHeaderError(f"session header version must be 0, got {js_string(version)}")
    hid = header.get("id", _MISSING)
    if hid != session_id or type(hid) is not str:
        raise SessionHeaderError(
            f'session header id "{js_string(hid)}" does not match session id "{session_id}"'
        )
    if not is_nonneg_safe_int(header.get("createdAt", _MISSING)):
        raise SessionHeaderError("session header createdAt must be a non-negative safe integer")
    cwd = header.get("cwd", _MISSING)
    if cwd is not _MISSING:
        if not isinstance(cwd, str):
            raise SessionHeaderError("session header cwd must be a string")
        if not cwd.startswith("/"):
            raise SessionHeaderError(f'session header cwd must be an absolute path, got "{cwd}"')
    parent = header.get("parentSession", _MISSING)
    if parent is not _MISSING and not isinstance(parent, str):
        raise SessionHeaderError("session header parentSession must be a string")
    seed_length = header.get("seedLength", _MISSING)
    if seed_length is not _MISSING and not is_nonneg_safe_int(seed_length):
        raise SessionHeaderError("session header seedLength must be a non-negative safe integer")
    origin = header.get("origin", _MISSING)
    if origin is not _MISSING and origin != "subagent":
        raise SessionHeaderError('session header origin must be "subagent"')
    depth = header.get("delegationDepth", _MISSING)
    if depth is not _MISSING and not is_nonneg_safe_int(depth):
        raise SessionHeaderError("session header delegationDepth must be a non-negative safe integer")
    preset = header.get("agentPreset", _MISSING)
    if preset is not _MISSING and not isinstance(preset, str):
        raise SessionHeaderError("session header agentPreset must be a string")


def snapshot_header(candidate: Any, session_id: str) -> FrozenDict:
    """Snapshot path: detach through the JSON gate, then validate."""
    try:
        copy = snapshot_json(candidate)
    except AgentlogError as err:
        raise SessionHeaderError(f"session header is not losslessly JSON-serializable: {err}") from None
    check_header_fields(copy, session_id)
    return copy  # type: ignore[no-any-return]


def restore_header(header: Any, session_id: str) -> FrozenDict:
    """Restore path: the caller hands over a fresh parsed graph; validate and freeze it, no JSON gate."""
    if isinstance(header, dict) and type(header) not in (dict, FrozenDict):
        raise SessionHeaderError("session header is not a plain JSON record")
    check_header_fields(header, session_id)
    frozen = freeze_tree(header)
    return frozen if isinstance(frozen, FrozenDict) else FrozenDict(frozen)


# --- event shapes ----------------------------------------------------------------------------------


def check_message_event_shape(event: Mapping[str, Any], subject: str, error: type[AgentlogError]) -> None:
    """Message-event shape rules (only for the three message types)."""
    etype = event.get("type")
    if etype not in MESSAGE_EVENT_TYPES:
        return
    data = event.get("data")
    message = data if etype == "user/message" else (data.get("message") if isinstance(data, dict) else None)
    if not isinstance(message, dict) or not _nonempty_str(message.get("id")):
        raise error(f"{subject} lacks an identified message")
    expected = "assistant" if etype == "assistant/message" else "user"
    if message.get("role") != expected:
        raise error(f'{subject} message must have role "{expected}"')
    source = message.get("source")
    if not isinstance(source, dict) or not _nonempty_str(source.get("kind")):
        raise error(f"{subject} message has invalid source")
    content = message.get("content")
    if not isinstance(content, list):
        raise error(f"{subject} message has invalid content")
    if etype == "assistant/message":
        if (
            source.get("kind") != "model"
            or not _nonempty_str(source.get("provider"))
            or not _nonempty_str(source.get("model"))
        ):
            raise error(f"{subject} message must have model source")
    elif etype == "tool/result":
        call_id = source.get("callId")
        if source.get("kind") != "tool" or not _nonempty_str(call_id):
            raise error(f"{subject} message must have tool source")
        if (
            len(content) != 1
            or not isinstance(content[0], dict)
            or content[0].get("type") != "tool-result"
            or not isinstance(content[0].get("content"), list)
        ):
            raise error(f"{subject} message must contain one tool-result block")
        if content[0].get("toolCallId") != call_id:
            raise error(f"{subject} message has mismatched tool call ids")


def check_request_header_shape(data: Any, index: int) -> None:
    header = data.get("header") if isinstance(data, dict) else None
    config = header.get("config") if isinstance(header, dict) else None
    if (
        not isinstance(config, dict)
        or not _nonempty_str(config.get("provider"))
        or not _nonempty_str(config.get("model"))
    ):
        raise InvalidSeedError(f"seed request/header at index {index} lacks provider/model", index=index)
    assert isinstance(header, dict)
    effort = config.get("reasoningEffort", _MISSING)
    if effort is not _MISSING and not _nonempty_str(effort):
        raise InvalidSeedError(f"seed request/header at index {index} has an invalid reasoningEffort", index=index)
    defaults = header.get("adapterDefaults", _MISSING)
    if defaults is not _MISSING:
        ok = isinstance(defaults, dict) and all(
            key in ("reasoningEffort", "maxTokens") and value is True for key, value in defaults.items()
        )
        if ok and defaults.get("reasoningEffort") is True and "reasoningEffort" not in config:
            ok = False
        if ok and defaults.get("maxTokens") is True and "maxTokens" not in config:
            ok = False
        if not ok:
            raise InvalidSeedError(f"seed request/header at index {index} has invalid adapterDefaults", index=index)


def legacy_request_header_problem(etype: Any, data: Any, location: str) -> str | None:
    """The refusal text for a removed request-header vocabulary, or None."""
    if etype == "request/header-delta":
        return f"{location} uses unsupported legacy request/header-delta format"
    if etype == "request/header" and isinstance(data, dict) and data.get("reason") == "fallback":
        return f'{location} uses unsupported legacy request/header reason "fallback"'
    return None


def check_seed_envelope(entry: Any, index: int) -> None:
    """Envelope rules for one seed event (before its seq and surface are checked)."""
    if isinstance(entry, dict) and entry.get("type") == "request/header-delta":
        raise InvalidSeedError(
            f"seed event at index {index} uses unsupported legacy request/header-delta format", index=index
        )
    bad = f"seed event at index {index} has an invalid event envelope"
    if not isinstance(entry, dict):
        raise InvalidSeedError(bad, index=index)
    for key in entry:
        if key not in ENVELOPE_KEYS:
            raise InvalidSeedError(bad, index=index)
    if (
        type(entry.get("type")) is not str
        or not is_nonneg_safe_int(entry.get("seq"))
        or not is_safe_int(entry.get("time"))
        or "data" not in entry
        or ("ignorable" in entry and entry["ignorable"] is not True)
    ):
        raise InvalidSeedError(bad, index=index)
    etype = entry["type"]
    if etype == "request/header":
        check_request_header_shape(entry["data"], index)
    elif etype in MESSAGE_EVENT_TYPES:
        check_message_event_shape(entry, f"seed {etype} at index {index}", InvalidSeedError)


# --- ownership helpers -----------------------------------------------------------------------------


def adopt_session_event(event: dict[str, Any]) -> dict[str, Any]:
    """Validate an exclusively owned event's message shape and freeze its message part.

    Python cannot freeze a dict in place, so the *message part* is swapped for its frozen equivalent
    inside the same event object, which is returned.
    """
    check_message_event_shape(event, f"session event at seq {event.get('seq')}", MessageShapeError)
    etype = event.get("type")
    if etype == "user/message":
        event["data"] = freeze_in_place(event["data"])
    elif etype in ("assistant/message", "tool/result"):
        data = event["data"]
        if type(data) is dict:
            data["message"] = freeze_in_place(data["message"])
    return event


def snapshot_session_event(event: Mapping[str, Any]) -> dict[str, Any]:
    """A detached deep copy of ``event`` with its message part validated and frozen."""
    copy = thaw(event)
    if not isinstance(copy, dict):
        raise MessageShapeError("session event must be a JSON object")
    return adopt_session_event(copy)


def event_from_restored(entry: dict[str, Any]) -> Event:
    """Freeze a validated restored entry (a fresh parsed graph) into an :class:`Event` without copying leaves."""
    frozen: dict[str, Any] = dict(entry)
    frozen["data"] = freeze_tree(entry["data"])
    op = entry.get("surfaceOp", _MISSING)
    if op is not _MISSING and type(op) is dict:
        frozen["surfaceOp"] = freeze_tree(op)
    sources = entry.get("sourceEventSeqs", _MISSING)
    if sources is not _MISSING and type(sources) is list:
        frozen["sourceEventSeqs"] = freeze_tree(sources)
    return new_event(frozen)


class SessionPreparation:
    """One unpublished session plus an optional release callback run once on disposal."""

    __slots__ = ("_release", "_released", "session")

    def __init__(self, session: Any, release: Callable[[], object] | None = None) -> None:
        self.session = session
        self._release = release
        self._released = False

    @classmethod
    def create(cls, session: Any, release: Callable[[], object] | None = None) -> SessionPreparation:
        return cls(session, release)

    def dispose(self) -> None:
        if self._released:
            return
        self._released = True
        if self._release is not None:
            self._release()

    def __enter__(self) -> SessionPreparation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.dispose()
