"""A parse that could run out of memory is refused before it starts, under an address-space limit.

orjson, the JSON parser every backend reads with, does not survive every allocation failure: an object
it fails to allocate midway can crash the process (a NULL dereference) instead of raising. So under an
address-space limit (``ulimit -v``: ``RLIMIT_AS`` or ``RLIMIT_DATA``) a read first checks that the address
space the parse can take is free, and refuses with :class:`~agentlog.errors.ResourceExhaustedError`
(nothing read or modified) when it is not. Without a limit nothing is checked: the system's own
overcommit decides, as for any allocation.

What a parse can take, measured with ``tracemalloc`` over texts of every shape (orjson 3): the parser's
value pool, about 12 bytes per byte of text, freed when the call returns; and the objects it makes, up
to twice the text (string contents) plus at most about 80 bytes per value or key (a dict, a list slot, a key
string). The densest text is all small containers (``[{},{},...]``: 36 bytes per byte of text), so a
reserve proportional to the text alone is either far too large for ordinary logs or too small for dense
ones (16x was: chunk events need 18x and crashed a process in the gap). The estimate therefore counts
the text's structural bytes (``,`` ``:`` ``[`` ``{``: each value or key but a text's first follows one),
and adds a floor for the allocators' own granularity (pymalloc arenas, malloc's heap steps). A single
long string needs 13x too: the parser's pool is sized from the text, whatever it holds.
"""

from __future__ import annotations

import mmap
import resource
from collections.abc import Iterable
from typing import Final

from ..errors import ResourceExhaustedError

__all__ = ["address_space_limited", "ensure_headroom", "parse_reserve"]

POOL_FACTOR: Final = 14
"""Bytes per byte of text of the parser's own pool (13 measured), held only while one call parses."""
STRING_FACTOR: Final = 2
"""Bytes per byte of text that string contents can keep (a character of text can cost two bytes)."""
VALUE_BYTES: Final = 96
"""Bytes per structural byte (one value or key each): the objects a parse keeps, at most 82 measured
(unique keys; repeated keys and small integers are shared, and cost nothing)."""
FLOOR_BYTES: Final = 8 << 20
"""Allocator granularity and the few fixed buffers of one read."""

_LIMITS: Final = tuple(getattr(resource, name) for name in ("RLIMIT_AS", "RLIMIT_DATA") if hasattr(resource, name))
_STRUCTURAL: Final = (b",", b":", b"[", b"{")
_STRUCTURAL_TEXT: Final = (",", ":", "[", "{")


def address_space_limited() -> bool:
    """Whether this process runs under an address-space (or data-segment) limit."""
    return any(resource.getrlimit(limit)[0] != resource.RLIM_INFINITY for limit in _LIMITS)


def parse_reserve(texts: Iterable[bytes | str], *, one_call: bool = True) -> int:
    """Address space a parse of ``texts`` (JSON texts) can take at its peak: parsed in one call (joined
    into one array), or one call per text (``one_call=False``: only the longest text's pool at a time)."""
    size = 0
    longest = 0
    values = 0
    for text in texts:
        size += len(text)
        longest = max(longest, len(text))
        if isinstance(text, bytes):
            values += 1 + sum(text.count(mark) for mark in _STRUCTURAL)
        else:
            values += 1 + sum(text.count(mark) for mark in _STRUCTURAL_TEXT)
    pool = POOL_FACTOR * (size if one_call else longest)
    return FLOOR_BYTES + pool + STRING_FACTOR * size + VALUE_BYTES * values


def ensure_headroom(reserve: int, size: int, what: str = "the session log") -> None:
    """Refuse (typed) a parse of ``size`` bytes of ``what`` unless ``reserve`` bytes of address space are free.

    Maps and unmaps an untouched anonymous region: no page is committed, so the probe is cheap. One
    contiguous region is asked for, while the parse allocates many small ones: the probe errs on the
    side of refusing.
    """
    try:
        probe = mmap.mmap(-1, max(reserve, mmap.PAGESIZE))
    except (OSError, MemoryError):
        raise ResourceExhaustedError(
            f"not enough memory to parse {size} bytes of {what} (about {reserve} bytes are needed under this "
            "process's address-space limit); nothing was read or modified — this is not damage. Retry with "
            "more memory (a higher ulimit -v) available"
        ) from None
    probe.close()
