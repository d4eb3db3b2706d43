"""Spans over real OTLP/HTTP: ``agentlog export ID --to otlp`` and the live batch exporter both reach a
receiver that decodes them with opentelemetry-proto; a receiver that is down costs the agent nothing
(the run completes, the exporter closes) and makes the offline export a typed error."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

import orjson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from typer.testing import CliRunner

import agentlog as al
from agentlog.cli.commands import app
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.telemetry.otel import attach_otel
from agentlog.telemetry.spans import span_id_of

from ._otel_scenarios import CANARIES, run_parent_with_child
from ._otlp_receiver import OtlpReceiver

runner = CliRunner()
SRC = Path(__file__).resolve().parents[2] / "src"


def _stored(tmp_path: Path, exporter_provider: TracerProvider | None = None) -> tuple[al.Session, al.Session]:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    exporter = attach_otel(store, exporter_provider) if exporter_provider is not None else None
    parent, child = run_parent_with_child(store)
    if exporter is not None:
        exporter.close(timeout_millis=2_000)
    coordinator.close()
    return parent, child


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once the socket is closed


def test_export_to_otlp_sends_the_family_over_http_and_twice_gives_the_same_ids(tmp_path: Path) -> None:
    parent, child = _stored(tmp_path)
    with OtlpReceiver() as receiver:
        args = [
            "export",
            parent.id,
            "--to",
            "otlp",
            "--endpoint",
            receiver.endpoint,
            "--store",
            str(tmp_path / "store"),
        ]
        first = runner.invoke(app, [*args, "--json"])
        assert first.exit_code == 0, first.output
        assert orjson.loads(first.stdout) == {
            "sessionId": parent.id,
            "endpoint": receiver.endpoint,
            "sessions": [parent.id, child.id],
            "spans": 8,
        }
        once = {(s.trace_id, s.span_id, s.parent_span_id) for s in receiver.spans()}
        second = runner.invoke(app, args)
        assert second.exit_code == 0 and "sent 8 spans of 2 session(s)" in second.stdout
        spans = receiver.spans()
    assert len(spans) == 16 and {(s.trace_id, s.span_id, s.parent_span_id) for s in spans} == once
    names = {s.name for s in spans}
    assert names == {
        "invoke_agent agentlog",
        "invoke_agent subagent",
        "chat deepseek-chat",
        "execute_tool lookup",
        "execute_tool delegate",
    }
    turn = next(s for s in spans if s.name == "invoke_agent agentlog")
    assert int.from_bytes(turn.span_id, "big") == span_id_of(parent.id, 1)
    wire = b"".join(receiver.raw)
    assert not [c for c in CANARIES if c.encode() in wire]


def test_export_to_otlp_redacts_with_the_same_option_as_the_html_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    parent, _child = _stored(tmp_path)
    with OtlpReceiver() as receiver:
        args = [
            "export",
            parent.id,
            "--to",
            "otlp",
            "--endpoint",
            receiver.endpoint,
            "--store",
            str(tmp_path / "store"),
        ]
        done = runner.invoke(app, [*args, "--redact", "CANARY-[A-Z]+-[0-9a-f]+"])
        assert done.exit_code == 0, done.output
    wire = b"".join(receiver.raw)
    assert b"[redacted]" in wire and b"gen_ai.input.messages" in wire
    assert not [c for c in CANARIES if c.encode() in wire]


def test_export_to_otlp_with_the_receiver_down_is_a_typed_error_that_names_the_endpoint(tmp_path: Path) -> None:
    parent, _child = _stored(tmp_path)
    endpoint = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    done = runner.invoke(
        app, ["export", parent.id, "--to", "otlp", "--endpoint", endpoint, "--store", str(tmp_path / "store"), "--json"]
    )
    assert done.exit_code != 0
    error = orjson.loads(done.stderr or done.stdout)["error"]
    assert error["code"] == "OTEL_EXPORT_FAILED" and endpoint in error["message"]


def test_live_batch_export_reaches_the_receiver() -> None:
    with OtlpReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint)))
        store = al.SessionStore()
        exporter = attach_otel(store, provider)
        run_parent_with_child(store)
        exporter.close()
        provider.shutdown()
        spans = receiver.spans()
    assert len(spans) == 8
    assert {s.name for s in spans if s.parent_span_id == b""} == {"invoke_agent agentlog"}


def test_a_receiver_that_is_down_does_not_affect_the_agent(tmp_path: Path) -> None:
    provider = TracerProvider()
    endpoint = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=1)))
    parent, _child = _stored(tmp_path, provider)  # the run asserts its turn completed
    provider.shutdown()
    reread = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path / "store")))
    try:
        assert [e["type"] for e in reread.view(parent.id).events] == [e["type"] for e in parent.events]
    finally:
        reread.close()


NO_OTEL = """
import sys
for name in ("opentelemetry", "opentelemetry.sdk", "opentelemetry.trace"):
    sys.modules[name] = None  # as if the otel extra were not installed
sys.argv = ["agentlog", "export", "any", "--to", "otlp", "--store", sys.argv[1], "--json"]
from agentlog.cli import main
main()
"""


@pytest.mark.subprocess
def test_export_to_otlp_without_the_otel_extra_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", NO_OTEL, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode != 0
    error = orjson.loads(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.stdout)["error"]
    assert error["code"] == "OTEL_NOT_INSTALLED" and "agentlog[otel]" in error["message"]
