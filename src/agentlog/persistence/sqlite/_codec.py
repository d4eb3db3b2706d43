"""Schema-17 physical row codec of the SQLite backend (spec §5.5, §5.5.1, §5.6).

This module is pure: it turns logical events into the column tuples of the ``events`` table and
physical rows back into logical events, and it decides which damaged rows are a removable torn tail
and which are committed corruption. It owns its own copy of the chunk-run codec on purpose: the
schema-17 rows are bounded (3..1024 members, 1 MiB of data JSON) while the JSONL codec in
:mod:`agentlog.chunkrows` is not, and a change to the JSONL format must never change how an existing
database is read (the original keeps the two codecs separate for the same reason).

Everything here runs once per flushed batch or per loaded row, so the hot loops avoid per-event
function layers beyond JSON encoding/decoding.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate, chain
from typing import Any, Final, TypeAlias

import zstandard

from ... import _accel
from ...errors import EncodeError, ResourceExhaustedError, SessionPersistenceCorruptionError
from ...kernel._gc import gc_paused
from ...kernel.events import ASSISTANT_CHUNK
from ...kernel.events import Event as _Event
from ...kernel.jsoncodec import DEFAULT_MAX_DEPTH, JsonDecodeError, dumps, loads
from ...kernel.jsonvalue import MAX_SAFE_INTEGER
from ...kernel.packedrun import ChunkRun

# The kernel's C accelerator builds packed-row members as frozen events (see _build_members).
_expand_row: Any = _accel.expand_row

__all__ = [
    "MAX_PACKED_DATA_BYTES",
    "MAX_PACKED_ROW_MEMBERS",
    "MIN_PACKED_ROW_MEMBERS",
    "PACKED_TAGS",
    "ZSTD_DATA_THRESHOLD_BYTES",
    "EncodeError",
    "InvalidText",
    "Limits",
    "PhysicalRow",
    "StorageRowError",
    "decode_data",
    "decode_packed_record",
    "decode_row",
    "decode_session_row",
    "decode_source_event_seqs",
    "decoded_size",
    "encode_batch",
    "encode_data",
    "encode_scalar",
    "encode_source_event_seqs",
    "is_uuid",
    "last_member_seq",
    "scan_batches",
    "scan_next_seq",
    "scan_prefix",
    "scan_rows",
]

MAX_SAFE: Final = MAX_SAFE_INTEGER  # the gate's bound (one definition)
_MAX_ZIGZAG: Final = MAX_SAFE * 2
MIN_PACKED_ROW_MEMBERS: Final = 3
MAX_PACKED_ROW_MEMBERS: Final = 1024
MAX_PACKED_DATA_BYTES: Final = 1_048_576
ZSTD_DATA_THRESHOLD_BYTES: Final = 4096
ZSTD_LEVEL: Final = 3
PACKED_SENTINEL: Final = 0

_CHUNK_EVENT: Final = ASSISTANT_CHUNK
_TEXT_DELTA: Final = "text-delta"
_REASONING_DELTA: Final = "reasoning-delta"
_TOOL_CALL_DELTA: Final = "tool-call-delta"
_TEXT_ROW: Final = "text-chunks"
_REASONING_ROW: Final = "reasoning-chunks"
_TOOL_CALL_ROW: Final = "tool-call-chunks"
PACKED_TAGS: Final = frozenset({_TEXT_ROW, _REASONING_ROW, _TOOL_CALL_ROW})
"""Schema 17's own spelling of the row tags (the codec imports no JSONL codec, spec §8.11 #300); a test holds
them equal to the kernel's ``CHUNK_ROW_TAGS``, which the other backends and the C code read."""
_ROW_OF_DELTA: Final = {_TEXT_DELTA: _TEXT_ROW, _REASONING_DELTA: _REASONING_ROW, _TOOL_CALL_DELTA: _TOOL_CALL_ROW}
_DELTA_OF_ROW: Final = {row: delta for delta, row in _ROW_OF_DELTA.items()}

_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", re.IGNORECASE)

PhysicalRow: TypeAlias = tuple[Any, ...]
"""A fetched ``events`` row: ``(seq, type, time, data, source_event_seqs, surface_op, ignorable)``.

Values are whatever SQLite holds (the ``ANY`` columns in particular), so every decoder checks types.
"""

InsertRow: TypeAlias = tuple[str, int, str, int, "str | bytes", "bytes | None", "str | None", "int | None"]
"""Bound parameters of one new ``events`` row: session id first, then the columns in DDL order."""


class StorageRowError(ValueError):
    """One physical row does not decode. Internal: :func:`scan_rows` decides whether it is fatal."""


_OUT_OF_MEMORY: Final = re.compile(r"not enough memory|out of memory|memory allocation|allocation error", re.IGNORECASE)


def out_of_memory(what: str) -> ResourceExhaustedError:
    """The typed error of an allocation failure while decoding: never evidence of damage."""
    return ResourceExhaustedError(
        f"out of memory while decoding {what}; nothing was modified and the stored data is not known to be "
        "damaged — retry with more memory available"
    )


def _row_failure(err: Exception, message: str) -> Exception:
    """``StorageRowError(message)`` for a decoder's refusal, or :func:`out_of_memory` when it ran out of memory.

    orjson and zstd report an allocation failure as their ordinary decode error; filing it as a damaged
    row would make a resource problem look like corruption.
    """
    if _OUT_OF_MEMORY.search(str(err)):
        return out_of_memory("a stored row")
    return StorageRowError(message)


def decoded_size(value: object) -> int:
    """About how many bytes a stored ``data`` value decodes to (a zstd frame's declared content size)."""
    if type(value) is bytes:
        try:
            size = zstandard.frame_content_size(value)
        except zstandard.ZstdError:
            return len(value)
        return size if size >= 0 else len(value) * 8
    return len(value) if type(value) is str else 0


