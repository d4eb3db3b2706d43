"""Tool-pairing balance over the surface: where a cut may fall without splitting a call from its result.

Compaction rewrites surface positions, so safe cuts are derived from the content in current surface
order, never from step markers: an ``assistant/message`` opens one pending call per ``tool-call``
block and each ``tool/result`` closes one. A cut is balanced when nothing is pending across it. The
balance of every cut is cached per session and extended incrementally while the surface only grows;
a replace (a new ``replace_generation``) rebuilds it.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..errors import CompactionRangeError, CompactionStateError
from ..kernel.events import ASSISTANT_MESSAGE, TOOL_RESULT


class _Balance:
    __slots__ = ("cut_balanced", "generation", "index_by_seq", "pending")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.cut_balanced: list[bool] = [True]  # entry i = the cut before surface position i
        self.index_by_seq: dict[int, int] = {}
        self.pending = 0


_CACHE: weakref.WeakKeyDictionary[Any, _Balance] = weakref.WeakKeyDictionary()


def _delta(event: Any, seq: int) -> int:
    etype = event["type"]
    if etype == ASSISTANT_MESSAGE:
        return sum(1 for block in event["data"]["message"]["content"] if block.get("type") == "tool-call")
    if etype == TOOL_RESULT:
        return -1
    return 0


def _extend(session: Any, cache: _Balance, seqs: Any) -> None:
    processed = len(cache.cut_balanced) - 1
    events = session.events  # one snapshot per fold; a kernel EventsView hands out its list directly
    to_list = getattr(events, "to_list", None)
    log = to_list() if to_list is not None else events
    size = len(log)
    pending = cache.pending
    cuts: list[bool] = []
    tail = list(seqs[processed:])
    for seq in tail:
        event = log[seq] if 0 <= seq < size else None  # each unseen node's event is read exactly once
        if event is None or event.seq != seq:
            raise CompactionStateError(
                f"tool-pairing balance: surface seq {seq} has no matching session event (corrupt surface)"
            )
        pending += _delta(event, seq)
        if pending < 0:
            raise CompactionStateError(
                f"tool-pairing balance: tool/result at surface seq {seq} has no matching tool-call (corrupt surface)"
            )
        cuts.append(pending == 0)
    # validated first, applied after: a corrupt tail leaves the cache as it was
    for offset, seq in enumerate(tail):
        cache.index_by_seq[seq] = processed + offset
    cache.cut_balanced.extend(cuts)
    cache.pending = pending


def _balance(session: Any) -> _Balance:
    surface = session.surface
    seqs = surface.nodes
    generation = surface.replace_generation
    cache = _CACHE.get(session)
    if cache is None or cache.generation != generation or len(cache.cut_balanced) - 1 > len(seqs):
        cache = _Balance(generation)
        _extend(session, cache, seqs)
        _CACHE[session] = cache
    elif len(cache.cut_balanced) - 1 < len(seqs):
        _extend(session, cache, seqs)
    return cache


def _cut(session: Any, seq: int, offset: int) -> bool:
    cache = _balance(session)
    index = cache.index_by_seq.get(seq)
    if index is None:
        raise CompactionRangeError(f"tool-pairing balance: surface seq {seq} not found")
    return cache.cut_balanced[index + offset]


def balanced_before(session: Any, seq: int) -> bool:
    """Whether no tool call is pending across the cut just before surface node ``seq``."""
    return _cut(session, seq, 0)


def balanced_after(session: Any, seq: int) -> bool:
    """Whether no tool call is pending across the cut just after surface node ``seq``."""
    return _cut(session, seq, 1)
