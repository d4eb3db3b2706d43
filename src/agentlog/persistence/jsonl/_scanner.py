"""The JSONL logical format: header line and the incremental session-log scanner (spec §4.3, §4.7.1).

Both physical encodings (raw text and Zstandard frames) decode to the same text — one header line, then
one storage record per line — and both feed it through :class:`SessionLogScanner`, so the rule that
decides what a crash may have left behind lives in one place:

* the preserved prefix ends at the last good line before the first defective one (unparsable line,
  malformed packed row, seq gap);
* only an incomplete final record is a torn tail: the unterminated fragment at the end, or a defective
  record that is the *last* complete line. A crash tears only the end of the last write, so a defective
  record with any complete line after it (or a defective row that itself holds a ``turn/end``) is
  damage inside the committed log, and reading it refuses — a repair never cuts a complete record that
  has records after it;
* bytes that are not UTF-8 are never replaced, yet they do not decide by themselves: the original
  decodes leniently (U+FFFD), so a line it then cannot parse, or whose record does not continue the
  seq, is an ordinary defect (as the last line, a torn tail), while a record it would keep only through
  replacement characters is damage at the offset of its first bad byte. Likewise a line orjson
  refuses but the original's ``JSON.parse`` reads (a lone surrogate escape, ``1e400``): a record in
  seq is damage agentlog cannot hold, never a torn tail;
* running out of memory is :class:`~agentlog.errors.ResourceExhaustedError`, never corruption.

Everything is decided on raw bytes, one line at a time, with one JSON parse per line; byte offsets are
positions in the decoded text (equal to file offsets in raw mode).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard, cast

import orjson

from ... import _accel
from ...errors import (
    ChunkRowError,
    ReaderLimitError,
    SessionFormatUnsupportedError,
    SessionPersistenceCorruptionError,
)
from ...kernel._js import js_string
from ...kernel.chunkrows import (
    CHUNK_ROW_TAGS,
    MIN_RAW_RUN,
    compact_raw_chunks,
    decode_storage_record,
    decode_storage_run,
)
from ...kernel.events import TURN_END, SessionHeader
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH, JsonDecodeError, is_out_of_memory, loads, out_of_memory
from ...kernel.jsonvalue import MAX_SAFE_INTEGER
from .._headroom import address_space_limited, ensure_headroom, parse_reserve

__all__ = [
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "ReaderLimitError",
    "ScanCheckpoint",
    "ScanResult",
    "SessionLogScanner",
    "header_line",
    "line_slices",
    "parse_header_line",
    "scan_log",
    "scan_log_compact",
    "scan_log_prefix",
    "version_refusal",
]

DEFAULT_MAX_LINE_BYTES: Final = 256 * 1024 * 1024
DEFAULT_MAX_HEADER_BYTES: Final = 1024 * 1024
"""A header line holds a handful of short fields; anything longer is refused before it is parsed."""
_PARSE_SLICE_BYTES: Final = 8 * 1024 * 1024
"""Upper bound on the text one batched parser call sees, which bounds the parser's own allocation."""
_LIMITED_SLICE_BYTES: Final = 1024 * 1024
"""The slice under an address-space limit: the parser's pool (14x a slice) is then small beside the room."""
_single_values: Any = _accel.lines_are_single_values
"""Whether every line is lexically one JSON object or array (C); without it lines are parsed one by one."""

_TURN_END: Final = TURN_END
_RETIRED_HEADER_FIELDS: Final = ("sandboxMode", "approvalPolicy")
_OPTIONAL_HEAD: Final = ("cwd", "parentSession", "seedLength", "origin")
_MISSING: Final = object()
_UNPARSABLE: Final = object()


class _TooDeep(Exception):
    """Internal: the JSON parser hit ``max_depth``."""


@dataclass(frozen=True, slots=True)
class ScanCheckpoint:
    input_bytes: int
    committed_bytes: int
    event_count: int


@dataclass(slots=True)
class ScanResult:
    meta: SessionHeader
    events: list[Any]
    committed_bytes: int
    count: int = -1
    """How many events ``events`` stands for (a compact scan's packed runs are one item each)."""


