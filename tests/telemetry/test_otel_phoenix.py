"""End to end with the OTLP/HTTP receiver users run: Arize Phoenix (``phoenix serve`` on loopback with its
own SQLite). The live exporter and ``agentlog export --to otlp`` send a parent turn with a delegation;
Phoenix's REST API must then hold every span with its attributes and parent links.

Phoenix is large, so it lives in its own environment: the test runs the ``phoenix`` command named by
``AGENTLOG_PHOENIX_BIN`` or found on ``PATH``, and skips without one (``.ci/run`` installs it and sets
``AGENTLOG_REQUIRE_PHOENIX=1``, which turns the skip into a failure)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.telemetry.otel import attach_otel, export_otlp
from agentlog.telemetry.spans import span_id_of

from ._otel_scenarios import CANARIES, run_parent_with_child

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]

START_LIMIT_S = 240  # a bound on a hung start, never a measure


def _phoenix() -> str | None:
    return os.environ.get("AGENTLOG_PHOENIX_BIN") or shutil.which("phoenix")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    command = _phoenix()
    if command is None:
        if os.environ.get("AGENTLOG_REQUIRE_PHOENIX") == "1":
            pytest.fail("AGENTLOG_REQUIRE_PHOENIX=1 but no phoenix command (AGENTLOG_PHOENIX_BIN or PATH)")
        pytest.skip("Arize Phoenix is not installed (pip install arize-phoenix into its own environment)")
    work = tmp_path_factory.mktemp("phoenix")
    port = _free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(_free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (work / "phoenix.log").open("wb")
    child = subprocess.Popen([command, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_LIMIT_S
        while True:  # Phoenix's own readiness report: its health endpoint answers
            if child.poll() is not None:
                pytest.fail(f"phoenix serve exited ({child.returncode}):\n{(work / 'phoenix.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("phoenix serve did not become healthy")
                time.sleep(0.5)
        yield base
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        log.close()


def _spans(base: str, project: str, expected: int) -> list[dict[str, Any]]:
    """The project's spans once Phoenix has ingested ``expected`` of them (it writes asynchronously)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            spans = _get(f"{base}/v1/projects/{project}/spans?limit=1000")["data"]
        except OSError:
            spans = []
        if len(spans) >= expected or time.monotonic() > deadline:
            return list(spans)
        time.sleep(0.5)


def _check_family(spans: list[dict[str, Any]], parent: al.Session, child: al.Session) -> None:
    assert len(spans) == 8
    by_id = {s["context"]["span_id"]: s for s in spans}
    turn_id = f"{span_id_of(parent.id, 1):016x}"
    turn = by_id[turn_id]
    assert turn["name"] == "invoke_agent agentlog" and turn["parent_id"] is None
    assert {s["context"]["trace_id"] for s in spans} == {turn["context"]["trace_id"]}
    delegate = next(s for s in spans if s["name"] == "execute_tool delegate")
    child_turn = next(s for s in spans if s["name"] == "invoke_agent subagent")
    assert child_turn["parent_id"] == delegate["context"]["span_id"]
    assert child_turn["attributes"]["agentlog.session.parent_id"] == parent.id
    for span in spans:
        attributes = span["attributes"]
        owner = parent.id if span["attributes"]["agentlog.session.id"] == parent.id else child.id
        assert attributes["gen_ai.conversation.id"] == owner
        if span is not turn and owner == parent.id:
            assert span["parent_id"] == turn_id
    chat = next(s for s in spans if s["name"] == "chat deepseek-chat" and s["parent_id"] == turn_id)
    assert chat["attributes"]["gen_ai.usage.input_tokens"] == 100
    assert chat["attributes"]["gen_ai.input.messages.ref"].startswith(f"agentlog://{parent.id}/")
    text = json.dumps(spans)
    assert not [c for c in CANARIES if c in text]


def test_live_spans_arrive_in_phoenix_with_their_attributes_and_parent_links(phoenix: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
    store = al.SessionStore()
    exporter = attach_otel(store, provider)
    parent, child = run_parent_with_child(store, parent_id="live-parent")
    exporter.close()
    provider.shutdown()
    spans = [
        s for s in _spans(phoenix, "default", 8) if s["attributes"].get("agentlog.session.id") in (parent.id, child.id)
    ]
    _check_family(spans, parent, child)


def test_a_stored_session_exported_twice_arrives_once_per_span_id(phoenix: str, tmp_path: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path / "store")))
    parent, child = run_parent_with_child(store, parent_id="stored-parent")
    coordinator.close()
    for _ in range(2):
        summary = export_otlp(JsonlBackend(str(tmp_path / "store")), parent.id, endpoint=f"{phoenix}/v1/traces")
        assert summary.spans == 8
    mine = [
        s for s in _spans(phoenix, "default", 16) if s["attributes"].get("agentlog.session.id") in (parent.id, child.id)
    ]
    assert len({s["context"]["span_id"] for s in mine}) == 8  # the same ids both times
    latest = {s["context"]["span_id"]: s for s in mine}
    _check_family(list(latest.values()), parent, child)
