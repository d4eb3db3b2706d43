"""agentlog benchmarks over the canonical workload W(T) (shared/bench/WORKLOAD.md).

Usage:
    python benchmarks/run.py kernel --turns 2000 [--repeat 5]

Subcommands:
    kernel   in-memory kernel figures: M1 append, M2 incremental derive, M6 compaction, peak RSS
    persist  --backend jsonl-zstd|jsonl-none|sqlite|postgres --style bulk|step: M3 write, M4 cold restore
    list     --backend ... --sessions 1000: M5 listing in a fresh process
    compaction --turns 2000: M7 token meter after every step, M8 one prune, M9 one region compaction
    projections: M10 ls from the projection cache, M11 cold snapshot, M12 append with the five units
    search   --sessions 1000: M13 index build, M14 reconciliation after one turn, M15/M16 query p50/p95
    import   --mb 200: M17 import throughput of a Claude Code style transcript (MB/s) and its peak RSS
    copy     --sessions 1000 --turns 20: copy throughput JSONL (zstd) → SQLite and SQLite → PostgreSQL
    inspector --turns 20000 --sessions 1000: M18 first paint, M19 slider, serving RSS, M20 sessions page, export --html
    cli-start --sessions 50: CPU (user + sys) of ``agentlog --version`` and ``agentlog ls`` in fresh processes
    telemetry --turns 2000: the OpenTelemetry span exporter's cost per append (no provider; batch OTLP export)
    pg-writers --processes 1,4,8: PostgreSQL, aggregate events/s of N concurrent writer processes
             (W(200) each, flush per step) and the eventsourcing recorder as the per-step peer anchor

Each subcommand prints an aligned plain-text table and, as the LAST line of stdout, exactly one
JSON object with its figures (medians over --repeat runs), so scripts can ``tail -n 1`` it.

Adding a subcommand (e.g. ``persist`` for M3/M4, ``list`` for M5): write ``cmd_<name>(args) ->
dict`` that prints its table and returns the JSON figures, and an ``add_<name>_parser(sub)`` that
registers it; list the latter in ``SUBCOMMANDS``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentlog import Session
from agentlog.kernel.messages import plugin_message

try:
    from workload import SURFACE_MESSAGES_PER_TURN, WorkloadEvent, build_workload
except ImportError:  # run as ``python -m benchmarks.run``
    from benchmarks.workload import SURFACE_MESSAGES_PER_TURN, WorkloadEvent, build_workload

COMPACTION_FRACTION = 0.9


# --------------------------------------------------------------------------- helpers


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (Linux reports ru_maxrss in KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # bytes there
        rss /= 1024
    return rss / 1024


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Plain aligned table: first column left-aligned, the others right-aligned."""
    widths = [max(len(str(r[c])) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [str(cell).ljust(widths[c]) if c == 0 else str(cell).rjust(widths[c]) for c, cell in enumerate(cells)]
        return "  ".join(parts).rstrip()

    rule = "-" * len(line(header))
    print(title)
    print(rule)
    print(line(header))
    print(rule)
    for row in rows:
        print(line(row))
    print(rule)


def fmt(value: float, unit: str) -> str:
    if unit == "events/s":
        return f"{value:,.0f}"
    if unit == "s":
        return f"{value:.4f}"
    return f"{value:,.1f}"


# --------------------------------------------------------------------------- kernel (M1, M2, M6)


def append_all(session: Session, workload: Sequence[WorkloadEvent]) -> float:
    """M1: append every event; returns elapsed seconds (append calls only)."""
    append = session.append
    gc.collect()
    start = time.perf_counter()
    for type_, data, intent in workload:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
    return time.perf_counter() - start


def append_with_derive(session: Session, workload: Sequence[WorkloadEvent]) -> tuple[float, int]:
    """M2: append everything, call derive_messages() after every step/end.

    Returns (summed seconds of the derive calls only, number of derive calls).
    """
    append = session.append
    derive = session.derive_messages
    clock = time.perf_counter
    total = 0.0
    calls = 0
    gc.collect()
    for type_, data, intent in workload:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
        if type_ == "step/end":
            start = clock()
            derive()
            total += clock() - start
            calls += 1
    return total, calls


def compact_and_derive(session: Session) -> tuple[float, int, int]:
    """M6: one user/message summary replacing the first 90% of the surface, then derive once.

    Returns (seconds for append + derive, number of shadowed nodes, derived message count).
    """
    nodes = list(session.surface.nodes)
    count = max(1, int(len(nodes) * COMPACTION_FRACTION))
    shadowed = nodes[:count]
    summary = plugin_message(
        f"Summary of the first {count} messages of this session: the user asked for files to be read; "
        "the agent read them and answered each question.",
        plugin="bench-compaction",
        id="bench-summary",
    )
    intent = {
        "surfaceOp": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
        "sourceEventSeqs": shadowed,
    }
    gc.collect()
    start = time.perf_counter()
    session.append("user/message", summary, intent)
    messages = session.derive_messages()
    elapsed = time.perf_counter() - start
    return elapsed, count, len(messages)


def kernel_once(workload: Sequence[WorkloadEvent], turns: int, run: int) -> dict[str, float]:
    expected_messages = SURFACE_MESSAGES_PER_TURN * turns

    # M1 (+ M6 on the same, fully appended session).
    session = Session.create(f"bench-{run}")
    m1_seconds = append_all(session, workload)
    if session.seq != len(workload):
        raise SystemExit(f"M1: session has {session.seq} events, expected {len(workload)}")
    if len(session.surface.nodes) != expected_messages:
        raise SystemExit(f"M1: surface has {len(session.surface.nodes)} nodes, expected {expected_messages}")

    m6_seconds, shadowed, remaining = compact_and_derive(session)
    if remaining != expected_messages - shadowed + 1:
        raise SystemExit(f"M6: derived {remaining} messages, expected {expected_messages - shadowed + 1}")
    del session
    gc.collect()

    # M2 on a fresh session.
    session = Session.create(f"bench-derive-{run}")
    m2_seconds, calls = append_with_derive(session, workload)
    if calls != 2 * turns:
        raise SystemExit(f"M2: {calls} derive calls, expected {2 * turns}")
    if len(session.derive_messages()) != expected_messages:
        raise SystemExit("M2: final derived message count is wrong")
    del session
    gc.collect()

    return {
        "M1_events_per_s": len(workload) / m1_seconds,
        "M1_seconds": m1_seconds,
        "M2_seconds": m2_seconds,
        "M6_seconds": m6_seconds,
    }


def cmd_kernel(args: argparse.Namespace) -> dict[str, Any]:
    turns: int = args.turns
    repeat: int = args.repeat

    build_start = time.perf_counter()
    workload = build_workload(turns)
    build_seconds = time.perf_counter() - build_start

    runs: list[dict[str, float]] = []
    for run in range(repeat):
        result = kernel_once(workload, turns, run)
        runs.append(result)
        print(
            f"run {run + 1}/{repeat}: M1 {result['M1_events_per_s']:,.0f} events/s"
            f"  M2 {result['M2_seconds']:.4f} s  M6 {result['M6_seconds']:.4f} s",
            file=sys.stderr,
        )

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    rss = peak_rss_mb()
    figures = [
        ("M1 append (full validation)", "M1_events_per_s", "events/s"),
        ("   M1 wall time", "M1_seconds", "s"),
        (f"M2 derive after each step ({2 * turns} calls, summed)", "M2_seconds", "s"),
        (f"M6 compaction ({COMPACTION_FRACTION:.0%} replaced) + derive", "M6_seconds", "s"),
    ]
    rows = [
        [
            label,
            fmt(med(key), unit),
            fmt(min(r[key] for r in runs), unit),
            fmt(max(r[key] for r in runs), unit),
            unit,
        ]
        for label, key, unit in figures
    ]
    rows.append(["peak RSS (whole process)", fmt(rss, "MB"), "", "", "MB"])
    title = (
        f"agentlog kernel — W({turns}) = {len(workload):,} events, {repeat} run(s), "
        f"Python {platform.python_version()} (workload built in {build_seconds:.2f} s, untimed)"
    )
    print_table(title, ["figure", "median", "min", "max", "unit"], rows)

    return {
        "M1_events_per_s": round(med("M1_events_per_s"), 1),
        "M2_seconds": round(med("M2_seconds"), 6),
        "M6_seconds": round(med("M6_seconds"), 6),
        "peak_rss_mb": round(rss, 1),
    }


def add_kernel_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("kernel", help="in-memory kernel: M1 append, M2 derive, M6 compaction, peak RSS")
    p.add_argument("--turns", type=positive_int, default=2000, help="turns T of W(T) (default 2000)")
    p.add_argument("--repeat", type=positive_int, default=5, help="runs; medians reported (default 5)")
    p.set_defaults(func=cmd_kernel)


# --------------------------------------------------------------------------- CLI


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


try:
    from cli_start import add_cli_start_parser
    from copy_bench import add_copy_parser
    from import_bench import add_import_parser
    from inspector import add_inspector_parser
    from persist import add_list_parser, add_persist_parser
    from pg_writers import add_pg_writers_parser
    from projections import add_projections_parser
    from search import add_search_parser
    from telemetry import add_telemetry_parser
except ImportError:  # run as ``python -m benchmarks.run``
    from benchmarks.cli_start import add_cli_start_parser
    from benchmarks.copy_bench import add_copy_parser
    from benchmarks.import_bench import add_import_parser
    from benchmarks.inspector import add_inspector_parser
    from benchmarks.persist import add_list_parser, add_persist_parser
    from benchmarks.pg_writers import add_pg_writers_parser
    from benchmarks.projections import add_projections_parser
    from benchmarks.search import add_search_parser
    from benchmarks.telemetry import add_telemetry_parser


# --------------------------------------------------------------------------- compaction (M7-M9)


def cmd_compaction(args: argparse.Namespace) -> dict[str, Any]:
    try:
        from compaction import m7, m8, m9
    except ImportError:  # run as ``python -m benchmarks.run``
        from benchmarks.compaction import m7, m8, m9
    workload = build_workload(args.turns)
    runs: dict[str, list[float]] = {"M7": [], "M8": [], "M9": [], "M9_cold": []}
    shadowed = 0
    for _ in range(args.repeat):
        runs["M7"].append(m7(args.turns, workload)["seconds"])
        runs["M8"].append(m8(args.turns, workload)["seconds"])
        warm = m9(args.turns, workload)
        runs["M9"].append(warm["seconds"])
        runs["M9_cold"].append(m9(args.turns, workload, warm=False)["seconds"])
        shadowed = warm["shadowed"]
    med = {key: statistics.median(values) for key, values in runs.items()}
    print_table(
        f"compaction, W({args.turns}), medians of {args.repeat} runs",
        ["figure", "median", "target"],
        [
            ["M7 measure() after every step", fmt(med["M7"], "s"), "<= 0.02 s"],
            ["M8 prune_session (300-char threshold)", fmt(med["M8"], "s"), "<= 0.05 s"],
            [f"M9 compact_region ({shadowed} nodes, warm meter)", fmt(med["M9"], "s"), "<= 0.02 s"],
            ["M9 with a cold meter (first fold)", fmt(med["M9_cold"], "s"), "-"],
        ],
    )
    return {
        "turns": args.turns,
        "M7_seconds": med["M7"],
        "M8_seconds": med["M8"],
        "M9_seconds": med["M9"],
        "M9_cold_seconds": med["M9_cold"],
    }


def add_compaction_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compaction", help="M7 token meter, M8 tool-result pruner, M9 region compaction")
    p.add_argument("--turns", type=positive_int, default=2000, help="turns T of W(T) (default 2000)")
    p.add_argument("--repeat", type=positive_int, default=3, help="runs; medians reported (default 3)")
    p.set_defaults(func=cmd_compaction)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    add_kernel_parser,
    add_persist_parser,
    add_list_parser,
    add_compaction_parser,
    add_projections_parser,
    add_search_parser,
    add_import_parser,
    add_copy_parser,
    add_pg_writers_parser,
    add_cli_start_parser,
    add_inspector_parser,
    add_telemetry_parser,
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="benchmarks/run.py", description="agentlog benchmarks over the canonical workload W(T)."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_parser in SUBCOMMANDS:
        add_parser(sub)
    args = parser.parse_args(argv)
    figures = args.func(args)
    print(json.dumps(figures))  # must stay the last line of stdout
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
