"""Issue 7, defects 4 (ids: the kernel and coordinator part) and 5 (silent loss after dispose)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import agentlog as al
from agentlog.errors import SessionDisposedError, SessionExistsError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend, encode_segment

pytestmark = pytest.mark.accel

ID_SHAPE = re.compile(r"\d{8}T\d{6}-\d{3}-[0-9a-f]{12}")
APPEND = {"surfaceOp": "append"}


# --- defect 4: default ids ----------------------------------------------------------------------------


def test_issue7_d4_default_ids_are_unique_time_sortable_and_storable() -> None:
    store = al.SessionStore()
    ids = []
    for _ in range(50):
        ids.append(store.create().id)
        time.sleep(0.0005)
    child = store.fork(ids[0])
    ids.append(child.id)
    assert all(ID_SHAPE.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)  # creation order (millisecond resolution, then random)
    assert all(encode_segment(i) == i for i in ids)  # stored verbatim by the JSONL layout


def test_issue7_d4_two_processes_never_mint_the_same_default_id(tmp_path: Path) -> None:
    code = "import agentlog as al; s = al.SessionStore(); print(s.create().id)"
    minted = [
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
        for _ in range(2)
    ]
    assert minted[0] != minted[1]
    assert all(ID_SHAPE.fullmatch(i) for i in minted)


def test_issue7_d4_create_over_a_stored_id_fails_at_once_and_names_resume(tmp_path: Path) -> None:
    root = str(tmp_path)
    first = PersistenceCoordinator(al.SessionStore(), JsonlBackend(root))
    session = first.store.create("chat-1")
    session.append("turn/start", {"turn": 1})
    first.store.flush(session)
    first.close()

    second = PersistenceCoordinator(al.SessionStore(), JsonlBackend(root))  # another process, later
    try:
        with pytest.raises(SessionExistsError) as caught:
            second.store.create("chat-1")
        assert caught.value.code == "SESSION_ALREADY_EXISTS"
        assert 'coordinator.resume("chat-1")' in str(caught.value)
        assert second.store.get("chat-1") is None  # the creation was vetoed, nothing is live
        resumed = second.resume("chat-1")  # the named remedy works
        assert resumed.events[0].type == "turn/start"
        fresh = second.store.create()  # and a default id never collides
        fresh.append("turn/start", {"turn": 1})
        second.store.flush(fresh)
    finally:
        second.close()


# --- defect 5: append after dispose ---------------------------------------------------------------------


def test_issue7_d5_append_on_a_disposed_session_raises_session_disposed(tmp_path: Path) -> None:
    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    store = coordinator.store
    session = store.create("s1")
    session.append("turn/start", {"turn": 1})
    store.dispose(session)
    with pytest.raises(SessionDisposedError) as caught:
        session.append("user/message", al.user_message("lost?", id="u1"), APPEND)
    assert caught.value.code == "SESSION_DISPOSED"
    assert 'coordinator.resume("s1")' in str(caught.value)
    assert [e.type for e in session.events] == ["turn/start"]
    with pytest.raises(SessionDisposedError):
        store.enter(session)  # nor can it be made live again behind the store's back
    resumed = coordinator.resume("s1")
    resumed.append("user/message", al.user_message("kept", id="u1"), APPEND)
    store.flush(resumed)
    coordinator.close()
    reader = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    try:
        assert [e["type"] for e in reader.inspect("s1").events][-1] == "user/message"
    finally:
        reader.close()


def test_issue7_d5_a_vetoed_creation_is_not_a_disposal() -> None:
    store = al.SessionStore()
    vetoed = {"done": False}

    def veto(session: al.Session) -> None:
        if not vetoed["done"]:
            vetoed["done"] = True
            raise RuntimeError("no")

    store.on_created(veto)
    prepared = store.prepare("s")
    detach = store.enter(prepared)
    with pytest.raises(RuntimeError):
        store.announce(prepared)
    detach()
    store.enter(prepared)  # the same prepared session may be published again
    store.announce(prepared)
    prepared.append("turn/start", {"turn": 1})
    assert prepared.seq == 1


def test_issue7_d4_an_unstorable_id_is_refused_at_create_even_for_a_fork(tmp_path: Path) -> None:
    from agentlog.errors import InvalidSessionIdError

    coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(tmp_path)))
    store = coordinator.store
    try:
        with pytest.raises(InvalidSessionIdError) as caught:
            store.create("x" * 5000)
        assert caught.value.code == "INVALID_SESSION_ID"
        parent = store.create("parent")
        parent.append("turn/start", {"turn": 1})
        parent.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        with pytest.raises(InvalidSessionIdError):
            store.fork(parent, child_id="y" * 5000)  # a seeded creation takes the same check
        assert [s.id for s in store.list()] == ["parent"]
    finally:
        coordinator.close()
