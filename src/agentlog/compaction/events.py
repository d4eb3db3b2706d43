"""The compaction package's events (runtime spec §5.1, the original's ``packages/compaction`` events).

All four are log-only. A compaction transaction is ``compaction/start`` (the durable lock), then
``compaction/summary``, the replacing checkpoint ``user/message`` and ``compaction/end``; a failed attempt
closes with ``compaction/end {error}``. ``compaction/prune`` prices one model-free prune replacement.
The summary and prune events are the *shadow price* of the surface replace that immediately follows
them: the token meter reads ``shadowedTokenCount`` from them.

Nothing else here: the modules that write and check these events (:mod:`.region`, :mod:`.pruner`,
:mod:`.invariants`, :mod:`.units`) and the CLI's marks import the names from this one module.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

from ..kernel import events as _core
from ..kernel.events import TokenUsage

__all__ = [
    "COMPACTION_END",
    "COMPACTION_PRUNE",
    "COMPACTION_START",
    "COMPACTION_SUMMARY",
    "CompactionEndData",
    "CompactionPruneData",
    "CompactionStartData",
    "CompactionSummaryData",
    "ShadowedRange",
]

COMPACTION_START: Final = _core.COMPACTION_START
"""Acquires the compaction lock (:class:`CompactionStartData`)."""

COMPACTION_SUMMARY: Final = _core.COMPACTION_SUMMARY
"""The summary, its inputs and the facts of the call (:class:`CompactionSummaryData`); immediately
precedes the checkpoint that replaces the shadowed span."""

COMPACTION_END: Final = _core.COMPACTION_END
"""Releases the lock (:class:`CompactionEndData`); ``error`` marks a failed attempt."""

COMPACTION_PRUNE: Final = "compaction/prune"
"""The shadow price of one prune replacement (:class:`CompactionPruneData`); immediately precedes it."""


class ShadowedRange(TypedDict):
    """First and last shadowed surface seqs (after earlier replaces ``start`` can exceed ``end``)."""

    start: int
    end: int


class CompactionStartData(TypedDict):
    """``turn`` is the open turn that owns an automatic compaction, ``None`` for a standalone manual one."""

    compactionId: str
    sourceCommandId: NotRequired[str]
    turn: int | None


class CompactionSummaryData(TypedDict):
    """``llmStreamCall: true`` (exactly one call through the model stream) requires ``rawOutput``."""

    compactionId: str
    sourceCommandId: NotRequired[str]
    summary: list[Any]
    rawOutput: NotRequired[list[Any]]
    llmStreamCall: NotRequired[Literal[True]]
    shadowedRange: ShadowedRange
    shadowedSeqs: list[int]
    shadowedTokenCount: int
    provider: str
    model: str
    maxTokens: NotRequired[int]
    usage: NotRequired[TokenUsage]


class CompactionEndData(TypedDict):
    """``error`` is the flattened error chain of a failed attempt (absent on success)."""

    compactionId: str
    sourceCommandId: NotRequired[str]
    turn: int | None
    error: NotRequired[str]


class CompactionPruneData(TypedDict):
    """The price of the one ``tool/result`` a prune replaces (``shadowedSeqs == [seq]``)."""

    shadowedRange: ShadowedRange
    shadowedSeqs: list[int]
    shadowedTokenCount: int
