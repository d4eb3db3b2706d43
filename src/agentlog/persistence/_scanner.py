"""The JSONL logical format: header line and the incremental session-log scanner (spec §4.3, §4.7.1).

Both physical encodings (raw text and Zstandard frames) decode to the same text — one header line, then
one storage record per line — and both feed it through :class:`SessionLogScanner`, so the rule that
decides what a crash may have left behind lives in one place:

* the preserved prefix ends at the last good line before the first defective one (unparsable line,
  malformed packed row, seq gap);
* the defect and everything after it is a removable torn tail, **unless** a later parsable line (or the
  defective row itself) holds a ``turn/end``: a turn that closed after the defect proves the defect was
  committed, so the log is damaged and reading it refuses.

Everything is decided on raw bytes, one line at a time, with one JSON parse per line; byte offsets are
positions in the decoded text (equal to file offsets in raw mode).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from .._js import js_string
from ..chunkrows import decode_storage_record
from ..errors import ChunkRowError, SessionFormatUnsupportedError, SessionPersistenceCorruptionError
from ..jsoncodec import DEFAULT_MAX_DEPTH, JsonDecodeError, loads
from ..jsonvalue import MAX_SAFE_INTEGER

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "ROW_TAGS",
    "ReaderLimitError",
    "ScanCheckpoint",
    "ScanResult",
    "SessionLogScanner",
    "header_line",
    "parse_header_line",
    "scan_log",
    "version_refusal",
]

DEFAULT_MAX_LINE_BYTES: Final = 256 * 1024 * 1024
ROW_TAGS: Final = frozenset({"text-chunks", "reasoning-chunks", "tool-call-chunks"})
"""Storage-row tags (bare words, never event types): a line with one of these must be expanded."""

_TURN_END: Final = "turn/end"
_RETIRED_HEADER_FIELDS: Final = ("sandboxMode", "approvalPolicy")
_OPTIONAL_HEAD: Final = ("cwd", "parentSession", "seedLength", "origin")
_MISSING: Final = object()
_UNPARSABLE: Final = object()


class ReaderLimitError(SessionPersistenceCorruptionError):
    """A line exceeds the reader's size or nesting limit.

    Always fatal, even in a would-be torn tail: a line that cannot be parsed within the limits cannot be
    classified, and silently truncating it could destroy a committed ``turn/end``.
    """


class _TooDeep(Exception):
    """Internal: the JSON parser hit ``max_depth``."""


@dataclass(frozen=True, slots=True)
class ScanCheckpoint:
    input_bytes: int
    committed_bytes: int
    event_count: int


@dataclass(slots=True)
class ScanResult:
    meta: dict[str, Any]
    events: list[Any]
    committed_bytes: int


def _corrupt(message: str, offset: int) -> SessionPersistenceCorruptionError:
    return SessionPersistenceCorruptionError(message, offset=offset)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parse(line: bytes, max_depth: int) -> Any:
    """One JSON value per line, decoding invalid UTF-8 leniently (U+FFFD) as the reference does.

    Only the failure path pays for the UTF-8 check: valid input is parsed by a single orjson call.
    """
    try:
        return loads(line, max_depth=max_depth)
    except JsonDecodeError as err:
        if "nesting exceeds" in str(err):
            raise _TooDeep from err
        if _is_utf8(line):
            raise
    try:
        return loads(line.decode("utf-8", "replace"), max_depth=max_depth)
    except JsonDecodeError as err:
        if "nesting exceeds" in str(err):
            raise _TooDeep from err
        raise


def _too_deep(offset: int, max_depth: int, where: str) -> ReaderLimitError:
    return ReaderLimitError(f"corrupt session log: {where} nests deeper than {max_depth} levels", offset=offset)


def _too_long(offset: int, size: int, max_line_bytes: int, where: str) -> ReaderLimitError:
    return ReaderLimitError(
        f"corrupt session log: {where} is {size} bytes, more than the {max_line_bytes}-byte line limit",
        offset=offset,
    )


# --- header ------------------------------------------------------------------------------------------


def version_refusal(session_id: object, version: float) -> str:
    """``sessionFormatVersionRefusal`` (§3.8): says which way the log's format differs from v0."""
    if isinstance(session_id, str):
        sid = session_id
    else:
        sid = "undefined" if session_id is _MISSING else js_string(session_id)
    shown = js_string(version)
    if version > 0:
        return (
            f'session "{sid}" uses log format v{shown}, but this harness reads only v0: '
            "the log was written by a newer harness — upgrade the harness to open it"
        )
    return (
        f'session "{sid}" uses log format v{shown}, older than the supported v0, '
        "and this build ships no upgrade path for it"
    )


