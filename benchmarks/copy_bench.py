"""Copy throughput between backends: N stored W(T) sessions JSONL (zstd) → SQLite, then SQLite → PostgreSQL.

``agentlog copy`` is how a user moves a store to PostgreSQL, so the figure is the whole command's work per
session: read as stored, stage and publish on the target, read back and compare digests
(:func:`agentlog.persistence.copy.copy_sessions`). The source store is written first (not timed); each
leg is timed in this process after imports, over fresh targets, ``--repeat`` times (medians).

PostgreSQL: ``$AGENTLOG_BENCH_DSN`` (else ``$AGENTLOG_DSN``), else a temporary database created through
postgresql://postgres@127.0.0.1:5432/postgres and dropped at the end (as ``persist`` does).

Usage: ``python benchmarks/run.py copy [--sessions 1000] [--turns 20] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.copy import copy_sessions

try:
    from persist import bench_database, bench_root, make_backend
    from workload import build_workload
except ImportError:  # run as ``python -m benchmarks.run``
    from benchmarks.persist import bench_database, bench_root, make_backend
    from benchmarks.workload import build_workload


def _fill(kind: str, root: str, sessions: int, turns: int) -> int:
    """Write ``sessions`` W(``turns``) sessions; the number of events written."""
    workload = build_workload(turns)
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    for index in range(sessions):
        session = store.create(f"s{index:05d}", meta={"cwd": f"/bench/p{index % 10}"})
        for type_, data, intent in workload:
            session.append(type_, data, intent)
        store.flush(session)
        store.dispose(session)
    coordinator.close()
    return sessions * len(workload)


def _leg(source_kind: str, source_root: str, target_kind: str, target_root: str, sessions: int) -> float:
    start = time.perf_counter()
    report = copy_sessions(make_backend(source_kind, source_root), make_backend(target_kind, target_root))
    elapsed = time.perf_counter() - start
    if len(report.copied) != sessions or not report.ok:
        raise SystemExit(f"copy {source_kind} → {target_kind}: {report.to_json()['failed']} failed, "
                         f"{len(report.copied)} of {sessions} copied")
    return elapsed


def cmd_copy(args: argparse.Namespace) -> dict[str, Any]:
    with bench_database("postgres"):
        return _copy(args)


def _copy(args: argparse.Namespace) -> dict[str, Any]:
    legs: dict[str, list[float]] = {"jsonl-zstd → sqlite": [], "sqlite → postgres": []}
    with bench_root("jsonl-zstd", "copy-src") as source:
        events = _fill("jsonl-zstd", source, args.sessions, args.turns)
        for _ in range(args.repeat):
            with bench_root("sqlite", "copy-sqlite") as sqlite_root, bench_root("postgres", "copy-pg") as schema:
                legs["jsonl-zstd → sqlite"].append(_leg("jsonl-zstd", source, "sqlite", sqlite_root, args.sessions))
                legs["sqlite → postgres"].append(_leg("sqlite", sqlite_root, "postgres", schema, args.sessions))
    figures: dict[str, Any] = {"sessions": args.sessions, "turns": args.turns, "events": events}
    rows = []
    for name, times in legs.items():
        median = statistics.median(times)
        key = name.replace(" → ", "_to_").replace("-", "_")
        figures[f"{key}_seconds"] = round(median, 4)
        figures[f"{key}_sessions_per_s"] = round(args.sessions / median, 1)
        figures[f"{key}_events_per_s"] = round(events / median)
        rows.append((name, f"{median:.2f}", f"{args.sessions / median:,.0f}", f"{events / median:,.0f}"))
    title = f"agentlog copy — {args.sessions} W({args.turns}) sessions ({events:,} events), {args.repeat} run(s)"
    print(title)
    widths = [max(len(row[i]) for row in [("leg", "s", "sessions/s", "events/s"), *rows]) for i in range(4)]
    for row in [("leg", "s", "sessions/s", "events/s"), *rows]:
        print("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
    return figures


def add_copy_parser(sub: Any) -> None:
    p = sub.add_parser("copy", help="copy throughput: N W(T) sessions JSONL → SQLite and SQLite → PostgreSQL")
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.set_defaults(func=cmd_copy)
