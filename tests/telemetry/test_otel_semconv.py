"""Every attribute name the spans use is a current name of the installed semantic-conventions package: the
GenAI names and ``error.type`` are defined there and none is superseded (``Replaced by ...`` or
``Removed``). The package marks the whole GenAI namespace "moved to the GenAI semantic conventions
repository": that notice relocates the names' definitions and supersedes none of them, so it is accepted;
any other deprecation notice fails. ``agentlog.*`` is agentlog's own namespace; ``gen_ai.input.messages.ref``
is agentlog's one extension (the reference that stands for the content when capture is off)."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

pytest.importorskip("opentelemetry.semconv")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentlog as al
from agentlog.telemetry.otel import attach_otel

from ._otel_scenarios import run_parent_with_child

EXTENSIONS = {"gen_ai.input.messages.ref"}
RELOCATED = "Moved to the [OpenTelemetry GenAI semantic conventions repository]"


def _documented(module_name: str) -> dict[str, str]:
    """Attribute value -> its docstring, read from the module source (the constants are plain strings)."""
    tree = ast.parse(inspect.getsource(importlib.import_module(module_name)))
    names: dict[str, str] = {}
    body = tree.body
    for index, node in enumerate(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            doc = ""
            following = body[index + 1] if index + 1 < len(body) else None
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                doc = str(following.value.value)
            names[node.value.value] = doc
    return names


def _known() -> dict[str, str]:
    known = _documented("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
    known.update(_documented("opentelemetry.semconv.attributes.error_attributes"))
    return known


def _used_names(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    names: set[str] = set()
    for mode in ("", "span_and_event"):
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        store = al.SessionStore()
        exporter = attach_otel(store, provider)
        run_parent_with_child(store)
        exporter.close()
        for span in memory.get_finished_spans():
            names.update(span.attributes)
            for event in span.events:
                names.update(event.attributes)
    return names


def test_every_genai_and_error_attribute_is_a_current_semantic_convention_name(monkeypatch: pytest.MonkeyPatch) -> None:
    known = _known()
    used = _used_names(monkeypatch)
    standard = {n for n in used if not n.startswith("agentlog.")} - EXTENSIONS
    assert {"gen_ai.operation.name", "gen_ai.usage.input_tokens", "gen_ai.tool.call.id"} <= standard
    assert "gen_ai.input.messages" in standard  # capture was on in one of the runs
    unknown = sorted(n for n in standard if n not in known)
    assert not unknown, f"not in the semantic-conventions package: {unknown}"
    superseded = sorted(n for n in standard if "Deprecated:" in known[n] and RELOCATED not in known[n])
    assert not superseded, f"deprecated names: {[(n, known[n].strip()) for n in superseded]}"


def test_the_check_recognises_superseded_names() -> None:
    known = _known()
    for old in ("gen_ai.system", "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.prompt"):
        assert "Deprecated:" in known[old] and RELOCATED not in known[old], old
