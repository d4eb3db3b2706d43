"""The inspector's scale figures (docs/inspector.md): ``python benchmarks/run.py inspector``.

* M18 first paint: a fresh process opens the store and answers what the session page paints first (the
  heading and the last log page, from the log's tail while the whole log is validated in the background),
  server time; then ``validated``: from the same start until the validation ended and the page's
  summary, the log page around the last seq and the state at the last seq are answered;
* ``--stages``: the parts of a first load one after another in one fresh process, each with its time and
  the process's peak RSS after it (a seq-range read of the last 300 events, the streamed load the server
  makes of a JSONL log, then the whole read it falls back to: the backend's whole-log read, the validated
  read and restore, the paged index);
* ``--session-store DIR``: the W(T) session is written to ``DIR`` once (with the projection cache the CLI
  leaves) and reused by later runs; ``--session-only`` measures only the session figures (and stages);
* M19 slider: p50/p95 server time of 100 moves to random seqs (``state_at`` and its JSON);
* the peak RSS of that process (the server's side only: the store is written by another process);
* in chromium (playwright over ``/usr/bin/chromium``; skipped without them), a real server in a fresh
  process: navigation until the session page shows its heading, and until it shows the last seq in all
  three panes, with that server process's peak RSS;
* M20 sessions page: ``GET /api/sessions`` over a real server on N stored sessions whose projection
  cache is current (as ``agentlog run`` leaves it), the first request and the median of 20 more;
* export: ``agentlog export bench --html`` of W(``--export-turns``, default 2000) as a fresh command
  (wall time, the file's size), then the file opened from disk in chromium (playwright; the launch not
  counted): the time from navigation until the page shows the last seq in all three panes
  (``body[data-at]``). Without playwright or ``/usr/bin/chromium`` (``$AGENTLOG_CHROMIUM``) the open
  time is ``null``.

Targets of the issue: M18 ≤ 1 s, M19 p95 ≤ 150 ms and RSS ≤ 300 MB at W(20000); M20 ≤ 200 ms at 1,000
sessions; ``export --html`` of W(2000) ≤ 3 s, opening it ≤ 2 s. The last line of stdout is one JSON
object with the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

try:
    from persist import bench_database, bench_dsn, own_peak_rss_mb, write_session
    from projections import build_store
    from workload import build_workload
except ImportError:  # run as ``python -m benchmarks.run``
    from benchmarks.persist import bench_database, bench_dsn, own_peak_rss_mb, write_session
    from benchmarks.projections import build_store
    from benchmarks.workload import build_workload

BACKENDS = ("jsonl-zstd", "jsonl-none", "sqlite", "postgres")
"""``postgres`` (session figures only: ``--session-only``) writes to ``$AGENTLOG_BENCH_DSN`` (else a database
of the run, as ``persist`` does); ``--session-store`` is then a schema name."""
MOVES = 100


def _read_only(kind: str, root: str) -> Any:
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    if kind == "sqlite":
        return SqliteBackend(os.path.join(root, "sessions.sqlite3"), read_only=True)
    if kind == "postgres":
        from agentlog.persistence.postgres import PostgresBackend

        return PostgresBackend(bench_dsn(), schema=root, read_only=True)
    return JsonlBackend(root, compression="auto", read_only=True)


def _session_child(kind: str, root: str) -> None:
    import orjson

    from agentlog.inspector.views import Inspector

    start = time.perf_counter()
    inspector = Inspector(_read_only(kind, root), search=False, page_after=None)
    early = getattr(inspector, "first_paint", None)  # (absent before the early first paint: a baseline)
    if early is not None:
        orjson.dumps(early("bench"))  # what the page paints first: the heading and the last log page
        first_paint: float | None = time.perf_counter() - start
        inspector.wait_validated("bench")
    else:
        first_paint = None
    summary = inspector.summary("bench")
    last = summary["lastSeq"]
    orjson.dumps(summary)
    orjson.dumps(inspector.log_page("bench", max(0, last - 20), 200))
    orjson.dumps(inspector.state_at("bench", last))
    validated = time.perf_counter() - start
    rng = random.Random(7)
    moves = []
    for _ in range(MOVES):
        seq = rng.randrange(last + 1)
        begin = time.perf_counter()
        orjson.dumps(inspector.state_at("bench", seq, shadowed_between=(max(0, seq - 20), seq + 2000)))
        moves.append(time.perf_counter() - begin)
    moves.sort()
    rss = own_peak_rss_mb()  # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's)
    # Paged out (what the server's pager does a few seconds after a load): what it then holds, and the
    # same figures answered from the pages.
    begin = time.perf_counter()
    loaded = inspector.page_out("bench")
    page_out_seconds = time.perf_counter() - begin
    gc.collect()
    held = own_rss_mb()
    paged_moves = []
    for _ in range(MOVES):
        seq = rng.randrange(last + 1)
        begin = time.perf_counter()
        orjson.dumps(inspector.state_at("bench", seq, shadowed_between=(max(0, seq - 20), seq + 2000)))
        paged_moves.append(time.perf_counter() - begin)
    paged_moves.sort()
    begin = time.perf_counter()
    orjson.dumps(inspector.log_page("bench", rng.randrange(last + 1), 200))
    paged_page = time.perf_counter() - begin
    paged = loaded.paged
    print(
        json.dumps(
            {
                "events": last + 1,
                "M18_seconds": first_paint if first_paint is not None else validated,
                "validated_seconds": validated,
                "M19_p50_seconds": statistics.median(moves),
                "M19_p95_seconds": moves[int(len(moves) * 0.95) - 1],
                "peak_rss_mb": rss,
                "page_out_seconds": page_out_seconds,
                "paged_rss_mb": held,
                "paged_bytes": paged.stored_bytes if paged is not None else None,
                "paged_M19_p50_seconds": statistics.median(paged_moves),
                "paged_M19_p95_seconds": paged_moves[int(len(paged_moves) * 0.95) - 1],
                "paged_log_page_seconds": paged_page,
            }
        )
    )


def _stages_child(kind: str, root: str) -> None:
    """The parts of a first load, in order, in this fresh process: each one's seconds and the peak RSS
    (``VmHWM``) after it. The validated read includes a whole-log backend read of its own (the one the
    previous stage timed alone, its result dropped before)."""
    from agentlog.inspector.paged import PAGE_EVENTS
    from agentlog.inspector.views import Inspector, LoadedSession

    held = threading.Event()  # never set: the first paint's background validation stays out of the stages
    try:
        inspector = Inspector(_read_only(kind, root), search=False, page_after=None, validation_gate=held)
    except TypeError:  # (before the early first paint: a baseline)
        inspector = Inspector(_read_only(kind, root), search=False, page_after=None)
    stages: list[dict[str, Any]] = []

    def stage(name: str, begin: float) -> None:
        stages.append({"stage": name, "seconds": time.perf_counter() - begin, "peak_rss_mb": own_peak_rss_mb()})

    if hasattr(inspector, "first_paint"):
        begin = time.perf_counter()
        inspector.first_paint("bench")
        stage("first paint (count, header, tail read, last log page)", begin)

    begin = time.perf_counter()
    tail = inspector.reader.read_from("bench", max(0, _count(inspector) - 300))
    stage("seq-range read of the last 300 events", begin)
    del tail
    try:
        from agentlog.inspector.streamed import load_streamed
    except ImportError:  # (before the streamed load: a baseline)
        load_streamed = None
    if load_streamed is not None:
        begin = time.perf_counter()
        streamed = load_streamed(inspector.reader, "bench", PAGE_EVENTS)
        stage("streamed load: read, checked, indexed, paged by batch" + ("" if streamed else " (declined)"), begin)
        del streamed
        gc.collect()
    from agentlog.kernel.packedrun import compact_chunk_runs

    begin = time.perf_counter()
    with compact_chunk_runs():  # as the coordinator's cold load asks it: packed chunk runs kept packed
        stored = inspector.backend.load_stored("bench")
    stage("whole-log backend read (chunk runs packed)", begin)
    del stored
    gc.collect()
    begin = time.perf_counter()
    view = inspector.reader.stored_view("bench", keep=False)
    stage("validated read and restore (backend read included)", begin)
    begin = time.perf_counter()
    loaded = LoadedSession("bench", None, view)
    loaded.index()
    stage("paged index (surface timeline)", begin)
    print(json.dumps({"stages": stages}))


def _browser_child(kind: str, root: str) -> None:
    """The session page in chromium over a real server in this fresh process (the browser's launch not
    counted): seconds from navigation until the page shows its first paint (the heading, with its status) and
    until it shows the last seq in all three panes (``body[data-at]``), and this process's peak RSS."""
    from agentlog.inspector.app import create_app
    from agentlog.inspector.server import start_server
    from agentlog.inspector.views import Inspector

    chromium = os.environ.get("AGENTLOG_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print(json.dumps({"browser_first_paint_seconds": None, "browser_validated_seconds": None}))
        return
    inspector = Inspector(_read_only(kind, root), search=False)
    running = start_server(create_app(inspector))
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1500, "height": 900})
                begin = time.perf_counter()
                page.goto(running.url + "/s/bench", timeout=120_000)
                page.locator("#summary > span").first.wait_for(state="attached", timeout=120_000)  # the heading
                painted = time.perf_counter() - begin
                status = page.locator("#summary [class^='status-']").inner_text()
                page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached", timeout=120_000)
                shown = time.perf_counter() - begin
            finally:
                browser.close()
    finally:
        running.stop()
        inspector.close()
    figures = {
        "browser_first_paint_seconds": painted,
        "browser_first_status": status,
        "browser_validated_seconds": shown,
        "browser_server_peak_rss_mb": own_peak_rss_mb(),
    }
    print(json.dumps(figures))