def _corrupt(message: str, offset: int) -> SessionPersistenceCorruptionError:
    return SessionPersistenceCorruptionError(message, offset=offset)


def _invalid_utf8(line: bytes) -> int | None:
    """Offset of the first byte in ``line`` that is not UTF-8, or ``None`` when it is valid."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as err:
        return int(err.start)
    return None


def _not_utf8(offset: int, where: str) -> SessionPersistenceCorruptionError:
    return _corrupt(f"corrupt session log: {where} holds bytes that are not UTF-8 at byte {offset}", offset)


def _parse(line: bytes, max_depth: int) -> Any:
    """One JSON value per line; invalid UTF-8 is damage (never replaced).

    Only the failure path pays for the UTF-8 check: valid input is parsed by a single orjson call.
    """
    try:
        return loads(line, max_depth=max_depth)
    except JsonDecodeError as err:
        if "nesting exceeds" in str(err):
            raise _TooDeep from err
        bad = _invalid_utf8(line)
        if bad is not None:
            raise _not_utf8(bad, "the header line") from None
        raise


def _too_deep(offset: int, max_depth: int, where: str) -> ReaderLimitError:
    return ReaderLimitError(f"corrupt session log: {where} nests deeper than {max_depth} levels", offset=offset)


def _too_long(offset: int, size: int, max_line_bytes: int, where: str, what: str = "line") -> ReaderLimitError:
    return ReaderLimitError(
        f"corrupt session log: {where} is {size} bytes, more than the {max_line_bytes}-byte {what} limit",
        offset=offset,
    )


def header_too_long(size: int, max_header_bytes: int) -> ReaderLimitError:
    """The typed refusal of a header line beyond ``max_header_bytes`` (``size`` may be a lower bound)."""
    return _too_long(0, size, max_header_bytes, "the header line", "header (max_header_bytes)")


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


def _parse_many(lines: list[bytes], limited: bool) -> list[Any] | None:
    """Every line parsed by few parser calls, or ``None`` when any line needs the per-line path.

    Lines are JSON texts without raw newlines, so joining them with commas makes one array. Slices of
    at most ``_PARSE_SLICE_BYTES`` keep what one call allocates bounded on a long log; running out of
    memory is :class:`~agentlog.errors.ResourceExhaustedError` (checked up front, slice by slice of 1 MB,
    when ``limited`` — an address-space limit — since the C parser is not safe against an allocation
    failure midway), never a defect.
    """
    if len(lines) < 2 or _single_values is None:
        return None
    # The array's element count alone cannot tell lines apart (a value split over two lines beside a line
    # holding two values gives as many elements as lines): each line must be one value on its own.
    # (So the array has exactly one element per line: an empty line, say, never gets this far.)
    if not _single_values(lines):
        return None
    parsed: list[Any] = []
    for lo, hi in itertools.pairwise(_slice_bounds(lines, _LIMITED_SLICE_BYTES if limited else _PARSE_SLICE_BYTES)):
        if limited:  # (each slice's check sees the slices before it in the address space in use)
            ensure_headroom(parse_reserve(lines[lo:hi]), sum(map(len, lines[lo:hi])))
        text = b"[" + b",".join(lines[lo:hi]) + b"]"
        try:
            part = orjson.loads(text)
        except orjson.JSONDecodeError as err:
            if is_out_of_memory(err):
                raise out_of_memory(len(text)) from None
            return None
        parsed.extend(part)
    return parsed


def _slice_end(lines: list[bytes], start: int) -> int:
    """The end of the slice of ``lines`` from ``start`` holding about ``_LIMITED_SLICE_BYTES`` (a line at least)."""
    size = 0
    for end in range(start, len(lines)):
        size += len(lines[end])
        if size > _LIMITED_SLICE_BYTES and end > start:
            return end
    return len(lines)


def _slice_bounds(lines: list[bytes], slice_bytes: int = _PARSE_SLICE_BYTES) -> list[int]:
    """Indexes cutting ``lines`` into runs of at most ``slice_bytes`` (a longer line is a run of its
    own): ``[0, ..., len(lines)]``."""
    if sum(map(len, lines)) <= slice_bytes:
        return [0, len(lines)]
    ends = list(itertools.accumulate(map(len, lines)))
    bounds = [0]
    while bounds[-1] < len(lines):
        base = ends[bounds[-1] - 1] if bounds[-1] else 0
        cut = bisect.bisect_right(ends, base + slice_bytes, lo=bounds[-1] + 1)
        bounds.append(min(max(cut, bounds[-1] + 1), len(lines)))
    return bounds


_take_plain: Any = _accel.take_plain_events
"""The scanner's plain-event fast path (C); ``None`` without the accelerator (``_parse_many`` is then off too)."""


