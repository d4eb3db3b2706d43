"""What compaction did to a session, read back from its log for ``agentlog show`` and the inspector
(runtime spec §5.1, §5.2, §5.11).

Two kinds of surface replacement are marked, both recognised from the log alone (no engine needed):

* a **compaction checkpoint**: a ``user/message`` whose ``source`` is ``{kind: "plugin", plugin:
  "compact", compactionId}``; its ``sourceEventSeqs`` are ``[startSeq, summarySeq, ...shadowedSeqs]`` and
  the ``compaction/summary`` at ``summarySeq`` holds the shadow price (``shadowedTokenCount``);
* a **pruned tool result**: a ``tool/result`` with a ``replace`` surface op immediately preceded by a
  ``compaction/prune`` event; its ``sourceEventSeqs`` name the original result, whose text is longer.

Logs written by other implementations are read defensively: a field that is missing or of the wrong
type leaves the corresponding number unknown (``None``) instead of failing the command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..kernel.events import TOOL_RESULT, USER_MESSAGE
from ..kernel.session import derive_event_message
from .events import COMPACTION_PRUNE, COMPACTION_SUMMARY

COMPACT_PLUGIN = "compact"


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _ints(value: Any) -> list[int]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return []
    return [item for item in value if type(item) is int]


def seq_ranges(seqs: Sequence[int]) -> str:
    """``[3, 4, 5, 9]`` → ``"3–5, 9"``: runs of consecutive seqs, in the order given."""
    parts: list[str] = []
    start = previous = None
    for seq in seqs:
        if previous is not None and seq == previous + 1:
            previous = seq
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}–{previous}")
        start = previous = seq
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}–{previous}")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class CheckpointMark:
    """A compaction checkpoint on the log: which surface nodes it replaced, and their shadow price."""

    seq: int
    compaction_id: str | None
    start_seq: int | None
    summary_seq: int | None
    shadowed_seqs: tuple[int, ...]
    shadowed_tokens: int | None

    @property
    def label(self) -> str:
        tokens = "" if self.shadowed_tokens is None else f", ~{self.shadowed_tokens:,} tokens"
        count = len(self.shadowed_seqs)
        return f"[compaction checkpoint: shadowed {count:,} message{'' if count == 1 else 's'}{tokens}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "checkpoint",
            "seq": self.seq,
            "compactionId": self.compaction_id,
            "startSeq": self.start_seq,
            "summarySeq": self.summary_seq,
            "shadowedSeqs": list(self.shadowed_seqs),
            "shadowedMessages": len(self.shadowed_seqs),
            "shadowedTokenCount": self.shadowed_tokens,
        }


@dataclass(frozen=True, slots=True)
class PruneMark:
    """A model-free prune: the replacement ``tool/result`` and how much of the original text it kept."""

    seq: int
    prune_seq: int
    original_seq: int | None
    chars_before: int | None
    chars_after: int
    shadowed_tokens: int | None

    @property
    def label(self) -> str:
        before = "?" if self.chars_before is None else f"{self.chars_before:,}"
        return f"[pruned: {before} → {self.chars_after:,} chars]"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "pruned",
            "seq": self.seq,
            "pruneSeq": self.prune_seq,
            "originalSeq": self.original_seq,
            "charsBefore": self.chars_before,
            "charsAfter": self.chars_after,
            "shadowedTokenCount": self.shadowed_tokens,
        }


Mark = CheckpointMark | PruneMark


def _result_chars(event: Mapping[str, Any] | None) -> int | None:
    """Code points of the top-level text blocks inside a ``tool/result``'s tool-result block(s) (what the
    pruner measures, §5.11)."""
    if event is None or event.get("type") != TOOL_RESULT:
        return None
    data = event.get("data")
    message = data.get("message") if isinstance(data, Mapping) else None
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, Sequence):
        return None
    total = 0
    for block in blocks:
        if isinstance(block, Mapping) and block.get("type") == "tool-result":
            for inner in block.get("content") or ():
                if isinstance(inner, Mapping) and inner.get("type") == "text" and isinstance(inner.get("text"), str):
                    total += len(inner["text"])
    return total


EventsBySeq = Sequence[Mapping[str, Any]] | Mapping[int, Mapping[str, Any]]
"""Events looked up by seq: the whole log (a sequence indexed by seq) or just the events seen so far."""


def _get(events: EventsBySeq, seq: int | None) -> Mapping[str, Any] | None:
    if seq is None or seq < 0:
        return None
    if isinstance(events, Mapping):
        return events.get(seq)
    return events[seq] if seq < len(events) else None


def mark_of(events: EventsBySeq, seq: int) -> Mark | None:
    """The compaction mark of the event at ``seq`` (``events`` looked up by seq), or ``None``."""
    event = _get(events, seq)
    if event is None:
        return None
    etype = event.get("type")
    data = event.get("data")
    if not isinstance(data, Mapping):
        return None
    if etype == USER_MESSAGE:
        source = data.get("source")
        if not (
            isinstance(source, Mapping) and source.get("kind") == "plugin" and source.get("plugin") == COMPACT_PLUGIN
        ):
            return None
        sources = _ints(event.get("sourceEventSeqs"))
        start_seq = sources[0] if sources else None
        summary_seq = sources[1] if len(sources) > 1 else None
        tokens = None
        summary = _get(events, summary_seq)
        if summary is not None:
            summary_data = summary.get("data")
            if summary.get("type") == COMPACTION_SUMMARY and isinstance(summary_data, Mapping):
                tokens = _int(summary_data.get("shadowedTokenCount"))
        compaction_id = source.get("compactionId")
        return CheckpointMark(
            seq=seq,
            compaction_id=compaction_id if isinstance(compaction_id, str) else None,
            start_seq=start_seq,
            summary_seq=summary_seq,
            shadowed_seqs=tuple(sources[2:]),
            shadowed_tokens=tokens,
        )
    if etype == TOOL_RESULT:
        op = event.get("surfaceOp")
        if not (isinstance(op, Mapping) and op.get("op") == "replace"):
            return None
        prune = _get(events, seq - 1)
        if prune is None or prune.get("type") != COMPACTION_PRUNE:
            return None
        prune_data = prune.get("data")
        sources = _ints(event.get("sourceEventSeqs"))
        original_seq = sources[0] if sources else None
        original = _get(events, original_seq)
        after = _result_chars(event)
        return PruneMark(
            seq=seq,
            prune_seq=seq - 1,
            original_seq=original_seq,
            chars_before=_result_chars(original),
            chars_after=after if after is not None else 0,
            shadowed_tokens=_int(prune_data.get("shadowedTokenCount")) if isinstance(prune_data, Mapping) else None,
        )
    return None


def log_marks(events: Sequence[Mapping[str, Any]]) -> list[Mark]:
    """Every checkpoint and prune replacement in the log, in seq order (also those shadowed since).

    One pass over the log, asking :func:`mark_of` only of the types it can mark: an index lookup of a
    restored log's packed chunk run builds and keeps its members, so looking every seq up turned a
    W(20000) log eager (about 470 MB more) only to find that chunks carry no mark. The few lookups a
    mark makes (its summary, the original result) are of events that are not chunks.
    """
    marks = []
    for seq, event in enumerate(events):
        if event["type"] in _MARKED_TYPES:
            mark = mark_of(events, seq)
            if mark is not None:
                marks.append(mark)
    return marks


_MARKED_TYPES = frozenset({USER_MESSAGE, TOOL_RESULT})
"""The event types :func:`mark_of` can mark (it returns ``None`` for any other)."""


def surface_marks(events: Sequence[Mapping[str, Any]], nodes: Sequence[int]) -> list[tuple[int, Mark | None]]:
    """``(seq, mark)`` for each surface node that derives a message, in the order of the derived messages."""
    out: list[tuple[int, Mark | None]] = []
    for seq in nodes:
        if derive_event_message(events[seq]) is not None:
            out.append((seq, mark_of(events, seq)))
    return out


def marks_json(marks: Sequence[tuple[int, Mark | None]]) -> list[dict[str, Any]]:
    """The marks of derived messages for ``--json``: each with the index of its message."""
    return [{"messageIndex": index, **mark.to_json()} for index, (_, mark) in enumerate(marks) if mark is not None]
