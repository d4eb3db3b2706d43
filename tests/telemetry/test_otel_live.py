"""The live exporter's own behaviour: spans end without a flush once the store is quiet, a fork's inherited
seed is never a span of the fork (live or offline), and an SDK provider set globally after the exporter
was attached is followed from then on."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.telemetry.otel import attach_otel, export_otlp

from ._otel_scenarios import run_parent_with_child

SRC = Path(__file__).resolve().parents[2] / "src"


class RootEnded(SpanProcessor):
    """Reports the end of the top-level turn span: the exporter's own progress, not a timer."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        if span.name == "invoke_agent agentlog":
            self.ended.set()


def test_spans_end_without_a_flush_once_the_store_is_quiet() -> None:
    memory = InMemorySpanExporter()
    root = RootEnded()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(root)
    store = al.SessionStore()
    exporter = attach_otel(store, provider)
    try:
        run_parent_with_child(store)
        assert root.ended.wait(timeout=120), "the worker never ended the turn's span"
        assert len(memory.get_finished_spans()) == 8  # the child's turn was released with it
    finally:
        exporter.close()


def test_a_fork_exports_only_its_own_turns_live_and_offline(tmp_path: Path) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    exporter = attach_otel(store, provider)
    parent, _child = run_parent_with_child(store)
    fork = store.fork(parent, child_id="fork")
    start = fork.append("turn/start", {"turn": 2})
    fork.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    exporter.close()
    coordinator.close()
    live = [s for s in memory.get_finished_spans() if s.attributes["agentlog.session.id"] == "fork"]
    assert [(s.name, s.attributes["agentlog.seq.start"]) for s in live] == [("invoke_agent agentlog", start.seq)]
    offline = InMemorySpanExporter()
    summary = export_otlp(JsonlBackend(str(tmp_path / "store")), "fork", span_exporter=offline)
    assert summary.sessions == ["fork"] and summary.spans == 1
    (span,) = offline.get_finished_spans()
    assert (span.context.trace_id, span.context.span_id) == (live[0].context.trace_id, live[0].context.span_id)


FOLLOW_GLOBAL = """
import sys
sys.path.insert(0, sys.argv[1])
import agentlog as al
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agentlog.telemetry.otel import attach_otel
from _otel_scenarios import run_parent_with_child

store = al.SessionStore()
exporter = attach_otel(store)  # nothing configured yet
early = store.create("early")
early.append("turn/start", {"turn": 1})
early.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
exporter.flush()  # what the worker does on each tick: still no SDK provider, so these are passed over
assert not exporter.enabled
memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(provider)
run_parent_with_child(store)
exporter.close()
print(sorted({s.attributes["agentlog.session.id"] for s in memory.get_finished_spans()}))
print(len(memory.get_finished_spans()))
"""


@pytest.mark.subprocess
def test_an_sdk_provider_set_globally_after_attaching_is_followed_from_then_on() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", FOLLOW_GLOBAL, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sessions, count = done.stdout.splitlines()[-2:]
    assert "'early'" not in sessions and "'parent'" in sessions  # the turn before the provider: no span
    assert int(count) == 8


def test_a_child_disposed_before_its_parent_names_it_still_lands_under_the_delegate_span() -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    store = al.SessionStore()
    exporter = attach_otel(store, provider)
    _parent, child = run_parent_with_child(store, release_child=True)
    assert store.get(child.id) is None  # gone from the store before the parent's result was written
    exporter.close()
    spans = memory.get_finished_spans()
    (delegate,) = [s for s in spans if s.name == "execute_tool delegate"]
    (child_turn,) = [s for s in spans if s.name == "invoke_agent subagent"]
    assert child_turn.parent is not None and child_turn.parent.span_id == delegate.context.span_id
    assert child_turn.context.trace_id == delegate.context.trace_id
    assert not exporter.mapper.has_session(child.id)  # released, then forgotten: nothing kept per child
