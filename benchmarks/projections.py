"""Projection benchmarks: M10 ``agentlog ls`` from the cache, M11 cold snapshot, M12 append with units.

* M10 — ``agentlog ls --json`` over 1,000 stored W(5) sessions whose titles and stats are in the
  projection cache, in a fresh interpreter (``python benchmarks/projections.py _ls BACKEND ROOT``): the
  timer starts after the imports and covers the whole command (listing, one cache query, the served
  rows, the JSON page on standard output). The child also counts cold reads: it must serve every
  session from the cache (0 cold reads), or the figure would not be what M10 claims.
  ``M10_<kind>_floor_seconds`` is the same command over a store of one such session (argument parsing, backend
  open, a one-row page): about the part of M10 that does not grow with the sessions listed.
* M11 — ``ProjectionCache.cold_snapshot`` of a stored W(2000) session whose cache row is one step
  behind the log (the last step's events were appended after the row was written), in a fresh
  interpreter; the stale cache file is restored before every run (the cold read writes the row back).
* M12 — appending W(2000) to a store session with the five built-in units registered on the store and
  a change listener subscribed (so the registry drives every unit on every event, as a UI would see
  it), as a fraction of the same appends without the registry (M1's loop; runs interleaved).
  ``M12_lazy_ratio``: the same units registered without a listener (the registry then folds lazily, in
  batches, at reads — the CLI's configuration), with the one final snapshot that folds them timed too.

Targets (issue 10): M10 <= 0.03 s (jsonl-zstd) and <= 0.005 s (sqlite), M11 <= 0.005 s, M12 >= 0.8.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

try:
    from persist import make_backend
    from workload import build_workload
except ImportError:  # imported as ``benchmarks.projections``
    from benchmarks.persist import make_backend
    from benchmarks.workload import build_workload

BACKENDS = ("jsonl-zstd", "sqlite")
TARGET_M10 = {"jsonl-zstd": 0.03, "sqlite": 0.005}
TARGET_M11 = 0.005
TARGET_M12 = 0.8


def _cli_args(kind: str, root: str) -> list[str]:
    if kind == "sqlite":
        return ["--store", root, "--backend", "sqlite"]
    return ["--store", root, "--backend", "jsonl", "--compression", "zstd" if kind == "jsonl-zstd" else "none"]


def _titled(session: Any, index: int) -> None:
    """A ``session/title`` as the title service writes it after the first prompt (fallback)."""
    from agentlog.projection.title import SESSION_TITLE

    session.append(
        SESSION_TITLE, {"title": f"bench session {index}", "messageSeqs": [1], "source": {"kind": "fallback"}}
    )


def build_store(kind: str, root: str, sessions: int) -> None:
    """``sessions`` W(5) sessions written through a store with the CLI's projections attached."""
    from agentlog.cli.projection_commands import attach_projections

    workload = build_workload(5)
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    projections = attach_projections(coordinator)
    for index in range(sessions):
        session = store.create(f"s{index:05d}", meta={"cwd": f"/bench/p{index % 10}"})
        for n, (type_, data, intent) in enumerate(workload):
            session.append(type_, data, intent)
            if n == 1:
                _titled(session, index)
        store.flush(session)
        projections.checkpoint(session)  # as the CLI releases a session (agent_commands._release)
        store.dispose(session)
    projections.close()
    coordinator.close()


# --------------------------------------------------------------------------- M10


def ls_figure(store_args: Sequence[str], limit: int | None = None) -> dict[str, Any]:
    """M10 on any workload: ``agentlog ls <store_args> --json [--limit N]`` in this process, timed.

    The imports come first, outside the timer: the CLI's own modules and the ones the first parse
    imports lazily (typer's parameter adapters, and pydantic's plugin loader with ``importlib.metadata``,
    which building the first adapter imports even with plugins disabled). The timer covers the whole
    command: argument parsing, backend open, listing, one cache query, the served rows, the JSON page.
    Cold reads are counted: a figure of M10 serves every session from the cache (0 cold reads).
    ``benchmarks/original/agentlog_side.py`` calls this with the ``ls`` store and every session listed.
    """
    import pydantic.plugin._loader  # noqa: F401
    import typer._adapters  # noqa: F401

    import agentlog.cli.commands as commands
    import agentlog.cli.read_commands  # the command's own module: commands load it lazily at first use
    import agentlog.persistence.jsonl.backend
    import agentlog.persistence.sqlite.backend  # noqa: F401
    from agentlog.projection.cache import ProjectionCache

    cold = 0
    original = ProjectionCache.cold_snapshot

    def counted(self: ProjectionCache, session_id: str) -> dict[str, Any]:
        nonlocal cold
        cold += 1
        return original(self, session_id)

    ProjectionCache.cold_snapshot = counted  # type: ignore[method-assign]
    argv = ["ls", *store_args, "--json", *(() if limit is None else ("--limit", str(limit)))]
    out = io.StringIO()
    gc.collect()
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(out):
            commands.app(argv, standalone_mode=False)
        elapsed = time.perf_counter() - start
    finally:
        ProjectionCache.cold_snapshot = original  # type: ignore[method-assign]
    page = json.loads(out.getvalue())["sessions"] if out.getvalue() else []
    titled = sum(1 for row in page if row["title"] and row["turns"] is not None)
    return {"seconds": elapsed, "rows": len(page), "titled": titled, "cold_reads": cold}


