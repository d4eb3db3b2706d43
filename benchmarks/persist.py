"""Persistence benchmarks: M3 durable write, M4 cold restore, M5 list (shared/bench/WORKLOAD.md).

M4 and M5 run in a fresh interpreter (``python benchmarks/persist.py _restore|_list ...``) so nothing
the writer cached can help the reader; the timer starts after imports.

``--backend postgres`` writes to ``$AGENTLOG_BENCH_DSN`` (else ``$AGENTLOG_DSN``); with neither set it
creates a temporary database ``agentlog_bench_<pid>`` through
postgresql://postgres@127.0.0.1:5432/postgres and drops it at the end. Every run gets a fresh schema
(dropped afterwards); for this backend the ``root`` handed around below is that schema's name, and the
fresh reader processes inherit the DSN through the environment.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

BACKENDS = ("jsonl-zstd", "jsonl-none", "sqlite", "postgres")

DSN_ENV = "AGENTLOG_BENCH_DSN"
SERVER_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def bench_dsn() -> str:
    dsn = os.environ.get(DSN_ENV) or os.environ.get("AGENTLOG_DSN")
    if not dsn:
        raise SystemExit(f"--backend postgres: set {DSN_ENV} or AGENTLOG_DSN (or run inside bench_database())")
    return dsn


@contextmanager
def bench_database(kind: str) -> Iterator[None]:
    """For ``postgres`` without a configured DSN: a temporary database for this run, dropped at the end."""
    if kind != "postgres" or os.environ.get(DSN_ENV) or os.environ.get("AGENTLOG_DSN"):
        yield
        return
    import psycopg
    from psycopg import conninfo, sql

    name = f"agentlog_bench_{os.getpid()}"
    try:
        with psycopg.connect(SERVER_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    except psycopg.Error as err:
        raise SystemExit(f"--backend postgres: cannot create {name} via {SERVER_DSN} ({err}); set {DSN_ENV}") from None
    os.environ[DSN_ENV] = conninfo.make_conninfo(SERVER_DSN, dbname=name)
    try:
        yield
    finally:
        del os.environ[DSN_ENV]
        with psycopg.connect(SERVER_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def bench_root(kind: str, tag: str) -> Iterator[str]:
    """A fresh, empty store location: a temporary directory, or for ``postgres`` a fresh schema name."""
    if kind != "postgres":
        root = tempfile.mkdtemp(prefix=f"agentlog-bench-{tag}-")
        try:
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    import psycopg
    from psycopg import sql

    schema = f"bench_{tag}_{os.getpid()}_{time.monotonic_ns() % 10**9}".replace("-", "_")
    try:
        yield schema
    finally:
        with psycopg.connect(bench_dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def make_backend(kind: str, root: str) -> Any:
    if kind == "postgres":
        from agentlog.persistence.postgres import PostgresBackend

        return PostgresBackend(bench_dsn(), schema=root)
    if kind == "sqlite":
        from agentlog.persistence.sqlite.backend import SqliteBackend

        return SqliteBackend(os.path.join(root, "sessions.sqlite3"))
    from agentlog.persistence.jsonl.backend import JsonlBackend

    return JsonlBackend(root, compression="zstd" if kind == "jsonl-zstd" else "none")


def stored_bytes(kind: str, root: str) -> int:
    if kind == "postgres":  # tables, indexes and TOAST of the run's schema
        import psycopg

        with psycopg.connect(bench_dsn()) as conn:
            row = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
                (root,),
            ).fetchone()
        return int(row[0]) if row else 0
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".lock"):
                continue
            total += os.path.getsize(os.path.join(dirpath, name))
    return total


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def own_peak_rss_mb() -> float:
    """This process image's own peak RSS (``VmHWM``).

    ``ru_maxrss`` survives ``exec`` on Linux, so a reader started from the benchmark process would report
    the writer's peak (its parent's RSS at fork) whenever that is higher; ``VmHWM`` belongs to the address
    space the reader itself built. Falls back to ``ru_maxrss`` where ``/proc`` is unavailable.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mb()


def write_session(kind: str, root: str, workload: Sequence[Any], style: str, session_id: str = "bench") -> float:
    """Append the workload through a live session; return seconds including the final flush."""
    start, end = write_session_span(kind, root, workload, style, session_id)
    return end - start


