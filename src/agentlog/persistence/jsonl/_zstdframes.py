"""Zstandard frame helpers for the JSONL backend: a structural frame scanner and bounded codecs.

A compressed session log is a plain concatenation of independent, checksummed Zstandard frames, one per
durable batch (spec §4.4). Crash recovery depends on telling a *torn* final frame (a write cut short by
a crash: truncate it and carry on) from a *damaged* complete frame (committed data lost: refuse). The
library cannot make that distinction for us — it only reports "incomplete input" or "corrupt data" for
the whole buffer — so :func:`scan_zstd_frames` walks frame and block headers itself (§4.4.1) and the
codecs below are only ever handed one frame at a time.

Decompression is bounded by a caller-supplied cap because a crafted frame (RLE blocks expand 4 bytes
into 128 KiB) could otherwise exhaust memory before any checksum is verified.

Errors raised here are :class:`~agentlog.errors.SessionPersistenceCorruptionError` carrying the spec's
bare text and a byte ``offset``; the backend adds the file path and a remedy.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import zstandard

from ...errors import FrameTooLargeError, ResourceExhaustedError, SessionPersistenceCorruptionError

__all__ = [
    "ZSTD_MAGIC",
    "ZSTD_MAGIC_BYTES",
    "FrameScan",
    "FrameTooLargeError",
    "compress_frame",
    "decompress_frame",
    "decompress_torn_frame",
    "frame_ends_at",
    "scan_zstd_frames",
]

ZSTD_MAGIC = 0xFD2FB528
"""Little-endian magic number that opens every standard Zstandard frame (bytes ``28 B5 2F FD``)."""

ZSTD_MAGIC_BYTES = ZSTD_MAGIC.to_bytes(4, "little")
_DICT_ID_BYTES = (0, 1, 2, 4)
_STREAM_CHUNK = 1 << 20  # output per streaming read: bounds memory overshoot past the cap to 1 MiB
_COMPRESSION_LEVEL = 3


@dataclass(frozen=True, slots=True)
class FrameScan:
    """Where the complete frames of a buffer lie, and where a torn final frame starts (if any)."""

    frames: list[tuple[int, int]] = field(default_factory=list)
    """``(start, end)`` byte ranges of the structurally complete frames, in order."""
    torn_start: int | None = None
    """Offset of an incomplete trailing frame; ``None`` when the buffer ends on a frame boundary."""
    damage: SessionPersistenceCorruptionError | None = None
    """With ``stop_at_damage``: the structural damage that ended the scan (``frames`` precede it)."""


def scan_zstd_frames(
    buffer: bytes | bytearray | memoryview, max_frames: int | None = None, *, stop_at_damage: bool = False
) -> FrameScan:
    """Walk frame and block headers without decompressing (spec §4.4.1).

    Running out of bytes anywhere inside a frame means the frame is torn (a crash cut the write short);
    a wrong magic number, a reserved header bit or a reserved block type cannot come from a cut-short
    write and raises instead. Block-size maxima are deliberately not checked here: the decoder does it
    when the frame is actually decoded.
    """
    data = memoryview(buffer).cast("B") if not isinstance(buffer, bytes) else buffer
    size = len(data)
    frames: list[tuple[int, int]] = []
    start = 0
    while start < size and (max_frames is None or len(frames) < max_frames):
        try:
            end = _frame_end(data, start, size)
        except SessionPersistenceCorruptionError as err:
            if not stop_at_damage:
                raise
            return FrameScan(frames, None, err)
        if end is None:
            return FrameScan(frames, start)
        frames.append((start, end))
        start = end
    return FrameScan(frames, None)


def frame_ends_at(data: bytes, start: int, end: int) -> bool:
    """Whether a structurally complete frame starts at ``start`` and ends exactly at ``end``.

    The backward seek of a suffix read tests candidate magic numbers with it: a false candidate (the
    magic bytes inside compressed data) is rejected here or, at the latest, by the frame's checksum.
    """
    try:
        return _frame_end(data, start, end) == end
    except SessionPersistenceCorruptionError:
        return False


def _frame_end(data: bytes | memoryview, start: int, size: int) -> int | None:
    """End offset of the frame at ``start``, or ``None`` when the buffer ends inside it."""
    if size - start < 4:
        return None
    if bytes(data[start : start + 4]) != ZSTD_MAGIC_BYTES:
        raise _structure_error(f"corrupt Zstandard session log: invalid frame magic at byte {start}", start)
    pos = start + 4
    if pos >= size:
        return None
    descriptor = data[pos]
    if descriptor & 0x18:
        raise _structure_error(f"corrupt Zstandard session log: reserved frame-header bit at byte {pos}", pos)
    fcs_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    has_checksum = bool(descriptor & 0x04)
    fcs_bytes = (1 if single_segment else 0) if fcs_flag == 0 else 1 << fcs_flag
    pos += 1 + (0 if single_segment else 1) + _DICT_ID_BYTES[descriptor & 3] + fcs_bytes
    if pos > size:
        return None
    while True:
        if size - pos < 3:
            return None
        header = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
        block_type = (header >> 1) & 3
        if block_type == 3:
            raise _structure_error(f"corrupt Zstandard session log: reserved block type at byte {pos}", pos)
        pos += 3 + (1 if block_type == 1 else header >> 3)
        if pos > size:
            return None
        if header & 1:
            break
    if has_checksum:
        pos += 4
        if pos > size:
            return None
    return pos


def _structure_error(message: str, offset: int) -> SessionPersistenceCorruptionError:
    return SessionPersistenceCorruptionError(message, offset=offset)


# --- codecs -----------------------------------------------------------------------------------------

_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    """A per-thread compressor: contexts are costly to build (~20 µs) and not safe to share."""
    cctx: zstandard.ZstdCompressor | None = getattr(_local, "cctx", None)
    if cctx is None:
        cctx = _local.cctx = zstandard.ZstdCompressor(level=_COMPRESSION_LEVEL, write_checksum=True)
    return cctx


def _decompressor() -> zstandard.ZstdDecompressor:
    dctx: zstandard.ZstdDecompressor | None = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = zstandard.ZstdDecompressor()
    return dctx


def compress_frame(data: bytes) -> bytes:
    """One independent frame with the content checksum and content size in its header (level 3)."""
    return _compressor().compress(data)


def _out_of_memory(start: int) -> ResourceExhaustedError:
    return ResourceExhaustedError(
        f"out of memory while decompressing the Zstandard frame at byte {start}; nothing was modified (this "
        "is not damage). Retry with more memory available, or a smaller max_frame_bytes so an oversized frame "
        "is refused before memory runs out"
    )


def _is_allocation_failure(err: BaseException) -> bool:
    return "memory" in str(err).lower() or "allocation" in str(err).lower()


def _too_large(start: int, max_bytes: int) -> FrameTooLargeError:
    return FrameTooLargeError(
        f"corrupt Zstandard session log: frame at byte {start} decompresses to more than {max_bytes} bytes",
        offset=start,
    )


def decompress_frame(frame: bytes | memoryview, start: int, max_bytes: int) -> bytes:
    """Decode exactly one complete frame, verifying its checksum, refusing output beyond ``max_bytes``.

    Frames carrying their content size (every frame this package writes) decode in one shot into an
    exactly-sized buffer after the declared size is checked against the cap; the decoder itself refuses
    output beyond the declared size. Frames without it (other writers may omit it) stream in 1 MiB reads.
    ``start`` only labels errors.
    """
    dctx = _decompressor()
    try:
        declared = zstandard.get_frame_parameters(frame).content_size
        if declared != zstandard.CONTENTSIZE_UNKNOWN:
            if declared > max_bytes:
                raise _too_large(start, max_bytes)
            return dctx.decompress(frame)
        return _stream(dctx, frame, start, max_bytes)
    except FrameTooLargeError:
        raise
    except MemoryError:
        raise _out_of_memory(start) from None
    except (zstandard.ZstdError, ValueError) as err:
        if _is_allocation_failure(err):
            raise _out_of_memory(start) from None
        raise SessionPersistenceCorruptionError(
            f"corrupt Zstandard session log: frame at byte {start} failed validation", offset=start
        ) from err


def _stream(dctx: zstandard.ZstdDecompressor, frame: bytes | memoryview, start: int, max_bytes: int) -> bytes:
    reader = dctx.stream_reader(frame, read_across_frames=False)
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = reader.read(_STREAM_CHUNK)
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(start, max_bytes)
        parts.append(chunk)


def decompress_torn_frame(partial: bytes | memoryview, start: int, max_bytes: int) -> bytes:
    """The plaintext a torn frame's available bytes yield; no checksum can be verified.

    Decoder errors mean the tail is garbage rather than a cut-short write, and are treated as "no
    plaintext" exactly as the reference does (§4.7.2 step 7); exceeding the cap is still refused.
    """
    try:
        return _stream(_decompressor(), partial, start, max_bytes)
    except FrameTooLargeError:
        raise
    except MemoryError:
        raise _out_of_memory(start) from None
    except (zstandard.ZstdError, ValueError) as err:
        if _is_allocation_failure(err):
            raise _out_of_memory(start) from None
        return b""
