"""The telemetry record and the pure mapping from a session event to it (runtime spec §6.11).

This module is the whole outbound vocabulary of the telemetry sink, and it does no I/O: it maps one
committed event (or one operational signal) to one :class:`TelemetryRecord`, decides which
``assistant/chunk`` events ship, and runs the redact waterfall. :mod:`agentlog.telemetry.sink` owns the
timing (when a record is built, queued and handed to a sink); everything here is a function of its
arguments, so the shapes can be checked without a thread or a store.

The shapes are the original's (``packages/session/session-telemetry``), kept so a receiver written for
it reads ours:

* **ledger** records mirror one logged event: ``time`` is the event's append time (epoch ms),
  ``attributes`` carry only identity (``session.id``, ``event.type``, ``event.seq``, plus
  ``session.cwd`` / ``session.parent_id`` / ``session.seed_length`` when the header has them), and
  ``body`` is a plain deep copy of the event's ``data`` — never the frozen object of the log, so
  neither a redaction rule nor a sink can touch history;
* **ops** records carry the two signals that have no home in the log (``agent-error``, ``shutdown``)
  and deliberately no ``event.seq`` / ``event.type``: they are signals to alert on, never rows to
  count or dedupe;
* ``severity`` is pre-mapped with the original's strings: ``"error"`` for a ``tool/result`` whose
  first block has ``isError``, a ``turn/end`` with an ``error`` reason and every ``agent-error``;
  ``"info"`` otherwise (``"warn"`` is left to redaction rules and sinks).

**The redact waterfall.** Every record passes a chain of rules before a sink sees it. A rule is
``rule(record, next) -> record``: it calls ``next()`` for what the rules after it made of the record
and returns that (transformed), or returns without calling ``next()`` to replace everything beneath.
The first rule is the outermost. With no rule the record passes unchanged: agentlog ships no
redaction of its own, so what leaves the process is exactly as clean as the rules given.
:func:`redact_strings` adapts a plain ``Callable[[str], str]`` (the shape of the HTML export's
``redact`` hook) into a rule over every string of the body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias, TypedDict

from ..kernel.events import ASSISTANT_CHUNK, TOOL_RESULT, TURN_END, Event
from ..kernel.jsoncodec import dumps, loads

__all__ = [
    "AGENT_ERROR_OP",
    "SHUTDOWN_OP",
    "TelemetryChannel",
    "TelemetryRecord",
    "TelemetryRule",
    "TelemetrySeverity",
    "agent_error_record",
    "chunk_key",
    "copy_data",
    "error_detail",
    "event_severity",
    "identity_attributes",
    "ledger_record",
    "redact_strings",
    "run_rules",
    "shutdown_record",
]

TelemetryChannel: TypeAlias = Literal["ledger", "ops"]
TelemetrySeverity: TypeAlias = Literal["info", "warn", "error"]

AGENT_ERROR_OP: Final = "agent-error"
SHUTDOWN_OP: Final = "shutdown"


class TelemetryRecord(TypedDict):
    """One logical record handed to a sink; owned by the sink after the call."""

    channel: TelemetryChannel
    time: int
    """Epoch milliseconds: the event's append time (ledger), the emission time (ops)."""
    severity: TelemetrySeverity
    attributes: dict[str, str | int]
    body: Any


TelemetryRule: TypeAlias = Callable[[TelemetryRecord, Callable[[], TelemetryRecord]], TelemetryRecord]
"""One link of the redact waterfall: ``rule(record, next) -> record``."""


def event_severity(event: Mapping[str, Any]) -> TelemetrySeverity:
    """The pre-mapped severity of a ledger record: the event's own outcome flag, else ``"info"``.

    Only the two core outcome flags are read; every other type (a plugin's included) is ``"info"``,
    its owner's semantics staying its owner's.
    """
    etype = event["type"]
    data = event["data"]
    if etype == TOOL_RESULT:
        content = data["message"]["content"]
        return "error" if content and content[0].get("isError") is True else "info"
    if etype == TURN_END:
        return "error" if data["reason"]["kind"] == "error" else "info"
    return "info"


