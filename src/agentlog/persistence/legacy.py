"""Reading old logs: stored-event normalisation and the format checks (spec §3.6, §3.8).

A stored log is never rewritten on disk; instead every read passes the freshly parsed events through
:func:`normalize_stored_events`, which upgrades the shapes older harness builds wrote (pre-react-loop
``turn/start``/``turn/end``/``steering/message`` records, pre-identity messages) to the current
vocabulary, so the rest of the system only ever sees one format. The refusals live here too, so that
every read path (load, inspect, prepare, readFrom, live adoption) reports the same exact texts:

* :func:`assert_supported_events` — vocabulary that was *removed* (not upgraded) is refused;
* :func:`assert_events_known` — a type this build does not know, and that its writer did not mark
  ``ignorable``, means a newer harness wrote the log, so interpreting it would be a guess;
* :func:`assert_version` / :func:`version_refusal` — a foreign log format version.

Everything here is pure: plain parsed dicts in, plain dicts out, no I/O. Texts follow the original
byte for byte, including JavaScript's rendering of interpolated values (``1`` for ``1.0``, ``null``,
``undefined``), because tests and users match on them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeGuard

from .. import _accel
from ..errors import LegacyFormatError, MessageShapeError, SessionFormatUnsupportedError
from ..kernel._js import UNDEFINED as _UNDEFINED
from ..kernel._js import js_string as _js_string
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    REQUEST_HEADER,
    REQUEST_HEADER_DELTA,
    SESSION_FORMAT_VERSION,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    EventTypes,
    event_types,
)
from ..kernel.jsonvalue import MAX_SAFE_INTEGER

__all__ = [
    "assert_events_known",
    "assert_supported_events",
    "assert_version",
    "current_log_types",
    "legacy_message_id",
    "needs_legacy_prefix",
    "normalize_stored_events",
    "version_refusal",
]


Adopt = Callable[[dict[str, Any]], dict[str, Any]]
"""Per-event validation run right after an event's migration (the original's ``adoptSessionEvent``)."""


_JS_WHITESPACE = (
    " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_DECIMAL = re.compile(r"[+-]?(?:Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_JS_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def _js_to_number(value: object) -> float:
    """JavaScript's ``ToNumber(ToPrimitive(value))`` for a parsed JSON value (NaN when not numeric)."""
    if value is _UNDEFINED:
        return math.nan
    if value is None or value is False:
        return 0.0
    if value is True:
        return 1.0
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, (list, tuple, str)):
        text = (value if isinstance(value, str) else _js_string(value)).strip(_JS_WHITESPACE)
        if not text:
            return 0.0
        if _JS_RADIX.fullmatch(text):
            return float(int(text, 0))
        if _JS_DECIMAL.fullmatch(text):
            return float(text.replace("Infinity", "inf"))
    return math.nan


def _is_number(value: object) -> TypeGuard[float]:
    """JavaScript's ``typeof value === 'number'`` (a Python bool is a JSON boolean, not a number)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_safe_integer(value: object) -> TypeGuard[float]:
    """JavaScript's ``Number.isSafeInteger``: an integral float such as ``1.0`` counts, as in JS."""
    if type(value) is int:  # the common case, first
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return value.is_integer() and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    return False


# --- removed vocabulary ----------------------------------------------------------------------------

_HEADER_DELTA: Final = REQUEST_HEADER_DELTA
_MODE_SET: Final = "mode/set"
_REQUEST_HEADER: Final = REQUEST_HEADER
_REMOVED_TYPES: Final = frozenset({_HEADER_DELTA, _MODE_SET, _REQUEST_HEADER})


