"""The tool-result pruner (runtime spec §5.11): shrink over-long tool results without a model.

A tool result whose text exceeds ``threshold_chars`` keeps its first ``head_chars`` and last
``tail_chars`` and loses the middle, replaced by :data:`PRUNE_MARKER`. The original result stays in the
log: the pruned copy is a new ``tool/result`` that *replaces* the original on the surface, preceded by a
``compaction/prune`` event carrying the shadowed node's token price (the shadow-price protocol, §5.1).

Sizes here are Unicode **code points** (Python ``len``), never UTF-16 units: a cut can never split a
surrogate pair. (The token meter, by contrast, counts UTF-16 units — the two metrics stay distinct.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from ..errors import CompactionConfigError
from ..kernel._js import js_string
from ..kernel.events import TOOL_RESULT
from .events import COMPACTION_PRUNE, CompactionPruneData
from .meter import TokenMeter, events_of

__all__ = ["DEFAULTS", "PRUNE_MARKER", "PruneResult", "PrunedEntry", "ToolResultPruner", "code_point_length"]

PRUNE_MARKER: Final = "\n\n[... tool result middle pruned ...]\n\n"
"""Substituted for every removed middle (39 code points)."""

DEFAULTS: Final[Mapping[str, int]] = MappingProxyType({"thresholdChars": 8192, "headChars": 4096, "tailChars": 1024})
"""The original's defaults, in its camelCase keys (read-only)."""

_CONFIG_KEYS: Final = ("thresholdChars", "headChars", "tailChars")


def code_point_length(text: str) -> int:
    """Unicode code points of ``text`` (what the pruner measures); a Python ``str`` is a code-point sequence."""
    return len(text)


def _is_integer(value: object) -> bool:
    """JavaScript ``Number.isInteger``: an integral finite number (``5.0`` counts, ``True`` does not)."""
    if type(value) is bool:
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()


def _resolve(config: Mapping[str, Any]) -> dict[str, int]:
    for key in config:
        if key not in _CONFIG_KEYS:
            raise CompactionConfigError(
                f'ToolResultPruneConfig: unknown key "{key}" (allowed: thresholdChars, headChars, tailChars)'
            )
    resolved = {key: DEFAULTS[key] if config.get(key) is None else config[key] for key in _CONFIG_KEYS}
    for key in _CONFIG_KEYS:
        value = resolved[key]
        positive = key == "thresholdChars"
        if not _is_integer(value) or value < (1 if positive else 0):
            kind = "a positive integer" if positive else "a non-negative integer"
            raise CompactionConfigError(f"ToolResultPruneConfig: {key} ({js_string(value)}) must be {kind}")
        resolved[key] = int(value)
    emitted = resolved["headChars"] + len(PRUNE_MARKER) + resolved["tailChars"]
    if emitted > resolved["thresholdChars"]:
        raise CompactionConfigError(
            f"ToolResultPruneConfig: headChars + marker + tailChars ({emitted}) "
            f"must be at most thresholdChars ({resolved['thresholdChars']})"
        )
    return resolved


@dataclass(frozen=True, slots=True)
class PrunedEntry:
    """One landed replacement: the shadowed original, its pruned copy, and the sizes in code points."""

    original_seq: int
    replacement_seq: int
    call_id: str
    chars_before: int
    chars_after: int

    def to_json(self) -> dict[str, Any]:
        return {
            "originalSeq": self.original_seq,
            "replacementSeq": self.replacement_seq,
            "callId": self.call_id,
            "charsBefore": self.chars_before,
            "charsAfter": self.chars_after,
        }


@dataclass(frozen=True, slots=True)
class PruneResult:
    """The outcome of one pass: replacements in surface order and the code points they removed."""

    pruned: tuple[PrunedEntry, ...]
    chars_removed: int

    def to_json(self) -> dict[str, Any]:
        return {"pruned": [entry.to_json() for entry in self.pruned], "charsRemoved": self.chars_removed}


