"""Scoped carriers and flush (spec §11.7, §11.10; checklist §19.12, items 212–222).

A Cordis scope is ``store.scope()``: its ``on_*`` hooks hear only sessions created/entered through that
scope; store-level hooks hear every session. ``store.flush`` runs synchronous listeners,
``await store.aflush`` awaits async ones with all-settled semantics.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from agentlog import Session, SessionNotLiveError, SessionStore
from agentlog.errors import SessionDisposedError


async def _drain() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


# spec 19.12 #212 (host-model: scoped carrier)
def test_scoped__session_entered_through_scope_dispatches_in_that_scope() -> None:
    store = SessionStore()
    scope = store.scope()
    other = store.scope()
    heard: list[str] = []

    store.on_event(lambda s, e: heard.append(f"global:{e.type}"))
    scope.on_event(lambda s, e: heard.append(f"owner:{e.type}"))
    other.on_event(lambda s, e: heard.append(f"other:{e.type}"))
    scope.on_created(lambda s: heard.append(f"owner-created:{s.id}"))
    other.on_created(lambda s: heard.append(f"other-created:{s.id}"))

    session = scope.create()
    session.append("turn/start", {"turn": 1})

    assert heard == [
        f"owner-created:{session.id}",
        "global:turn/start",
        "owner:turn/start",
    ]


# spec 19.12 #213
def test_scoped__bare_session_dispatches_subject_less_scoped_listeners_never_hear_it() -> None:
    store = SessionStore()
    scope = store.scope()
    heard: list[str] = []
    store.on_event(lambda s, e: heard.append(f"global:{e.type}"))
    scope.on_event(lambda s, e: heard.append(f"owner:{e.type}"))
    scope.on_created(lambda s: heard.append(f"owner-created:{s.id}"))
    store.on_created(lambda s: heard.append(f"global-created:{s.id}"))

    bare = store.create()
    bare.append("turn/start", {"turn": 1})
    assert heard == [f"global-created:{bare.id}", "global:turn/start"]


# spec 19.12 #214
def test_scoped__reuses_captured_owner_carrier_for_paired_disposal() -> None:
    store = SessionStore()
    owner = store.scope()
    other = store.scope()
    heard: list[str] = []
    store.on_disposed(lambda s: heard.append(f"global:{s.id}"))
    owner.on_disposed(lambda s: heard.append(f"owner:{s.id}"))
    other.on_disposed(lambda s: heard.append(f"other:{s.id}"))

    session = store.prepare()
    detach = owner.enter(session)
    store.announce(session)
    detach()

    assert heard == [f"global:{session.id}", f"owner:{session.id}"]
    assert store.get(session.id) is None


# spec 19.12 #215
def test_scoped__flush_with_no_listeners_reports_false() -> None:
    store = SessionStore()
    session = store.create()
    assert store.flush(session) is False
    assert asyncio.run(store.aflush(session)) is False


# spec 19.12 #216
def test_scoped__flush_reports_a_participating_listener_after_it_succeeds() -> None:
    store = SessionStore()
    session = store.create()
    flushed: list[Session] = []
    store.on_flush(lambda current: flushed.append(current))

    assert store.flush(session) is True
    assert flushed == [session]
    assert flushed[0] is session

    async def async_listener(current: Session) -> None:
        await asyncio.sleep(0)
        flushed.append(current)

    store.on_flush(async_listener)
    assert asyncio.run(store.aflush(session)) is True
    assert flushed == [session, session, session]


# spec 19.12 #217
def test_scoped__flush_dispatches_with_owning_carrier_and_awaits_all_listeners() -> None:
    async def scenario() -> None:
        store = SessionStore()
        scope = store.scope()
        flushed: list[str] = []

        async def global_listener(session: Session) -> None:
            await asyncio.sleep(0)
            flushed.append(f"global:{session.id}")

        store.on_flush(global_listener)
        scope.on_flush(lambda session: flushed.append(f"owner:{session.id}"))

        owned = scope.create()
        bare = store.create()
        assert await store.aflush(owned) is True
        # Parallel dispatch: completion order is unspecified, but both have settled before aflush returns.
        assert sorted(flushed) == sorted([f"global:{owned.id}", f"owner:{owned.id}"])
        assert await store.aflush(bare) is True
        assert flushed[2:] == [f"global:{bare.id}"]

    asyncio.run(scenario())


# spec 19.12 #218
def test_scoped__propagates_a_rejecting_flush_listener() -> None:
    store = SessionStore()
    disk_full = RuntimeError("disk full")

    async def failing(session: Session) -> None:
        raise disk_full

    store.on_flush(failing)
    session = store.create()

    with pytest.raises(RuntimeError, match="disk full") as excinfo:
        asyncio.run(store.aflush(session))
    assert excinfo.value is disk_full

    # The synchronous flush re-raises a synchronous listener's failure as is.
    sync_store = SessionStore()
    sync_failure = RuntimeError("disk full")

    def sync_failing(session: Session) -> None:
        raise sync_failure

    sync_store.on_flush(sync_failing)
    sync_session = sync_store.create()
    with pytest.raises(RuntimeError, match="disk full") as sync_excinfo:
        sync_store.flush(sync_session)
    assert sync_excinfo.value is sync_failure


# spec 19.12 #219
def test_scoped__synchronous_flush_failure_does_not_starve_later_listeners() -> None:
    for run in ("flush", "aflush"):
        store = SessionStore()
        flushed: list[Session] = []

        def failing(session: Session) -> None:
            raise RuntimeError("disk full")

        store.on_flush(failing)
        store.on_flush(lambda session, flushed=flushed: flushed.append(session))
        session = store.create()

        with pytest.raises(RuntimeError, match="disk full"):
            if run == "flush":
                store.flush(session)
            else:
                asyncio.run(store.aflush(session))
        assert flushed == [session], run


# spec 19.12 #220
def test_scoped__waits_for_slower_flush_listeners_before_reporting_another_failure() -> None:
    async def scenario() -> None:
        store = SessionStore()
        gate = asyncio.Event()
        state = {"slow_started": False, "slow_finished": False}
        first_failure = RuntimeError("disk full")
        later_failure = RuntimeError("later failure")

        async def failing(session: Session) -> None:
            raise first_failure

        async def slow(session: Session) -> None:
            state["slow_started"] = True
            await gate.wait()
            state["slow_finished"] = True
            raise later_failure

        store.on_flush(failing)
        store.on_flush(slow)
        session = store.create()

        flushing = asyncio.create_task(store.aflush(session))
        await _drain()
        assert state["slow_started"] is True
        assert flushing.done() is False

        gate.set()
        with pytest.raises(RuntimeError, match="disk full") as excinfo:
            await flushing
        assert excinfo.value is first_failure  # first failure in listener order
        assert state["slow_finished"] is True
        assert flushing.done() is True

    asyncio.run(scenario())


# spec 19.12 #221
def test_scoped__rejects_never_entered_session_instead_of_inventing_a_carrier() -> None:
    store = SessionStore()
    scope = store.scope()
    flushed: list[str] = []
    store.on_flush(lambda s: flushed.append(f"global:{s.id}"))
    scope.on_flush(lambda s: flushed.append(f"owner:{s.id}"))

    prepared = store.prepare()
    text = f'session "{prepared.id}" is not live in this store'
    with pytest.raises(SessionNotLiveError, match=re.escape(text)) as excinfo:
        store.flush(prepared)
    assert excinfo.value.code == "SESSION_NOT_LIVE"
    with pytest.raises(SessionNotLiveError, match=re.escape(text)):
        asyncio.run(store.aflush(prepared))
    assert flushed == []


# spec 19.12 #222
def test_scoped__clears_detached_carrier_and_rejects_stale_flushes() -> None:
    store = SessionStore()
    scope = store.scope()
    flushed: list[str] = []
    store.on_flush(lambda s: flushed.append(f"global:{s.id}"))
    scope.on_flush(lambda s: flushed.append(f"owner:{s.id}"))

    session = store.prepare()
    detach = scope.enter(session)
    # Entered but never announced sessions can be flushed.
    assert store.flush(session) is True
    assert sorted(flushed) == sorted([f"global:{session.id}", f"owner:{session.id}"])

    detach()
    text = f'session "{session.id}" is not live in this store'
    with pytest.raises(SessionNotLiveError, match=re.escape(text)):
        store.flush(session)
    with pytest.raises(SessionNotLiveError, match=re.escape(text)):
        asyncio.run(store.aflush(session))
    assert len(flushed) == 2


# spec 11.10: disposing a scope removes its hooks (and detaches the sessions it owns).
def test_scoped__disposing_a_scope_removes_its_hooks_and_detaches_its_sessions() -> None:
    store = SessionStore()
    scope = store.scope()
    heard: list[str] = []
    scope.on_event(lambda s, e: heard.append(f"owner:{e.type}"))
    store.on_disposed(lambda s: heard.append(f"disposed:{s.id}"))
    owned = scope.create("owned")
    scope.dispose()
    assert heard == ["disposed:owned"]
    assert store.get("owned") is None

    # A session later entered into the store directly is not heard by the disposed scope's hook.
    fresh = store.create("fresh")
    fresh.append("turn/start", {"turn": 1})
    with pytest.raises(SessionDisposedError):  # issue 7: a disposed session refuses appends
        owned.append("turn/start", {"turn": 1})
    assert heard == ["disposed:owned"]
