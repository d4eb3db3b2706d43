"""One id → file-name encoding for every backend that puts session ids into paths (spec §4.2).

The JSONL store names each session's directory, and every file-backed store names each writer lock
file, by :func:`encode_segment` of the session id; the JSONL store names a project directory by
:func:`project_key` of the header's cwd. Backends import these from here, never from each other.
"""

from __future__ import annotations

import functools
import re
import stat
import struct
from typing import Final

__all__ = [
    "LOCK_SUFFIX",
    "MAX_ENCODED_ID_BYTES",
    "MAX_FILE_NAME_BYTES",
    "decode_segment",
    "encode_segment",
    "encodes_verbatim",
    "project_key",
]

MAX_FILE_NAME_BYTES: Final = 255
"""The longest file name (one path component) the supported file systems accept."""
LOCK_SUFFIX: Final = ".lock"
"""A writer lock file is ``<encode_segment(id)>.lock``."""
MAX_ENCODED_ID_BYTES: Final = MAX_FILE_NAME_BYTES - len(LOCK_SUFFIX)
"""A session id's encoded name must fit a 255-byte file name, lock file suffix included."""

_SAFE_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_SAFE_SEGMENT: Final = re.compile(r"[A-Za-z0-9._-]+\Z")
_ESCAPE: Final = re.compile(r"~([0-9A-F]{4})")
_SEPARATORS: Final = frozenset((0x2F, 0x5C, 0x3A))  # / \ :


def _utf16_units(text: str) -> tuple[int, ...]:
    data = text.encode("utf-16-le", "surrogatepass")
    return struct.unpack(f"<{len(data) // 2}H", data)


def encodes_verbatim(raw: str) -> bool:
    """Whether ``raw`` is only ``[A-Za-z0-9._-]``: then :func:`encode_segment` keeps it as it is (but for
    ``.`` and ``..``, which become five and ten bytes) — a fast path for an id's length check."""
    return _SAFE_SEGMENT.match(raw) is not None


def encode_segment(raw: str) -> str:
    """Injective escaping of a session id into one safe path component (spec §4.2).

    Works on UTF-16 code units (so ids round-trip exactly as the reference encodes them): safe ASCII
    stays literal, everything else — separators, NUL, ``~`` itself, non-ASCII, each surrogate half —
    becomes ``~XXXX``. ``.`` and ``..`` are escaped too, so no id can name the directory itself or its
    parent: nothing can escape the root.
    """
    if raw == "":
        raise ValueError("cannot encode an empty path segment")
    if raw == ".":
        return "~002E"
    if raw == "..":
        return "~002E~002E"
    if _SAFE_SEGMENT.match(raw):
        return raw
    return "".join(
        chr(unit) if unit < 0x80 and chr(unit) in _SAFE_CHARS else f"~{unit:04X}" for unit in _utf16_units(raw)
    )


def decode_segment(name: str) -> str:
    """Best-effort inverse of :func:`encode_segment`, to name a session whose header is unreadable."""
    units: list[int] = []
    pos = 0
    for match in _ESCAPE.finditer(name):
        units.extend(ord(ch) for ch in name[pos : match.start()])
        units.append(int(match.group(1), 16))
        pos = match.end()
    units.extend(ord(ch) for ch in name[pos:])
    if any(unit > 0xFFFF for unit in units):
        return name
    return struct.pack(f"<{len(units)}H", *units).decode("utf-16-le", "surrogatepass")


@functools.lru_cache(maxsize=1024)
def project_key(cwd: str) -> str:
    """Readable, bounded, intentionally lossy project directory name for a cwd (spec §4.2).

    Runs of ``/``, ``\\`` and ``:`` become one ``-``; safe characters stay; others are ``~XXXX``.
    Different cwds may collide (``/a/b-c`` and ``/a-b/c``) — the session directory below keeps them
    apart, and identity checks compare the header's full path, not the key. Memoized: listing a
    thousand sessions of one project computes it once.
    """
    if not cwd:
        raise ValueError("cannot encode an empty project path")
    out: list[str] = []
    in_separator = False
    for unit in _utf16_units(cwd):
        if unit in _SEPARATORS:
            if not in_separator:
                out.append("-")
                in_separator = True
            continue
        in_separator = False
        out.append(chr(unit) if unit < 0x80 and chr(unit) in _SAFE_CHARS else f"~{unit:04X}")
    slug = "".join(out).lstrip("-") or "root"
    return f"--{slug[:251]}--"


def file_kind(mode: int) -> str:
    """What a non-regular file at a log or database path is, for the refusal that names it (both backends)."""
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "regular file" if stat.S_ISREG(mode) else "special file"