def _is_number(value: object) -> TypeGuard[float]:
    return type(value) is int or type(value) is float


def _is_negative_zero(value: object) -> bool:
    return type(value) is float and value == 0 and math.copysign(1.0, value) < 0


def _safe_count(value: object) -> bool:
    """A safe integer >= 0 as JS sees it: integral floats count, ``-0`` does not (checked separately)."""
    if type(value) is int:
        return 0 <= value <= MAX_SAFE_INTEGER
    if type(value) is float:
        return value.is_integer() and 0 <= value <= MAX_SAFE_INTEGER and not _is_negative_zero(value)
    return False


def _int_hook(text: str) -> int | float:
    return -0.0 if text == "-0" else int(text)


def _literal_negative_zero(line: bytes, key: str) -> bool:
    """Whether ``key`` was written as the integer literal ``-0``, which orjson reads as plain ``0``.

    JS keeps ``-0`` and the reference validators reject it; this slow re-parse only runs for a header
    whose field is zero and whose text contains ``-0`` at all.
    """
    if b"-0" not in line:
        return False
    try:
        value = json.loads(line.decode("utf-8", "replace"), parse_int=_int_hook)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and _is_negative_zero(value.get(key))


def _is_header(value: Any, line: bytes) -> bool:
    """``isHeaderLine``: the fields the JSONL layer itself relies on (the kernel validates the rest)."""
    if type(value) is not dict or value.get("type") != "session":
        return False
    if not _is_number(value.get("version")) or not isinstance(value.get("id"), str):
        return False
    for key in ("createdAt", "delegationDepth"):
        field = value.get(key, _MISSING)
        if not _safe_count(field) or (field == 0 and type(field) is int and _literal_negative_zero(line, key)):
            return False
    origin = value.get("origin", _MISSING)
    preset = value.get("agentPreset", _MISSING)
    return (origin is _MISSING or origin == "subagent") and (preset is _MISSING or isinstance(preset, str))


def _as_int(value: Any) -> Any:
    """Integral floats (``1000.0``, as some writers emit) become ints, so JS-equal values compare equal."""
    return int(value) if type(value) is float else value


def parse_header_line(line: bytes, *, max_depth: int = DEFAULT_MAX_DEPTH) -> dict[str, Any]:
    """Parse and check a header line (without its newline) into session metadata (``fromHeaderLine``).

    A numeric ``version`` other than 0 is refused *before* the shape check, so a structurally foreign
    future header still says "upgrade the harness" rather than "corrupt".
    """
    try:
        value = _parse(line, max_depth)
    except _TooDeep:
        raise _too_deep(0, max_depth, "the header line") from None
    except JsonDecodeError as err:
        raise _corrupt("corrupt session log: header line is not valid JSON", 0) from err
    if type(value) is dict:
        version = value.get("version")
        if _is_number(version) and version != 0:
            raise SessionFormatUnsupportedError(version_refusal(value.get("id", _MISSING), version))
    if not _is_header(value, line):
        raise _corrupt("corrupt session log: first line is not a session header", 0)
    if any(key in value for key in _RETIRED_HEADER_FIELDS):
        raise SessionFormatUnsupportedError("session header uses retired policy baseline fields")
    meta: dict[str, Any] = {"version": _as_int(value["version"]), "id": value["id"]}
    meta["createdAt"] = _as_int(value["createdAt"])
    for key in _OPTIONAL_HEAD:
        if key in value:
            meta[key] = value[key]
    meta["delegationDepth"] = _as_int(value["delegationDepth"])
    if "agentPreset" in value:
        meta["agentPreset"] = value["agentPreset"]
    return meta