def _ls_main(kind: str, root: str) -> None:
    result = ls_figure(_cli_args(kind, root))
    print(json.dumps({"M10_seconds": result.pop("seconds"), **result}))


def _ls_child(kind: str, root: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "_ls", kind, root], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def m10(kind: str, sessions: int, repeat: int) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="agentlog-bench-ls-")
    one = tempfile.mkdtemp(prefix="agentlog-bench-ls-one-")
    try:
        build_store(kind, root, sessions)
        build_store(kind, one, 1)
        results, floors = [], []
        for _ in range(repeat):  # interleaved: both see the same load
            result = _ls_child(kind, root)
            if result["cold_reads"] or result["titled"] != result["rows"]:
                raise SystemExit(f"M10: not served from the cache: {result}")
            results.append(result["M10_seconds"])
            floors.append(_ls_child(kind, one)["M10_seconds"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(one, ignore_errors=True)
    return {
        "median": statistics.median(results),
        "min": min(results),
        "max": max(results),
        "floor": statistics.median(floors),
    }


# --------------------------------------------------------------------------- M11


def _cold_main(kind: str, root: str) -> None:
    import agentlog.persistence.jsonl.backend
    import agentlog.persistence.sqlite.backend  # noqa: F401
    from agentlog.cli.projection_commands import read_cache

    gc.collect()
    start = time.perf_counter()
    coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
    cache = read_cache(coordinator)
    snapshot = cache.cold_snapshot("bench")
    elapsed = time.perf_counter() - start
    cache.close()
    coordinator.close()
    print(
        json.dumps(
            {
                "M11_seconds": elapsed,
                "asOfSeq": snapshot["asOfSeq"],
                "turns": snapshot["values"]["sessionStats"]["turns"],
            }
        )
    )


def _cache_files(root: str) -> list[str]:
    return [
        os.path.join(dirpath, name) for dirpath, _d, names in os.walk(root) for name in names if ".projections" in name
    ]


def m11(kind: str, turns: int, repeat: int) -> dict[str, float]:
    from agentlog.cli.projection_commands import attach_projections

    workload = build_workload(turns)
    last_step = max(i for i, (type_, _d, _i) in enumerate(workload) if type_ == "step/start")
    root = tempfile.mkdtemp(prefix="agentlog-bench-cold-")
    try:
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, make_backend(kind, root))
        projections = attach_projections(coordinator)
        session = store.create("bench", meta={"cwd": "/bench"})
        for type_, data, intent in workload[:last_step]:
            session.append(type_, data, intent)
        projections.cache.write(session)  # the row: everything up to the last step
        projections.close()  # detached: the last step reaches the log only
        for type_, data, intent in workload[last_step:]:
            session.append(type_, data, intent)
        store.flush(session)
        store.dispose(session)
        coordinator.close()
        saved = {path: Path(path).read_bytes() for path in _cache_files(root)}
        results = []
        for _ in range(repeat):
            for path in _cache_files(root):
                os.unlink(path)
            for path, data in saved.items():
                Path(path).write_bytes(data)
            out = subprocess.run(
                [sys.executable, __file__, "_cold", kind, root], check=True, capture_output=True, text=True
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["asOfSeq"] != len(workload) - 1 or result["turns"] != turns:
                raise SystemExit(f"M11: wrong snapshot {result}")
            results.append(result["M11_seconds"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"median": statistics.median(results), "min": min(results), "max": max(results)}


# --------------------------------------------------------------------------- M12


def _append(workload: Sequence[Any], with_units: bool, *, listener_on: bool = True) -> float:
    """Seconds to append ``workload`` to a store session (with the five units registered: driven on every
    event when a change listener is on; otherwise folded in one batch by a final snapshot, timed too)."""
    from agentlog.projection.registry import ProjectionRegistry

    store = al.SessionStore()
    registry = None
    changes = 0
    if with_units:
        registry = ProjectionRegistry.with_builtin_units(store)
    if registry is not None and listener_on:

        def listener(_session: Any, _key: str, _value: Any, _seq: int) -> None:
            nonlocal changes
            changes += 1

        registry.on_changed(listener)
    session = store.create("bench", meta={"cwd": "/bench"})
    append = session.append
    gc.collect()
    start = time.perf_counter()
    for type_, data, intent in workload:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
    if registry is not None and not listener_on:
        registry.snapshot(session)  # the lazy cells fold the whole log here: part of the cost
    elapsed = time.perf_counter() - start
    if registry is not None and listener_on and not changes:
        raise SystemExit("M12: the registry did not drive")
    if registry is not None:
        registry.dispose()
    return elapsed


def m12_cost(workload: Sequence[Any]) -> dict[str, float]:
    """M12 on any workload, once: the bare appends, then the same with the five units driven; the units'
    cost per event is the difference (``benchmarks/original/agentlog_side.py`` calls this on W(T))."""
    bare = _append(workload, False)
    units = _append(workload, True)
    return {
        "seconds": units - bare,
        "per_event_us": (units - bare) / len(workload) * 1e6,
        "bare_seconds": bare,
        "units_seconds": units,
    }


def m12(turns: int, repeat: int) -> dict[str, float]:
    workload = build_workload(turns)
    plain, units, lazy = [], [], []
    for _ in range(repeat):
        cost = m12_cost(workload)
        plain.append(cost["bare_seconds"])
        units.append(cost["units_seconds"])
        lazy.append(_append(workload, True, listener_on=False))
    m1 = statistics.median(plain)
    m12_s = statistics.median(units)
    return {
        "M1_events_per_s": len(workload) / m1,
        "units_events_per_s": len(workload) / m12_s,
        "ratio": m1 / m12_s,
        "lazy_ratio": m1 / statistics.median(lazy),
    }


# --------------------------------------------------------------------------- command


def cmd_projections(args: argparse.Namespace) -> dict[str, Any]:
    load = os.getloadavg()[0]
    figures: dict[str, Any] = {}
    rows: list[tuple[str, str, str]] = []
    for kind in args.backends:
        result = m10(kind, args.sessions, args.repeat)
        figures[f"M10_{kind}_seconds"] = round(result["median"], 6)
        figures[f"M10_{kind}_floor_seconds"] = round(result["floor"], 6)
        rows.append(
            (
                f"M10 ls, {args.sessions} W(5) sessions from the cache ({kind})",
                f"{result['median']:.4f} s",
                f"<= {TARGET_M10[kind]} (min {result['min']:.4f}, max {result['max']:.4f};"
                f" 1 session {result['floor']:.4f})",
            )
        )
    for kind in args.backends:
        result = m11(kind, args.turns, args.repeat)
        figures[f"M11_{kind}_seconds"] = round(result["median"], 6)
        rows.append(
            (
                f"M11 cold snapshot, W({args.turns}) row one step behind ({kind})",
                f"{result['median']:.4f} s",
                f"<= {TARGET_M11} (min {result['min']:.4f}, max {result['max']:.4f})",
            )
        )
    result12 = m12(args.turns, args.repeat)
    rows.append(
        (
            f"M12 append W({args.turns}), five units driven / without",
            f"{result12['ratio']:.3f}",
            f">= {TARGET_M12} ({result12['units_events_per_s']:,.0f} vs {result12['M1_events_per_s']:,.0f} events/s)",
        )
    )
    rows.append(
        (
            "M12 lazy: units registered, no listener, one final snapshot",
            f"{result12['lazy_ratio']:.3f}",
            "(the CLI's configuration: the cache folds at its write points)",
        )
    )
    print(f"agentlog projections — medians of {args.repeat} runs, load average {load:.2f} at start")
    width = max(len(r[0]) for r in rows)
    for label, value, note in rows:
        print(f"{label.ljust(width)}  {value:>10}  {note}")
    primary = args.backends[0]  # jsonl-zstd by default: the headline M10/M11 figures
    return {
        "M10_seconds": figures[f"M10_{primary}_seconds"],
        "M11_seconds": figures[f"M11_{primary}_seconds"],
        "M12_ratio": round(result12["ratio"], 4),
        **figures,
        "M12_lazy_ratio": round(result12["lazy_ratio"], 4),
        "M12_events_per_s": round(result12["units_events_per_s"], 1),
        "M1_events_per_s": round(result12["M1_events_per_s"], 1),
        "load_average": round(load, 2),
    }


def add_projections_parser(sub: Any) -> None:
    p = sub.add_parser("projections", help="M10 ls from the cache, M11 cold snapshot, M12 append with units")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS), help="M10/M11 backends")
    p.add_argument("--sessions", type=int, default=1000, help="stored W(5) sessions for M10 (default 1000)")
    p.add_argument("--turns", type=int, default=2000, help="turns T of W(T) for M11/M12 (default 2000)")
    p.add_argument("--repeat", type=int, default=5, help="runs; medians reported (default 5)")
    p.set_defaults(func=cmd_projections)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if sys.argv[1] == "_ls":
        _ls_main(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "_cold":
        _cold_main(sys.argv[2], sys.argv[3])