class _Cursor:
    """Line indexes for the scanner's loop, which may jump ahead (past what the fast path took)."""

    __slots__ = ("end", "pos")

    def __init__(self, end: int) -> None:
        self.pos = 0
        self.end = end

    def __iter__(self) -> Iterator[int]:
        while self.pos < self.end:
            index = self.pos
            self.pos = index + 1
            yield index


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"JSON.parse refuses {name}")


def _js_parse(text: str) -> Any:
    """``JSON.parse`` as the original runs it (lone surrogate escapes kept, ``1e400`` infinite, ``NaN``
    refused), or ``_UNPARSABLE``. Only for the rare line orjson refused."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return _UNPARSABLE


def _has_turn_end(events: list[Any]) -> bool:
    return any(type(event) is dict and event.get("type") == _TURN_END for event in events)


class SessionLogScanner:
    """Incremental line scanner over a decoded session log (``SessionLogScanner``, §4.7.1).

    ``write`` accepts the text in arbitrary chunks (frame plaintexts, file reads); a line may span
    chunks. ``committed_bytes`` only advances over lines that decoded into contiguous events and is
    frozen at the first defect, which is where a repair truncates.
    """

    __slots__ = (
        "_base",
        "_committed",
        "_compact",
        "_count",
        "_events",
        "_finished",
        "_fragment",
        "_input",
        "_issue",
        "_limited",
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
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    ) -> None:
        record = bytes(header_record)
        if not record.endswith(b"\n") or record.count(b"\n") != 1:
            raise _corrupt("empty or header-less session log", 0)
        if len(record) - 1 > max_line_bytes:
            raise _too_long(0, len(record) - 1, max_line_bytes, "the header line")
        if len(record) - 1 > max_header_bytes:
            raise header_too_long(len(record) - 1, max_header_bytes)
        self.meta = cast("SessionHeader", parse_header_line(record[:-1], max_depth=max_depth))  # checked: a header
        self._max_line_bytes = max_line_bytes
        self._max_depth = max_depth
        self._input = self._committed = len(record)
        self._line = 0
        self._events: list[Any] = []
        self._count = 0
        self._compact = False
        self._base = 0
        self._issue: SessionPersistenceCorruptionError | None = None
        self._fragment = b""
        self._finished = False
        # Asked once per scan (a load): under an address-space limit every parse is checked first.
        self._limited = address_space_limited()

    def keep_runs_packed(self) -> None:
        """Keep each packed row as one validated :class:`~agentlog.kernel.chunkrows.ChunkRun` item instead
        of its expanded members (the coordinator's cold load); every check still runs, in the same order."""
        self._compact = True

    def resume_at(self, base_seq: int) -> None:
        """Scan a suffix: the next record must start at ``base_seq`` (a seek read's first line).

        The records before it are not read, so their defects are not seen, and line numbers in
        defect messages count from the suffix; a seek read that meets any defect falls back to the
        whole read for the exact error. Only allowed before any event line was written.
        """
        if self._input != self._committed or self._events or self._fragment or self._line or self._count:
            raise RuntimeError("resume_at must precede every event line")
        self._base = base_seq

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
        """Consume ``pieces`` (the result of splitting text at ``start`` on newlines; last = fragment).

        A compact scan consumes long text in slices of about ``_PARSE_SLICE_BYTES``: each slice's raw
        chunk lines become packed runs before the next slice is parsed, so the parsed form of the whole
        log never exists at once. Slices are consumed exactly like successive writes (the defect rules
        carry over between them), so the outcome is the same; only a run never spans two slices.
        """
        self._fragment = pieces.pop()
        if not pieces:
            return
        if not self._compact:
            self._consume(pieces, start)
            return
        bounds = _slice_bounds(pieces, _LIMITED_SLICE_BYTES if self._limited else _PARSE_SLICE_BYTES)
        if len(bounds) == 2:
            self._consume(pieces, start)
            return
        offset = start
        for lo, hi in itertools.pairwise(bounds):
            self._consume(pieces[lo:hi], offset)
            offset += sum(map(len, pieces[lo:hi])) + hi - lo

    def _line_start(self, lines: list[bytes], index: int, start: int) -> int:
        return start + sum(len(line) + 1 for line in lines[:index])

    def _consume(self, lines: list[bytes], start: int) -> None:
        """The hot loop of a cold load: one JSON parse per line and a seq check, nothing else.

        Everything unusual (a non-object line, a defect) leaves the fast path for the general rules
        below it. A defect is tolerated only as the last complete line: any complete line after it
        makes it damage inside the committed log.
        """
        events = self._events
        append = events.append
        n = self._base + self._count
        compact = self._compact
        max_depth = self._max_depth
        check_size = sum(map(len, lines)) > self._max_line_bytes
        issue = self._issue
        parsed = None if issue is not None or check_size else _parse_many(lines, self._limited)
        # Lines parsed one by one under an address-space limit: each slice of them checked first.
        checked = len(lines) if parsed is not None or not self._limited else 0
        first = len(events)
        take = _take_plain if parsed is not None else None
        cursor = _Cursor(len(lines))
        try:
            for index in cursor:
                if take is not None and issue is None:
                    # The common values (plain events in seq order) in one C pass; the loop below judges
                    # the first one that is anything else, with every rule it has.
                    index, n = take(parsed, index, n, events, CHUNK_ROW_TAGS)
                    if index >= len(lines):
                        break
                    cursor.pos = index + 1
                line = lines[index]
                if issue is not None:
                    raise self._followed(issue, self._line + index + 1)
                if parsed is not None:
                    value = parsed[index]
                else:
                    if check_size:
                        self._check_size(lines, index, start)
                    if index >= checked:
                        checked = _slice_end(lines, index)
                        span = lines[index:checked]
                        ensure_headroom(parse_reserve(span, one_call=False), sum(map(len, span)))
                    try:
                        value = loads(line, max_depth=max_depth)
                    except JsonDecodeError as err:
                        issue = self._refused_line(lines, index, start, err, n)
                        continue
                if type(value) is dict:
                    tag = value.get("type")
                    if tag.__class__ is str and tag in CHUNK_ROW_TAGS:  # (an unhashable type is no tag either)
                        if compact:
                            try:
                                run = decode_storage_run(value)
                            except ChunkRowError as err:
                                issue = self._set_issue(lines, index, start, err, None)
                                continue
                            assert run is not None
                            seq = run.seq0
                            if seq == n:
                                append(run)
                                n += run.n
                                continue
                            issue = self._set_issue(lines, index, start, None, (n, seq))
                            continue  # (a run holds chunks only, never a turn/end)
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
                    decode_storage_record(value)
                except ChunkRowError as err:
                    issue = self._set_issue(lines, index, start, err, None)
                    continue
                issue = self._set_issue(lines, index, start, None, (n, _MISSING))  # never the expected seq
        finally:
            self._count = n - self._base  # what the events read so far stand for, even on a refusal
        if compact and len(events) - first >= MIN_RAW_RUN:
            # Raw chunk lines (an unpacked log, or runs too short to pack) of exactly a packed run's
            # members' shape: kept as runs too. The lines already passed every check above; the seed
            # rules their events must pass hold by that shape (see kernel.chunkrows.compact_raw_chunks).
            grouped = compact_raw_chunks(events, first)
            if grouped is not None:
                events[first:] = grouped
        self._line += len(lines)
        if issue is None:
            self._committed = start + sum(map(len, lines)) + len(lines)

    def _followed(self, issue: SessionPersistenceCorruptionError, line_no: int) -> SessionPersistenceCorruptionError:
        """A defect with a complete record after it: damage inside the committed log, never a torn tail."""
        err = _corrupt(
            f"{issue.message}, and a complete record follows it at line {line_no}: this is damage inside the "
            "committed log, not a torn tail",
            issue.offset or 0,
        )
        err.__cause__ = issue.__cause__
        return err

    def _check_size(self, lines: list[bytes], index: int, start: int) -> None:
        size = len(lines[index])
        if size > self._max_line_bytes:
            offset = self._line_start(lines, index, start)
            raise _too_long(offset, size, self._max_line_bytes, f"event line {self._line + index + 1}")

    def _refused_line(
        self, lines: list[bytes], index: int, start: int, err: JsonDecodeError, n: int
    ) -> SessionPersistenceCorruptionError:
        """Judge a line the parser refused, as the original does; returns the defect it records.

        Nesting beyond the limit is fatal. Otherwise what the original makes of the line decides: it
        decodes leniently (U+FFFD for each sequence that is not UTF-8) and parses with ``JSON.parse``,
        which also takes what orjson refuses (a lone surrogate escape, a number beyond the double
        range). Unparsable even so, or a record that does not continue the seq: an ordinary defect (as
        the last line, a torn tail), a defective ``turn/end`` raising at once as in the loop. A record
        it would keep: refused here as damage, since agentlog never replaces bytes and cannot hold that
        value, and a complete record is never cut as a torn tail.
        """
        line = lines[index]
        if "nesting exceeds" in str(err):
            raise self._too_deep_at(lines, index, start) from None
        bad = _invalid_utf8(line)
        value: Any = _UNPARSABLE
        if bad is not None:
            try:
                value = loads(line.decode("utf-8", "replace").encode("utf-8"), max_depth=self._max_depth)
            except JsonDecodeError as lenient:
                if "nesting exceeds" in str(lenient):
                    raise self._too_deep_at(lines, index, start) from None
        if value is _UNPARSABLE:
            value = _js_parse(line.decode("utf-8", "replace"))
            if value is _UNPARSABLE:
                return self._set_issue(lines, index, start, err, None)
        try:
            decoded = decode_storage_record(value)
        except ChunkRowError as row_err:
            return self._set_issue(lines, index, start, row_err, None)
        first = decoded[0]
        seq = first.get("seq", _MISSING) if isinstance(first, Mapping) else _MISSING  # C: frozen members
        if seq == n and type(seq) is not bool:
            where = f"event line {self._line + index + 1}"
            if bad is not None:
                raise _not_utf8(self._line_start(lines, index, start) + bad, where) from None
            raise _corrupt(
                f"corrupt session log: {where} is a record this reader cannot hold losslessly ({err}); "
                "a complete record is never cut as a torn tail",
                self._line_start(lines, index, start),
            ) from None
        issue = self._set_issue(lines, index, start, None, (n, seq))
        if _has_turn_end(decoded):
            raise issue
        return issue

    def _too_deep_at(self, lines: list[bytes], index: int, start: int) -> ReaderLimitError:
        offset = self._line_start(lines, index, start)
        return _too_deep(offset, self._max_depth, f"event line {self._line + index + 1}")

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

    def take_events(self) -> list[Any]:
        """Hand over the events decoded so far (a streaming read drains them between writes, so that the
        parsed log never exists whole). The scan goes on exactly as if they were still held: what the
        rules carry between writes is the count, the defect state and the fragment, never the events.
        ``checkpoint().event_count`` and ``finish().events`` then count from the last hand-over."""
        events = self._events
        self._events = []
        return events

    def finish(self) -> ScanResult:
        """End of input: an unterminated final fragment is a torn write and is ignored."""
        self._finished = True
        return ScanResult(self.meta, self._events, self._committed, self._count)


def scan_log(
    buffer: bytes,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> ScanResult:
    """Scan a whole raw log: the header up to the first newline, then everything else in one write.

    Splits the buffer once (no copy of the body), which is the cold-load path of raw mode.
    """
    scanner, pieces, body_start = _raw_scanner(buffer, max_line_bytes, max_depth, max_header_bytes)
    if pieces:
        scanner._feed(pieces, body_start)
    return scanner.finish()


def scan_log_compact(
    buffer: bytes,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> ScanResult:
    """:func:`scan_log` keeping packed rows packed (:meth:`SessionLogScanner.keep_runs_packed`).

    The body is written to the scanner in slices of about ``_PARSE_SLICE_BYTES``, each ending at a line
    end (a longer line is one slice of its own), like the frames of a compressed log: only one slice's
    lines and parsed values exist at a time, and its raw chunk lines are packed before the next slice
    is read. Writes split only between lines, so the outcome (events, errors, offsets) is the same as
    one write of the whole body; the unterminated final fragment, if any, is the last write.
    """
    data = bytes(buffer)
    end = data.find(b"\n")
    if end < 0:
        raise _corrupt("empty or header-less session log", 0)
    scanner = SessionLogScanner(
        data[: end + 1], max_line_bytes=max_line_bytes, max_depth=max_depth, max_header_bytes=max_header_bytes
    )
    scanner.keep_runs_packed()
    view = memoryview(data)
    for position, stop in line_slices(data, end + 1, _PARSE_SLICE_BYTES):
        scanner.write(view[position:stop])
    return scanner.finish()


def line_slices(data: bytes, position: int, slice_bytes: int) -> Iterator[tuple[int, int]]:
    """``data[position:]`` as ``(start, stop)`` slices of about ``slice_bytes``, each ending at a line end
    (a longer line is a slice of its own; the unterminated final fragment, if any, ends the last one).
    A scanner written these slices sees what one write of the whole body shows it."""
    size = len(data)
    while position < size:
        stop = size
        if size - position > slice_bytes:
            cut = data.rfind(b"\n", position, position + slice_bytes)
            if cut < 0:  # a line longer than a slice is a slice of its own
                cut = data.find(b"\n", position + slice_bytes)
            if cut >= 0:
                stop = cut + 1
        yield position, stop
        position = stop


def scan_log_prefix(
    buffer: bytes,
    *,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> tuple[ScanResult, SessionPersistenceCorruptionError | None]:
    """Like :func:`scan_log`, but damage after the header ends the scan instead of failing it.

    Returns the valid contiguous prefix up to the first damaged record, and the damage (with its
    offset) or ``None``. A damaged header still raises: there is no prefix without it.
    """
    scanner, pieces, body_start = _raw_scanner(buffer, max_line_bytes, max_depth, max_header_bytes)
    damage: SessionPersistenceCorruptionError | None = None
    if pieces:
        try:
            scanner._feed(pieces, body_start)
        except SessionPersistenceCorruptionError as err:
            damage = err
    result = scanner.finish()
    if damage is not None:
        result.committed_bytes = damage.offset if damage.offset is not None else result.committed_bytes
    return result, damage


def _raw_scanner(
    buffer: bytes, max_line_bytes: int, max_depth: int, max_header_bytes: int
) -> tuple[SessionLogScanner, list[bytes], int]:
    """The scanner past the header, and the body's pieces (one split of the buffer, no copy of the body)."""
    data = bytes(buffer)
    pieces = data.split(b"\n")
    if len(pieces) < 2:
        raise _corrupt("empty or header-less session log", 0)
    header = pieces[0]
    scanner = SessionLogScanner(
        header + b"\n", max_line_bytes=max_line_bytes, max_depth=max_depth, max_header_bytes=max_header_bytes
    )
    body = len(data) - len(header) - 1
    if not body:
        return scanner, [], len(header) + 1
    scanner._input += body
    del pieces[0]
    return scanner, pieces, len(header) + 1
