"""``PersistenceCoordinator.view``: a stored session as the model would see it, without writing."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentlog as al
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend


def _crashed(root: Path) -> None:
    store = al.SessionStore(now=lambda: 5)
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))
    session = store.create("v", meta={"cwd": "/w"})
    session.append("turn/start", {"turn": 1})
    session.append("user/message", al.user_message("hi", id="u"), {"surfaceOp": "append"})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append(
        "assistant/message",
        {
            "turn": 1,
            "step": 1,
            "message": al.assistant_message([al.tool_call_block("c1", "rm", "{}")], provider="p", model="m", id="a"),
        },
        {"surfaceOp": "append"},
    )
    store.flush(session)
    coordinator._live.clear()  # the process "dies": nothing more is written, the lock is abandoned


def _files(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock")}


def test_view__cold_view_shows_the_repair_in_memory_and_writes_nothing(tmp_path: Path) -> None:
    _crashed(tmp_path)
    before = _files(tmp_path)
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    try:
        view = coordinator.view("v")
        messages = view.derive_messages()
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        assert messages[2]["content"][0]["toolCallId"] == "c1"
        assert messages[2]["content"][0]["isError"] is True
        assert [e["type"] for e in view.events][-3:] == ["tool/result", "step/end", "turn/end"]
        assert list(view.surface.nodes) == [1, 3, 4]
    finally:
        coordinator.close()
    assert _files(tmp_path) == before


def test_view__live_session_view_is_its_current_state(tmp_path: Path) -> None:
    store = al.SessionStore()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(tmp_path)))
    try:
        session = store.create("live", meta={"cwd": "/w"})
        session.append("turn/start", {"turn": 1})
        session.append("user/message", al.user_message("q", id="u"), {"surfaceOp": "append"})
        view = coordinator.view("live")
        assert view.derive_messages() == session.derive_messages()
        with pytest.raises(al.AgentlogError) as info:
            coordinator.view("missing")
        assert info.value.code == "SESSION_NOT_FOUND"
    finally:
        coordinator.close()
