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

import asyncio
import contextlib
import gc
import io
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
from agentlog.compaction import CompactionEngine, SummaryResult, TokenMeter, lock_is_held  # noqa: E402
from agentlog.compaction.pairing import balanced_after, balanced_before  # noqa: E402
from agentlog.compaction.pruner import ToolResultPruner  # noqa: E402
from agentlog.persistence.coordinator import PersistenceCoordinator  # noqa: E402
from compaction import M8_HEAD, M8_TAIL, M8_THRESHOLD  # noqa: E402
from persist import _import_backend_modules, make_backend, write_session  # noqa: E402

Workload = list[tuple[str, Any, Any]]


def workload(data: str, turns: int) -> Workload:
    return read_log(Path(data) / f"w{turns}.jsonl")


def append_all(session: Any, events: Workload) -> None:
    append = session.append
    for type_, body, intent in events:
        if intent is None:
            append(type_, body)
        else:
            append(type_, body, intent)


def fig_tokens(data: str, turns: int) -> dict[str, Any]:
    session = al.Session.create("bench")
    append_all(session, workload(data, turns))
    m = TokenMeter().measure(session)
    return {"surface_tokens": m.surface_tokens, "total_tokens": m.total_tokens, "nodes": len(m.nodes)}


def fig_m1(data: str, turns: int) -> dict[str, Any]:
    events = workload(data, turns)
    session = al.Session.create("bench")
    gc.collect()
    start = time.perf_counter()
    append_all(session, events)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "events": session.seq, "events_per_s": len(events) / seconds}


def fig_m7(data: str, turns: int) -> dict[str, Any]:
    events = workload(data, turns)
    session = al.Session.create("bench")
    measure = TokenMeter().measure
    append = session.append
    clock = time.perf_counter
    seconds, calls, last = 0.0, 0, None
    gc.collect()
    for type_, body, intent in events:
        if intent is None:
            append(type_, body)
        else:
            append(type_, body, intent)
        if type_ == "step/end":
            start = clock()
            last = measure(session)
            seconds += clock() - start
            calls += 1
    if calls != 2 * turns or last is None or len(last.nodes) != 4 * turns:
        raise SystemExit(f"M7: {calls} calls")
    per_event = seconds / len(events) * 1e6
    return {"seconds": seconds, "calls": calls, "surface_tokens": last.surface_tokens, "per_event_us": per_event}


def fig_m8(data: str, turns: int) -> dict[str, Any]:
    session = al.Session.create("bench")
    append_all(session, workload(data, turns))
    session.append("turn/start", {"turn": turns + 1})
    pruner = ToolResultPruner(threshold_chars=M8_THRESHOLD, head_chars=M8_HEAD, tail_chars=M8_TAIL)
    gc.collect()
    start = time.perf_counter()
    result = pruner.prune_session(session)
    seconds = time.perf_counter() - start
    if len(result.pruned) != turns:
        raise SystemExit(f"M8: pruned {len(result.pruned)}")
    return {"seconds": seconds, "pruned": len(result.pruned)}


def fig_m9(data: str, turns: int) -> dict[str, Any]:
    class Scripted:
        async def summarize(self, summary_input: Any) -> SummaryResult:
            return SummaryResult(
                summary=[{"type": "text", "text": "## Current Work\n- reading files"}],
                provider="bench",
                model="scripted",
            )

    session = al.Session.create("bench")
    append_all(session, workload(data, turns))
    session.append("turn/start", {"turn": turns + 1})
    meter = TokenMeter()
    engine = CompactionEngine(meter=meter, pruner=None, summarizer=Scripted())
    nodes = list(session.surface.nodes)
    meter.measure(session)
    session.request_header()
    lock_is_held(session)
    balanced_before(session, nodes[0])
    end = max(1, int(len(nodes) * 0.9)) - 1
    while end > 0 and not balanced_after(session, nodes[end]):
        end -= 1
    gc.collect()
    start = time.perf_counter()
    asyncio.run(engine.compact_region(session, nodes[0], nodes[end]))
    return {"seconds": time.perf_counter() - start, "shadowed": end + 1}


def fig_m12(data: str, turns: int) -> dict[str, Any]:
    from projections import _append

    events = workload(data, turns)
    bare = _append(events, False)
    units = _append(events, True)
    per_event = (units - bare) / len(events) * 1e6
    return {"seconds": units - bare, "per_event_us": per_event, "bare_seconds": bare, "units_seconds": units}


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
    """``agentlog ls --json --limit N`` over the ``ls`` store in this process, served from the projection cache.

    N is every session (the original's listing views every session's cached row), or ``limit`` (the
    CLI's default page is 50). Imports happen before the timer, as in benchmarks/projections.py.
    """
    import typer._adapters  # noqa: F401  # typer imports its parameter adapters at the first parse

    import agentlog.cli.commands as commands
    import agentlog.cli.read_commands  # noqa: F401  # loaded lazily at first use otherwise
    from agentlog.projection.cache import ProjectionCache

    _import_backend_modules()
    cold = 0
    original = ProjectionCache.cold_snapshot

    def counted(self: ProjectionCache, session_id: str) -> dict[str, Any]:
        nonlocal cold
        cold += 1
        return original(self, session_id)

    ProjectionCache.cold_snapshot = counted  # type: ignore[method-assign]
    rows = sessions if limit is None else limit
    argv = ["ls", "--store", str(Path(data) / "ls"), "--backend", "jsonl", "--compression", "zstd"]
    argv += ["--json", "--limit", str(rows)]
    out = io.StringIO()
    gc.collect()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out):
        commands.app(argv, standalone_mode=False)
    seconds = time.perf_counter() - start
    page = json.loads(out.getvalue())["sessions"]
    titled = sum(1 for row in page if row["title"] and row["turns"] is not None)
    if cold or titled != rows:
        raise SystemExit(f"M10: {titled} of {len(page)} rows titled, {cold} cold reads")
    return {"seconds": seconds, "rows": len(page), "titled": titled}


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
