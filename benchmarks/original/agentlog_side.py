"""One figure of agentlog per invocation, on the data ``make_data.py`` wrote; prints one JSON line.

The same figure as ``node figures.mjs FIGURE DATA [ARG]`` on the same data (see that file for each
figure's definition); ``compare.py`` alternates the two.

Usage: python agentlog_side.py FIGURE DATA [ARG]
  FIGURE: M1 M3-bulk M3-step M4 M4-sqlite M5 M7 M8 M9 M10 M12 search tokens
  ARG: turns T (default 2000) or the session count (M5 M10 search; default 1000)
Helpers figures.mjs calls: ``queries`` (the 100 mixed queries as JSON), ``append-turn ROOT ID`` (one
closed turn appended to a stored W(20) session, as another process would).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from make_data import read_log  # noqa: E402

import agentlog as al  # noqa: E402
from agentlog.compaction import TokenMeter  # noqa: E402
from agentlog.persistence.coordinator import PersistenceCoordinator  # noqa: E402
from compaction import m7, m8, m9  # noqa: E402
from persist import _import_backend_modules, make_backend, write_session  # noqa: E402
from workload import append_workload  # noqa: E402

Workload = list[tuple[str, Any, Any]]


def workload(data: str, turns: int) -> Workload:
    return read_log(Path(data) / f"w{turns}.jsonl")


def fig_tokens(data: str, turns: int) -> dict[str, Any]:
    session = al.Session.create("bench")
    append_workload(session, workload(data, turns))
    m = TokenMeter().measure(session)
    return {"surface_tokens": m.surface_tokens, "total_tokens": m.total_tokens, "nodes": len(m.nodes)}


def fig_m1(data: str, turns: int) -> dict[str, Any]:
    events = workload(data, turns)
    session = al.Session.create("bench")
    gc.collect()
    start = time.perf_counter()
    append_workload(session, events)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "events": session.seq, "events_per_s": len(events) / seconds}


def fig_m7(data: str, turns: int) -> dict[str, Any]:
    events = workload(data, turns)
    figure = m7(turns, events)
    return {**figure, "per_event_us": figure["seconds"] / len(events) * 1e6}


def fig_m8(data: str, turns: int) -> dict[str, Any]:
    return m8(turns, workload(data, turns))


def fig_m9(data: str, turns: int) -> dict[str, Any]:
    return m9(turns, workload(data, turns))


def fig_m12(data: str, turns: int) -> dict[str, Any]:
    """``benchmarks/projections.py``'s M12 (:func:`m12_cost`) on W(T) as make_data.py wrote it."""
    from projections import m12_cost

    return dict(m12_cost(workload(data, turns)))


def fig_m3(data: str, turns: int, style: str) -> dict[str, Any]:
    events = workload(data, turns)
    root = tempfile.mkdtemp(prefix="agentlog-m3-")
    try:
        seconds = write_session("jsonl-zstd", root, events, style)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"seconds": seconds, "events_per_s": len(events) / seconds, "style": style}


def fig_m4(data: str, turns: int, kind: str) -> dict[str, Any]:
    root = str(Path(data) / "m4" / f"{kind}-{turns}")
    _import_backend_modules()
    gc.collect()
    start = time.perf_counter()
    coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
    session = coordinator.prepare("bench").session
    messages = session.derive_messages()
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "events": session.seq, "messages": len(messages), "kind": kind}


def fig_m5(data: str, sessions: int) -> dict[str, Any]:
    _import_backend_modules()
    gc.collect()
    start = time.perf_counter()
    listings = make_backend("jsonl-zstd", str(Path(data) / "ls")).list_sessions()
    seconds = time.perf_counter() - start
    if len(listings) != sessions:
        raise SystemExit(f"M5: listed {len(listings)}")
    return {"seconds": seconds, "sessions": len(listings)}