def write_session_span(
    kind: str,
    root: str,
    workload: Sequence[Any],
    style: str,
    session_id: str = "bench",
    ready: Callable[[], object] | None = None,
) -> tuple[float, float]:
    """:func:`write_session`'s write path; returns the ``perf_counter`` at start and after the final flush.

    ``ready`` (e.g. a barrier's ``wait``) is called once the session is open, just before the timer starts.
    """
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    session = store.create(session_id, meta={"cwd": "/bench"})
    append = session.append
    flush = store.flush
    gc.collect()
    if ready is not None:
        ready()
    start = time.perf_counter()
    if style == "bulk":
        for type_, data, intent in workload:
            append(type_, data, intent)
        flush(session)
    else:
        for type_, data, intent in workload:
            append(type_, data, intent)
            if type_ == "step/end":
                flush(session)
        flush(session)
    end = time.perf_counter()
    coordinator.close()
    return start, end


def restore_in_fresh_process(kind: str, root: str, session_id: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "_restore", kind, root, session_id],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _restore_main(kind: str, root: str, session_id: str) -> None:
    _import_backend_modules()
    gc.collect()
    start = time.perf_counter()
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, make_backend(kind, root))
    session = coordinator.prepare(session_id).session
    messages = session.derive_messages()
    elapsed = time.perf_counter() - start
    # The reader's own peak (this fresh process: interpreter, imports, the load), never the writer's.
    print(
        json.dumps(
            {
                "M4_seconds": elapsed,
                "events": session.seq,
                "messages": len(messages),
                "M4_reader_rss_mb": own_peak_rss_mb(),
            }
        )
    )


def cmd_persist(args: argparse.Namespace) -> dict[str, Any]:
    with bench_database(args.backend):
        return _persist(args)


def _persist(args: argparse.Namespace) -> dict[str, Any]:
    from workload import build_workload

    workload = build_workload(args.turns)
    runs: list[dict[str, float]] = []
    for run in range(args.repeat):
        with bench_root(args.backend, "persist") as root:
            seconds = write_session(args.backend, root, workload, args.style)
            size = stored_bytes(args.backend, root)
            restored = restore_in_fresh_process(args.backend, root, "bench")
            if restored["events"] != len(workload) + 1:  # + the end-seed marker of the restored session
                raise SystemExit(f"M4: restored {restored['events']} events, expected {len(workload) + 1}")
            runs.append(
                {
                    "M3_events_per_s": len(workload) / seconds,
                    "M4_seconds": restored["M4_seconds"],
                    "bytes_per_event": size / len(workload),
                    "M4_reader_rss_mb": restored["M4_reader_rss_mb"],
                }
            )
            print(
                f"run {run + 1}/{args.repeat}: M3 {runs[-1]['M3_events_per_s']:,.0f} events/s  "
                f"M4 {restored['M4_seconds']:.4f} s  reader peak {restored['M4_reader_rss_mb']:.1f} MB  "
                f"{size / len(workload):.1f} B/event",
                file=sys.stderr,
            )

    def med(key: str) -> float:
        return statistics.median(r[key] for r in runs)

    writer_rss = peak_rss_mb()  # this process: the workload, the writing session and its store
    reader_rss = max(r["M4_reader_rss_mb"] for r in runs)
    rss = max(writer_rss, reader_rss)
    rows = [
        [f"M3 durable write ({args.style})", f"{med('M3_events_per_s'):,.0f}", "events/s"],
        ["M4 cold restore + derive (fresh process)", f"{med('M4_seconds'):.4f}", "s"],
        ["M4 reader peak RSS (fresh process, max of runs)", f"{reader_rss:.1f}", "MB"],
        ["bytes on disk per event", f"{med('bytes_per_event'):.1f}", "B"],
        ["writer peak RSS (benchmark process)", f"{writer_rss:.1f}", "MB"],
        ["peak RSS (writer or reader process)", f"{rss:.1f}", "MB"],
    ]
    print(
        f"agentlog persist — backend {args.backend}, W({args.turns}) = {len(workload):,} events, {args.repeat} run(s)"
    )
    width = max(len(r[0]) for r in rows)
    for label, value, unit in rows:
        print(f"{label.ljust(width)}  {value:>12}  {unit}")
    return {
        "M3_events_per_s": round(med("M3_events_per_s"), 1),
        "M4_seconds": round(med("M4_seconds"), 6),
        "bytes_per_event": round(med("bytes_per_event"), 2),
        "M4_reader_rss_mb": round(reader_rss, 1),
        "writer_rss_mb": round(writer_rss, 1),
        "peak_rss_mb": round(rss, 1),
    }


