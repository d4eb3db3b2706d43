"""Compaction benchmarks over the canonical workload W(T): M7 token meter, M8 tool-result pruner.

``m7(turns)`` and ``m8(turns)`` return seconds (the timed calls only) for one run; ``benchmarks/run.py``
takes medians over repeated runs. Run this file directly for a quick look:
``python benchmarks/compaction.py [--turns 2000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time

from agentlog import Session
from agentlog.compaction.meter import TokenMeter
from agentlog.compaction.pruner import PRUNE_MARKER, ToolResultPruner

try:
    from workload import SURFACE_MESSAGES_PER_TURN, TOOL_RESULT_CHARS, build_workload
except ImportError:  # imported as ``benchmarks.compaction``
    from benchmarks.workload import SURFACE_MESSAGES_PER_TURN, TOOL_RESULT_CHARS, build_workload

M8_THRESHOLD = 300
M8_HEAD = 100
M8_TAIL = 100


def m7(turns: int) -> float:
    """M7: ``TokenMeter.measure()`` after every step's ``step/end`` of W(turns) (2 x turns calls).

    Returns the summed seconds of the measure calls only (appends untimed).
    """
    workload = build_workload(turns)
    session = Session.create(f"bench-m7-{turns}")
    meter = TokenMeter()
    append = session.append
    measure = meter.measure
    clock = time.perf_counter
    total = 0.0
    calls = 0
    last = None
    gc.collect()
    for type_, data, intent in workload:
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
    return total


def m8(turns: int) -> float:
    """M8: one ``prune_session`` over W(turns): every 1,000-char tool result pruned at threshold 300.

    A ``turn/start`` is appended first (prune appends need an open turn). Returns the seconds of the
    ``prune_session`` call only.
    """
    workload = build_workload(turns)
    session = Session.create(f"bench-m8-{turns}")
    append = session.append
    for type_, data, intent in workload:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
    append("turn/start", {"turn": turns + 1})
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
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/compaction.py", description=__doc__)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    runs7 = [m7(args.turns) for _ in range(args.repeat)]
    runs8 = [m8(args.turns) for _ in range(args.repeat)]
    for name, runs in (("M7", runs7), ("M8", runs8)):
        print(
            f"{name}: median {statistics.median(runs):.4f} s  min {min(runs):.4f}  max {max(runs):.4f}"
            f"  ({args.repeat} runs, W({args.turns}))",
            file=sys.stderr,
        )
    print(
        json.dumps({"M7_seconds": round(statistics.median(runs7), 6), "M8_seconds": round(statistics.median(runs8), 6)})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
