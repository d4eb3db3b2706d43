"""SessionStore lifecycle, publication and hook semantics (spec §11; checklist §19.2, items 48–73).

Host-model items are mapped onto the Python design (docs/kernel-api.md): Cordis internal dispatch
interceptors are ``store.before_event(fn)``; owner lifetimes / fibers are ``store.scope()`` (``scope.create``
or ``store.create(..., owner=scope)``) disposed with ``scope.dispose()``; async listener rejections are
``async def`` listeners raising inside a running event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog import (
    Session,
    SessionAnnouncedError,
    SessionAttachedError,
    SessionExistsError,
    SessionHeaderError,
    SessionStore,
)
from agentlog.errors import SessionDisposedError
from agentlog.kernel.messages import assistant_message, text_block, user_message
from agentlog.kernel.surface import replace_op
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend, encode_segment

APPEND = {"surfaceOp": "append"}
MAX_SAFE_INTEGER = 2**53 - 1


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if (record.name == "agentlog" or record.name.startswith("agentlog."))
        and record.levelno == logging.WARNING
    ]


async def _drain() -> None:
    """Let scheduled listener tasks and their done-callbacks run."""
    for _ in range(20):
        await asyncio.sleep(0)


def _refuses_mutation(value: Any) -> bool:
    try:
        value["__probe__"] = 1
    except TypeError:
        return True
    return False


# ---------------------------------------------------------------------------------------------------------


# spec 19.2 #48
def test_store__creates_sessions_emits_created_and_event() -> None:
    store = SessionStore()
    created: list[Session] = []
    published: list[tuple[Session, Any]] = []
    store.on_created(lambda session: created.append(session))
    store.on_event(lambda session, event: published.append((session, event)))

    session = store.create()
    assert created == [session]
    assert created[0] is session

    # An unrelated attribute on the session object cannot suppress publication.
    with contextlib.suppress(AttributeError, TypeError):
        session.onAppend = None  # type: ignore[attr-defined]
    with contextlib.suppress(AttributeError, TypeError):
        session.on_append = None  # type: ignore[attr-defined]

    first = session.append("turn/start", {"turn": 1})
    second = session.append("user/message", user_message("x"), APPEND)

    assert len(published) == 2
    assert published[0][0] is session
    assert published[1][0] is session
    assert published[0][1] is first
    assert published[1][1] is second
    assert published[1][1].type == "user/message"
    assert store.get(session.id) is session
    assert store.list() == [session]


# spec 19.2 #49
def test_store__rejects_duplicate_ids_and_supports_seeding() -> None:
    store = SessionStore()
    a = store.create("fixed")
    with pytest.raises(SessionExistsError, match=re.escape('session "fixed" already exists')) as excinfo:
        store.create("fixed")
    assert excinfo.value.code == "SESSION_ALREADY_EXISTS"
    assert store.get("fixed") is a

    a.append("turn/start", {"turn": 1})
    a.append("user/message", user_message("q"), APPEND)
    forked = store.create("fork", seed=list(a.events))
    assert forked.derive_messages() == a.derive_messages()
    assert len(forked.derive_messages()) == 1


# spec 19.2 #50
def test_store__enter_rejects_stale_prepared_session_whose_id_is_live() -> None:
    store = SessionStore()
    stale = store.prepare("racy")
    live = store.create("racy")

    with pytest.raises(SessionExistsError, match=re.escape('session "racy" already exists')) as excinfo:
        store.enter(stale)
    assert excinfo.value.code == "SESSION_ALREADY_EXISTS"
    assert store.get("racy") is live
    assert store.list() == [live]


# spec 19.2 #51
def test_store__prepare_enter_announce_register_and_emit_created() -> None:
    store = SessionStore()
    created: list[Session] = []
    store.on_created(lambda session: created.append(session))

    session = store.prepare("lifecycle")
    assert isinstance(session, Session)
    assert store.get("lifecycle") is None
    assert store.list() == []

    detach = store.enter(session)
    assert store.get("lifecycle") is session
    assert created == []

    store.announce(session)
    assert created == [session]

    detach()
    detach()  # idempotent
    assert store.get("lifecycle") is None

    # A stale detach cannot disturb a later same-id lifecycle.
    later = store.create("lifecycle")
    detach()
    assert store.get("lifecycle") is later


# spec 19.2 #52
def test_store__prevents_attachment_of_one_session_to_two_stores() -> None:
    first = SessionStore()
    second = SessionStore()
    session = Session.create("owned-key")
    detach_first = first.enter(session)

    with pytest.raises(
        SessionAttachedError, match=re.escape('session "owned-key" is already attached to a store')
    ) as excinfo:
        second.enter(session)
    assert excinfo.value.code == "SESSION_ALREADY_ATTACHED"
    assert first.get("owned-key") is session
    assert second.get("owned-key") is None

    detach_first()
    assert first.get("owned-key") is None
    detach_second = second.enter(session)
    assert second.get("owned-key") is session
    detach_second()
    assert second.get("owned-key") is None


# spec 19.2 #53
def test_store__rejects_direct_and_reentrant_repeat_announcements() -> None:
    store = SessionStore()
    counts = {"created": 0, "disposed": 0}
    reentrant: list[BaseException] = []

    def on_created(session: Session) -> None:
        counts["created"] += 1
        try:
            store.announce(session)
        except Exception as err:
            reentrant.append(err)

    store.on_created(on_created)
    store.on_disposed(lambda session: counts.__setitem__("disposed", counts["disposed"] + 1))

    session = store.prepare("once")
    detach = store.enter(session)
    store.announce(session)

    assert len(reentrant) == 1
    assert isinstance(reentrant[0], SessionAnnouncedError)
    assert reentrant[0].code == "SESSION_ALREADY_ANNOUNCED"
    assert 'session "once" was already announced' in str(reentrant[0])

    with pytest.raises(SessionAnnouncedError, match=re.escape('session "once" was already announced')):
        store.announce(session)

    detach()
    assert counts == {"created": 1, "disposed": 1}


# spec 19.2 #54
def test_store__defers_reentrant_detach_until_creation_dispatch_unwinds() -> None:
    store = SessionStore()
    order: list[str] = []
    live_during: list[bool] = []
    session = store.prepare("reentrant-detach")
    detach = store.enter(session)

    def first(created: Session) -> None:
        order.append("created:first")
        detach()
        live_during.append(store.get(created.id) is created)

    def second(created: Session) -> None:
        order.append("created:second")
        live_during.append(store.get(created.id) is created)

    def disposed(gone: Session) -> None:
        order.append("disposed")
        live_during.append(store.get(gone.id) is None)

    store.on_created(first)
    store.on_created(second)
    store.on_disposed(disposed)

    store.announce(session)

    assert order == ["created:first", "created:second", "disposed"]
    assert live_during == [True, True, True]
    assert store.get(session.id) is None
    detach()
    assert order == ["created:first", "created:second", "disposed"]


# spec 19.2 #55 (host-model: owner lifetime = store.scope())
def test_store__rolls_back_create_when_owner_disposed_from_created_listener() -> None:
    store = SessionStore()
    owner = store.scope()
    disposed: list[str] = []

    def on_created(session: Session) -> None:
        if session.id == "create-unload-race":
            owner.dispose()

    store.on_created(on_created)
    store.on_disposed(lambda session: disposed.append(session.id))

    owner.create("create-unload-race")
    assert store.get("create-unload-race") is None
    assert store.list() == []
    assert disposed == ["create-unload-race"]
    owner.dispose()  # disposing again is harmless
    assert store.get("create-unload-race") is None


# spec 19.2 #56
def test_store__synthesizes_minimal_current_version_header_for_bare_create() -> None:
    store = SessionStore(now=lambda: 1_700_000_000_123)
    session = store.create("plain")
    header = session.header
    assert header["version"] == 0
    assert header["id"] == "plain"
    assert type(header["createdAt"]) is int
    assert 0 <= header["createdAt"] <= MAX_SAFE_INTEGER
    assert header["createdAt"] == 1_700_000_000_123
    assert "cwd" not in header
    assert "parentSession" not in header
    assert dict(header) == {"version": 0, "id": "plain", "createdAt": 1_700_000_000_123}


# spec 19.2 #57
def test_store__attaches_cwd_and_parent_session_from_meta() -> None:
    store = SessionStore()
    session = store.create("child", meta={"cwd": "/work/project", "parentSession": "parent"})
    assert session.header["version"] == 0
    assert session.header["id"] == "child"
    assert session.header["cwd"] == "/work/project"
    assert session.header["parentSession"] == "parent"


# spec 19.2 #58
def test_store__attaches_subagent_origin_and_delegation_depth_from_meta() -> None:
    store = SessionStore()
    session = store.create(
        "delegated-child",
        meta={"parentSession": "parent", "origin": "subagent", "delegationDepth": 2},
    )
    assert session.header["id"] == "delegated-child"
    assert session.header["parentSession"] == "parent"
    assert session.header["origin"] == "subagent"
    assert session.header["delegationDepth"] == 2


_BAD_META = [
    ({"parentSession": 2**64}, "session header is not losslessly JSON-serializable"),
    ({"parentSession": object()}, "session header is not losslessly JSON-serializable"),
    ({"cwd": 1}, "session header cwd must be a string"),
    ({"parentSession": 1}, "session header parentSession must be a string"),
    ({"createdAt": "123"}, "session header createdAt must be a non-negative safe integer"),
    ({"createdAt": 1.5}, "session header createdAt must be a non-negative safe integer"),
    ({"createdAt": -1}, "session header createdAt must be a non-negative safe integer"),
    ({"createdAt": float(2**53)}, "session header createdAt must be a non-negative safe integer"),
    ({"seedLength": "1"}, "session header seedLength must be a non-negative safe integer"),
    ({"seedLength": 0.5}, "session header seedLength must be a non-negative safe integer"),
    ({"seedLength": -1}, "session header seedLength must be a non-negative safe integer"),
    ({"origin": "fork"}, 'session header origin must be "subagent"'),
    ({"delegationDepth": "1"}, "session header delegationDepth must be a non-negative safe integer"),
    ({"delegationDepth": 0.5}, "session header delegationDepth must be a non-negative safe integer"),
    ({"delegationDepth": -1}, "session header delegationDepth must be a non-negative safe integer"),
    ({"agentPreset": 1}, "session header agentPreset must be a string"),
]


# spec 19.2 #59
@pytest.mark.parametrize(("meta", "message"), _BAD_META, ids=[f"case{i}" for i in range(len(_BAD_META))])
def test_store__rejects_non_json_and_invalid_scalar_session_metadata(
    meta: dict[str, Any], message: str
) -> None:
    store = SessionStore()
    with pytest.raises(SessionHeaderError, match=re.escape(message)) as excinfo:
        store.prepare("bad-meta", meta=meta)
    assert excinfo.value.code == "INVALID_HEADER"
    assert store.get("bad-meta") is None


# spec 19.2 #60
def test_store__rejects_non_absolute_meta_cwd() -> None:
    store = SessionStore()
    created: list[Session] = []
    store.on_created(lambda session: created.append(session))
    with pytest.raises(
        SessionHeaderError,
        match=re.escape('session header cwd must be an absolute path, got "relative/path"'),
    ) as excinfo:
        store.create("rel", meta={"cwd": "relative/path"})
    assert excinfo.value.code == "INVALID_HEADER"
    assert store.get("rel") is None
    assert created == []


# spec 19.2 #61
def test_store__bare_session_without_store_exposes_current_version_header() -> None:
    session = Session.create("bare", now=lambda: 42)
    assert session.header["version"] == 0
    assert session.header["id"] == "bare"
    assert type(session.header["createdAt"]) is int
    assert session.header["createdAt"] == 42


# spec 19.2 #62 (host-model: owner lifetime / fiber = scope)
def test_store__detaches_sessions_when_owner_lifetime_is_disposed() -> None:
    store = SessionStore()
    owner = store.scope()
    session = owner.create("scoped")
    assert store.get("scoped") is session

    observed: list[Any] = []
    disposed: list[str] = []
    store.on_event(lambda s, e: observed.append(e))
    store.on_disposed(lambda s: disposed.append(s.id))

    owner.dispose()
    assert store.get("scoped") is None
    assert disposed == ["scoped"]
    # Issue 7, defect 5: a disposed session refuses appends (they would never be stored).
    before = list(session.events)
    with pytest.raises(SessionDisposedError) as caught:
        session.append("user/message", user_message("late"), APPEND)
    assert caught.value.code == "SESSION_DISPOSED"
    assert list(session.events) == before
    assert observed == []

    # The same lifetime through the explicit owner= argument of store.create.
    other_owner = store.scope()
    owned = store.create("owned", owner=other_owner)
    assert store.get("owned") is owned
    other_owner.dispose()
    assert store.get("owned") is None
    assert disposed == ["scoped", "owned"]
    with pytest.raises(SessionDisposedError):
        owned.append("turn/start", {"turn": 1})
    assert observed == []


# spec 19.2 #63
def test_store__pairs_partial_created_announcement_with_disposal_during_rollback() -> None:
    store = SessionStore()
    disposed: list[Session] = []
    threw = {"done": False}
    boom = RuntimeError("boom created listener")

    def on_created(session: Session) -> None:
        if not threw["done"]:
            threw["done"] = True
            raise boom

    store.on_disposed(lambda session: disposed.append(session))
    store.on_created(on_created)

    with pytest.raises(RuntimeError, match="boom created listener") as excinfo:
        store.create("fixed")
    assert excinfo.value is boom
    assert store.get("fixed") is None
    assert store.list() == []
    assert [s.id for s in disposed] == ["fixed"]

    events: list[Any] = []
    store.on_event(lambda s, e: events.append(e))
    session = store.create("fixed")
    assert store.get("fixed") is session
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user_message("hi"), APPEND)
    assert [e.type for e in events] == ["turn/start", "user/message"]


# spec 19.2 #64
def test_store__contains_event_observer_failures_after_commit(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog")

    async def scenario() -> None:
        store = SessionStore()
        session = store.create("contained-event")
        heard: list[Any] = []
        committed_before_notify: list[bool] = []

        def sync_observer(observed: Session, event: Any) -> None:
            committed_before_notify.append(observed.events[-1] is event)
            raise RuntimeError("sync event observer")

        async def async_observer(observed: Session, event: Any) -> None:
            raise RuntimeError("async event observer")

        store.on_event(sync_observer)
        store.on_event(async_observer)
        store.on_event(lambda observed, event: heard.append(event))

        appended = session.append("turn/start", {"turn": 1})
        assert committed_before_notify == [True]
        assert session.events == [appended]
        assert heard == [appended]
        assert heard[0] is appended
        await _drain()

    asyncio.run(scenario())
    assert _warnings(caplog) == [
        'session "contained-event": session/event listener threw: RuntimeError: sync event observer',
        'session "contained-event": session/event listener rejected: RuntimeError: async event observer',
    ]


# spec 19.2 #65 (host-model: pre-commit interceptor = store.before_event)
def test_store__before_event_sees_one_frozen_candidate_before_commit_and_resets_after_veto() -> None:
    store = SessionStore()
    session = store.create("dispatch-veto")
    validations: list[dict[str, Any]] = []
    observed: list[Any] = []
    reject = {"next": True}

    def interceptor(observed_session: Session, candidate: Any) -> None:
        validations.append(
            {
                "event": candidate,
                "log_length": len(observed_session.events),
                "frozen": _refuses_mutation(candidate) and _refuses_mutation(candidate["data"]),
            }
        )
        if reject["next"]:
            reject["next"] = False
            raise RuntimeError("reject first candidate")

    store.before_event(interceptor)
    store.on_event(lambda s, e: observed.append(e))

    with pytest.raises(RuntimeError, match="reject first candidate"):
        session.append("turn/start", {"turn": 1})
    assert session.events == []
    assert session.seq == 0
    assert observed == []

    appended = session.append("turn/start", {"turn": 1})
    assert [(v["log_length"], v["frozen"]) for v in validations] == [(0, True), (0, True)]
    assert [v["event"]["seq"] for v in validations] == [0, 0]
    assert validations[1]["event"] is appended
    assert session.events == [appended]
    assert observed == [appended]


# spec 19.2 #66
def test_store__does_not_publish_surface_transition_rejected_by_before_event() -> None:
    store = SessionStore()
    session = store.create("surface-dispatch-veto")
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("user/message", user_message("source"), APPEND)
    surface = session.surface
    reject = {"next": True}

    def interceptor(s: Session, candidate: Any) -> None:
        if reject["next"]:
            reject["next"] = False
            raise RuntimeError("reject surface candidate")

    store.before_event(interceptor)

    with pytest.raises(RuntimeError, match="reject surface candidate"):
        session.append(
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "message": assistant_message([text_block("replacement")], provider="mock", model="mock"),
            },
            {"surfaceOp": replace_op(2, 2), "sourceEventSeqs": [2]},
        )

    assert len(session.events) == 3
    assert surface.nodes == [2]
    assert surface.replace_generation == 0

    session.append("user/message", user_message("next"), APPEND)
    assert surface.nodes == [2, 3]
    assert surface.replace_generation == 0
    assert session.surface is surface


# spec 19.2 #67
def test_store__resolves_event_dispatch_before_commit_so_interceptor_failure_hides_nothing() -> None:
    store = SessionStore()
    session = store.create("dispatch-check")
    observed: list[Any] = []

    def interceptor(s: Session, candidate: Any) -> None:
        raise RuntimeError("dispatch instrumentation rejected the carrier")

    store.before_event(interceptor)
    store.on_event(lambda s, e: observed.append(e))

    with pytest.raises(RuntimeError, match="dispatch instrumentation rejected the carrier"):
        session.append("turn/start", {"turn": 1})
    assert session.events == []
    assert observed == []


# spec 19.2 #68
def test_store__contains_reentrant_observer_append_without_reordering_observers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog")
    store = SessionStore()
    session = store.create("reentrant-observer")
    heard: list[Any] = []

    def reentrant(observed: Session, event: Any) -> None:
        observed.append("todo/write", {"todos": []})

    store.on_event(reentrant)
    store.on_event(lambda s, e: heard.append(e))

    appended = session.append("turn/start", {"turn": 1})
    assert session.events == [appended]
    assert heard == [appended]
    assert _warnings(caplog) == [
        'session "reentrant-observer": session/event listener threw: ReentrantAppendError: '
        "session append cannot reenter while another append is being published",
    ]

    # The guard is released afterwards: a later append publishes normally.
    store2_heard_before = len(heard)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert len(heard) == store2_heard_before + 1


# spec 19.2 #69
def test_store__defers_detach_through_resolution_commit_and_publication() -> None:
    store = SessionStore()
    order: list[str] = []
    session = store.prepare("detach-during-append")
    detach = store.enter(session)

    def state(s: Session) -> str:
        return "live" if store.get(s.id) is s else "detached"

    def interceptor(s: Session, candidate: Any) -> None:
        order.append(f"resolve:{state(s)}")
        detach()

    store.before_event(interceptor)
    store.on_event(lambda s, e: order.append(f"observe:{state(s)}"))
    store.on_disposed(lambda s: order.append(f"dispose:{state(s)}"))
    store.announce(session)

    appended = session.append("turn/start", {"turn": 1})

    assert session.events == [appended]
    assert order == ["resolve:live", "observe:live", "dispose:detached"]
    assert store.get(session.id) is None


# spec 19.2 #70
def test_store__observes_async_created_rejection_without_rollback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog")

    async def scenario() -> None:
        store = SessionStore()
        heard: list[str] = []

        async def failing(session: Session) -> None:
            raise RuntimeError("late creation failure")

        store.on_created(failing)
        store.on_created(lambda session: heard.append(session.id))

        session = store.create("async-created")
        await _drain()

        assert store.get(session.id) is session
        assert heard == ["async-created"]

    asyncio.run(scenario())
    assert _warnings(caplog) == [
        'session "async-created": session/created listener rejected: RuntimeError: late creation failure',
    ]


# spec 19.2 #71
def test_store__contains_sync_and_async_disposed_listener_failures(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agentlog")

    async def scenario() -> None:
        store = SessionStore()
        heard: list[str] = []

        def sync_failing(session: Session) -> None:
            raise RuntimeError("sync disposed")

        async def async_failing(session: Session) -> None:
            raise RuntimeError("async disposed")

        store.on_disposed(sync_failing)
        store.on_disposed(async_failing)
        store.on_disposed(lambda session: heard.append(session.id))

        unannounced = store.prepare("never-announced")
        detach_unannounced = store.enter(unannounced)
        detach_unannounced()
        await _drain()
        assert heard == []
        assert store.get("never-announced") is None

        announced = store.prepare("contained-disposal")
        detach = store.enter(announced)
        store.announce(announced)
        detach()  # must not raise
        await _drain()

        assert heard == ["contained-disposal"]
        assert store.get("contained-disposal") is None

    asyncio.run(scenario())
    assert _warnings(caplog) == [
        'session "contained-disposal": session/disposed listener threw: RuntimeError: sync disposed',
        'session "contained-disposal": session/disposed listener rejected: RuntimeError: async disposed',
    ]


# spec 11.9 / 19.2 #48: every hook registration returns a working unsubscribe callable.
def test_store__hook_registrations_return_unsubscribe_callables() -> None:
    store = SessionStore()
    heard: list[str] = []
    off_created = store.on_created(lambda s: heard.append("created"))
    off_event = store.on_event(lambda s, e: heard.append("event"))
    off_before = store.before_event(lambda s, e: heard.append("before"))
    off_disposed = store.on_disposed(lambda s: heard.append("disposed"))
    off_flush = store.on_flush(lambda s: heard.append("flush"))

    session = store.create("hooks")
    session.append("turn/start", {"turn": 1})
    assert store.flush(session) is True
    assert heard == ["created", "before", "event", "flush"]

    for off in (off_created, off_event, off_before, off_disposed, off_flush):
        off()
    heard.clear()
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert store.flush(session) is False
    store.dispose(session)
    assert store.get("hooks") is None
    store.create("hooks-2")
    assert heard == []


# Issue 7, defects 4 (ids: the kernel and coordinator part) and 5 (silent loss after dispose).


ID_SHAPE = re.compile(r"\d{8}T\d{6}-\d{3}-[0-9a-f]{12}")


# --- defect 4: default ids ----------------------------------------------------------------------------


def test_default_ids_are_unique_time_sortable_and_storable() -> None:
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


def test_two_processes_never_mint_the_same_default_id(tmp_path: Path) -> None:
    code = "import agentlog as al; s = al.SessionStore(); print(s.create().id)"
    minted = [
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()
        for _ in range(2)
    ]
    assert minted[0] != minted[1]
    assert all(ID_SHAPE.fullmatch(i) for i in minted)


def test_create_over_a_stored_id_fails_at_once_and_names_resume(tmp_path: Path) -> None:
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


def test_append_on_a_disposed_session_raises_session_disposed(tmp_path: Path) -> None:
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


def test_a_vetoed_creation_is_not_a_disposal() -> None:
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


def test_an_unstorable_id_is_refused_at_create_even_for_a_fork(tmp_path: Path) -> None:
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