def _import_backend_modules() -> None:
    """Import the backends before a timer starts: interpreter start-up is not what M4/M5 measure."""
    import agentlog.persistence.jsonl.backend
    import agentlog.persistence.sqlite.backend

    if os.environ.get(DSN_ENV) or os.environ.get("AGENTLOG_DSN"):
        import agentlog.persistence.postgres  # noqa: F401


def _list_main(kind: str, root: str) -> None:
    _import_backend_modules()
    gc.collect()
    start = time.perf_counter()
    backend = make_backend(kind, root)
    listings = backend.list_sessions()
    elapsed = time.perf_counter() - start
    # The search index's per-search reconciliation runs on an open backend: warm figures (medians of a
    # few calls) of list_revisions, a stat per session, beside the listing it replaces there.
    warm_list = _median_seconds(backend.list_sessions)
    revisions = PersistenceCoordinator(al.SessionStore(), backend).list_revisions
    if len(revisions()) != len(listings):
        raise SystemExit(f"list_revisions: {len(revisions())} sessions, listing {len(listings)}")
    warm_revisions = _median_seconds(revisions)
    print(
        json.dumps(
            {
                "M5_seconds": elapsed,
                "sessions": len(listings),
                "list_warm_seconds": warm_list,
                "list_revisions_seconds": warm_revisions,
            }
        )
    )


def _median_seconds(call: Any, runs: int = 9) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cmd_list(args: argparse.Namespace) -> dict[str, Any]:
    with bench_database(args.backend):
        return _list(args)


def _list(args: argparse.Namespace) -> dict[str, Any]:
    from workload import build_workload

    workload = build_workload(5)
    with bench_root(args.backend, "list") as root:
        store = al.SessionStore()
        coordinator = PersistenceCoordinator(store, make_backend(args.backend, root))
        for index in range(args.sessions):
            session = store.create(f"s{index:05d}", meta={"cwd": f"/bench/p{index % 10}"})
            for type_, data, intent in workload:
                session.append(type_, data, intent)
            store.flush(session)
            store.dispose(session)
        coordinator.close()
        results: list[float] = []
        warm_lists: list[float] = []
        revision_lists: list[float] = []
        for _ in range(args.repeat):
            out = subprocess.run(
                [sys.executable, __file__, "_list", args.backend, root], check=True, capture_output=True, text=True
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result["sessions"] != args.sessions:
                raise SystemExit(f"M5: listed {result['sessions']} sessions, expected {args.sessions}")
            results.append(result["M5_seconds"])
            warm_lists.append(result["list_warm_seconds"])
            revision_lists.append(result["list_revisions_seconds"])
    m5 = statistics.median(results)
    warm = statistics.median(warm_lists)
    revised = statistics.median(revision_lists)
    print(f"agentlog list — backend {args.backend}, {args.sessions} stored W(5) sessions, {args.repeat} run(s)")
    print(f"M5 list (fresh process, headers only)  {m5:.4f}  s  (min {min(results):.4f}, max {max(results):.4f})")
    print(f"list, open backend (warm)              {warm:.4f}  s")
    print(f"list_revisions, open backend (warm)    {revised:.4f}  s  (the search index's per-search reconciliation)")
    return {
        "M5_seconds": round(m5, 6),
        "list_warm_seconds": round(warm, 6),
        "list_revisions_seconds": round(revised, 6),
    }


def add_persist_parser(sub: Any) -> None:
    p = sub.add_parser("persist", help="M3 durable write, M4 cold restore, bytes/event, peak RSS")
    p.add_argument("--backend", choices=BACKENDS, default="jsonl-zstd")
    p.add_argument("--style", choices=("bulk", "step"), default="bulk")
    p.add_argument("--turns", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.set_defaults(func=cmd_persist)


def add_list_parser(sub: Any) -> None:
    p = sub.add_parser("list", help="M5: list stored W(5) sessions in a fresh process")
    p.add_argument("--backend", choices=BACKENDS, default="jsonl-zstd")
    p.add_argument("--sessions", type=int, default=1000)
    p.add_argument("--repeat", type=int, default=5)
    p.set_defaults(func=cmd_list)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if sys.argv[1] == "_restore":
        _restore_main(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "_list":
        _list_main(sys.argv[2], sys.argv[3])