def identity_attributes(session_id: str, header: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, str | int]:
    """The ledger identity: the envelope plus the header facts a receiver stitches forks with."""
    attributes: dict[str, str | int] = {
        "session.id": session_id,
        "event.type": event["type"],
        "event.seq": event["seq"],
    }
    cwd = header.get("cwd")
    if cwd is not None:
        attributes["session.cwd"] = cwd
    parent = header.get("parentSession")
    if parent is not None:
        attributes["session.parent_id"] = str(parent)
    seed_length = header.get("seedLength")
    if seed_length is not None:
        # The fork boundary: the child's stream starts here, its prefix lives in the parent's stream.
        attributes["session.seed_length"] = seed_length
    return attributes


def ledger_record(session_id: str, header: Mapping[str, Any], event: Mapping[str, Any]) -> TelemetryRecord:
    """The ledger record of one committed event, its body a plain deep copy of ``event["data"]``."""
    return {
        "channel": "ledger",
        "time": event["time"],
        "severity": event_severity(event),
        "attributes": identity_attributes(session_id, header, event),
        "body": copy_data(event),
    }


def copy_data(event: Mapping[str, Any]) -> Any:
    """A plain, mutable deep copy of ``event["data"]``.

    Through the storage codec (C, about twice as fast as a Python walk), from the event's cached JSON text
    when persistence already serialized it: committed data is gate-checked JSON, which the codec round
    trips exactly (the same bytes a stored session is read back from).
    """
    cached = event.cached_json_bytes() if isinstance(event, Event) else None
    if cached is not None:
        return loads(cached)["data"]
    return loads(dumps(event["data"]))


def shutdown_record(session_id: str, time: int) -> TelemetryRecord:
    """The clean-exit marker of one session (a receiver reads activity without it as a crash)."""
    return {
        "channel": "ops",
        "time": time,
        "severity": "info",
        "attributes": {"telemetry.op": SHUTDOWN_OP, "session.id": session_id},
        "body": {"op": SHUTDOWN_OP},
    }


def error_detail(error: object) -> dict[str, str]:
    """The stable ``{name, message}`` of any raised value (a non-exception is an ``Error`` by its text)."""
    if isinstance(error, BaseException):
        return {"name": type(error).__name__, "message": str(error)}
    return {"name": "Error", "message": str(error)}


def agent_error_record(
    session_id: str, agent_id: str, turn: int, step: int, error: object, time: int
) -> TelemetryRecord:
    """The operational record of one failed agent turn."""
    detail = error_detail(error)
    return {
        "channel": "ops",
        "time": time,
        "severity": "error",
        "attributes": {
            "telemetry.op": AGENT_ERROR_OP,
            "session.id": session_id,
            "agent.id": agent_id,
            "error.name": detail["name"],
            "turn": turn,
            "step": step,
        },
        "body": detail,
    }


def chunk_key(event: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """``(turn, step)`` of an ``assistant/chunk`` (only the first of each ships), else ``None``."""
    if event["type"] != ASSISTANT_CHUNK:
        return None
    data = event["data"]
    return (data["turn"], data["step"])


def run_rules(rules: Sequence[TelemetryRule], record: TelemetryRecord) -> TelemetryRecord:
    """Pass ``record`` through the waterfall ``rules`` (first = outermost); the innermost ``next()``
    returns ``record`` itself. A rule's exception propagates: the caller withholds the record."""

    def link(index: int) -> TelemetryRecord:
        if index == len(rules):
            return record
        return rules[index](record, lambda: link(index + 1))

    return link(0)


def redact_strings(redact: Callable[[str], str]) -> TelemetryRule:
    """A waterfall rule applying ``redact`` to every string value of the body (keys and attributes are
    left alone: attributes are identity, which receivers dedupe and stitch on)."""

    def rule(record: TelemetryRecord, next: Callable[[], TelemetryRecord]) -> TelemetryRecord:
        inner = next()
        return {**inner, "body": _map_strings(inner["body"], redact)}

    return rule


def _map_strings(value: Any, redact: Callable[[str], str]) -> Any:
    """A copy of the JSON value ``value`` with ``redact`` applied to each string (iterative: bodies may nest deep)."""
    if isinstance(value, str):
        return redact(value)
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    work: list[tuple[Any, Any]] = [(value, root)]
    while work:
        src, dst = work.pop()
        items: Iterable[tuple[Any, Any]] = src.items() if isinstance(src, dict) else enumerate(src)
        for key, item in items:
            if isinstance(item, str):
                out: Any = redact(item)
            elif isinstance(item, (dict, list)):
                out = {} if isinstance(item, dict) else []
                work.append((item, out))
            else:
                out = item
            if isinstance(dst, dict):
                dst[key] = out
            else:
                dst.append(out)
    return root
