"""Telemetry benchmarks: what the OpenTelemetry span exporter adds to ``Session.append``.

* T1 — W(T) appended to a store session (in memory, or persisted with ``--backend``) with
  :func:`agentlog.telemetry.otel.attach_otel` following the store and no SDK tracer provider anywhere (the
  API's default): the time added per append against the same appends without it
  (``T1_added_us_per_append``; target <= 2 µs).
* T2 — the same with an SDK ``TracerProvider`` whose ``BatchSpanProcessor`` sends OTLP/HTTP to a receiver in
  another process (it decodes nothing, it answers 200): append throughput as a fraction of the appends
  without the exporter (``T2_batch_ratio``; target >= 0.95). The exporter's worker and the SDK's batch
  worker share the interpreter with the loop, so whatever they do while it appends is in the figure; the
  final flush after the loop is not (``T2_flush_seconds``: how long the spans of a whole W(T) run then
  take to be mapped and sent). ``T2_spans`` is what the receiver was sent per run (4 spans per W turn).

Runs are interleaved (baseline, T1, T2, baseline, ...); T1 and T2 are the medians of the per-run
differences and ratios against that run's baseline, so a machine that slows down between runs slows
both sides of each pair alike.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator

try:
    from persist import make_backend
    from workload import WorkloadEvent, build_workload
except ImportError:  # imported as ``benchmarks.telemetry``
    from benchmarks.persist import make_backend
    from benchmarks.workload import WorkloadEvent, build_workload

RECEIVER = """
from http.server import BaseHTTPRequestHandler, HTTPServer

class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _append(session: al.Session, workload: Sequence[WorkloadEvent]) -> float:
    append = session.append
    gc.collect()
    start = time.perf_counter()
    for type_, data, intent in workload:
        if intent is None:
            append(type_, data)
        else:
            append(type_, data, intent)
    return time.perf_counter() - start


def _run(
    workload: Sequence[WorkloadEvent],
    name: str,
    attach: Callable[[al.SessionStore], Any] | None,
    backend: str,
    flushes: list[float] | None = None,
) -> float:
    store = al.SessionStore()
    coordinator = None
    with tempfile.TemporaryDirectory(prefix="agentlog-bench-telemetry-") as root:
        if backend != "memory":
            coordinator = PersistenceCoordinator(store, make_backend(backend, root))
        exporter = attach(store) if attach is not None else None
        session = store.create(name)
        seconds = _append(session, workload)
        if exporter is not None:
            flush_start = time.perf_counter()
            exporter.close(timeout_millis=60_000)
            if flushes is not None:
                flushes.append(time.perf_counter() - flush_start)
        if coordinator is not None:
            coordinator.close()  # untimed: the write-behind's final flush, alike for every variant
    return seconds


def cmd_telemetry(args: argparse.Namespace) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

    from agentlog.telemetry.otel import attach_otel

    workload = build_workload(args.turns)
    receiver = subprocess.Popen([sys.executable, "-c", RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        endpoint = f"http://127.0.0.1:{int(receiver.stdout.readline())}/v1/traces"  # its own readiness report

        class Counting(OTLPSpanExporter):
            sent = 0

            def export(self, spans: Any) -> SpanExportResult:
                result = super().export(spans)
                if result is SpanExportResult.SUCCESS:
                    Counting.sent += len(spans)
                return result

        def no_provider(store: al.SessionStore) -> Any:
            return attach_otel(store)

        def batch(store: al.SessionStore) -> Any:
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(Counting(endpoint=endpoint)))
            return attach_otel(store, provider)

        base: list[float] = []
        t1: list[float] = []
        t2: list[float] = []
        spans: list[int] = []
        flushes: list[float] = []
        for run in range(args.repeat):
            base.append(_run(workload, f"base-{run}", None, args.backend))
            t1.append(_run(workload, f"t1-{run}", no_provider, args.backend))
            Counting.sent = 0
            t2.append(_run(workload, f"t2-{run}", batch, args.backend, flushes))
            spans.append(Counting.sent)
            print(
                f"run {run + 1}/{args.repeat}: base {len(workload) / base[-1]:,.0f} ev/s, no provider "
                f"{len(workload) / t1[-1]:,.0f} ev/s, batch {len(workload) / t2[-1]:,.0f} ev/s ({spans[-1]} spans)",
                file=sys.stderr,
            )
    finally:
        receiver.terminate()
        receiver.wait()
    events = len(workload)
    # Paired within each interleaved run, then the median: the machine's drift between runs (other work on
    # a shared two-core machine moves the baseline by 2x) cancels out of each pair.
    added_us = statistics.median((b1 - b0) / events * 1e6 for b0, b1 in zip(base, t1, strict=True))
    ratio = statistics.median(b0 / b2 for b0, b2 in zip(base, t2, strict=True))
    rows = [
        ["append, no listener", f"{events / statistics.median(base):,.0f}", "events/s", ""],
        ["T1 added per append, no tracer provider", f"{added_us:.2f}", "µs", "<= 2"],
        ["T2 throughput with the batch exporter", f"{ratio:.3f}", "x baseline", ">= 0.95"],
        ["   spans sent per run", f"{statistics.median(spans):,.0f}", "spans", ""],
        ["   then mapped and sent in", f"{statistics.median(flushes):.2f}", "s", ""],
    ]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    print(
        f"agentlog telemetry — W({args.turns}) = {events:,} events, store {args.backend}, "
        f"{args.repeat} interleaved run(s)"
    )
    for row in rows:
        print("  ".join(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(row)))
    return {
        "backend": args.backend,
        "append_events_per_s": round(events / statistics.median(base), 1),
        "T1_added_us_per_append": round(added_us, 3),
        "T2_batch_ratio": round(ratio, 4),
        "T2_spans": int(statistics.median(spans)),
        "T2_flush_seconds": round(statistics.median(flushes), 3),
    }


def add_telemetry_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("telemetry", help="span exporter: T1 cost without a provider, T2 batch-export throughput")
    p.add_argument("--turns", type=int, default=2000, help="turns T of W(T) (default 2000)")
    p.add_argument("--repeat", type=int, default=5, help="interleaved runs; medians reported (default 5)")
    p.add_argument(
        "--backend",
        choices=("memory", "jsonl-zstd", "jsonl-none", "sqlite"),
        default="memory",
        help="the store's persistence (default memory: the kernel's append alone, the strictest ratio)",
    )
    p.set_defaults(func=cmd_telemetry)