def assert_supported_events(session_id: object, events: Iterable[Mapping[str, Any]]) -> None:
    """Refuse vocabulary that was removed without an upgrade path (on every append and every read).

    The three checks are searched separately, in the original's priority order: a
    ``request/header-delta`` anywhere is reported before an earlier ``mode/set``, which is reported
    before an earlier fallback header. Refusing instead of dropping matters because these events
    changed what a request carried; replaying the log without them would silently send a different
    request than the one that was recorded.
    """
    mode_set: Mapping[str, Any] | None = None
    fallback: Mapping[str, Any] | None = None
    if isinstance(events, list):
        # Whole logs: one pass collects the types present; only header events can then still matter.
        try:
            present = {event.get("type") for event in events}
        except (TypeError, AttributeError):  # damaged data: the general loop below reports it
            present = None
        if present is not None:
            if not present & _REMOVED_TYPES:
                return
            if _HEADER_DELTA not in present and _MODE_SET not in present:
                events = [event for event in events if event.get("type") == _REQUEST_HEADER]
    for event in events:
        try:
            etype = event.get("type")
            if etype not in _REMOVED_TYPES:
                continue
        except TypeError:  # an unhashable "type" (damaged data) is none of the removed types
            continue
        if etype == _HEADER_DELTA:
            raise LegacyFormatError(
                f'session "{_js_string(session_id)}" contains unsupported legacy request/header-delta event '
                f"at seq {_js_string(event.get('seq', _UNDEFINED))}"
            )
        if etype == _MODE_SET:
            if mode_set is None:
                mode_set = event
        elif fallback is None:
            data = event.get("data")
            if isinstance(data, dict) and data.get("reason") == "fallback":
                fallback = event
    if mode_set is not None:
        raise LegacyFormatError(
            f'session "{_js_string(session_id)}" contains unsupported legacy mode/set event '
            f"at seq {_js_string(mode_set.get('seq', _UNDEFINED))}"
        )
    if fallback is not None:
        raise LegacyFormatError(
            f'session "{_js_string(session_id)}" contains unsupported legacy request/header reason "fallback" '
            f"at seq {_js_string(fallback.get('seq', _UNDEFINED))}"
        )


# --- normalisation ---------------------------------------------------------------------------------


def legacy_message_id(session_id: object, seq: object) -> str:
    """The id minted for a message written before messages had ids: stable, so re-reads agree."""
    return f"legacy-message:{_js_string(session_id)}:{_js_string(seq)}"


class _Pass:
    """State of one normalisation pass: the session id, the position, and message ids by seq.

    A legacy ``tool/result`` that *replaces* an earlier one inherits the replaced message's id, so the
    pass must know the message id recorded for any earlier seq. Recording ids for every event would
    tax every current-format log for a case only legacy logs have, so ids are indexed lazily: the
    first lookup indexes every event before the current one, later lookups only the new ones.
    """

    __slots__ = ("events", "ids", "index", "indexed", "session_id")

    def __init__(self, session_id: object, events: list[Any]) -> None:
        self.session_id = session_id
        self.events = events
        self.index = 0
        self.indexed = 0
        self.ids: dict[float, str] = {}

    def malformed(self, what: str, event: Mapping[str, Any]) -> MessageShapeError:
        seq = _js_string(event.get("seq", _UNDEFINED))
        return MessageShapeError(
            f'session "{_js_string(self.session_id)}" contains malformed pre-react-loop {what} at seq {seq}'
        )

    def legacy_id(self, event: Mapping[str, Any]) -> str:
        return legacy_message_id(self.session_id, event.get("seq", _UNDEFINED))

    def message_id_at(self, seq: float) -> str | None:
        """The id of the message last recorded for ``seq`` by an event before the current one."""
        ids = self.ids
        events = self.events
        for position in range(self.indexed, self.index):
            event = events[position]
            try:
                key = event.get("seq")
                data = event.get("data")
                etype = event.get("type")
            except AttributeError:  # not an object at all: contributes no id
                continue
            if type(key) is not int and type(key) is not float:
                continue  # a non-numeric seq can never equal a replacement's numeric start
            if not isinstance(data, dict):
                continue
            message = data if etype == USER_MESSAGE else data.get("message")
            if isinstance(message, dict):
                message_id = message.get("id")
                if isinstance(message_id, str):
                    ids[key] = message_id
        self.indexed = self.index  # positions only grow during a pass
        return ids.get(seq)


_Migration = Callable[[dict[str, Any], _Pass], dict[str, Any]]

_TURN_AND_TRIGGER: Final = frozenset({"turn", "trigger"})
_TURN_AND_REASON: Final = frozenset({"turn", "reason"})
_KIND_ONLY: Final = frozenset({"kind"})
_FLAT_STEERING: Final = frozenset({"turn", "content", "source"})
_WRAPPED_STEERING: Final = frozenset({"turn", "message"})
_ERROR_WITH_FAILURE: Final = frozenset({"kind", "step", "failure"})
_ERROR_WITH_MESSAGE: Final = frozenset({"kind", "step", "message"})
_ERROR_WITH_CODE: Final = frozenset({"kind", "step", "message", "code"})
_FAILURE_REQUIRED: Final = frozenset({"message", "code"})
_FAILURE_ALLOWED: Final = frozenset({"message", "code", "status", "providerRetryAfterMs", "requestId"})
_BARE_END_KINDS: Final = frozenset({"completed", "blocked", "max-tokens", "interrupted"})