def header_line(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``toHeaderLine``: the header record in canonical key order; ``delegationDepth`` always present."""
    record: dict[str, Any] = {
        "type": "session",
        "version": meta.get("version", 0),
        "id": meta["id"],
        "createdAt": meta["createdAt"],
    }
    for key in _OPTIONAL_HEAD:
        if key in meta:
            record[key] = meta[key]
    depth = meta.get("delegationDepth")
    record["delegationDepth"] = 0 if depth is None else depth
    if "agentPreset" in meta:
        record["agentPreset"] = meta["agentPreset"]
    return record


# --- the scanner -------------------------------------------------------------------------------------


def _has_turn_end(events: list[Any]) -> bool:
    return any(type(event) is dict and event.get("type") == _TURN_END for event in events)


class SessionLogScanner:
    """Incremental line scanner over a decoded session log (``SessionLogScanner``, §4.7.1).

    ``write`` accepts the text in arbitrary chunks (frame plaintexts, file reads); a line may span
    chunks. ``committed_bytes`` only advances over lines that decoded into contiguous events and is
    frozen at the first defect, which is where a repair truncates.
    """

    __slots__ = (
        "_committed",
        "_events",
        "_finished",
        "_fragment",
        "_input",
        "_issue",
        "_line",
        "_max_depth",
        "_max_line_bytes",
        "meta",
    )

    def __init__(
        self,
        header_record: bytes,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        record = bytes(header_record)
        if not record.endswith(b"\n") or record.count(b"\n") != 1:
            raise _corrupt("empty or header-less session log", 0)
        if len(record) - 1 > max_line_bytes:
            raise _too_long(0, len(record) - 1, max_line_bytes, "the header line")
        self.meta = parse_header_line(record[:-1], max_depth=max_depth)
        self._max_line_bytes = max_line_bytes
        self._max_depth = max_depth
        self._input = self._committed = len(record)
        self._line = 0
        self._events: list[Any] = []
        self._issue: SessionPersistenceCorruptionError | None = None
        self._fragment = b""
        self._finished = False

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Consume the next piece of text. The caller may reuse its buffer afterwards (we copy)."""
        if self._finished:
            raise RuntimeError("cannot write to a finished session log scanner")
        data = chunk if type(chunk) is bytes else bytes(chunk)
        if not data:
            return
        start = self._input - len(self._fragment)
        self._input += len(data)
        if self._fragment:
            data = self._fragment + data
        self._feed(data.split(b"\n"), start)

    def _feed(self, pieces: list[bytes], start: int) -> None:
        """Consume ``pieces`` (the result of splitting text at ``start`` on newlines; last = fragment)."""
        self._fragment = pieces.pop()
        if pieces:
            self._consume(pieces, start)

    def _line_start(self, lines: list[bytes], index: int, start: int) -> int:
        return start + sum(len(line) + 1 for line in lines[:index])

    def _consume(self, lines: list[bytes], start: int) -> None:
        """The hot loop of a cold load: one JSON parse per line and a seq check, nothing else.

        Everything unusual (a non-object line, a defect, anything after the first defect) leaves the
        fast path for the general rules below it.
        """
        events = self._events
        append = events.append
        n = len(events)
        max_depth = self._max_depth
        check_size = sum(map(len, lines)) > self._max_line_bytes
        issue = self._issue
        # Fast path: parse every line of this piece with ONE parser call (lines are JSON texts without
        # raw newlines, so joining them with commas makes one array). Any failure — an unparsable line,
        # a too-deep value — drops back to the per-line parse, which reports exactly which line.
        parsed: list[Any] | None = None
        if issue is None and not check_size and len(lines) > 1:
            try:
                parsed = orjson.loads(b"[" + b",".join(lines) + b"]")
            except orjson.JSONDecodeError:
                parsed = None
            if parsed is not None and len(parsed) != len(lines):
                parsed = None  # an empty line vanished into the join: let the per-line path see it
        for index, line in enumerate(lines):
            if parsed is not None:
                value = parsed[index]
            else:
                if check_size:
                    self._check_size(lines, index, start)
                try:
                    value = loads(line, max_depth=max_depth)
                except JsonDecodeError as err:
                    value = self._reparse(lines, index, start, err)
                    if value is _UNPARSABLE:
                        if issue is None:
                            issue = self._set_issue(lines, index, start, err, None)
                        continue
            if issue is None and type(value) is dict:
                if value.get("type") in ROW_TAGS:
                    try:
                        decoded = decode_storage_record(value)
                    except ChunkRowError as err:
                        issue = self._set_issue(lines, index, start, err, None)
                        continue
                    seq = decoded[0]["seq"]  # members are seq0 + k by construction: the first decides
                    if seq == n:
                        events.extend(decoded)
                        n += len(decoded)
                        continue
                else:
                    seq = value.get("seq", _MISSING)
                    if seq == n and type(seq) is not bool:
                        append(value)
                        n += 1
                        continue
                    decoded = [value]
                issue = self._set_issue(lines, index, start, None, (n, seq))
                if _has_turn_end(decoded):
                    raise issue
                continue
            try:
                decoded = decode_storage_record(value)
            except ChunkRowError as err:
                if issue is None:
                    issue = self._set_issue(lines, index, start, err, None)
                continue
            if issue is None:  # a non-object record can never carry the expected seq
                issue = self._set_issue(lines, index, start, None, (n, _MISSING))
            elif _has_turn_end(decoded):
                raise issue
        self._line += len(lines)
        if issue is None:
            self._committed = start + sum(map(len, lines)) + len(lines)

    def _check_size(self, lines: list[bytes], index: int, start: int) -> None:
        size = len(lines[index])
        if size > self._max_line_bytes:
            offset = self._line_start(lines, index, start)
            raise _too_long(offset, size, self._max_line_bytes, f"event line {self._line + index + 1}")

    def _reparse(self, lines: list[bytes], index: int, start: int, err: JsonDecodeError) -> Any:
        """Second chance for a line orjson refused: lenient UTF-8; nesting beyond the limit is fatal."""
        line = lines[index]
        if "nesting exceeds" not in str(err) and not _is_utf8(line):
            try:
                return loads(line.decode("utf-8", "replace"), max_depth=self._max_depth)
            except JsonDecodeError as retry:
                err = retry
        if "nesting exceeds" in str(err):
            offset = self._line_start(lines, index, start)
            raise _too_deep(offset, self._max_depth, f"event line {self._line + index + 1}") from None
        return _UNPARSABLE

    def _set_issue(
        self,
        lines: list[bytes],
        index: int,
        start: int,
        cause: BaseException | None,
        gap: tuple[int, object] | None,
    ) -> SessionPersistenceCorruptionError:
        """Record the first defect; the prefix is committed up to the start of the defective line."""
        line_no = self._line + index + 1
        offset = self._line_start(lines, index, start)
        if gap is None:
            message = f"corrupt session log: unparsable committed event at line {line_no}"
        else:
            expected, got = gap
            shown = "undefined" if got is _MISSING else js_string(got)
            message = (
                f"corrupt session log: seq gap in committed region at line {line_no} (expected {expected}, got {shown})"
            )
        issue = _corrupt(message, offset)
        issue.__cause__ = cause
        self._issue = issue
        self._committed = offset
        return issue

    def checkpoint(self) -> ScanCheckpoint:
        return ScanCheckpoint(self._input, self._committed, len(self._events))

    def finish(self) -> ScanResult:
        """End of input: an unterminated final fragment is a torn write and is ignored."""
        self._finished = True
        return ScanResult(self.meta, self._events, self._committed)


def scan_log(
    buffer: bytes, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, max_depth: int = DEFAULT_MAX_DEPTH
) -> ScanResult:
    """Scan a whole raw log: the header up to the first newline, then everything else in one write.

    Splits the buffer once (no copy of the body), which is the cold-load path of raw mode.
    """
    data = bytes(buffer)
    pieces = data.split(b"\n")
    if len(pieces) < 2:
        raise _corrupt("empty or header-less session log", 0)
    header = pieces[0]
    scanner = SessionLogScanner(header + b"\n", max_line_bytes=max_line_bytes, max_depth=max_depth)
    body = len(data) - len(header) - 1
    if body:
        scanner._input += body
        scanner._feed(pieces[1:], len(header) + 1)
    return scanner.finish()