class ToolResultPruner:
    """Deterministic head/marker/tail pruning of the tool results currently on a session's surface.

    ``meter`` prices each shadowed result for its ``compaction/prune`` event (a new :class:`TokenMeter`
    by default; the price is the fixed heuristic either way).
    """

    __slots__ = ("_config", "_head", "_meter", "_tail", "_threshold")

    def __init__(
        self,
        threshold_chars: int = 8192,
        head_chars: int = 4096,
        tail_chars: int = 1024,
        *,
        meter: TokenMeter | None = None,
    ) -> None:
        resolved = _resolve({"thresholdChars": threshold_chars, "headChars": head_chars, "tailChars": tail_chars})
        self._threshold = resolved["thresholdChars"]
        self._head = resolved["headChars"]
        self._tail = resolved["tailChars"]
        self._config: Mapping[str, int] = MappingProxyType(resolved)
        self._meter = meter if meter is not None else TokenMeter()

    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, meter: TokenMeter | None = None) -> ToolResultPruner:
        """Build from the original's camelCase settings (``thresholdChars``, ``headChars``, ``tailChars``).

        Absent (or ``None``) keys take the defaults; an unknown key is refused.
        """
        resolved = _resolve(config)
        return cls(resolved["thresholdChars"], resolved["headChars"], resolved["tailChars"], meter=meter)

    @property
    def config(self) -> Mapping[str, int]:
        """The resolved settings, camelCase, read-only."""
        return self._config

    def measure_content(self, blocks: Sequence[Mapping[str, Any]]) -> int:
        """Code points of the top-level ``text`` blocks; every other block counts 0."""
        return sum(len(block["text"]) for block in blocks if block.get("type") == "text")

    def prune_content(self, blocks: Sequence[Mapping[str, Any]]) -> list[Any] | None:
        """The content with its text middle removed, or ``None`` when the text is within the threshold.

        The removed span is the global text code-point range ``[head_chars, total - tail_chars)`` across
        all text blocks; non-text blocks stay in place, the first text block touching the span gets the
        marker, and text blocks left empty are dropped. The result is at most ``threshold_chars`` and
        strictly smaller (guaranteed by the configuration rule ``head + marker + tail <= threshold``).
        """
        total = self.measure_content(blocks)
        if total <= self._threshold:
            return None
        return self._pruned(blocks, total)

    def _pruned(self, blocks: Sequence[Mapping[str, Any]], total: int) -> list[Any]:
        """:meth:`prune_content` of over-long ``blocks`` whose text measures ``total`` code points."""
        removed_start = self._head
        removed_end = total - self._tail
        pruned: list[Any] = []
        consumed = 0
        marker_inserted = False
        for block in blocks:
            if block.get("type") != "text":
                pruned.append(block)
                continue
            text: str = block["text"]
            size = len(text)
            block_start = consumed
            consumed += size
            head_end = min(size, max(0, removed_start - block_start))
            tail_start = min(size, max(0, removed_end - block_start))
            marker = ""
            if not marker_inserted and block_start < removed_end and consumed > removed_start:
                marker = PRUNE_MARKER
                marker_inserted = True
            kept = text[:head_end] + marker + text[tail_start:]
            if kept:
                pruned.append({**block, "text": kept})
        return pruned

    def prune_session(self, session: Any) -> PruneResult:
        """Prune every over-long tool result on the session's current surface, in surface order.

        The candidates are fixed from one snapshot of the surface. Each replacement keeps every field of
        the original event's data (turn, step, error, meta, unknown fields) except the message content,
        cites the original, and follows a ``compaction/prune`` pricing it. The appends need an open turn
        when the session runs under the invariant checker. A refused append raises; replacements made
        earlier in the pass stay. A second pass finds nothing to do.
        """
        events, _count = events_of(session)
        candidates = [
            (seq, event) for seq in list(session.surface.nodes) if (event := events[seq])["type"] == TOOL_RESULT
        ]
        pruned: list[PrunedEntry] = []
        chars_removed = 0
        append = session.append
        estimate = self._meter.estimate_message
        measure, threshold = self.measure_content, self._threshold
        # The text is measured once per result (prune_content would measure it again), unless a subclass
        # prunes its own way.
        own_prune = type(self).prune_content is not ToolResultPruner.prune_content
        for seq, event in candidates:
            data = event["data"]
            message = data["message"]
            result = message["content"][0]
            if own_prune:
                pruned_content = self.prune_content(result["content"])
                if pruned_content is None:
                    continue
                content = pruned_content
                chars_before = measure(result["content"])
            else:
                chars_before = measure(result["content"])
                if chars_before <= threshold:
                    continue
                content = self._pruned(result["content"], chars_before)
            chars_after = measure(content)
            price: CompactionPruneData = {
                "shadowedRange": {"start": seq, "end": seq},
                "shadowedSeqs": [seq],
                "shadowedTokenCount": estimate(message),
            }
            append(COMPACTION_PRUNE, price)
            replacement = append(
                TOOL_RESULT,
                {**data, "message": {**message, "content": [{**result, "content": content}]}},
                {"surfaceOp": {"op": "replace", "start": seq, "end": seq}, "sourceEventSeqs": [seq]},
            )
            pruned.append(PrunedEntry(seq, replacement.seq, message["source"]["callId"], chars_before, chars_after))
            chars_removed += chars_before - chars_after
        return PruneResult(tuple(pruned), chars_removed)