def _with_data(event: dict[str, Any], data: Any) -> dict[str, Any]:
    """A copy of the envelope with new ``data`` in the same key position (the caller's dicts stay intact)."""
    migrated = dict(event)
    migrated["data"] = data
    return migrated


def _migrate_turn_start(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """Pre-react-loop ``turn/start`` carried a ``trigger``; the current one is just ``{turn}``."""
    data = event.get("data")
    if not isinstance(data, dict) or "trigger" not in data:
        return event
    turn = data.get("turn")
    trigger = data["trigger"]
    if (
        not _is_safe_integer(turn)
        or turn < 1
        or data.keys() != _TURN_AND_TRIGGER
        or not isinstance(trigger, dict)
        or not isinstance(trigger.get("kind"), str)
        or not trigger["kind"]
    ):
        raise state.malformed(TURN_START, event)
    return _with_data(event, {"turn": turn})


def _is_valid_failure(failure: Mapping[str, Any]) -> bool:
    keys = failure.keys()
    return (
        keys <= _FAILURE_ALLOWED
        and keys >= _FAILURE_REQUIRED
        and isinstance(failure["message"], str)
        and isinstance(failure["code"], str)
        and ("status" not in failure or _is_number(failure["status"]))
        and ("providerRetryAfterMs" not in failure or _is_number(failure["providerRetryAfterMs"]))
        and ("requestId" not in failure or isinstance(failure["requestId"], str))
    )


def _migrate_turn_end(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """Check every ``turn/end`` and map the pre-react-loop reasons onto the current ones.

    Current-format endings pass through the same checks (and come back as the same object), which is
    why a current-looking ending with a stray key — the short-lived ``step`` field — is refused rather
    than half-understood.
    """
    data = event.get("data")
    if not isinstance(data, dict):
        return event  # not a legacy shape; the session's own validation judges it
    turn = data.get("turn")
    reason = data.get("reason")
    if (
        not _is_safe_integer(turn)
        or turn < 1
        or data.keys() != _TURN_AND_REASON
        or not isinstance(reason, dict)
        or not isinstance(reason.get("kind"), str)
    ):
        raise state.malformed(TURN_END, event)
    kind = reason["kind"]
    if kind in _BARE_END_KINDS:
        if reason.keys() != _KIND_ONLY:
            raise state.malformed(TURN_END, event)
        return event
    current: dict[str, Any]
    if kind == "aborted":
        if "reason" in reason:
            return event
        if reason.keys() != _KIND_ONLY:
            raise state.malformed(TURN_END, event)
        current = {"kind": "aborted", "reason": {"kind": "legacy"}}
    elif kind == "disposed":
        if reason.keys() != _KIND_ONLY:
            raise state.malformed(TURN_END, event)
        current = {"kind": "aborted", "reason": {"kind": "disposed"}}
    elif kind == "error":
        if "error" in reason:
            return event
        step = reason.get("step")
        if not _is_safe_integer(step) or step < 0:
            raise state.malformed(TURN_END, event)
        failure = reason.get("failure")
        if isinstance(failure, dict) and reason.keys() == _ERROR_WITH_FAILURE and _is_valid_failure(failure):
            current = {"kind": "error", "error": failure}
        else:
            has_code = "code" in reason
            message = reason.get("message")
            code = reason.get("code")
            if (
                reason.keys() != (_ERROR_WITH_CODE if has_code else _ERROR_WITH_MESSAGE)
                or not isinstance(message, str)
                or (has_code and not isinstance(code, str))
            ):
                raise state.malformed(TURN_END, event)
            current = {"kind": "error", "error": {"message": message, "code": code if has_code else "UNKNOWN"}}
    else:
        return event  # a kind this module does not own (e.g. an extension's): keep it as written
    migrated_data = dict(data)
    migrated_data["reason"] = current  # keeps ``reason`` in its written position; no ``step`` survives
    return _with_data(event, migrated_data)


def _migrate_steering(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """Pre-react-loop steering became an ordinary ``user/message`` (then the message upgrade applies)."""
    data = event.get("data")
    if not isinstance(data, dict):
        raise state.malformed("steering/message", event)
    turn = data.get("turn")
    wrapped = data.get("message")
    migrated = dict(event)
    migrated["type"] = USER_MESSAGE
    if isinstance(wrapped, dict) and _is_safe_integer(turn) and data.keys() == _WRAPPED_STEERING:
        migrated["data"] = wrapped  # the wrapped message keeps its own id
    elif not _is_safe_integer(turn) or data.keys() != _FLAT_STEERING:
        raise state.malformed("steering/message", event)
    else:
        message = {key: value for key, value in data.items() if key != "turn"}
        message["id"] = state.legacy_id(event)
        message["role"] = "user"
        migrated["data"] = message
    return _migrate_user_message(migrated, state)


def _migrate_user_message(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """A pre-identity user message gets a stable legacy id and its role (appended after existing keys)."""
    data = event.get("data")
    if (
        not isinstance(data, dict)
        or "id" in data
        or "role" in data
        or "message" in data
        or "content" not in data
        or "source" not in data
    ):
        return event  # current, or malformed in a way the message validation reports
    message = dict(data)
    message["id"] = state.legacy_id(event)
    message["role"] = "user"
    return _with_data(event, message)


def _migrate_assistant_message(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """A pre-identity assistant message is wrapped: ``provenance`` becomes the model ``source``."""
    data = event.get("data")
    if not isinstance(data, dict) or "message" in data or "content" not in data or "provenance" not in data:
        return event
    provenance = data["provenance"]
    source: dict[str, Any] = dict(provenance) if isinstance(provenance, dict) else {}
    source["kind"] = "model"
    rest = {key: value for key, value in data.items() if key != "content" and key != "provenance"}
    rest["message"] = {
        "id": state.legacy_id(event),
        "role": "assistant",
        "content": data["content"],
        "source": source,
    }
    return _with_data(event, rest)


def _replacement_start(event: Mapping[str, Any]) -> float | None:
    """The replaced seq of a ``{op: 'replace', start: n}`` surface op, else ``None``."""
    op = event.get("surfaceOp")
    if isinstance(op, dict) and op.get("op") == "replace":
        start = op.get("start")
        if _is_number(start):
            return start
    return None


def _migrate_tool_result(event: dict[str, Any], state: _Pass) -> dict[str, Any]:
    """A pre-identity tool result is wrapped; a replacement keeps the id of the result it replaces.

    Inheriting the id is what lets a pruned result (a replacement of the full one) stay the *same*
    message for everything keyed by message id. When the replaced seq recorded no id the message is
    built without one, and message validation then refuses it ("lacks an identified message") — as the
    original does with its ``undefined`` id.
    """
    data = event.get("data")
    if (
        not isinstance(data, dict)
        or "message" in data
        or "callId" not in data
        or "content" not in data
        or "isError" not in data
    ):
        return event
    call_id = data["callId"]
    start = _replacement_start(event)
    message_id = state.legacy_id(event) if start is None else state.message_id_at(start)
    message: dict[str, Any] = {} if message_id is None else {"id": message_id}
    message["role"] = "user"
    message["content"] = [
        {"type": "tool-result", "toolCallId": call_id, "content": data["content"], "isError": data["isError"]}
    ]
    message["source"] = {"kind": "tool", "callId": call_id}
    rest = {key: value for key, value in data.items() if key not in ("callId", "content", "isError")}
    rest["message"] = message
    return _with_data(event, rest)


_MIGRATIONS: Final[dict[str, _Migration]] = {
    TURN_START: _migrate_turn_start,
    TURN_END: _migrate_turn_end,
    "steering/message": _migrate_steering,
    USER_MESSAGE: _migrate_user_message,
    ASSISTANT_MESSAGE: _migrate_assistant_message,
    TOOL_RESULT: _migrate_tool_result,
}
"""Each type is touched by at most one of turnStart → turnEnd → steering → message (steering chains
into the user-message upgrade itself), so one lookup picks the whole chain for an event."""


def normalize_stored_events(
    session_id: object,
    events: list[Any],
    *,
    adopt: Adopt | None = None,
) -> list[Any]:
    """Upgrade every legacy-shaped event of a freshly parsed stored log to the current vocabulary.

    Runs the original's per-event chain migrateLegacyTurnStart → migrateLegacyTurnEnd →
    migrateLegacySteering → migrateLegacyMessage. Migrated events are *new* dicts written into
    ``events`` at their index (their envelope key order kept; nested caller dicts are never mutated);
    every other event stays the very same object, and ``events`` itself is returned. A current-format
    event costs one dict lookup (its type is not one that ever had a legacy shape) or, for the message
    and turn types, a few key tests — this runs over whole 100k-event logs on every cold read.

    ``adopt``, when given, validates each event right after its migration (e.g.
    :func:`agentlog.seeds.adopt_session_event`) and its result is stored instead, so a log with
    several problems reports the one at the lowest seq first, as the original's interleaved loop does.

    Raises :class:`~agentlog.errors.MessageShapeError` for a malformed legacy record. Malformed
    *current-looking* message events are left as written for the message validation to report.
    """
    state = _Pass(session_id, events)
    migrations = _MIGRATIONS
    if adopt is None:
        for index, event in enumerate(events):
            try:
                migrate = migrations.get(event["type"])
            except (KeyError, TypeError):  # no/unhashable type, or not an object: nothing to upgrade
                continue
            if migrate is not None:
                state.index = index
                migrated = migrate(event, state)
                if migrated is not event:
                    events[index] = migrated
        return events
    for index, event in enumerate(events):
        try:
            migrate = migrations.get(event["type"])
        except (KeyError, TypeError):
            migrate = None
        if migrate is not None:
            state.index = index
            event = migrate(event, state)
        events[index] = adopt(event)
    return events


def _legacy_current(etype: str, event: Mapping[str, Any]) -> bool:
    """Whether ``event`` (a dict with a str type) passes the removed-vocabulary check and comes back from
    its migration unchanged and without an error. ``False`` means only "the full checks must look": it is
    also the answer wherever the judgement would need more than a few key tests."""
    data = event.get("data")
    if not isinstance(data, dict):  # every migration keeps such an event; removed vocabulary is refused
        return etype != "steering/message" and etype != _HEADER_DELTA and etype != _MODE_SET
    if etype == TURN_START:
        return "trigger" not in data
    if etype == TURN_END:
        turn = data.get("turn")
        if len(data) != 2 or type(turn) is not int or not 1 <= turn <= MAX_SAFE_INTEGER:
            return False
        reason = data.get("reason")
        if not isinstance(reason, dict):
            return False
        kind = reason.get("kind")
        if type(kind) is not str:
            return False
        if kind in _BARE_END_KINDS:
            return len(reason) == 1
        if kind == "aborted":
            return "reason" in reason
        if kind == "disposed":
            return False
        if kind == "error":
            return "error" in reason
        return True
    if etype == USER_MESSAGE:
        return "id" in data or "role" in data or "message" in data or "content" not in data or "source" not in data
    if etype == ASSISTANT_MESSAGE:
        return "message" in data or "content" not in data or "provenance" not in data
    if etype == TOOL_RESULT:
        return "message" in data or "callId" not in data or "content" not in data or "isError" not in data
    if etype == _REQUEST_HEADER:
        if "reason" not in data:
            return True
        reason = data["reason"]
        return type(reason) is str and reason != "fallback"
    return etype != "steering/message" and etype != _HEADER_DELTA and etype != _MODE_SET


def _current_log_types(items: list[Any], skip: type) -> set[str] | None:
    """Pure-Python twin of the accelerator's ``current_log_types`` (same answer for every input)."""
    present: set[str] = set()
    for event in items:
        if event.__class__ is skip:
            continue
        if not isinstance(event, dict):
            return None
        etype = event.get("type")
        if type(etype) is not str or not _legacy_current(etype, event):
            return None
        present.add(etype)
    return present


def current_log_types(items: list[Any], skip: type) -> set[str] | None:
    """The event types of a freshly parsed stored log that needs no legacy work, else ``None``.

    One pass over the log (items of class ``skip``, the packed chunk runs, are stepped over) instead of
    the three the checks take (removed vocabulary, normalisation, then the types present): a set means
    :func:`assert_supported_events` passes and :func:`normalize_stored_events` returns every event as
    the same object without an error, so a reader only has to check the returned types are known.
    ``None`` (an event that is legacy-shaped, removed vocabulary, or anything unusual) means run the
    full checks, which then give their exact result or error. Current-format logs are the common case,
    and on a cold load each separate pass over 100k parsed events costs tens of milliseconds.
    """
    if _c_current_log_types is not None:
        return _c_current_log_types(items, skip)  # type: ignore[no-any-return]
    return _current_log_types(items, skip)


_c_current_log_types: Any = _accel.current_log_types


def needs_legacy_prefix(event: Mapping[str, Any]) -> bool:
    """Whether normalising ``event`` needs the events before it (a suffix read must load the prefix).

    Legacy message ids come from the seq of the message's own event, and a legacy replacement inherits
    the id of an earlier event, so a read that starts mid-log falls back to a whole-log read when any
    event of the suffix has one of these shapes (the original's ``needsLegacyPrefix``).
    """
    etype = event.get("type")
    if etype == "steering/message":
        return True
    data = event.get("data")
    if not isinstance(data, dict):
        return False
    if etype == USER_MESSAGE:
        return "id" not in data and "content" in data
    if etype == ASSISTANT_MESSAGE:
        return "message" not in data and "content" in data
    if etype == TOOL_RESULT:
        return "message" not in data and "callId" in data
    return False


# --- unknown types and format versions --------------------------------------------------------------


def _raw_log_suffix(message: str, location: str | None) -> str:
    return message if location is None else f"{message} (raw log: {location})"


def assert_events_known(
    session_id: object,
    events: Iterable[Mapping[str, Any]],
    registry: EventTypes = event_types,
    *,
    location: str | None = None,
) -> None:
    """Refuse a normalised log containing a type this build does not know and may not skip.

    A writer marks events a reader may skip with ``ignorable: true``; an unmarked unknown type means
    a newer harness recorded something whose meaning this build cannot replay, so guessing would be
    worse than refusing. ``location`` (the raw log's path, when the backend has one) is appended as
    `` (raw log: <path>)`` and set on the error.
    """
    is_known = registry.is_known
    if isinstance(events, list):
        # Fast path for whole logs: one pass collecting the distinct types, then the set difference.
        try:
            present = {event.get("type") for event in events}
        except TypeError:  # an unhashable "type" (damaged data): the per-event loop reports it
            present = None
        if present is not None and all(type(t) is str and is_known(t) for t in present):
            return
    for event in events:
        etype = event.get("type")
        if (type(etype) is str and is_known(etype)) or event.get("ignorable") is True:
            continue
        message = (
            f'session "{_js_string(session_id)}" contains event type "{_js_string(event.get("type", _UNDEFINED))}" '
            f"(seq {_js_string(event.get('seq', _UNDEFINED))}) unknown to this harness and not marked ignorable; "
            "refusing to interpret the log — it was likely written by a newer harness"
        )
        raise SessionFormatUnsupportedError(_raw_log_suffix(message, location), location=location)


def version_refusal(session_id: object, version: object) -> str:
    """The refusal text for a log whose format version is not ours (``sessionFormatVersionRefusal``).

    ``version > 0`` is evaluated with JavaScript's coercions (so ``"2"`` reads as newer and ``null``
    as older), and both values are rendered as ``String()`` would: ``1.0`` → ``1``, ``123`` → ``123``.
    """
    rendered_id = _js_string(session_id)
    rendered = _js_string(version)
    current = SESSION_FORMAT_VERSION
    if _js_to_number(version) > current:
        return (
            f'session "{rendered_id}" uses log format v{rendered}, but this harness reads only v{current}: '
            "the log was written by a newer harness — upgrade the harness to open it"
        )
    return (
        f'session "{rendered_id}" uses log format v{rendered}, older than the supported v{current}, '
        "and this build ships no upgrade path for it"
    )


def assert_version(session_id: object, meta: Mapping[str, Any], *, location: str | None = None) -> None:
    """Refuse a header whose ``version`` is not exactly the supported one (JS ``===``: ``false`` is not ``0``).

    The message names ``session_id``; callers check the stored identity first, so it equals the
    header's ``id`` (the original interpolates ``meta.id``). It is checked before any event is looked
    at, because a foreign version may give every later structure a different meaning.
    """
    version = meta.get("version", _UNDEFINED)
    if _is_number(version) and version == SESSION_FORMAT_VERSION:
        return
    raise SessionFormatUnsupportedError(
        _raw_log_suffix(version_refusal(session_id, version), location), location=location
    )
