"""The compaction marks ``show`` and ``trace`` print: defined in :mod:`agentlog.compaction.marks` (the
inspector reads them too), named here for the commands."""

from __future__ import annotations

from ..compaction.marks import (
    CheckpointMark,
    Mark,
    PruneMark,
    log_marks,
    mark_of,
    marks_json,
    seq_ranges,
    surface_marks,
)

__all__ = ["CheckpointMark", "Mark", "PruneMark", "log_marks", "mark_of", "marks_json", "seq_ranges", "surface_marks"]
