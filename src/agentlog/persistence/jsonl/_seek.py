"""JSONL store: seek reads, a log's suffix read backwards from its end (``load_stored_from``).

Only the header and the records from the last one that starts below ``from_seq`` are read and parsed,
through a :class:`_TailWindow` of ``pread`` blocks; whenever the span holds anything unusual the answer
is ``_WHOLE`` and the caller reads the whole log.
"""

from __future__ import annotations

import os
import re
from typing import Any, Final

from ...errors import ChunkRowError, SessionFormatUnsupportedError, SessionPersistenceCorruptionError
from ...kernel._gc import gc_paused
from ...kernel.chunkrows import CHUNK_ROW_TAGS, decode_storage_record
from ...kernel.events import SessionHeader
from ...kernel.jsoncodec import loads
from ..backend import StoredPrefix
from ._decoding import TornMarker, _Decoding
from ._files import _FileChanged, _revision
from ._scanner import SessionLogScanner
from ._zstdframes import (
    ZSTD_MAGIC_BYTES,
    _frame_end,
    decompress_frame,
    decompress_torn_frame,
    frame_ends_at,
    scan_zstd_frames,
)

_SEEK_BLOCK: Final = 64 * 1024
"""First backward read of a seek (doubling after): a few steps of a typical session's tail."""
_RECORD_HEAD: Final = re.compile(rb'\{"type":"[^"\\]*","seq0?":(0|[1-9][0-9]{0,15})[,}]')
"""How a record this writer wrote opens (events ``{"type":..,"seq":..``, packed rows ``"seq0"``)."""
_PROBE_REACH: Final = 64 * 1024 * 1024
"""How far back from the end the torn-tail probe looks for the last complete zstd frame (beyond: no answer)."""
_NO_SEQ: Final = 1 << 62
"""A ``from_seq`` above every seq: :meth:`_Seeking._record_seq` then parses the record for its seq."""
_WHOLE: Final = object()
"""Internal answer of a seek: read the whole log instead."""


class _TailWindow:
    """The bytes of an open file from some offset to its end, grown backwards (doubling) on demand.

    A seek read only ever looks at the header and at a suffix of the file, so it reads those with
    ``pread`` instead of the whole file; the window is contiguous, so searches may span block edges.
    """

    __slots__ = ("_block", "_data", "_fd", "_start", "size")

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self.size = size
        self._start = size
        self._data = b""
        self._block = _SEEK_BLOCK

    def _pread(self, offset: int, length: int) -> bytes:
        parts: list[bytes] = []
        while length > 0:
            chunk = os.pread(self._fd, length, offset)
            if not chunk:
                raise _FileChanged  # it shrank under the read: read it again
            parts.append(chunk)
            offset += len(chunk)
            length -= len(chunk)
        return b"".join(parts)

    def head(self, length: int) -> bytes:
        return self._pread(0, min(length, self.size))

    def _reach(self, offset: int) -> None:
        """Make the window start at or before ``offset``."""
        if offset >= self._start:
            return
        start = max(0, min(offset, self._start - self._block))
        self._block = max(self._block, self.size - start)
        self._data = self._pread(start, self._start - start) + self._data
        self._start = start

    def rfind(self, needle: bytes, lo: int, hi: int) -> int:
        """The last offset in ``[lo, hi)`` where ``needle`` starts and ends before ``hi``, else -1."""
        while True:
            found = self._data.rfind(needle, max(lo, self._start) - self._start, max(hi - self._start, 0))
            if found >= 0:
                return self._start + found
            if self._start <= lo:
                return -1
            self._reach(self._start - 1)

    def slice(self, start: int, end: int) -> bytes:
        self._reach(start)
        return self._data[start - self._start : end - self._start]

    def frame_ends_at(self, start: int, end: int) -> bool:
        self._reach(start)
        return frame_ends_at(self._data, start - self._start, end - self._start)

    def frame_end(self, start: int) -> int | None:
        """Where the frame at ``start`` ends (``None``: the file ends inside it); bad structure raises."""
        self._reach(start)
        end = _frame_end(self._data, start - self._start, self.size - self._start)
        return None if end is None else end + self._start


