"""Seed and load validation: what a borrowed or restored log must satisfy before it becomes a session.

Appends and loads share one set of rules (message shapes, the core types' data shapes, request
headers): whatever ``Session.append`` accepts loads again, because a log agentlog wrote itself must
never be refused as corrupt. Every load check runs in the original's order so the first failure
reported is the same one; append refusals add the fix ("build it with agentlog.user_message(text)").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import AgentlogError, EventDataError, InvalidSeedError, MessageShapeError, SessionHeaderError
from ._js import UNDEFINED, js_string
from .events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    REQUEST_HEADER,
    REQUEST_HEADER_DELTA,
    SESSION_FORMAT_VERSION,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Event,
    new_event,
)
from .jsoncodec import dumps
from .jsonvalue import MAX_SAFE_INTEGER, FrozenDict, freeze_in_place, freeze_tree, snapshot_json, thaw

_MISSING: Any = UNDEFINED

ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})
MESSAGE_EVENT_TYPES = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT})


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
    if etype.__class__ is not str or etype not in MESSAGE_EVENT_TYPES:  # (an unhashable type is none of them)
        return
    check_message_shape(etype, event.get("data"), subject, error)


def check_message_shape(etype: Any, data: Any, subject: str, error: type[AgentlogError]) -> None:
    """The message rules of one message event's ``data`` (``etype`` is one of the three message types)."""
    message = data if etype == USER_MESSAGE else (data.get("message") if isinstance(data, dict) else None)
    if not isinstance(message, dict) or not _nonempty_str(message.get("id")):
        raise error(f"{subject} lacks an identified message")
    expected = "assistant" if etype == ASSISTANT_MESSAGE else "user"
    if message.get("role") != expected:
        raise error(f'{subject} message must have role "{expected}"')
    source = message.get("source")
    if not isinstance(source, dict) or not _nonempty_str(source.get("kind")):
        raise error(f"{subject} message has invalid source")
    content = message.get("content")
    if not isinstance(content, list):
        raise error(f"{subject} message has invalid content")
    if etype == ASSISTANT_MESSAGE:
        if (
            source.get("kind") != "model"
            or not _nonempty_str(source.get("provider"))
            or not _nonempty_str(source.get("model"))
        ):
            raise error(f"{subject} message must have model source")
    elif etype == TOOL_RESULT:
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


# --- core data shapes: one rule set for append and load ------------------------------------------------
#
# Each rule returns what is wrong with an event's ``data`` (a phrase completing "<type> data ..."), or
# None. Appends and every load path run the same rules, so whatever ``Session.append`` accepts loads
# again. They are written for the common case first (one class test per field), because appends of
# ``assistant/chunk`` are the hot path.

_DICT_CLASSES = (dict, FrozenDict)
_BARE_END_KINDS = frozenset({"completed", "blocked", "max-tokens", "interrupted"})
_TURN_END_KEYS = frozenset({"turn", "reason"})


def _positive_int(value: object) -> bool:
    """A positive safe integer (JavaScript's ``Number.isSafeInteger``: an integral float counts)."""
    if value.__class__ is int:
        return 0 < value <= MAX_SAFE_INTEGER
    return value.__class__ is float and value.is_integer() and 0 < value <= MAX_SAFE_INTEGER


def _nonneg_int(value: object) -> bool:
    if value.__class__ is int:
        return 0 <= value <= MAX_SAFE_INTEGER
    return value.__class__ is float and value.is_integer() and 0 <= value <= MAX_SAFE_INTEGER


def _shown(value: Any) -> str:
    """A value as JSON text for a refusal message (``missing`` when absent), cut to 60 characters."""
    if value is _MISSING:
        return "missing"
    text = dumps(value).decode("utf-8", "replace")
    return text if len(text) <= 60 else text[:57] + "..."


def _turn_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"must be an object, got {_shown(data)}"
    if not _positive_int(data.get("turn", _MISSING)):
        return f'turn must be a positive integer (e.g. {{"turn": 1}}), got {_shown(data.get("turn", _MISSING))}'
    return None


def _turn_start_problem(data: Any) -> str | None:
    problem = _turn_problem(data)
    if problem is None and "trigger" in data:
        return 'carries the pre-react-loop "trigger" key (current form: {"turn": n})'
    return problem


def _turn_end_problem(data: Any) -> str | None:
    problem = _turn_problem(data)
    if problem is not None:
        return problem
    if data.keys() != _TURN_END_KEYS:
        return 'must have exactly the keys "turn" and "reason"'
    reason = data["reason"]
    if not isinstance(reason, dict) or not isinstance(reason.get("kind"), str):
        return 'reason must be an object with a string "kind"'
    kind = reason["kind"]
    if kind in _BARE_END_KINDS:
        if len(reason) != 1:
            return f'reason of kind "{kind}" must have no other keys'
    elif kind == "aborted":
        if "reason" not in reason:
            return 'reason of kind "aborted" must say why: {"kind": "aborted", "reason": {"kind": ...}}'
    elif kind == "disposed":
        return 'reason "disposed" is the pre-react-loop form: write {"kind": "aborted", "reason": {"kind": "disposed"}}'
    elif kind == "error" and "error" not in reason:
        return 'reason of kind "error" must carry "error": {"message": ..., "code": ...}'
    return None