def _count(inspector: Any) -> int:
    """The bench session's stored event count, from the projection cache when it has it (else 0)."""
    from agentlog.kernel.jsonvalue import MAX_SAFE_INTEGER

    cache = inspector._cache()
    try:
        head = inspector.reader.read_from("bench", MAX_SAFE_INTEGER).meta
        snapshot = cache.cached_snapshot(head)
    finally:
        cache.close()
    return 0 if snapshot is None else int(snapshot["asOfSeq"]) + 1


def own_rss_mb() -> float | None:
    """This process's resident set now (``VmRSS``), ``None`` without ``/proc``."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _listing_child(kind: str, root: str) -> None:
    from agentlog.inspector.app import create_app
    from agentlog.inspector.server import start_server
    from agentlog.inspector.views import Inspector

    inspector = Inspector(_read_only(kind, root), search=False)
    running = start_server(create_app(inspector))
    try:
        times = []
        rows = 0
        for _ in range(21):
            begin = time.perf_counter()
            with urllib.request.urlopen(running.url + "/api/sessions?limit=50", timeout=600) as response:
                rows = json.loads(response.read())["total"]
            times.append(time.perf_counter() - begin)
    finally:
        running.stop()
        inspector.close()
    print(json.dumps({"sessions": rows, "M20_first_seconds": times[0], "M20_seconds": statistics.median(times[1:])}))


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("agentlog")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentlog.cli"]


def _export_figures(kind: str, root: str) -> dict[str, Any]:
    """``export --html`` of the stored ``bench`` session as a fresh command, then the file opened in chromium."""
    out = os.path.join(root, "bench.html")
    store = ["--store", root, *(["--backend", "sqlite"] if kind == "sqlite" else [])]
    begin = time.perf_counter()
    done = subprocess.run(
        [*_cli(), "export", "bench", "--html", "-o", out, "--json", *store], check=True, capture_output=True, text=True
    )
    export_seconds = time.perf_counter() - begin
    events = json.loads(done.stdout)["events"]
    return {
        "export_events": events,
        "export_seconds": export_seconds,
        "export_bytes": os.path.getsize(out),
        "export_open_seconds": _open_seconds(out),
    }


def _open_seconds(path: str) -> float | None:
    """Seconds from navigating to the exported file until it shows its last seq (``None`` without a browser)."""
    chromium = os.environ.get("AGENTLOG_CHROMIUM", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not os.path.isfile(chromium):
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            begin = time.perf_counter()
            page.goto(Path(path).as_uri(), timeout=120_000)
            page.locator("body[data-at]:not([data-at=''])").wait_for(state="attached", timeout=120_000)
            return time.perf_counter() - begin
        finally:
            browser.close()


def write_bench_session(kind: str, root: str, turns: int) -> None:
    """W(``turns``) written as ``bench`` (appended in bulk), then resumed and released with the CLI's
    projections attached, as ``agentlog resume`` releases a session: its projection cache is current, as
    ``agentlog run`` leaves it. (Attached while appending, the projections fold each append: 40 minutes
    for W(20000) here, against a few for the bulk write and one fold.)"""
    import agentlog as al
    from agentlog.cli.projection_commands import attach_projections
    from agentlog.persistence.coordinator import PersistenceCoordinator

    try:
        from persist import make_backend
    except ImportError:
        from benchmarks.persist import make_backend
    write_session(kind, root, build_workload(turns), "bulk")
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    projections = attach_projections(coordinator)
    session = coordinator.resume("bench")
    projections.checkpoint(session)
    store.dispose(session)
    projections.close()
    coordinator.close()


def _session_store(args: argparse.Namespace, scratch: str) -> str:
    """Where the W(T) session is: ``--session-store`` (written there once, then reused) or ``scratch``."""
    if args.backend == "postgres":  # a schema: reused when it holds the session
        schema = args.session_store or f"inspector_bench_{os.getpid()}"
        reader = _read_only("postgres", schema)
        try:
            found = any(item.id == "bench" for item in reader.list_sessions())
        except Exception:  # (no schema yet)
            found = False
        finally:
            reader.close()
        if not found:
            write_bench_session("postgres", schema, args.turns)
        return schema
    root = args.session_store or scratch
    marker = os.path.join(root, f".bench-{args.backend}-W{args.turns}")
    if not os.path.exists(marker):
        os.makedirs(root, exist_ok=True)
        write_bench_session(args.backend, root, args.turns)
        Path(marker).touch()
    return root


def _child(mode: str, kind: str, root: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, mode, kind, root], check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _print_session(args: argparse.Namespace, page: dict[str, Any]) -> None:
    print(f"inspector over {args.backend}: W({args.turns}) = {page['events']:,} events")
    print(f"  M18 first paint (heading, last log page)         {page['M18_seconds']:8.3f} s    (target 1 s)")
    print(f"  validated: summary, log page, last state         {page['validated_seconds']:8.3f} s")
    if page.get("browser_first_paint_seconds") is not None:
        print(f"  in chromium: first paint (heading, last events)  {page['browser_first_paint_seconds']:8.3f} s")
        print(f"  in chromium: the last seq in all three panes     {page['browser_validated_seconds']:8.3f} s")
        print(f"  in chromium: the server process's peak RSS       {page['browser_server_peak_rss_mb']:8.0f} MB")
    print(f"  M19 slider move p50                              {page['M19_p50_seconds']:8.3f} s")
    print(f"  M19 slider move p95                              {page['M19_p95_seconds']:8.3f} s    (target 0.15 s)")
    print(f"  peak RSS of the serving process                  {page['peak_rss_mb']:8.0f} MB   (target 300 MB)")
    print(f"  paged out: RSS held after (pages {page['paged_bytes'] / 1e6:.1f} MB)     {page['paged_rss_mb']:8.0f} MB")
    p50, p95 = page["paged_M19_p50_seconds"], page["paged_M19_p95_seconds"]
    print(f"  paged out: slider move p50 / p95            {p50:6.3f} / {p95:.3f} s")
    print(f"  paged out: a log page at a random seq            {page['paged_log_page_seconds']:8.3f} s")
    print(f"  page-out (serialize and compress the log)        {page['page_out_seconds']:8.3f} s")


def cmd_inspector(args: argparse.Namespace) -> dict[str, Any]:
    if args.backend == "postgres" and not args.session_only:
        raise SystemExit("--backend postgres: only the session figures (add --session-only)")
    with bench_database(args.backend):
        return _inspector_figures(args)


def _inspector_figures(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as listing_root:
        session_root = _session_store(args, scratch)
        page = _child("_session", args.backend, session_root)
        page.update(_child("_browser", args.backend, session_root))
        if args.stages:
            page.update(_child("_stages", args.backend, session_root))
            for row in page["stages"]:
                print(f"  stage {row['stage']:<52} {row['seconds']:7.3f} s  peak RSS {row['peak_rss_mb']:6.0f} MB")
        if args.session_only:
            _print_session(args, page)
            return {"backend": args.backend, "turns": args.turns, **page}
        build_store(args.backend, listing_root, args.sessions)
        listing = _child("_listing", args.backend, listing_root)
    with tempfile.TemporaryDirectory() as export_root:
        write_session(args.backend, export_root, build_workload(args.export_turns), "bulk")
        export = _export_figures(args.backend, export_root)
    figures = {"backend": args.backend, "turns": args.turns, "export_turns": args.export_turns, **page, **listing}
    figures.update(export)
    opened = export["export_open_seconds"]
    print(f"inspector over {args.backend}: {listing['sessions']:,} sessions listed")
    _print_session(args, page)
    print(f"  M20 sessions page, first request                 {listing['M20_first_seconds']:8.3f} s")
    print(f"  M20 sessions page, median of 20 more             {listing['M20_seconds']:8.3f} s    (target 0.2 s)")
    print(
        f"  export --html of W({args.export_turns}) ({export['export_events']:,} events, "
        f"{export['export_bytes'] / 1e6:.1f} MB)  {export['export_seconds']:8.3f} s    (target 3 s)"
    )
    print(
        "  the exported file opened in chromium             "
        + (f"{opened:8.3f} s" if opened is not None else "     n/a  (no playwright or chromium)")
        + "    (target 2 s)"
    )
    return figures


def add_inspector_parser(sub: Any) -> None:
    p = sub.add_parser("inspector", help="M18 first paint, M19 slider p50/p95, RSS, M20 sessions page, export --html")
    p.add_argument("--turns", type=int, default=20000, help="turns T of the W(T) session (default 20000)")
    p.add_argument("--sessions", type=int, default=1000, help="stored sessions for the sessions page (default 1000)")
    p.add_argument("--backend", choices=BACKENDS, default="jsonl-zstd", help="store backend (default jsonl-zstd)")
    p.add_argument("--export-turns", type=int, default=2000, help="turns of the exported W(T) session (default 2000)")
    p.add_argument("--stages", action="store_true", help="also time each part of a first load (and its peak RSS)")
    p.add_argument("--session-store", metavar="DIR", help="write the W(T) session here once and reuse it")
    p.add_argument("--session-only", action="store_true", help="only the session figures (no listing, no export)")
    p.set_defaults(func=cmd_inspector)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    children = {
        "_session": _session_child,
        "_listing": _listing_child,
        "_stages": _stages_child,
        "_browser": _browser_child,
    }
    if len(sys.argv) == 4 and sys.argv[1] in children:
        children[sys.argv[1]](sys.argv[2], sys.argv[3])
    else:
        parser = argparse.ArgumentParser(prog="benchmarks/inspector.py")
        add_inspector_parser(parser.add_subparsers(dest="command", required=True))
        arguments = parser.parse_args(["inspector", *sys.argv[1:]])
        print(json.dumps(arguments.func(arguments)))
