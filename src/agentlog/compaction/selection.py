"""Which head of the surface to compact (runtime spec §5.7).

The range is always head-anchored and ends where the retained tail begins: the tail keeps at least
``retain_tokens`` of the most recent context verbatim, and the cut is moved head-ward until no tool call
is pending across it, so a call and its result are never split between summary and tail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import CompactionStateError
from .meter import TokenMeasurement  # (at run time too: typing.get_type_hints resolves annotations here)
from .pairing import balanced_before


class CompactableRange(NamedTuple):
    """An inclusive span of surface positions, named by the seqs of its first and last node."""

    start: int
    end: int

    def to_json(self) -> dict[str, int]:
        return {"start": self.start, "end": self.end}


def _check_nodes(surface_nodes: Sequence[int], priced: Sequence[Any]) -> None:
    if len(surface_nodes) != len(priced) or any(
        seq != node.seq for seq, node in zip(surface_nodes, priced, strict=True)
    ):
        raise CompactionStateError("compaction: token-meter surface does not match the current session surface")


def select_compactable_range(
    session: Any, measurement: TokenMeasurement, retain_tokens: int
) -> CompactableRange | None:
    """The next range to compact, or ``None`` when the retained tail already covers the whole surface.

    ``measurement`` must describe the session's current surface (``TokenMeter().measure(session)``);
    with ``retain_tokens = 0`` only the newest node (and whatever a balanced cut needs) is kept.
    """
    priced = measurement.nodes
    if len(priced) == 0:
        return None
    surface_nodes = session.surface.nodes
    _check_nodes(surface_nodes, priced)
    accumulated = 0
    keep_from = len(priced)
    for index in range(len(priced) - 1, -1, -1):
        accumulated += priced[index].tokens
        keep_from = index
        if accumulated >= retain_tokens:
            break
    if keep_from == 0:
        return None
    while keep_from > 0 and not balanced_before(session, surface_nodes[keep_from]):
        keep_from -= 1
    if keep_from == 0:
        return None
    return CompactableRange(surface_nodes[0], surface_nodes[keep_from - 1])
