"""Issue 7, defect 2 (property): whatever append accepts, a fresh reader loads back unchanged.

Random sequences of append attempts (well-formed, near-miss and foreign shapes, unknown types,
surface replacements) are applied to a live, persisted session; refused ones are skipped. The
accepted log is closed as an agent would close it, flushed, and read back by a fresh coordinator
and store over the same storage — on every backend — and once by a real child process. Events,
derived messages and the request header must be the same.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog import AgentlogError
from agentlog.kernel.events import event_types
from agentlog.kernel.jsoncodec import dumps
from agentlog.kernel.repair import interrupted_turn_closers
from agentlog.persistence.coordinator import PersistenceCoordinator
from persistence.conftest import BACKEND_KINDS, BackendFactory

pytestmark = pytest.mark.accel

PLUGIN = "issue7-roundtrip/state"  # a plugin type a reader registers too
SKIPPABLE = "issue7-roundtrip/trace"  # a plugin type readers may skip
event_types.register(PLUGIN)
event_types.register(SKIPPABLE, ignorable=True)

small_ints = st.sampled_from([0, 1, 2, 3])
turns = st.one_of(small_ints, st.sampled_from(["1", 1.0, 1.5, None, True]))
texts = st.text(alphabet="abcü ", max_size=5)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), texts, st.sampled_from([1.5, 2**53, -0.0])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def attempt(draw: Any) -> tuple[str, Any, Any]:
    """One append attempt ``(type, data, surface)``: surface is None, "append" or ("replace", i, j)."""
    kind = draw(
        st.sampled_from(
            [
                "turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "tool/call", "user",
                "assistant", "tool/result", "header", "request/context", "todo/write", "plugin", "skippable",
                "unknown", "foreign",
            ]
        )
    )
    turn, step, text = draw(turns), draw(small_ints), draw(texts)
    call = draw(st.sampled_from(["c1", "c2"]))
    surface: Any = "append"
    if draw(st.integers(0, 5)) == 0:
        surface = ("replace", draw(st.integers(0, 9)), draw(st.integers(0, 9)))
    if kind == "turn/start":
        return kind, {"turn": turn}, None
    if kind == "turn/end":
        reason = draw(st.sampled_from([{"kind": "completed"}, {"kind": "disposed"}, {"kind": "aborted", "reason": {}}]))
        return kind, {"turn": turn, "reason": reason}, None
    if kind in ("step/start", "step/end"):
        return kind, {"turn": turn, "step": step}, None
    if kind == "assistant/chunk":
        return kind, {"turn": turn, "step": step, "chunk": al.text_delta(0, text)}, None
    if kind == "tool/call":
        return kind, {"turn": turn, "step": step, "callId": call, "name": "t", "arguments": "{}"}, None
    if kind == "user":
        data = draw(st.sampled_from([al.user_message(text), text, {"role": "user", "content": text}]))
        return "user/message", data, surface
    if kind == "assistant":
        blocks = [al.text_block(text)] + ([al.tool_call_block(call, "t", "{}")] if draw(st.booleans()) else [])
        message = al.assistant_message(blocks, provider="p", model="m")
        data = {"turn": turn, "step": step, "message": message} if draw(st.booleans()) else message
        return "assistant/message", data, surface
    if kind == "tool/result":
        data = {"turn": turn, "step": step, "message": al.tool_result_message(call, text)}
        return kind, data, surface
    if kind == "header":
        config = {"provider": "p", "model": draw(st.sampled_from(["m1", "m2", ""]))}
        return "request/header", {"header": {"config": config}, "reason": "initial"}, None
    if kind == "request/context":
        return kind, {"provider": "p", "model": "m", "contextWindow": 1000}, None
    if kind == "todo/write":
        return kind, {"todos": [{"content": text, "status": "pending"}]}, None
    if kind == "plugin":
        return PLUGIN, draw(json_values), None
    if kind == "skippable":
        return SKIPPABLE, draw(json_values), None
    if kind == "unknown":
        return "someone-else/event", draw(json_values), None
    return draw(st.sampled_from(["turn/start", "user/message", "tool/call"])), draw(json_values), surface


def apply_attempts(session: al.Session, attempts: list[tuple[str, Any, Any]]) -> int:
    accepted = 0
    for etype, data, surface in attempts:
        intent: Any = None
        if surface == "append":
            intent = {"surfaceOp": "append"}
        elif surface is not None:
            nodes = list(session.surface.nodes)
            if nodes:
                i, j = sorted((surface[1] % len(nodes), surface[2] % len(nodes)))
                shadowed = nodes[i : j + 1]
                op = {"op": "replace", "start": nodes[i], "end": nodes[j]}
                intent = {"surfaceOp": op, "sourceEventSeqs": shadowed}
        try:
            if intent is None:
                session.append(etype, data)
            else:
                session.append(etype, data, intent)
            accepted += 1
        except AgentlogError:
            pass  # refused: nothing changed
    # close what is open, as an agent's exit path does, so no reader needs a repair
    for closer in interrupted_turn_closers(session.events):
        closer_intent = {k: closer[k] for k in ("surfaceOp", "sourceEventSeqs") if k in closer} or None
        session.append(closer["type"], closer["data"], closer_intent)
    return accepted


def expected_state(session: al.Session) -> tuple[list[bytes], list[bytes], bytes]:
    return (
        [event.json_bytes for event in session.events],
        [dumps(message) for message in session.derive_messages()],
        dumps(session.request_header()),
    )


def reloaded_state(coordinator: PersistenceCoordinator, session_id: str) -> tuple[list[bytes], list[bytes], bytes]:
    events = [dumps(event) for event in coordinator.load(session_id).events]
    view = coordinator.view(session_id)
    return events, [dumps(m) for m in view.derive_messages()], dumps(view.request_header())


@pytest.mark.parametrize("kind", BACKEND_KINDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempts=st.lists(attempt(), min_size=1, max_size=25))
def test_issue7_d2_every_accepted_append_sequence_reloads_identically(
    kind: str, attempts: list[tuple[str, Any, Any]]
) -> None:
    root = Path(tempfile.mkdtemp(prefix="issue7-roundtrip-"))
    factory = BackendFactory(kind, root)
    try:
        writer = PersistenceCoordinator(al.SessionStore(), factory(), batch_delay_ms=5)
        session = writer.store.create("rt", meta={"cwd": "/work"})
        apply_attempts(session, attempts)
        writer.store.flush(session)
        expected = expected_state(session)
        writer.close()
        reader = PersistenceCoordinator(al.SessionStore(), factory())  # a fresh coordinator and store
        try:
            if not expected[0]:
                return  # nothing accepted: nothing was stored
            assert reloaded_state(reader, "rt") == expected
        finally:
            reader.close()
    finally:
        factory.close_all()
        shutil.rmtree(root, ignore_errors=True)


_CHILD = textwrap.dedent(
    """
    import json, sys
    import agentlog as al
    from agentlog.kernel.events import event_types
    from agentlog.kernel.jsoncodec import dumps
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    event_types.register(PLUGIN)  # the reader knows the plugin's required type; the skippable one it does not
    kind, location = sys.argv[1], sys.argv[2]
    backend = JsonlBackend(location) if kind == "jsonl" else SqliteBackend(location)
    reader = PersistenceCoordinator(al.SessionStore(), backend)
    events = [dumps(e).decode() for e in reader.load("rt").events]
    view = reader.view("rt")
    messages = [dumps(m).decode() for m in view.derive_messages()]
    print(json.dumps([events, messages, dumps(view.request_header()).decode()]))
    reader.close()
    """
).replace("PLUGIN", repr(PLUGIN))


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(attempts=st.lists(attempt(), min_size=40, max_size=80))
def test_issue7_d2_an_accepted_log_reloads_identically_in_a_fresh_process(
    kind: str, attempts: list[tuple[str, Any, Any]]
) -> None:
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    root = Path(tempfile.mkdtemp(prefix="issue7-roundtrip-"))
    try:
        location = str(root / ("jsonl" if kind == "jsonl" else "db.sqlite3"))
        backend = JsonlBackend(location) if kind == "jsonl" else SqliteBackend(location)
        writer = PersistenceCoordinator(al.SessionStore(), backend)
        session = writer.store.create("rt", meta={"cwd": "/work"})
        always = [(SKIPPABLE, {"n": 1}, None), ("turn/start", {"turn": 1}, None), (PLUGIN, [1, {"a": None}], None)]
        assert apply_attempts(session, [*always, *attempts]) >= len(always)
        writer.store.flush(session)
        events, messages, header = expected_state(session)
        writer.close()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, kind, location], capture_output=True, text=True, timeout=300, check=False
        )
        assert child.returncode == 0, child.stderr
        got_events, got_messages, got_header = json.loads(child.stdout)
        assert got_events == [e.decode() for e in events]
        assert got_messages == [m.decode() for m in messages]
        assert got_header == header.decode()
    finally:
        shutil.rmtree(root, ignore_errors=True)