def _step_problem(data: Any) -> str | None:
    problem = _turn_problem(data)
    if problem is None and not _nonneg_int(data.get("step", _MISSING)):
        return f"step must be a non-negative integer, got {_shown(data.get('step', _MISSING))}"
    return problem


def _chunk_problem(data: Any) -> str | None:
    # The hot path: a well-formed chunk costs three lookups and class tests.
    if data.__class__ is FrozenDict:
        turn = data.get("turn")
        step = data.get("step")
        chunk = data.get("chunk")
        if (
            turn.__class__ is int
            and step.__class__ is int
            and chunk.__class__ is FrozenDict
            and 0 < turn <= MAX_SAFE_INTEGER
            and 0 <= step <= MAX_SAFE_INTEGER
            and chunk.get("type").__class__ is str
        ):
            return None
    problem = _step_problem(data)
    if problem is not None:
        return problem
    chunk = data.get("chunk")
    if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
        return 'chunk must be an object with a string "type" (build it with agentlog.messages.text_delta(...))'
    return None


def _tool_call_problem(data: Any) -> str | None:
    problem = _step_problem(data)
    if problem is not None:
        return problem
    if not _nonempty_str(data.get("callId")):
        return "callId must be a non-empty string"
    if not isinstance(data.get("name"), str):
        return "name must be a string"
    if not isinstance(data.get("arguments"), str):
        return "arguments must be the raw JSON text of the call (a string)"
    return None


CORE_DATA_RULES: dict[str, Callable[[Any], str | None]] = {
    TURN_START: _turn_start_problem,
    TURN_END: _turn_end_problem,
    STEP_START: _step_problem,
    STEP_END: _step_problem,
    ASSISTANT_CHUNK: _chunk_problem,
    TOOL_CALL: _tool_call_problem,
}
"""Data rules of the core log-only types (message types and ``request/header`` have their own checks)."""

_MESSAGE_HINTS = {
    USER_MESSAGE: "user/message data must be a message; build it with agentlog.user_message(text)",
    ASSISTANT_MESSAGE: (
        'assistant/message data must be {"turn": n, "step": n, "message": ...} with the message built by '
        "agentlog.assistant_message(blocks, provider=..., model=...)"
    ),
    TOOL_RESULT: (
        'tool/result data must be {"turn": n, "step": n, "message": ...} with the message built by '
        "agentlog.tool_result_message(call_id, text)"
    ),
}


def check_append_data(etype: str, data: Any) -> None:
    """The append side of the shared rules: raise a typed refusal that names the fix."""
    rule = CORE_DATA_RULES.get(etype)
    if rule is not None:
        problem = rule(data)
        if problem is not None:
            raise EventDataError(f'session event "{etype}" data {problem}')
        return
    if etype in MESSAGE_EVENT_TYPES:
        try:
            check_message_shape(etype, data, f'session event "{etype}"', MessageShapeError)
        except MessageShapeError as err:
            raise MessageShapeError(f"{err}: {_MESSAGE_HINTS[etype]}") from None
    elif etype == REQUEST_HEADER:
        try:
            check_request_header_shape(data, 0)
        except InvalidSeedError as err:
            text = str(err).replace("seed request/header at index 0", 'session event "request/header"')
            raise EventDataError(
                f"{text}: build its data as {{\"header\": {{\"config\": {{\"provider\": ..., \"model\": ...}}, ...}}, "
                '"reason": "initial"}'
            ) from None


def check_seed_data(etype: str, data: Any, index: int) -> None:
    """The load side of the shared rules for one seed/restored event (message types excluded)."""
    rule = CORE_DATA_RULES.get(etype)
    if rule is not None:
        problem = rule(data)
        if problem is not None:
            raise InvalidSeedError(f"seed {etype} at index {index} data {problem}", index=index)


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
    if etype == REQUEST_HEADER_DELTA:
        return f"{location} uses unsupported legacy request/header-delta format"
    if etype == REQUEST_HEADER and isinstance(data, dict) and data.get("reason") == "fallback":
        return f'{location} uses unsupported legacy request/header reason "fallback"'
    return None


def check_seed_envelope(entry: Any, index: int) -> None:
    """Envelope rules for one seed event (before its seq and surface are checked)."""
    if isinstance(entry, dict) and entry.get("type") == REQUEST_HEADER_DELTA:
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
    if etype == REQUEST_HEADER:
        check_request_header_shape(entry["data"], index)
    elif etype in MESSAGE_EVENT_TYPES:
        check_message_event_shape(entry, f"seed {etype} at index {index}", InvalidSeedError)
    else:
        check_seed_data(etype, entry["data"], index)


# --- ownership helpers -----------------------------------------------------------------------------


def adopt_session_event(event: dict[str, Any]) -> dict[str, Any]:
    """Validate an exclusively owned event's message shape and freeze its message part.

    Python cannot freeze a dict in place, so the *message part* is swapped for its frozen equivalent
    inside the same event object, which is returned.
    """
    check_message_event_shape(event, f"session event at seq {event.get('seq')}", MessageShapeError)
    etype = event.get("type")
    if etype == USER_MESSAGE:
        event["data"] = freeze_in_place(event["data"])
    elif etype in (ASSISTANT_MESSAGE, TOOL_RESULT):
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
