"""PostgreSQL concurrent writers, and the ``eventsourcing`` recorder as the peer anchor.

``python benchmarks/run.py pg-writers --processes 1,4,8``:

* **Concurrent writers.** For each N, N processes (forked, each with its own store, coordinator,
  backend pool and session) write one W(200) session each through persist.py's write path, flushing
  per step; they start together at a barrier. Aggregate events/s = all events / (last flush - first
  start). Each repeat uses a fresh schema.
* **Peer anchor.** In the same run, one agentlog writer stores W(2000) flushing per step (persist.py's
  ``step`` style), and the ``eventsourcing`` library's ``PostgresApplicationRecorder`` (the recorder an
  eventsourcing application uses on PostgreSQL) stores the same W(2000) events: one aggregate per
  session, one stored event per agentlog event, one ``insert_events`` transaction per step. The
  recorder gets its best case: the stored events (JSON state bytes) are built before its timer starts,
  while agentlog's figure includes validation and encoding. ``eventsourcing`` is a benchmark-only
  dependency (``pip install 'eventsourcing[postgres]'``); without it the agentlog figures are printed
  alone.

The DSN is persist.py's (``$AGENTLOG_BENCH_DSN``, ``$AGENTLOG_DSN``, else a temporary database).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

try:
    from persist import bench_database, bench_dsn, bench_root, make_backend, write_session_span
    from workload import build_workload
except ImportError:  # run as ``python -m benchmarks.run``
    from benchmarks.persist import bench_database, bench_dsn, bench_root, make_backend, write_session_span
    from benchmarks.workload import build_workload

WRITER_TURNS = 200
ANCHOR_TURNS = 2000


def _writer(schema: str, session_id: str, workload: Sequence[Any], barrier: Any, results: Any) -> None:
    try:
        start, end = write_session_span("postgres", schema, workload, "step", session_id, ready=barrier.wait)
        results.put((session_id, start, end, None))
    except BaseException as err:  # reported by the parent; a broken barrier frees the others
        barrier.abort()
        results.put((session_id, 0.0, 0.0, f"{type(err).__name__}: {err}"))


def concurrent_once(processes: int, workload: Sequence[Any]) -> float:
    """Aggregate events/s of ``processes`` writers, one W(T) session each, in a fresh schema."""
    ctx = multiprocessing.get_context("fork")
    with bench_root("postgres", f"w{processes}") as schema:
        backend = make_backend("postgres", schema)
        backend.list_sessions()  # create the schema now, not inside the timed window
        backend.close()
        barrier = ctx.Barrier(processes)
        results = ctx.Queue()
        workers = [
            ctx.Process(target=_writer, args=(schema, f"w{index:03d}", workload, barrier, results))
            for index in range(processes)
        ]
        for worker in workers:
            worker.start()
        spans = [results.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        failed = [f"{sid}: {error}" for sid, _s, _e, error in spans if error is not None]
        if failed:
            raise SystemExit("pg-writers: " + "; ".join(failed))
        check = make_backend("postgres", schema)
        stored = sorted(listing.id for listing in check.list_sessions() if listing.ok)
        check.close()
        if stored != sorted(sid for sid, _s, _e, _err in spans):
            raise SystemExit(f"pg-writers: sessions stored {stored}, expected {processes}")
    first = min(start for _sid, start, _e, _err in spans)
    last = max(end for _sid, _s, end, _err in spans)
    return processes * len(workload) / (last - first)


def agentlog_step_once(workload: Sequence[Any]) -> float:
    """One agentlog writer, W(ANCHOR_TURNS), flush per step: events/s (persist.py's M3 step)."""
    with bench_root("postgres", "anchor") as schema:
        start, end = write_session_span("postgres", schema, workload, "step", "anchor")
    return len(workload) / (end - start)


def _step_batches(workload: Sequence[Any]) -> list[list[tuple[str, bytes]]]:
    """The workload cut where agentlog's step style flushes: after every step/end, and the tail."""
    batches: list[list[tuple[str, bytes]]] = [[]]
    for type_, data, intent in workload:
        state = json.dumps({"type": type_, "data": data, "intent": intent}, separators=(",", ":")).encode()
        batches[-1].append((f"agentlog:{type_}", state))
        if type_ == "step/end":
            batches.append([])
    return [batch for batch in batches if batch]


def eventsourcing_once(workload: Sequence[Any], recorder_class: str = "PostgresApplicationRecorder") -> float | str:
    """An eventsourcing PostgreSQL recorder storing ``workload``, one transaction per step.

    ``PostgresApplicationRecorder`` (the anchor) is what an eventsourcing application uses;
    ``PostgresAggregateRecorder`` (no notification log, no table lock) is reported beside it.
    Returns events/s, or why it could not run.
    """
    try:
        from eventsourcing import postgres
        from eventsourcing.persistence import StoredEvent
        from eventsourcing.postgres import PostgresDatastore
        from psycopg import conninfo
    except ImportError as err:
        return f"eventsourcing is not installed ({err}); pip install 'eventsourcing[postgres]'"
    params = conninfo.conninfo_to_dict(bench_dsn())
    batches = _step_batches(workload)
    with bench_root("postgres", "es") as schema:
        import psycopg
        from psycopg import sql

        with psycopg.connect(bench_dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        datastore = PostgresDatastore(
            dbname=str(params.get("dbname", "postgres")),
            host=str(params.get("host", "127.0.0.1")),
            port=str(params.get("port", "5432")),
            user=str(params.get("user", "postgres")),
            password=str(params.get("password", "")),
            schema=schema,
            originator_id_type="text",
        )
        try:
            recorder = getattr(postgres, recorder_class)(datastore)
            recorder.create_table()
            originator = "anchor"
            stored: list[list[Any]] = []
            version = 0
            for batch in batches:
                events = []
                for topic, state in batch:
                    version += 1
                    events.append(StoredEvent(originator, version, topic, state))
                stored.append(events)
            insert = recorder.insert_events
            start = time.perf_counter()
            for events in stored:
                insert(events)
            elapsed = time.perf_counter() - start
            count = len(recorder.select_events(originator))
        finally:
            datastore.close()
    if count != len(workload):
        return f"eventsourcing stored {count} events, expected {len(workload)}"
    return len(workload) / elapsed


def cmd_pg_writers(args: argparse.Namespace) -> dict[str, Any]:
    with bench_database("postgres"):
        return _pg_writers(args)


def _pg_writers(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()
    counts = sorted(set(args.processes))
    writer_workload = build_workload(args.turns)
    aggregate: dict[int, float] = {}
    for n in counts:
        runs = []
        for run in range(args.repeat):
            runs.append(concurrent_once(n, writer_workload))
            print(f"N={n} run {run + 1}/{args.repeat}: {runs[-1]:,.0f} events/s aggregate", file=sys.stderr)
        aggregate[n] = statistics.median(runs)

    anchor_workload = build_workload(args.anchor_turns)
    ours: list[float] = []
    theirs: list[float] = []
    plain: list[float] = []
    es_problem: str | None = None
    for run in range(args.repeat):
        ours.append(agentlog_step_once(anchor_workload))
        result = eventsourcing_once(anchor_workload) if es_problem is None else es_problem
        if isinstance(result, str):
            es_problem = result
        else:
            theirs.append(result)
            other = eventsourcing_once(anchor_workload, "PostgresAggregateRecorder")
            if isinstance(other, str):
                es_problem = other
            else:
                plain.append(other)
        peer = f"eventsourcing {theirs[-1]:,.0f} events/s" if es_problem is None else es_problem
        print(f"anchor run {run + 1}/{args.repeat}: agentlog {ours[-1]:,.0f} events/s, {peer}", file=sys.stderr)
    agentlog_step = statistics.median(ours)

    print(
        f"agentlog pg-writers — W({args.turns}) = {len(writer_workload):,} events per writer, flush per step, "
        f"{args.repeat} run(s), {os.cpu_count()} CPU(s)"
    )
    load_at_end = os.getloadavg()
    print(
        "load average (1/5/15 min): at start "
        + "/".join(f"{value:.2f}" for value in load_at_start)
        + ", at end "
        + "/".join(f"{value:.2f}" for value in load_at_end)
    )
    for n in counts:
        print(f"{n:>3} writer process(es)  {aggregate[n]:>12,.0f}  events/s aggregate")
    figures: dict[str, Any] = {
        "turns": args.turns,
        "aggregate_events_per_s": {str(n): round(aggregate[n], 1) for n in counts},
        "load_average_start": [round(value, 2) for value in load_at_start],
        "load_average_end": [round(value, 2) for value in load_at_end],
    }
    if 1 in aggregate and 8 in aggregate:
        figures["ratio_8_vs_1"] = round(aggregate[8] / aggregate[1], 3)
        print(f"8 writers vs 1           {figures['ratio_8_vs_1']:>12.2f}  x")
    elif len(counts) > 1:
        figures[f"ratio_{counts[-1]}_vs_{counts[0]}"] = round(aggregate[counts[-1]] / aggregate[counts[0]], 3)
    print(f"peer anchor — W({args.anchor_turns}) = {len(anchor_workload):,} events, one transaction per step")
    print(f"agentlog (persist step style)          {agentlog_step:>12,.0f}  events/s")
    figures["anchor_turns"] = args.anchor_turns
    figures["agentlog_step_events_per_s"] = round(agentlog_step, 1)
    if es_problem is None and theirs:
        es = statistics.median(theirs)
        print(f"eventsourcing PostgresApplicationRecorder  {es:>9,.0f}  events/s")
        print(f"agentlog / eventsourcing               {agentlog_step / es:>12.2f}  x")
        figures["eventsourcing_step_events_per_s"] = round(es, 1)
        figures["agentlog_vs_eventsourcing"] = round(agentlog_step / es, 3)
        if plain:
            bare = statistics.median(plain)
            print(f"eventsourcing PostgresAggregateRecorder    {bare:>9,.0f}  events/s  (no notification log)")
            print(f"agentlog / that                        {agentlog_step / bare:>12.2f}  x")
            figures["eventsourcing_aggregate_recorder_step_events_per_s"] = round(bare, 1)
            figures["agentlog_vs_eventsourcing_aggregate_recorder"] = round(agentlog_step / bare, 3)
    else:
        print(f"eventsourcing: not measured ({es_problem})")
        figures["eventsourcing_step_events_per_s"] = None
        figures["eventsourcing_error"] = es_problem
    return figures


def process_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return counts


def add_pg_writers_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pg-writers",
        help="PostgreSQL: aggregate events/s of N concurrent writer processes; eventsourcing recorder as the anchor",
    )
    p.add_argument("--processes", type=process_counts, default=[1, 4, 8], help="writer counts (default 1,4,8)")
    p.add_argument("--turns", type=int, default=WRITER_TURNS, help=f"W(T) per writer (default {WRITER_TURNS})")
    p.add_argument(
        "--anchor-turns", type=int, default=ANCHOR_TURNS, help=f"W(T) of the peer anchor (default {ANCHOR_TURNS})"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs; medians reported (default 3)")
    p.set_defaults(func=cmd_pg_writers)