class _Seeking(_Decoding):
    """The seek read's parts (a mixin of :class:`~agentlog.persistence.jsonl.backend.JsonlBackend`)."""

    def _seek_stable(self, path: str, from_seq: int) -> StoredPrefix[TornMarker] | object | None:
        """The seek read, bracketed by two stats like :meth:`_read_stable`: a prefix, ``_WHOLE``, or None."""
        seek = self._seek_zstd if self._zstd else self._seek_raw

        def read(fd: int, opened: os.stat_result) -> Any:
            with gc_paused():
                try:
                    return seek(_TailWindow(fd, opened.st_size), from_seq, path)
                except (SessionPersistenceCorruptionError, SessionFormatUnsupportedError, ChunkRowError):
                    return None  # the whole read reports it exactly

        stable = self._stable(path, read)
        if stable is None:
            return None
        found, before = stable
        if found is None:
            return _WHOLE
        meta, events = found
        return StoredPrefix(meta=meta, events=events, revision=_revision(before))

    def _record_seq(self, line: bytes, from_seq: int) -> int | None:
        """The first seq a complete record holds, when that is enough to place it; ``None`` if unknown.

        A record this writer wrote opens with its type and seq, so most records of the span are placed
        by a match on their first bytes; only a candidate anchor (a seq below ``from_seq``) is parsed.
        """
        match = _RECORD_HEAD.match(line)
        if match is not None and int(match.group(1)) >= from_seq:
            return int(match.group(1))
        if len(line) > self.max_line_bytes:
            return None  # never parsed: the forward scan (or the whole read) refuses it
        try:
            value = loads(line, max_depth=self.max_depth)
        except (ValueError, RecursionError):
            return None
        if type(value) is not dict:
            return None
        tag = value.get("type")
        if tag.__class__ is str and tag in CHUNK_ROW_TAGS:  # (an unhashable type is no tag either)
            try:
                value = decode_storage_record(value)[0]
            except ChunkRowError:
                return None
        seq = value.get("seq")
        return seq if type(seq) is int else None

    def _last_line_below(self, text: bytes, from_seq: int, first_seq: int) -> tuple[int, int]:
        """Offset and seq of the last complete line of a frame's text that starts below ``from_seq``.

        The frame's first line does (``first_seq``), so a large batch frame is parsed only from the
        last record the suffix needs, not from its start.
        """
        end = text.rfind(b"\n")
        while end > 0:
            previous = text.rfind(b"\n", 0, end)
            if previous < 0:
                break  # the first line, known to start below from_seq
            seq = self._record_seq(text[previous + 1 : end], from_seq)
            if seq is not None and seq < from_seq:
                return previous + 1, seq
            end = previous
        return 0, first_seq

    def _seek_raw(self, tail: _TailWindow, from_seq: int, path: str) -> tuple[SessionHeader, list[Any]] | None:
        head = tail.head(_SEEK_BLOCK)
        newline = head.find(b"\n")
        if newline < 0 or from_seq == 0:
            return None
        scanner = SessionLogScanner(head[: newline + 1], **self._limits())
        body = newline + 1
        # ``end``: where the next complete line (searching backwards) ends — at the last newline.
        end = tail.rfind(b"\n", body, tail.size)
        while end >= body:
            previous = tail.rfind(b"\n", body, end)
            start = body if previous < 0 else previous + 1
            seq = self._record_seq(tail.slice(start, end), from_seq)
            if seq is not None and seq < from_seq:
                scanner.resume_at(seq)
                scanner.write(tail.slice(start, tail.size))
                result = scanner.finish()
                return result.meta, result.events[from_seq - seq :]
            end = start - 1
        return None

    def _seek_zstd(self, tail: _TailWindow, from_seq: int, path: str) -> tuple[SessionHeader, list[Any]] | None:
        head = tail.head(_SEEK_BLOCK)
        header = scan_zstd_frames(head, 1)
        if not header.frames or from_seq == 0:
            return None
        scanner = self._header_scanner(memoryview(head), header.frames[0], path)
        body = header.frames[0][1]
        texts: list[bytes] = []
        end = tail.size  # the start of the earliest frame found so far
        while end > body:
            candidate = end
            while True:
                candidate = tail.rfind(ZSTD_MAGIC_BYTES, body, candidate)
                if candidate < 0:
                    return None  # a torn or damaged final frame: the whole read decides
                if tail.frame_ends_at(candidate, end):
                    break
            text = decompress_frame(tail.slice(candidate, end), candidate, self.max_frame_bytes)
            texts.append(text)
            end = candidate
            newline = text.find(b"\n")
            seq = self._record_seq(text[:newline] if newline >= 0 else text, from_seq)
            if seq is not None and seq < from_seq:
                start, seq = self._last_line_below(text, from_seq, seq)
                scanner.resume_at(seq)
                texts[-1] = text[start:]
                for chunk in reversed(texts):
                    scanner.write(chunk)
                checkpoint = scanner.checkpoint()
                if checkpoint.committed_bytes != checkpoint.input_bytes:
                    return None  # a complete frame ends inside a record: corruption, reported by the whole read
                result = scanner.finish()
                return result.meta, result.events[from_seq - seq :]
        return None

    def probe_torn_tail(self, session_id: str) -> bool:
        """Whether the log ends in a torn tail (what ``load_stored`` reports as its marker), from its end.

        Only the header and the last records are read: raw, the last two complete lines and what
        follows them, judged by the scanner as the whole read judges them (an unterminated fragment, a
        defective last line); zstd, the last complete frame and the incomplete frame after it, whose
        available text must scan after that frame's last record. ``False`` when the log ends cleanly, is
        absent, or holds damage near its end (damage, and anything before those records, is for the whole
        read to tell), or when no complete zstd frame lies within the last 64 MiB. Never writes.
        """
        self._preflight()
        path = self._find_log(session_id)
        if path is None:
            return False
        probe = self._probe_zstd if self._zstd else self._probe_raw

        def read(fd: int, opened: os.stat_result) -> bool:
            with gc_paused():
                try:
                    return probe(_TailWindow(fd, opened.st_size), path)
                except (SessionPersistenceCorruptionError, SessionFormatUnsupportedError, ChunkRowError):
                    return False

        stable = self._stable(path, read)
        return stable is not None and stable[0]

    def _probe_raw(self, tail: _TailWindow, path: str) -> bool:
        head = tail.head(_SEEK_BLOCK)
        newline = head.find(b"\n")
        if newline < 0:
            return False  # no header line: damage
        scanner = SessionLogScanner(head[: newline + 1], **self._limits())
        body = newline + 1
        start = body  # the first line the scanner judges: the one before the last complete line
        last = tail.rfind(b"\n", body, tail.size)
        if last >= 0:
            before = tail.rfind(b"\n", body, last)
            if before >= 0:
                anchor = tail.rfind(b"\n", body, before)
                start = body if anchor < 0 else anchor + 1
                seq = self._record_seq(tail.slice(start, before), _NO_SEQ)
                if seq is None:
                    return False  # a defective line with a complete one after it: damage
                scanner.resume_at(seq)
        scanner.write(tail.slice(start, tail.size))
        checkpoint = scanner.checkpoint()
        return checkpoint.committed_bytes < checkpoint.input_bytes

    def _probe_zstd(self, tail: _TailWindow, path: str) -> bool:
        head = tail.head(_SEEK_BLOCK)
        header = scan_zstd_frames(head, 1)
        if not header.frames:
            return False
        body = header.frames[0][1]
        candidate = tail.size
        while candidate > body:
            candidate = tail.rfind(ZSTD_MAGIC_BYTES, body, candidate)
            if candidate < 0:
                break
            if tail.size - candidate > _PROBE_REACH:
                return False
            try:
                end = tail.frame_end(candidate)
            except SessionPersistenceCorruptionError:
                continue  # the magic bytes inside compressed data
            if end == tail.size:
                return False  # the log ends on a complete frame: any defect in it is damage, not a tear
            if end is None or not self._torn_region(tail, end):
                continue
            text = decompress_frame(tail.slice(candidate, end), candidate, self.max_frame_bytes)
            newline = text.find(b"\n")
            first = self._record_seq(text[:newline] if newline >= 0 else text, _NO_SEQ)
            if first is None:
                return False
            start, seq = self._last_line_below(text, _NO_SEQ, first)
            scanner = self._header_scanner(memoryview(head), header.frames[0], path)
            scanner.resume_at(seq)
            scanner.write(text[start:])
            return self._tears_after(scanner, tail, end)
        if self._torn_region(tail, body):  # the only write after the header was torn
            return self._tears_after(self._header_scanner(memoryview(head), header.frames[0], path), tail, body)
        return False

    def _torn_region(self, tail: _TailWindow, start: int) -> bool:
        """Whether ``[start, end of file)`` is the beginning of one frame that the file ends inside."""
        region = tail.slice(start, tail.size)
        try:
            scan = scan_zstd_frames(region, 1)
        except SessionPersistenceCorruptionError:
            return False
        return not scan.frames and scan.torn_start == 0

    def _tears_after(self, scanner: SessionLogScanner, tail: _TailWindow, torn: int) -> bool:
        """The torn frame at ``torn`` judged as the whole read judges it, after the complete frames
        (``scanner`` has read the last one's records): a torn tail unless it is damage."""
        checkpoint = scanner.checkpoint()
        if checkpoint.committed_bytes != checkpoint.input_bytes:
            return False  # a complete frame that ends inside a record: damage
        region = memoryview(tail.slice(torn, tail.size))
        if self._frame_after(region, 0) is not None:
            return False  # a complete frame follows: a damaged earlier frame, not a tear
        scanner.write(decompress_torn_frame(region, torn, self.max_frame_bytes))
        return True