class InvalidText:
    """A TEXT value whose bytes are not UTF-8 (only a foreign writer can store one).

    Python's ``sqlite3`` would fail the whole query on such a value; the backend re-reads with raw
    bytes and substitutes this marker, so the damage is reported for the one row that holds it.
    """

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def __repr__(self) -> str:
        return f"InvalidText({self.raw!r})"

    def describe(self) -> str:
        """Where the first invalid byte sits inside the value (defect 8: damage is located, never replaced)."""
        try:
            self.raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return f"invalid byte 0x{self.raw[err.start]:02X} at byte offset {err.start} of the value"
        return "invalid UTF-8"


class Limits:
    """The reader's safety limits (see the persistence contract's "Safety limits")."""

    __slots__ = ("max_data_bytes", "max_depth", "max_text_bytes")

    def __init__(
        self,
        *,
        max_data_bytes: int = 256 * 1024 * 1024,
        max_text_bytes: int = 256 * 1024 * 1024,
        max_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self.max_data_bytes = max_data_bytes  # decompressed size cap of one scalar data BLOB
        self.max_text_bytes = max_text_bytes  # UTF-8 size cap of one scalar data value
        self.max_depth = max_depth


DEFAULT_LIMITS: Final = Limits()


def is_uuid(value: object) -> bool:
    """The store identity / incarnation shape the original accepts (RFC 4122 versions 1-8)."""
    return type(value) is str and _UUID.fullmatch(value) is not None


# --- data column --------------------------------------------------------------------------------

_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    """One compressor per thread: ``ZstdCompressor`` instances must not be shared across threads."""
    comp: zstandard.ZstdCompressor | None = getattr(_local, "compressor", None)
    if comp is None:
        # Level 3, library defaults: content size in the header, no checksum flag (spec §5.5).
        comp = _local.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return comp


def encode_data(text: bytes) -> str | bytes:
    """The ``data`` column value for serialized JSON: TEXT below 4096 bytes, else zstd when smaller.

    Small values stay TEXT because a frame's own overhead and the CPU cost outweigh the gain; a large
    value that does not shrink (already-compressed or random text) also stays TEXT.
    """
    if len(text) < ZSTD_DATA_THRESHOLD_BYTES:
        return text.decode("utf-8")
    compressed = _compressor().compress(text)
    if len(compressed) < len(text):
        return compressed
    return text.decode("utf-8")


def _decompress(blob: bytes, cap: int, what: str) -> bytes:
    """Decompress a stored frame with the output bounded by ``cap`` bytes.

    The bounded streaming read means a crafted frame cannot exhaust memory; the second pass checks
    that the input really ends with complete frames (the streaming reader stops silently at a
    truncated frame), and it cannot produce more than the first pass already bounded.
    """
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(blob, read_across_frames=True)
        pieces: list[bytes] = []
        total = 0
        while True:
            piece = reader.read(min(cap + 1 - total, 1 << 20) or 1)
            if not piece:
                break
            pieces.append(piece)
            total += len(piece)
            if total > cap:
                raise StorageRowError(f"{what} decompresses beyond {cap} bytes")
        rest = blob
        while True:
            dobj = zstandard.ZstdDecompressor().decompressobj()
            dobj.decompress(rest)
            if not dobj.eof:
                raise StorageRowError(f"{what} is a truncated Zstandard frame")
            rest = dobj.unused_data
            if not rest:
                break
    except zstandard.ZstdError as err:
        raise _row_failure(err, f"{what} is not a valid Zstandard frame: {err}") from None
    except MemoryError:
        raise out_of_memory(what) from None
    return b"".join(pieces)


def decode_data(value: object, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse a scalar row's ``data`` column (TEXT as is; BLOB → zstd → strict UTF-8 → JSON)."""
    if type(value) is str:
        if len(value) > limits.max_text_bytes >> 2 and len(value.encode("utf-8", "surrogatepass")) > (
            limits.max_text_bytes
        ):
            raise StorageRowError(f"stored data exceeds {limits.max_text_bytes} UTF-8 bytes")
        text: str | bytes = value
    elif isinstance(value, bytes):
        raw = _decompress(value, limits.max_data_bytes, "stored data")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise StorageRowError(
                f"stored data is not valid UTF-8 (byte offset {err.start} of the decompressed value)"
            ) from None
        text = raw
    else:
        raise StorageRowError(_column_type_message("data", value, "a string or blob"))
    try:
        return loads(text, max_depth=limits.max_depth)
    except JsonDecodeError as err:
        raise _row_failure(err, f"stored data is not valid JSON: {err}") from None


def _column_type_message(column: str, value: object, expected: str) -> str:
    if isinstance(value, InvalidText):
        return f"stored {column} is not valid UTF-8 text ({value.describe()})"
    return f"stored {column} must be {expected}"


# --- source_event_seqs ----------------------------------------------------------------------------


def encode_source_event_seqs(values: object) -> bytes:
    """The complete provenance list as LEB128 varints: first value, then ZigZag deltas.

    Deltas keep the common case (ascending, nearby seqs) to one byte per entry. An empty list is an
    empty BLOB (distinct from NULL, which means "absent").
    """
    if not isinstance(values, list):
        raise EncodeError("sourceEventSeqs must contain non-negative safe integers")
    out = bytearray()
    previous = 0
    first = True
    for value in values:
        if type(value) is not int or value < 0 or value > MAX_SAFE:
            raise EncodeError("sourceEventSeqs must contain non-negative safe integers")
        if first:
            encoded = value
            first = False
        else:
            delta = value - previous
            encoded = delta * 2 if delta >= 0 else -delta * 2 - 1
        previous = value
        while encoded >= 0x80:
            out.append((encoded & 0x7F) | 0x80)
            encoded >>= 7
        out.append(encoded)
    return bytes(out)


_ZIGZAG_BYTE: Final = tuple(value >> 1 if not value & 1 else -((value + 1) >> 1) for value in range(128))


def decode_source_event_seqs(blob: bytes) -> list[int]:
    """Inverse of :func:`encode_source_event_seqs`, rejecting every non-canonical or unsafe form."""
    if not blob:
        return []
    # Fast path: the first value may take several bytes (it is absolute), but when every later delta is
    # a one-byte varint (nearby seqs, the common case) the rest decodes in C: a table maps each ZigZag
    # byte to its delta and ``accumulate`` sums them. One-byte varints are always canonical.
    end = 0
    while end < len(blob) and end < 9 and blob[end] & 0x80:
        end += 1
    if end < min(len(blob), 9) and (end == 0 or blob[end]):
        first = 0
        for shift, byte in enumerate(blob[: end + 1]):
            first |= (byte & 0x7F) << (7 * shift)
        tail = len(blob) - end - 1
        if first <= MAX_SAFE and blob.count(2, end + 1) == tail:
            # Every delta is +1 (ZigZag byte 2): consecutive seqs, the provenance a message usually has.
            if first + tail > MAX_SAFE:
                raise StorageRowError("malformed source_event_seqs storage value: decoded seq is out of range")
            return list(range(first, first + tail + 1))
        if first <= MAX_SAFE and blob[end + 1 :].isascii():
            fast = list(accumulate(map(_ZIGZAG_BYTE.__getitem__, blob[end + 1 :]), initial=first))
            if min(fast) < 0 or max(fast) > MAX_SAFE:
                raise StorageRowError("malformed source_event_seqs storage value: decoded seq is out of range")
            return fast
    values: list[int] = []
    previous = 0
    offset = 0
    size = len(blob)
    while offset < size:
        first = not values
        limit = MAX_SAFE if first else _MAX_ZIGZAG
        value = 0
        shift = 0
        while True:
            if offset >= size:
                raise StorageRowError("malformed source_event_seqs storage value: truncated varint")
            byte = blob[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if shift and not byte & 0x7F:
                    raise StorageRowError("malformed source_event_seqs storage value: non-canonical varint")
                if value > limit:
                    raise StorageRowError("malformed source_event_seqs storage value: varint is out of range")
                break
            shift += 7
            if shift > 56:
                raise StorageRowError("malformed source_event_seqs storage value: varint is out of range")
        if first:
            current = value
        else:
            current = previous + (value >> 1 if not value & 1 else -((value + 1) >> 1))
        if current < 0 or current > MAX_SAFE:
            raise StorageRowError("malformed source_event_seqs storage value: decoded seq is out of range")
        values.append(current)
        previous = current
    return values


# --- encoding logical events ----------------------------------------------------------------------

_MISSING: Final = object()


def _is_number(value: object) -> bool:
    """A JSON number a packed row may carry: ``int`` or finite ``float`` (never ``bool``)."""
    kind = type(value)
    return kind is int or (kind is float and math.isfinite(value))  # type: ignore[arg-type]


def _same_number(a: Any, b: Any) -> bool:
    """Equal *and* spelled the same once serialized (``1`` vs ``1.0``, ``0.0`` vs ``-0.0``).

    JS compares doubles; Python must also keep the spelling, because a packed row writes the first
    member's value for every member.
    """
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    return type(a) is int or math.copysign(1.0, a) == math.copysign(1.0, b)


def encode_scalar(session_id: str, event: Mapping[str, Any]) -> InsertRow:
    """One logical event as a scalar row. Refuses what the columns could not represent losslessly."""
    try:
        kind = event["type"]
        seq = event["seq"]
        time = event["time"]
        data = event["data"]
    except KeyError as err:
        raise EncodeError(f"cannot store an event without {err.args[0]!r}") from None
    except TypeError:
        raise EncodeError("cannot store an event that is not a JSON object") from None
    if type(kind) is not str or not kind:
        raise EncodeError("event type must be a non-empty string")
    if type(seq) is not int or seq < 0 or seq > MAX_SAFE:
        raise EncodeError(f"event seq must be a non-negative safe integer, got {seq!r}")
    if type(time) is not int or time < -MAX_SAFE or time > MAX_SAFE:
        raise EncodeError(f"event time must be a safe integer, got {time!r}")
    sources: bytes | None = None
    surface: str | None = None
    ignorable: int | None = None
    extra = len(event) - 4
    if extra:
        value = event.get("sourceEventSeqs", _MISSING)
        if value is not _MISSING:
            sources = encode_source_event_seqs(value)
            extra -= 1
        value = event.get("surfaceOp", _MISSING)
        if value is not _MISSING:
            surface = dumps(value).decode("utf-8")
            extra -= 1
        value = event.get("ignorable", _MISSING)
        if value is not _MISSING:
            if value is not True:
                raise EncodeError("event ignorable must be the literal true when present")
            ignorable = 1
            extra -= 1
        if extra:
            known = {"type", "seq", "time", "data", "sourceEventSeqs", "surfaceOp", "ignorable"}
            unknown = sorted(str(key) for key in event if key not in known)
            raise EncodeError(f"event envelope keys {unknown} have no schema-17 column and would be lost")
    return (session_id, seq, kind, time, encode_data(dumps(data)), sources, surface, ignorable)


# A packable delta: (row tag, seq, time, turn, step, index, call id, name or _MISSING, payload, event).
_Delta: TypeAlias = tuple[str, int, int, Any, Any, Any, Any, Any, str, Mapping[str, Any]]


def _classify(event: Mapping[str, Any]) -> _Delta | None:
    """The packable facts of a whitelisted delta event (§4.3.1 eligibility), else ``None``.

    Exact key counts make any extra field disqualify, so unknown fields cost compression, never data.
    """
    if len(event) != 4:
        return None
    seq = event.get("seq")
    time = event.get("time")
    data = event.get("data")
    if type(seq) is not int or seq < 0 or seq > MAX_SAFE:
        return None
    if type(time) is not int or time < -MAX_SAFE or time > MAX_SAFE:
        return None
    if not isinstance(data, dict) or len(data) != 3:
        return None
    turn = data.get("turn")
    step = data.get("step")
    chunk = data.get("chunk")
    if not isinstance(chunk, dict) or not _is_number(turn) or not _is_number(step):
        return None
    index = chunk.get("index")
    if not _is_number(index):
        return None
    kind = chunk.get("type")
    size = len(chunk)
    if kind == _TEXT_DELTA or kind == _REASONING_DELTA:
        text = chunk.get("text")
        if size != 3 or type(text) is not str:
            return None
        tag = _TEXT_ROW if kind == _TEXT_DELTA else _REASONING_ROW
        return (tag, seq, time, turn, step, index, None, _MISSING, text, event)
    if kind == _TOOL_CALL_DELTA:
        call_id = chunk.get("id")
        args = chunk.get("argumentsDelta")
        if type(call_id) is not str or type(args) is not str:
            return None
        name: Any = _MISSING
        if size == 5:
            name = chunk.get("name", _MISSING)
            if type(name) is not str:
                return None
        elif size != 4:
            return None
        return (_TOOL_CALL_ROW, seq, time, turn, step, index, call_id, name, args, event)
    return None


def _continues(previous: _Delta, delta: _Delta) -> bool:
    """Whether ``delta`` extends the run ending with ``previous`` (§4.3.1 continuation rules)."""
    gap = delta[2] - previous[2]
    return (
        delta[0] == previous[0]
        and delta[1] == previous[1] + 1
        and -MAX_SAFE <= gap <= MAX_SAFE
        and _same_number(delta[3], previous[3])
        and _same_number(delta[4], previous[4])
        and _same_number(delta[5], previous[5])
        and delta[6] == previous[6]
        and (delta[7] is previous[7] or delta[7] == previous[7])
    )


def _packed_json(run: Sequence[_Delta], start: int, count: int) -> bytes:
    """``JSON(row.data)`` of the packed row holding ``run[start:start + count]`` (key order per spec)."""
    first = run[start]
    members = run[start : start + count]
    previous_time = first[2]
    dt: list[int] = []
    for member in members[1:]:
        dt.append(member[2] - previous_time)
        previous_time = member[2]
    payloads = [member[8] for member in members]
    if first[0] == _TOOL_CALL_ROW:
        if first[7] is _MISSING:
            return dumps(
                {"turn": first[3], "step": first[4], "index": first[5], "dt": dt, "id": first[6], "args": payloads}
            )
        return dumps(
            {
                "turn": first[3],
                "step": first[4],
                "index": first[5],
                "dt": dt,
                "id": first[6],
                "name": first[7],
                "args": payloads,
            }
        )
    return dumps({"turn": first[3], "step": first[4], "index": first[5], "dt": dt, "texts": payloads})


def _emit_bounded_run(out: list[InsertRow], session_id: str, run: list[_Delta]) -> None:
    """Partition one compatible run into rows of 3..1024 members and <= 1 MiB data (``emitBoundedRun``).

    Try the largest row; when its data is too large, binary-search the largest member count that fits
    (size grows with the count); when not even three members fit, the first member goes scalar.
    """
    total = len(run)
    offset = 0
    while total - offset >= MIN_PACKED_ROW_MEMBERS:
        high = min(total - offset, MAX_PACKED_ROW_MEMBERS)
        text = _packed_json(run, offset, high)
        accepted = high if len(text) <= MAX_PACKED_DATA_BYTES else 0
        if not accepted:
            low = MIN_PACKED_ROW_MEMBERS
            high -= 1
            while low <= high:
                middle = (low + high) // 2
                candidate = _packed_json(run, offset, middle)
                if len(candidate) <= MAX_PACKED_DATA_BYTES:
                    accepted, text = middle, candidate
                    low = middle + 1
                else:
                    high = middle - 1
        if not accepted:
            out.append(encode_scalar(session_id, run[offset][9]))
            offset += 1
            continue
        first = run[offset]
        out.append((session_id, first[1], first[0], first[2], encode_data(text), None, None, PACKED_SENTINEL))
        offset += accepted
    for member in run[offset:]:
        out.append(encode_scalar(session_id, member[9]))


def encode_batch(session_id: str, events: Sequence[Mapping[str, Any]]) -> list[InsertRow]:
    """Encode one append batch: packed rows for bounded delta runs, scalar rows for everything else.

    Packing is per batch (runs split at batch boundaries pack separately), so earlier rows are never
    rewritten. The batch must be contiguous; a gap would be stored as committed corruption later.
    """
    out: list[InsertRow] = []
    run: list[_Delta] = []
    expected: int | None = None
    for event in events:
        if not isinstance(event, dict) and not isinstance(event, Mapping):
            raise EncodeError("cannot store an event that is not a JSON object")
        seq = event.get("seq")
        if expected is not None and seq != expected:
            raise EncodeError(f"append batch is not contiguous: expected seq {expected}, got {seq!r}")
        expected = seq + 1 if type(seq) is int else None
        delta = _classify(event) if event.get("type") == _CHUNK_EVENT else None
        if delta is None:
            if run:
                _flush_run(out, session_id, run)
                run = []
            out.append(encode_scalar(session_id, event))
            continue
        if run and not _continues(run[-1], delta):
            _flush_run(out, session_id, run)
            run = []
        run.append(delta)
    if run:
        _flush_run(out, session_id, run)
    return out


def _flush_run(out: list[InsertRow], session_id: str, run: list[_Delta]) -> None:
    if len(run) < MIN_PACKED_ROW_MEMBERS:
        for member in run:
            out.append(encode_scalar(session_id, member[9]))
    else:
        _emit_bounded_run(out, session_id, run)


# --- decoding physical rows -----------------------------------------------------------------------


_STR_ONLY: Final = frozenset({str})
_INT_ONLY: Final = frozenset({int})


def _malformed(tag: str, why: str) -> StorageRowError:
    return StorageRowError(f"malformed {tag} storage row: {why}")


def _is_safe_int(value: object) -> bool:
    return type(value) is int and -MAX_SAFE <= value <= MAX_SAFE


_PackedFacts: TypeAlias = tuple[Any, Any, Any, Any, Any, list[str], int, list[int]]
"""A validated packed row: (turn, step, index, call id, name or _MISSING, members, last member time, gaps)."""


def _expand(tag: str, seq0: int, time0: int, data: object, serialized_bytes: int | None) -> list[dict[str, Any]]:
    """Validate a packed row's data, then expand it into its member events."""
    return _build_members(tag, seq0, time0, _validate_packed(tag, seq0, time0, data, serialized_bytes))


def _validate_packed(tag: str, seq0: int, time0: int, data: object, serialized_bytes: int | None) -> _PackedFacts:
    """Validate a packed row's data against the schema-17 bounds (``validateRow``), first failure wins."""
    if not isinstance(data, dict):
        raise _malformed(tag, "data must be an object")
    name: Any = _MISSING
    call_id: Any = None
    if tag == _TOOL_CALL_ROW:
        size = len(data)
        keys = "turn" in data and "step" in data and "index" in data and "id" in data and "dt" in data
        keys = keys and "args" in data
        with_name = size == 7 and keys and "name" in data
        if not with_name and not (size == 6 and keys):
            raise _malformed(tag, "invalid tool-call data fields")
        call_id = data["id"]
        if with_name:
            name = data["name"]
        if type(call_id) is not str or not (name is _MISSING or type(name) is str):
            raise _malformed(tag, "id and optional name must be strings")
        payload_key = "args"
    else:
        if len(data) != 5 or not (
            "turn" in data and "step" in data and "index" in data and "dt" in data and "texts" in data
        ):
            raise _malformed(tag, "invalid text data fields")
        payload_key = "texts"
    turn = data["turn"]
    step = data["step"]
    index = data["index"]
    numbers = (int, float)
    if type(turn) not in numbers or type(step) not in numbers or type(index) not in numbers:
        raise _malformed(tag, "turn/step/index must be numbers")
    payload = data[payload_key]
    # Type checks run over whole lists in C (map/set) because a row holds up to 1024 members.
    if (
        type(payload) is not list
        or not MIN_PACKED_ROW_MEMBERS <= len(payload) <= MAX_PACKED_ROW_MEMBERS
        or not {*map(type, payload)} <= _STR_ONLY
    ):
        raise _malformed(tag, f"{payload_key} must contain {MIN_PACKED_ROW_MEMBERS}..{MAX_PACKED_ROW_MEMBERS} strings")
    gaps = data["dt"]
    if type(gaps) is not list or not {*map(type, gaps)} <= _INT_ONLY:
        raise _malformed(tag, "dt must be an array of safe integers")
    least = min(gaps) if gaps else 0
    if gaps and (least < -MAX_SAFE or max(gaps) > MAX_SAFE):
        raise _malformed(tag, "dt must be an array of safe integers")
    members = len(payload)
    if len(gaps) != members - 1:
        raise _malformed(tag, "dt length must match the member count")
    if serialized_bytes is None:
        serialized_bytes = len(dumps(data))
    if serialized_bytes > MAX_PACKED_DATA_BYTES:
        raise _malformed(tag, f"data exceeds {MAX_PACKED_DATA_BYTES} UTF-8 bytes")
    if seq0 + members - 1 > MAX_SAFE:
        raise _malformed(tag, "member seqs exceed safe integers")
    if least >= 0:
        # Non-decreasing times (the usual row): time0 is safe, so only the last one can overflow, and
        # no list of member times is needed.
        last_time = time0 + sum(gaps)
        if last_time > MAX_SAFE:
            raise _malformed(tag, "member times exceed safe integers")
    else:
        times = list(accumulate(gaps, initial=time0))
        if min(times) < -MAX_SAFE or max(times) > MAX_SAFE:
            raise _malformed(tag, "member times exceed safe integers")
        last_time = times[-1]
    return turn, step, index, call_id, name, payload, last_time, gaps


def _packed_run(tag: str, seq0: int, time0: int, data: object, serialized_bytes: int | None) -> ChunkRun:
    """Validate a packed row's data exactly as :func:`_expand` does, and keep it packed."""
    turn, step, index, call_id, name, payload, last_time, gaps = _validate_packed(
        tag, seq0, time0, data, serialized_bytes
    )
    return ChunkRun.from_validated(
        tool=tag == _TOOL_CALL_ROW,
        chunk_type=_DELTA_OF_ROW[tag],
        seq0=seq0,
        time0=time0,
        turn=turn,
        step=step,
        index=index,
        dt=gaps,
        payload=payload,
        call_id=call_id,
        name=None if name is _MISSING else name,
        last_time=last_time,
    )


def _build_members(tag: str, seq0: int, time0: int, facts: _PackedFacts) -> list[dict[str, Any]]:
    """The member events of a validated packed row (chunk key order per spec).

    With the kernel's C accelerator the members are built in C directly as frozen, GC-untracked
    :class:`~agentlog.events.Event` objects (equal to the plain form, exactly as the JSONL codec
    returns them), which a restore adopts as is; otherwise they are fresh plain dicts.
    """
    turn, step, index, call_id, name, payload, _, gaps = facts
    members = len(payload)
    delta_type = _DELTA_OF_ROW[tag]
    if _expand_row is not None:
        tool = tag == _TOOL_CALL_ROW
        expanded = _expand_row(
            tool, delta_type, seq0, time0, turn, step, index, gaps, payload,
            call_id, None if name is _MISSING else name, _Event,
        )  # fmt: skip
        if expanded is not None:
            return expanded  # type: ignore[no-any-return]
    seqs = range(seq0, seq0 + members)
    times = accumulate(gaps, initial=time0)
    # Comprehensions with dict displays: the cheapest way CPython builds ~80k small dicts per log.
    if tag != _TOOL_CALL_ROW:
        return [
            {
                "type": _CHUNK_EVENT,
                "seq": seq,
                "time": time,
                "data": {"turn": turn, "step": step, "chunk": {"type": delta_type, "index": index, "text": member}},
            }
            for seq, time, member in zip(seqs, times, payload, strict=True)
        ]
    if name is _MISSING:
        return [
            {
                "type": _CHUNK_EVENT,
                "seq": seq,
                "time": time,
                "data": {
                    "turn": turn,
                    "step": step,
                    "chunk": {"type": delta_type, "index": index, "id": call_id, "argumentsDelta": member},
                },
            }
            for seq, time, member in zip(seqs, times, payload, strict=True)
        ]
    return [
        {
            "type": _CHUNK_EVENT,
            "seq": seq,
            "time": time,
            "data": {
                "turn": turn,
                "step": step,
                "chunk": {"type": delta_type, "index": index, "id": call_id, "name": name, "argumentsDelta": member},
            },
        }
        for seq, time, member in zip(seqs, times, payload, strict=True)
    ]


def decode_packed_record(value: object) -> list[Any]:
    """Decode one parsed schema-17 record value (``decodeStorageRecord``): tagged rows are validated.

    A non-object, or an object whose ``type`` is not a packed tag, is returned as ``[value]``. This is
    the value-level view of a packed row that the codec tests exercise (the row path below builds the
    same envelope from the columns).
    """
    if not isinstance(value, dict):
        return [value]
    tag = value.get("type")
    if type(tag) is not str or tag not in PACKED_TAGS:
        return [value]
    if len(value) != 4 or "seq0" not in value or "time0" not in value or "data" not in value:
        raise _malformed(tag, "invalid envelope fields")
    seq0 = value["seq0"]
    if type(seq0) is not int or seq0 < 0 or seq0 > MAX_SAFE:
        raise _malformed(tag, "seq0 must be non-negative")
    time0 = value["time0"]
    if not _is_safe_int(time0):
        raise _malformed(tag, "time0 must be a safe integer")
    return _expand(tag, seq0, time0, value["data"], None)


def _decode_packed_data(tag: str, value: object, limits: Limits) -> tuple[Any, int]:
    """A packed row's data column: bounded to 1 MiB *before* JSON parsing, returning (value, bytes)."""
    if type(value) is str:
        size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_PACKED_DATA_BYTES:
            raise _malformed(tag, f"data exceeds {MAX_PACKED_DATA_BYTES} UTF-8 bytes")
        text: str | bytes = value
    elif isinstance(value, bytes):
        raw = _decompress(value, MAX_PACKED_DATA_BYTES, f"malformed {tag} storage row: data")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _malformed(
                tag, f"data is not valid UTF-8 (byte offset {err.start} of the decompressed value)"
            ) from None
        size = len(raw)
        text = raw
    else:
        raise StorageRowError(_column_type_message("data", value, "a string or blob"))
    try:
        return loads(text, max_depth=limits.max_depth), size
    except JsonDecodeError as err:
        raise _row_failure(err, f"malformed {tag} storage row: data is not valid JSON: {err}") from None


def _row_error(row: PhysicalRow) -> StorageRowError:
    """The first primitive-check failure of a row (``decodeEventRow``'s messages)."""
    if len(row) != 7:
        return StorageRowError("stored event row must have 7 columns")
    seq, kind, time, data, sources, surface, _ = row
    if type(seq) is not int or seq < 0 or seq > MAX_SAFE:
        return StorageRowError("stored seq must be a non-negative safe integer")
    if type(kind) is not str or not kind:
        return StorageRowError(_column_type_message("type", kind, "a non-empty string"))
    if not _is_safe_int(time):
        return StorageRowError("stored time must be a safe integer")
    if type(data) is not str and type(data) is not bytes:
        return StorageRowError(_column_type_message("data", data, "a string or blob"))
    if sources is not None and type(sources) is not bytes:
        return StorageRowError(_column_type_message("source_event_seqs", sources, "a blob or null"))
    if surface is not None and type(surface) is not str:
        return StorageRowError(_column_type_message("surface_op", surface, "a string or null"))
    return StorageRowError("stored ignorable must be null, 0 or 1")


def decode_row(row: PhysicalRow, limits: Limits = DEFAULT_LIMITS, compact: bool = False) -> list[Any]:
    """Decode one physical row into the logical event(s) it stores (``decodeRow``); fresh dicts.

    The primitive checks run before any JSON is parsed, inlined as one condition because this runs
    for every row of every load. Raises :class:`StorageRowError` with the spec's message for any damage.
    ``compact``: a packed row is validated completely but kept packed, as one
    :class:`~agentlog.kernel.packedrun.ChunkRun` (the coordinator's cold load).
    """
    try:
        seq, kind, time, data, sources, surface, ignorable = row
    except ValueError:
        raise _row_error(row) from None
    if not (
        type(seq) is int
        and 0 <= seq <= MAX_SAFE
        and type(kind) is str
        and kind
        and type(time) is int
        and -MAX_SAFE <= time <= MAX_SAFE
        and (type(data) is str or type(data) is bytes)
        and (sources is None or type(sources) is bytes)
        and (surface is None or type(surface) is str)
        and (ignorable is None or (type(ignorable) is int and (ignorable == 0 or ignorable == 1)))
    ):
        raise _row_error(row)
    if ignorable == PACKED_SENTINEL:
        if kind not in PACKED_TAGS:
            raise _malformed(kind, "packed discriminator requires a chunk tag")
        if sources is not None or surface is not None:
            raise _malformed(kind, "packed surface fields must be null")
        value, size = _decode_packed_data(kind, data, limits)
        if compact:
            return [_packed_run(kind, seq, time, value, size)]
        return _expand(kind, seq, time, value, size)
    if type(data) is str and len(data) <= limits.max_text_bytes >> 2:
        try:
            parsed = loads(data, max_depth=limits.max_depth)
        except JsonDecodeError as err:
            raise _row_failure(err, f"stored data is not valid JSON: {err}") from None
    else:
        parsed = decode_data(data, limits)
    event: dict[str, Any] = {"type": kind, "seq": seq, "time": time, "data": parsed}
    if sources is not None:
        event["sourceEventSeqs"] = decode_source_event_seqs(sources)
    if surface is not None:
        if surface == '"append"':
            event["surfaceOp"] = "append"
        else:
            try:
                event["surfaceOp"] = loads(surface, max_depth=limits.max_depth)
            except JsonDecodeError as err:
                raise _row_failure(err, f"stored surface_op is not valid JSON: {err}") from None
    if ignorable == 1:
        event["ignorable"] = True
    return [event]


def last_member_seq(row: PhysicalRow, limits: Limits = DEFAULT_LIMITS) -> int:
    """The last logical seq a row stores; raises :class:`StorageRowError` when it does not decode.

    A packed row is fully validated but not expanded: seeks and the append tail check ask this of
    every packed row up to 1023 seqs back, and building the member dicts would dominate their cost.
    """
    if len(row) == 7 and row[6] == PACKED_SENTINEL and type(row[6]) is int and row[1] in PACKED_TAGS:
        seq, kind, time, data, sources, surface, _ = row
        if (
            type(seq) is int
            and 0 <= seq <= MAX_SAFE
            and _is_safe_int(time)
            and (type(data) is str or type(data) is bytes)
        ):
            if sources is not None or surface is not None:
                raise _malformed(kind, "packed surface fields must be null")
            value, size = _decode_packed_data(kind, data, limits)
            return seq + len(_validate_packed(kind, seq, time, value, size)[5]) - 1
    return int(decode_row(row, limits)[-1]["seq"])


def scan_rows(
    rows: Sequence[PhysicalRow],
    base: int = 0,
    *,
    location: str,
    limits: Limits = DEFAULT_LIMITS,
    compact: bool = False,
) -> list[Any]:
    """Flatten ordered physical rows into their logical events (``scanRows``), all or nothing.

    A SQLite row cannot tear: a transaction commits whole rows or none, so a row that fails to decode,
    or whose events do not continue the expected seq, is committed damage wherever it sits — typed
    :class:`SessionPersistenceCorruptionError` naming the row's seq, and nothing is ever deleted. (The
    original classified damage after the last ``turn/end`` as a removable torn tail; deleting it
    destroyed complete committed rows.)
    """
    if len(rows) < _GC_PAUSE_ROWS:
        preserved, damage = _scan_forward(rows, base, location, limits, compact)
    else:
        with gc_paused():
            preserved, damage = _scan_forward(rows, base, location, limits, compact)
    if damage is not None:
        raise damage
    return preserved


def scan_prefix(
    rows: Sequence[PhysicalRow],
    base: int = 0,
    *,
    location: str,
    limits: Limits = DEFAULT_LIMITS,
    compact: bool = False,
) -> tuple[list[Any], SessionPersistenceCorruptionError | None]:
    """The decodable prefix of ordered rows and the damage that ends it (``None`` when all decode).

    The partial read behind ``export --partial``: events up to the first damaged row or seq gap,
    and the typed error that row would raise in :func:`scan_rows` (``compact`` as there).
    """
    if len(rows) < _GC_PAUSE_ROWS:
        return _scan_forward(rows, base, location, limits, compact)
    with gc_paused():
        return _scan_forward(rows, base, location, limits, compact)


def scan_batches(
    batches: Iterable[Sequence[PhysicalRow]],
    base: int = 0,
    *,
    location: str,
    limits: Limits = DEFAULT_LIMITS,
    compact: bool = False,
) -> tuple[list[Any], SessionPersistenceCorruptionError | None]:
    """:func:`scan_prefix` over rows that arrive in batches (a cursor's ``fetchmany``), decoded as they come.

    A load that fetched every row first held all row tuples — whose TEXT/BLOB payloads are most of a
    log's bytes — alive beside the events decoded from them; consuming batch by batch bounds that to
    one batch. The rows are decoded in the same order with the same checks, so the events and the
    damage (its message, its seq) are exactly those of :func:`scan_prefix` over the concatenated rows.
    Iteration stops at the damaged row: the caller still owns the rest of ``batches``.
    """
    with gc_paused():  # the row count is unknown up front; a short load pays nothing for the pause
        return _scan_forward(chain.from_iterable(batches), base, location, limits, compact)


def _scan_forward(
    rows: Iterable[PhysicalRow], base: int, location: str, limits: Limits, compact: bool = False
) -> tuple[list[Any], SessionPersistenceCorruptionError | None]:
    preserved: list[Any] = []
    append = preserved.append
    expected = base
    max_depth = limits.max_depth
    fast_text = limits.max_text_bytes >> 2  # below this many characters no size check is needed
    # One string object per event type: each fetched row brings its own copy of the type text, which
    # every event would otherwise keep alive (~6 MB on a 100k-row log); a log has a few dozen types.
    seen_kinds: dict[str, str] = {}
    kinds = seen_kinds.setdefault
    for row in rows:
        # Fast path for the common row: a contiguous, non-ignorable scalar event with TEXT data. Any
        # surprise (a type, a JSON error, a provenance error) falls through to ``decode_row``, which
        # re-checks everything in the spec's order and produces the canonical error.
        if len(row) == 7:
            seq, kind, time, data, sources, surface, ignorable = row
            if (
                ignorable is None
                and seq == expected
                and type(seq) is int
                and type(kind) is str
                and kind
                and type(time) is int
                and -MAX_SAFE <= time <= MAX_SAFE
                and type(data) is str
                and len(data) <= fast_text
                and (sources is None or type(sources) is bytes)
                and (surface is None or type(surface) is str)
            ):
                try:
                    event = {
                        "type": kinds(kind, kind),
                        "seq": seq,
                        "time": time,
                        "data": loads(data, max_depth=max_depth),
                    }
                    if sources is not None:
                        event["sourceEventSeqs"] = decode_source_event_seqs(sources)
                    if surface is not None:
                        event["surfaceOp"] = "append" if surface == '"append"' else loads(surface, max_depth=max_depth)
                except (JsonDecodeError, StorageRowError):
                    pass
                else:
                    append(event)
                    expected += 1
                    continue
            # Fast path for a contiguous packed row kept packed (the cold load); a refusal is left to
            # ``decode_row`` exactly as above.
            elif (
                compact
                and ignorable == PACKED_SENTINEL
                and type(ignorable) is int
                and seq == expected
                and type(seq) is int
                and type(kind) is str
                and kind in PACKED_TAGS
                and type(time) is int
                and -MAX_SAFE <= time <= MAX_SAFE
                and sources is None
                and surface is None
                and (type(data) is str or type(data) is bytes)
            ):
                try:
                    value, size = _decode_packed_data(kind, data, limits)
                    run = _packed_run(kind, seq, time, value, size)
                except StorageRowError:
                    pass
                else:
                    append(run)
                    expected += run.n
                    continue
        reason: str
        try:
            events = decode_row(row, limits, compact)
        except StorageRowError as err:
            reason = str(err)
        else:
            # A decoded row's members are contiguous from the row's own seq.
            if row[0] == expected:
                first = events[0]
                expected += first.n if first.__class__ is ChunkRun else len(events)
                preserved += events
                continue
            reason = f"expected seq {expected}, row stores seq {row[0]}"
        return preserved, committed_corruption(location, row[0] if len(row) else None, reason)
    return preserved, None


# --- garbage-collector pause ----------------------------------------------------------------------

_GC_PAUSE_ROWS: Final = 256


def scan_next_seq(
    rows: Sequence[PhysicalRow],
    base: int,
    *,
    location: str,
    last_seq_of: Callable[[PhysicalRow], int],
) -> int:
    """:func:`scan_rows` without building events: the next seq, or the same typed damage.

    The append path only needs the stored next seq, so rows are validated (``last_seq_of`` raises
    :class:`StorageRowError` like :func:`decode_row`) but packed members are never expanded.
    """
    expected = base
    for row in rows:
        reason: str
        try:
            last = last_seq_of(row)
        except StorageRowError as err:
            reason = str(err)
        else:
            if row[0] == expected:
                expected = last + 1
                continue
            reason = f"expected seq {expected}, row stores seq {row[0]}"
        raise committed_corruption(location, row[0] if len(row) else None, reason)
    return expected


REMEDY: Final = (
    "The database was not modified; restore it from a backup or export the readable prefix with "
    "'agentlog export --partial'."
)


def committed_corruption(location: str, seq: Any, reason: str) -> SessionPersistenceCorruptionError:
    """The spec's committed-corruption error, located (database path, seq) and with a remedy."""
    return SessionPersistenceCorruptionError(
        f"corrupt session log: invalid committed physical row at seq {seq} — {location}, seq {seq} ({reason}). "
        + REMEDY,
        location=location,
        offset=seq if type(seq) is int else None,
    )


# --- session rows ---------------------------------------------------------------------------------

SessionRow: TypeAlias = tuple[Any, ...]
"""A fetched ``sessions`` row, columns in DDL order (id ... revision)."""


def _nonneg_safe(value: object) -> bool:
    return type(value) is int and 0 <= value <= MAX_SAFE


def decode_session_row(row: SessionRow) -> tuple[dict[str, Any], str, int]:
    """Validate a ``sessions`` row and rebuild its header (``decodeSessionRow``).

    Returns ``(header, incarnation, revision)``; NULL columns become absent header fields, so an
    absent ``delegationDepth`` stays absent (unlike JSONL). Raises :class:`StorageRowError`. Listing
    runs this for every session, so the common all-valid row is checked in one condition first.
    """
    (sid, version, created_at, cwd, parent, seed_length, origin, depth, preset, incarnation, revision) = row
    if (
        type(sid) is str
        and sid
        and type(version) is int
        and -MAX_SAFE <= version <= MAX_SAFE
        and type(created_at) is int
        and 0 <= created_at <= MAX_SAFE
        and type(revision) is int
        and 0 <= revision <= MAX_SAFE
        and (incarnation in _known_uuids or is_uuid(incarnation))
        and (cwd is None or (type(cwd) is str and cwd.startswith("/")))
        and (parent is None or type(parent) is str)
        and (seed_length is None or (type(seed_length) is int and 0 <= seed_length <= MAX_SAFE))
        and (origin is None or (type(origin) is str and origin == "subagent"))
        and (depth is None or (type(depth) is int and 0 <= depth <= MAX_SAFE))
        and (preset is None or type(preset) is str)
    ):
        if len(_known_uuids) < _KNOWN_UUIDS_MAX:
            _known_uuids.add(incarnation)
        header: dict[str, Any] = {"version": version, "id": sid, "createdAt": created_at}
        if cwd is not None:
            header["cwd"] = cwd
        if parent is not None:
            header["parentSession"] = parent
        if seed_length is not None:
            header["seedLength"] = seed_length
        if origin is not None:
            header["origin"] = origin
        if depth is not None:
            header["delegationDepth"] = depth
        if preset is not None:
            header["agentPreset"] = preset
        return header, incarnation, revision
    _decode_session_row_slow(row)  # raises the first failing check's message
    raise StorageRowError("stored session row is invalid")  # unreachable: the slow path raised


_known_uuids: set[str] = set()  # incarnations already proven valid (listing revalidates every row)
_KNOWN_UUIDS_MAX: Final = 65536


def _decode_session_row_slow(row: SessionRow) -> dict[str, Any]:
    """Every check of ``decodeSessionRow`` in order, first failure wins; returns the header."""
    (sid, version, created_at, cwd, parent, seed_length, origin, depth, preset, incarnation, revision) = row
    if type(sid) is not str or not sid:
        raise StorageRowError(_column_type_message("session id", sid, "a non-empty string"))
    if not _is_safe_int(version):
        raise StorageRowError("stored session version must be a safe integer")
    if not _nonneg_safe(created_at):
        raise StorageRowError("stored session createdAt must be a non-negative safe integer")
    header: dict[str, Any] = {"version": version, "id": sid, "createdAt": created_at}
    if cwd is not None:
        if type(cwd) is not str or not cwd.startswith("/"):
            raise StorageRowError("stored session cwd must be absolute")
        header["cwd"] = cwd
    if parent is not None:
        if type(parent) is not str:
            raise StorageRowError(_column_type_message("session parentSession", parent, "a string or null"))
        header["parentSession"] = parent
    if seed_length is not None:
        if not _nonneg_safe(seed_length):
            raise StorageRowError("stored session seedLength must be a non-negative safe integer or null")
        header["seedLength"] = seed_length
    if origin is not None:
        if origin != "subagent" or type(origin) is not str:
            raise StorageRowError("stored session origin must be subagent or null")
        header["origin"] = origin
    if depth is not None:
        if not _nonneg_safe(depth):
            raise StorageRowError("stored session delegationDepth must be a non-negative safe integer or null")
        header["delegationDepth"] = depth
    if preset is not None:
        if type(preset) is not str:
            raise StorageRowError(_column_type_message("session agentPreset", preset, "a string or null"))
        header["agentPreset"] = preset
    if not is_uuid(incarnation):
        raise StorageRowError("stored session incarnation must be a UUID")
    if not _nonneg_safe(revision):
        raise StorageRowError("stored session revision must be a non-negative safe integer")
    return header
