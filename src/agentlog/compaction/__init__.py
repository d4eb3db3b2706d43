"""Compaction: the model sees less, the log keeps everything (runtime spec §5).

A compaction replaces a head span of the *surface* (what the model is sent) with one summary checkpoint;
every original event stays in the log, so ``session.at(seq)`` before it, replay, forks and audits see the
full history. The pieces, bottom-up:

- :class:`TokenMeter` prices the request the next step would send (incrementally, per session);
- :func:`select_compactable_range` picks the head span to summarize without splitting a tool call from
  its result;
- :class:`ToolResultPruner` is the model-free first pass: it cuts the middle out of huge tool results;
- :func:`compact_surface_region` is the logged transaction (lock, summary, checkpoint);
- a :class:`Summarizer` writes the summary (:class:`ProviderSummarizer` asks the model;
  :class:`ExtractiveSummarizer` needs none);
- :class:`CompactionEngine` decides when, installed in the agent loop with ``Agent(compaction=...)``.

The names load on first access (:mod:`agentlog._lazy`): a caller that needs one piece (the meter, the
pruner) does not load the engine, the summarizers and the LLM layer behind the others. The token meter's
projection units live with the other units, in :mod:`agentlog.projection.units`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ..errors import (
    CompactionBusyError,
    CompactionConfigError,
    CompactionError,
    CompactionRangeError,
    CompactionStateError,
    CompactionThresholdError,
    ManualCompactionError,
    SummarizationError,
    SummaryNotSmallerError,
    SurfaceChangedError,
    TargetPressureConfigError,
)

if TYPE_CHECKING:  # the real types for mypy; at run time the table below resolves the names lazily
    from .config import CompactionConfig, CompactSpec, Retention, TargetPolicy
    from .engine import CompactionEngine, routed_target
    from .estimate import estimate_content, estimate_header, estimate_message, js_length
    from .invariants import CompactionInvariants
    from .meter import TokenMeasurement, TokenMeter, TokenSurfaceNode
    from .pairing import balanced_after, balanced_before
    from .pruner import PRUNE_MARKER, PrunedEntry, PruneResult, ToolResultPruner
    from .region import (
        CompactionResult,
        RegionOptions,
        checkpoint_source,
        compact_surface_region,
        is_checkpoint_source,
        lock_is_held,
        manual_compaction_range,
    )
    from .selection import CompactableRange, select_compactable_range
    from .summarizer import (
        CHECKPOINT_PREAMBLE,
        COMPACTION_INSTRUCTION,
        ExtractiveSummarizer,
        ProviderSummarizer,
        SummarizationInput,
        Summarizer,
        SummaryResult,
        SummaryTarget,
        frame_summary,
    )

# Where each lazily exported name lives (keep in step with the TYPE_CHECKING imports above).
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".config": (
        "CompactionConfig",
        "CompactSpec",
        "Retention",
        "TargetPolicy",
    ),
    ".engine": (
        "CompactionEngine",
        "routed_target",
    ),
    ".estimate": (
        "estimate_content",
        "estimate_header",
        "estimate_message",
        "js_length",
    ),
    ".invariants": ("CompactionInvariants",),
    ".meter": (
        "TokenMeasurement",
        "TokenMeter",
        "TokenSurfaceNode",
    ),
    ".pairing": (
        "balanced_after",
        "balanced_before",
    ),
    ".pruner": (
        "PRUNE_MARKER",
        "PrunedEntry",
        "PruneResult",
        "ToolResultPruner",
    ),
    ".region": (
        "CompactionResult",
        "RegionOptions",
        "checkpoint_source",
        "compact_surface_region",
        "is_checkpoint_source",
        "lock_is_held",
        "manual_compaction_range",
    ),
    ".selection": (
        "CompactableRange",
        "select_compactable_range",
    ),
    ".summarizer": (
        "CHECKPOINT_PREAMBLE",
        "COMPACTION_INSTRUCTION",
        "ExtractiveSummarizer",
        "ProviderSummarizer",
        "SummarizationInput",
        "Summarizer",
        "SummaryResult",
        "SummaryTarget",
        "frame_summary",
    ),
}

__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "CHECKPOINT_PREAMBLE",
    "COMPACTION_INSTRUCTION",
    "PRUNE_MARKER",
    "CompactSpec",
    "CompactableRange",
    "CompactionBusyError",
    "CompactionConfig",
    "CompactionConfigError",
    "CompactionEngine",
    "CompactionError",
    "CompactionInvariants",
    "CompactionRangeError",
    "CompactionResult",
    "CompactionStateError",
    "CompactionThresholdError",
    "ExtractiveSummarizer",
    "ManualCompactionError",
    "ProviderSummarizer",
    "PruneResult",
    "PrunedEntry",
    "RegionOptions",
    "Retention",
    "SummarizationError",
    "SummarizationInput",
    "Summarizer",
    "SummaryNotSmallerError",
    "SummaryResult",
    "SummaryTarget",
    "SurfaceChangedError",
    "TargetPolicy",
    "TargetPressureConfigError",
    "TokenMeasurement",
    "TokenMeter",
    "TokenSurfaceNode",
    "ToolResultPruner",
    "balanced_after",
    "balanced_before",
    "checkpoint_source",
    "compact_surface_region",
    "estimate_content",
    "estimate_header",
    "estimate_message",
    "frame_summary",
    "is_checkpoint_source",
    "js_length",
    "lock_is_held",
    "manual_compaction_range",
    "routed_target",
    "select_compactable_range",
]