def fig_m10(data: str, sessions: int, limit: int | None = None) -> dict[str, Any]:
    """``agentlog ls --json --limit N`` over the ``ls`` store in this process, served from the projection cache
    (``benchmarks/projections.py``'s :func:`ls_figure`: imports before the timer, cold reads counted).

    N is every session (the original's listing views every session's cached row), or ``limit`` (the
    CLI's default page is 50).
    """
    from projections import ls_figure

    _import_backend_modules()
    rows = sessions if limit is None else limit
    store = ["--store", str(Path(data) / "ls"), "--backend", "jsonl", "--compression", "zstd"]
    result = ls_figure(store, limit=rows)
    if result["cold_reads"] or result["titled"] != rows:
        raise SystemExit(f"M10: {result['titled']} of {result['rows']} rows titled, {result['cold_reads']} cold reads")
    return {"seconds": result["seconds"], "rows": result["rows"], "titled": result["titled"]}


def fig_search(data: str, sessions: int, build_only: bool = False) -> dict[str, Any]:
    import agentlog.query.sqlite  # noqa: F401  # imports are not what M13 measures
    from search import _percentile, _search, append_one_turn, timed_queries

    source = Path(data) / ("search" if sessions == 1000 else f"search-{sessions}")
    work = tempfile.mkdtemp(prefix="agentlog-search-")
    root = os.path.join(work, "store")
    shutil.copytree(source, root)
    try:
        _import_backend_modules()
        gc.collect()
        start = time.perf_counter()
        search, coordinator = _search("jsonl-zstd", root)
        first = search.search_sessions(query="r1")
        m13 = time.perf_counter() - start
        if not first["items"] or search.skipped:
            raise SystemExit("M13: the first search found nothing or skipped sessions")
        if build_only:
            search.close()
            coordinator.close()
            return {"M13": m13, "seconds": m13, "sessions": sessions}
        target = f"s{sessions // 2:05d}"
        append_one_turn("jsonl-zstd", root, target, 20)
        gc.collect()
        start = time.perf_counter()
        found = search.search_sessions(query="zebra quokka axolotl")
        m14 = time.perf_counter() - start
        hits = [item["header"]["id"] for item in found["items"]]
        if hits != [target]:
            raise SystemExit(f"M14: the appended turn was not found: {hits}")
        latencies, matched = timed_queries(search)
        search.close()
        coordinator.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "M13": m13,
        "M14": m14,
        "M15": _percentile(latencies, 0.5),
        "M16": _percentile(latencies, 0.95),
        "matched": matched,
        "queries": len(latencies),
        "sessions": sessions,
    }


def main(argv: list[str]) -> int:
    if argv and argv[0] == "queries":
        from search import mixed_queries

        print(json.dumps(mixed_queries(), ensure_ascii=False))
        return 0
    if argv and argv[0] == "append-turn":
        from search import append_one_turn

        append_one_turn("jsonl-zstd", argv[1], argv[2], 20)
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    figure, data = argv[0], argv[1]
    arg = int(argv[2]) if len(argv) > 2 else None
    turns = arg or 2000
    sessions = arg or 1000
    runs: dict[str, Any] = {
        "tokens": lambda: fig_tokens(data, turns),
        "M1": lambda: fig_m1(data, turns),
        "M7": lambda: fig_m7(data, turns),
        "M8": lambda: fig_m8(data, turns),
        "M9": lambda: fig_m9(data, turns),
        "M12": lambda: fig_m12(data, turns),
        "M3-bulk": lambda: fig_m3(data, turns, "bulk"),
        "M3-step": lambda: fig_m3(data, turns, "step"),
        "M4": lambda: fig_m4(data, turns, "jsonl-zstd"),
        "M4-sqlite": lambda: fig_m4(data, turns, "sqlite"),
        "M5": lambda: fig_m5(data, sessions),
        "M10": lambda: fig_m10(data, sessions),
        "M10-page": lambda: fig_m10(data, 1000, limit=arg or 50),
        "search": lambda: fig_search(data, sessions),
        "search-build": lambda: fig_search(data, sessions, build_only=True),
    }
    if figure not in runs:
        print(f"unknown figure {figure}; known: {' '.join(runs)}", file=sys.stderr)
        return 2
    result = runs[figure]()
    print(json.dumps({"side": "agentlog", "figure": figure, "python": sys.version.split()[0], **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
