"""Issue 7 regression tests for the JSONL backends (raw and zstd frames), the memory backend and the
coordinator's load path (each named after its defect number). Real files, real processes, real
file-system conditions (tmpfs, read-only remounts, FIFOs, symlinks, address-space limits)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentlog import SessionStore
from agentlog.errors import AgentlogError, SessionPersistenceCorruptionError

from .conftest import (
    SID,
    Harness,
    closed_turn,
    ev,
    header,
    step_start,
    turn_start,
    user_event,
)


def _stored_bytes(env: Harness) -> Any:
    """A fingerprint of the stored data (file bytes, or the backend's stored rows)."""
    kind = env.kind
    if kind.startswith("jsonl"):
        root = Path(env.factory.root)
        return {str(p): p.read_bytes() for p in sorted(root.rglob("session.jsonl*"))}
    if kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(env.factory.db_path)
        try:
            return con.execute("SELECT * FROM events ORDER BY 1, 2").fetchall()
        finally:
            con.close()
    backend = env.backend()
    return backend.stored_lines(SID)


# --- 19: a malformed event inside the open turn is a typed refusal on every backend ----------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "step/start", "seq": 3, "time": 1003, "data": {}},  # repair would read data["step"]
        {"type": "turn/start", "seq": 3, "time": 1003, "data": "x"},  # repair would index a string
        {"type": "tool/call", "seq": 3, "data": {"callId": "c"}},  # no time: repair reads last["time"]
    ],
    ids=["step-without-step", "data-not-an-object", "no-time"],
)
def test_issue7_d19_malformed_envelope_in_the_open_turn_is_typed_and_untouched(env: Harness, bad: Any) -> None:
    backend = env.backend()
    events = [*closed_turn(0)[:0], turn_start(0), user_event(1, "q"), step_start(2), bad]
    try:
        backend.append_batch(header(), events, False)
    except AgentlogError:
        pytest.skip(f"{env.kind} refuses to store this malformed event at all")
    before = _stored_bytes(env)
    coordinator = env.coordinator()
    for read in (coordinator.load, coordinator.inspect, coordinator.resume):
        with pytest.raises(SessionPersistenceCorruptionError, match="failed validation"):
            read(SID)
    assert _stored_bytes(env) == before
