"""Compaction benchmarks over the canonical workload W(T): M7 token meter, M8 pruner, M9 region compaction.

Each figure is defined once, here: ``m7``, ``m8`` and ``m9`` take the turns T and, optionally, the workload
to append (``benchmarks/original/agentlog_side.py`` passes the very events the original's side appends,
read from ``w<T>.jsonl``; otherwise W(T) is built), and return a dict whose ``seconds`` are the timed
calls only. ``benchmarks/run.py compaction`` takes medians over repeated runs. Run this file directly for
a quick look: ``python benchmarks/compaction.py [--turns 2000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from agentlog import Session
from agentlog.compaction import CompactionEngine, SummaryResult, lock_is_held
from agentlog.compaction.meter import TokenMeter
from agentlog.compaction.pairing import balanced_after, balanced_before
from agentlog.compaction.pruner import PRUNE_MARKER, ToolResultPruner

try:
    from workload import SURFACE_MESSAGES_PER_TURN, TOOL_RESULT_CHARS, WorkloadEvent, append_workload, build_workload
except ImportError:  # imported as ``benchmarks.compaction``
    from benchmarks.workload import (
        SURFACE_MESSAGES_PER_TURN,
        TOOL_RESULT_CHARS,
        WorkloadEvent,
        append_workload,
        build_workload,
    )

M8_THRESHOLD = 300
M8_HEAD = 100
M8_TAIL = 100
M9_FRACTION = 0.9


def _events(turns: int, workload: Sequence[WorkloadEvent] | None) -> Sequence[WorkloadEvent]:
    return build_workload(turns) if workload is None else workload


def build_session(session_id: str, workload: Sequence[WorkloadEvent], *, open_turn: int | None = None) -> Session:
    """A fresh session holding ``workload`` (untimed), plus a ``turn/start`` of ``open_turn`` if given.

    Prune and compaction appends need an open turn (automatic compaction runs inside one).
    """
    session = Session.create(session_id)
    append_workload(session, workload)
    if open_turn is not None:
        session.append("turn/start", {"turn": open_turn})
    return session


def m7(turns: int, workload: Sequence[WorkloadEvent] | None = None) -> dict[str, Any]:
    """M7: ``TokenMeter.measure()`` after every step's ``step/end`` of W(turns) (2 x turns calls).

    ``seconds`` sums the measure calls only (appends untimed); ``surface_tokens`` is the last measurement's.
    """
    events = _events(turns, workload)
    session = Session.create(f"bench-m7-{turns}")
    meter = TokenMeter()
    append = session.append
    measure = meter.measure
    clock = time.perf_counter
    total = 0.0
    calls = 0
    last = None
    gc.collect()
    for type_, data, intent in events:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
        if type_ == "step/end":
            start = clock()
            last = measure(session)
            total += clock() - start
            calls += 1
    if calls != 2 * turns or last is None:
        raise SystemExit(f"M7: {calls} measure calls, expected {2 * turns}")
    if len(last.nodes) != SURFACE_MESSAGES_PER_TURN * turns:
        raise SystemExit(f"M7: unexpected final measurement {last!r}")
    return {"seconds": total, "calls": calls, "events": len(events), "surface_tokens": last.surface_tokens}


def m8(turns: int, workload: Sequence[WorkloadEvent] | None = None) -> dict[str, Any]:
    """M8: one ``prune_session`` over W(turns): every 1,000-char tool result pruned at threshold 300.

    A ``turn/start`` is appended first (prune appends need an open turn). ``seconds`` is the
    ``prune_session`` call only.
    """
    session = build_session(f"bench-m8-{turns}", _events(turns, workload), open_turn=turns + 1)
    pruner = ToolResultPruner(threshold_chars=M8_THRESHOLD, head_chars=M8_HEAD, tail_chars=M8_TAIL)
    gc.collect()
    start = time.perf_counter()
    result = pruner.prune_session(session)
    elapsed = time.perf_counter() - start
    if len(result.pruned) != turns:
        raise SystemExit(f"M8: pruned {len(result.pruned)} results, expected {turns}")
    expected = turns * (TOOL_RESULT_CHARS - (M8_HEAD + len(PRUNE_MARKER) + M8_TAIL))
    if result.chars_removed != expected:
        raise SystemExit(f"M8: removed {result.chars_removed} chars, expected {expected}")
    return {"seconds": elapsed, "pruned": len(result.pruned), "chars_removed": result.chars_removed}


class _ScriptedSummarizer:
    """A summarizer that answers at once with a fixed summary (M9 times the transaction, not a model)."""

    async def summarize(self, summary_input: Any) -> SummaryResult:
        return SummaryResult(
            summary=[{"type": "text", "text": "## Current Work\n- reading files"}],
            provider="bench",
            model="scripted",
        )


def m9(turns: int, workload: Sequence[WorkloadEvent] | None = None, *, warm: bool = True) -> dict[str, Any]:
    """M9: one region compaction of the first 90% of W(turns)'s surface with a scripted summarizer.

    The transaction is timed from the call to its return, inside the event loop (validation, lock,
    pricing, the summarizer's await, shrink and stability checks, the three commits). "Warm" is the
    state a running agent compacts in: its engine measured the session before the step, checked the
    lock and selected the range (which builds the tool-pairing cache), and the loop folded the request
    header. With ``warm=False`` those first folds of the whole log happen inside the call. The range
    never splits a tool pair.
    """
    session = build_session(f"bench-m9-{turns}", _events(turns, workload), open_turn=turns + 1)
    meter = TokenMeter()
    engine = CompactionEngine(meter=meter, pruner=None, summarizer=_ScriptedSummarizer())
    nodes = list(session.surface.nodes)
    if warm:
        meter.measure(session)
        session.request_header()
        lock_is_held(session)
        balanced_before(session, nodes[0])
    end = max(1, int(len(nodes) * M9_FRACTION)) - 1
    while end > 0 and not balanced_after(session, nodes[end]):  # never split a tool pair
        end -= 1

    async def timed() -> float:
        # Timed inside the loop, as the original's side times its ``await``: asyncio.run's own set-up and
        # tear-down (which on Python 3.11 also renders the finished task's result) are not the transaction.
        start = time.perf_counter()
        result = await engine.compact_region(session, nodes[0], nodes[end])
        seconds = time.perf_counter() - start
        if len(result.shadowed_seqs) != end + 1:
            raise SystemExit(f"M9: shadowed {len(result.shadowed_seqs)}, expected {end + 1}")
        return seconds

    gc.collect()
    return {"seconds": asyncio.run(timed()), "shadowed": end + 1}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/compaction.py", description=__doc__)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    workload = build_workload(args.turns)
    runs = {
        "M7": [m7(args.turns, workload)["seconds"] for _ in range(args.repeat)],
        "M8": [m8(args.turns, workload)["seconds"] for _ in range(args.repeat)],
        "M9": [m9(args.turns, workload)["seconds"] for _ in range(args.repeat)],
    }
    for name, values in runs.items():
        print(
            f"{name}: median {statistics.median(values):.4f} s  min {min(values):.4f}  max {max(values):.4f}"
            f"  ({args.repeat} runs, W({args.turns}))",
            file=sys.stderr,
        )
    print(json.dumps({f"{name}_seconds": round(statistics.median(values), 6) for name, values in runs.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
