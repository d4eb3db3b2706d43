"""The projection registry (runtime spec §2.1–§2.4) against the original's ``registry.spec.ts``.

The first block has one test per case of runtime.md §10.1, named after the case, with the original's
vectors. The original's "owning fiber" is an owner lifetime here: the disposers ``register`` and
``on_changed`` return, closed together. The second block covers what the Python registry adds: typed
errors, frozen states (a mutating reducer is caught), JSON validation of states and views, failure
containment, the drive's subscription being held only while it is observable, and the cut a read takes
inside a publication. The last block is the hypothesis property: the eager drive, a lazy cell built
later and a restore from a checkpoint at a random cut all give the same views and rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.compaction.estimate import estimate_message
from agentlog.errors import (
    FrozenError,
    ProjectionKeyConflictError,
    ProjectionReducerError,
    ProjectionRestoreError,
    ProjectionRowError,
    ProjectionStateError,
    ProjectionUnitError,
    ProjectionViewError,
)
from agentlog.kernel.events import event_types
from agentlog.kernel.messages import (
    assistant_message,
    reasoning_delta,
    text_block,
    text_delta,
    token_usage,
    tool_call_block,
    tool_call_delta,
    tool_result_message,
    user_message,
)
from agentlog.kernel.session import Session, derive_event_message
from agentlog.kernel.store import SessionStore
from agentlog.projection.registry import BUILTIN_UNITS, ProjectionRegistry
from agentlog.projection.stats import SESSION_STATS_UNIT
from agentlog.projection.title import TITLE_UNIT
from agentlog.projection.units import (
    CONTEXT_BREAKDOWN_UNIT,
    CONTEXT_PRESSURE_UNIT,
    TOKEN_USAGE_UNIT,
    ProjectionUnit,
)

MARK = "test/mark"
event_types.register(MARK)

Marks = dict[str, list[str]] | None


def _parse_marks(value: object) -> Marks:
    """The marks unit's state schema: ``{"marks": [str, ...]}`` or ``None``."""
    if value is None:
        return None
    if (
        isinstance(value, dict)
        and set(value) == {"marks"}
        and isinstance(value["marks"], list)
        and all(isinstance(mark, str) for mark in value["marks"])
    ):
        return {"marks": list(value["marks"])}
    raise ValueError(f"not a marks state: {value!r}")


def _parse_count(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"not a count: {value!r}")


def marks_unit(**changes: Any) -> ProjectionUnit[Any, Any]:
    """Whole-value unit: the latest ``test/mark`` wins; unrelated events return the same state."""
    fields: dict[str, Any] = {
        "key": "test/marks",
        "state_version": 1,
        "initial": lambda: None,
        "reduce": lambda state, event: event["data"] if event["type"] == MARK else state,
        "view": lambda state: state if state is not None else {"marks": []},
        "client_visible": True,
        "parse_state": _parse_marks,
    }
    fields.update(changes)
    return ProjectionUnit(**fields)


def count_unit(**changes: Any) -> ProjectionUnit[Any, Any]:
    """Host-only counting unit over every event: its state changes on each event."""
    fields: dict[str, Any] = {
        "key": "test/count",
        "state_version": 1,
        "initial": lambda: 0,
        "reduce": lambda state, event: state + 1,
        "view": lambda state: state,
        "client_visible": False,
        "parse_state": _parse_count,
    }
    fields.update(changes)
    return ProjectionUnit(**fields)


class Clock:
    """A deterministic event clock (epoch ms), advanced by hand."""

    def __init__(self, start: int = 1_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def store() -> SessionStore:
    return SessionStore(now=Clock())


@pytest.fixture
def registry(store: SessionStore) -> Iterator[ProjectionRegistry]:
    registry = ProjectionRegistry(store)
    yield registry
    registry.dispose()


@pytest.fixture
def session(store: SessionStore) -> Session:
    return store.create("projected")


def mark(session: Session, marks: list[str]) -> Any:
    return session.append(MARK, {"marks": marks})


def ev(seq: int, type: str, data: Any) -> dict[str, Any]:
    """A stored event (what a persistence tail read returns), time = seq."""
    return {"type": type, "seq": seq, "time": seq, "data": data}


def turn_end(seq: int, turn: int) -> dict[str, Any]:
    return ev(seq, "turn/end", {"turn": turn, "reason": {"kind": "completed"}})


# --- registry.spec.ts, case by case (runtime.md §10.1) -----------------------------------------------


def test_drives_a_registered_unit_over_committed_events_and_snapshots_the_current_value(
    registry: ProjectionRegistry, session: Session
) -> None:
    """Two marks: the snapshot serves the latest, at the seq of the last event."""
    registry.register(marks_unit())
    mark(session, ["a"])
    mark(session, ["a", "b"])
    snapshot = registry.snapshot(session)
    assert snapshot["values"]["test/marks"] == {"marks": ["a", "b"]}
    assert snapshot["asOfSeq"] == session.seq - 1


def test_builds_the_cell_lazily_from_the_full_log_for_a_unit_registered_after_events_flowed(
    registry: ProjectionRegistry, session: Session
) -> None:
    """A pre-registration event is visible; the lazily built cell then continues on the drive."""
    mark(session, ["pre-registration"])
    registry.register(marks_unit())
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["pre-registration"]}
    mark(session, ["after"])
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["after"]}


def test_serves_init_derived_state_and_as_of_seq_minus_1_for_an_empty_log(
    registry: ProjectionRegistry, session: Session
) -> None:
    registry.register(marks_unit())
    snapshot = registry.snapshot(session)
    assert snapshot["asOfSeq"] == -1
    assert snapshot["values"]["test/marks"] == {"marks": []}


def test_notifies_on_changed_with_the_validated_view_and_the_causing_seq_and_skips_same_reference_applies(
    registry: ProjectionRegistry, session: Session
) -> None:
    """One notification carrying the mark event's seq; the unrelated ``turn/start`` is silent."""
    registry.register(marks_unit())
    seen: list[dict[str, Any]] = []
    registry.on_changed(
        lambda changed, key, value, seq: seen.append({"key": key, "value": value, "seq": seq, "session": changed.id})
    )
    event = mark(session, ["a"])
    session.append("turn/start", {"turn": 1})
    assert seen == [{"key": "test/marks", "value": {"marks": ["a"]}, "seq": event.seq, "session": session.id}]


def test_drives_independently_per_session(registry: ProjectionRegistry, store: SessionStore, session: Session) -> None:
    """Cells are per-session watermarks: two sessions hold different values."""
    other = store.create("other")
    registry.register(marks_unit())
    registry.on_changed(lambda *args: None)  # the eager drive, too
    mark(session, ["one"])
    mark(other, ["two"])
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["one"]}
    assert registry.snapshot(other)["values"]["test/marks"] == {"marks": ["two"]}


def test_updates_host_only_units_without_publishing_them_to_wire_listeners(
    registry: ProjectionRegistry, session: Session
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit())
    changed_keys: list[str] = []
    registry.on_changed(lambda _session, key, _value, _seq: changed_keys.append(key))
    session.append("turn/start", {"turn": 1})
    assert changed_keys == []
    assert registry.state_of(session, "test/count") == 1
    assert registry.snapshot(session)["values"] == {"test/marks": {"marks": []}}


def test_shares_one_unit_between_registrants_of_the_same_key(registry: ProjectionRegistry, session: Session) -> None:
    """A second registration of the same key and version is counted (its unit object is not used)."""
    registry.register(marks_unit())
    registry.register(marks_unit(view=lambda state: {"marks": ["IGNORED"]}))
    mark(session, ["kept"])
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["kept"]}
    assert len(registry.units) == 1


def test_keeps_the_unit_until_the_last_registrant_releases_it(registry: ProjectionRegistry, session: Session) -> None:
    first = registry.register(marks_unit())
    second = registry.register(marks_unit())
    mark(session, ["kept"])
    first()
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["kept"]}
    first()  # a disposer releases its own registration once
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["kept"]}
    second()
    assert registry.snapshot(session)["values"] == {}


def test_refuses_to_share_a_key_across_a_state_version_change(registry: ProjectionRegistry) -> None:
    registry.register(marks_unit())
    with pytest.raises(
        ProjectionKeyConflictError,
        match=r'^session projection key "test/marks" is already registered at stateVersion 1; '
        r"refusing to share it with stateVersion 9$",
    ) as raised:
        registry.register(marks_unit(state_version=9))
    assert raised.value.code == "PROJECTION_KEY_CONFLICT"


@pytest.mark.parametrize("version", [-1, 1.5, True, 2**53])
def test_rejects_a_non_integer_or_negative_state_version_at_register_time(
    registry: ProjectionRegistry, version: Any
) -> None:
    """``-1`` and ``1.5`` (the original's vectors), a bool and an unsafe integer: nothing is registered."""
    with pytest.raises(ProjectionUnitError, match=r'^session projection "test/marks" stateVersion must be') as raised:
        registry.register(marks_unit(state_version=version))
    assert raised.value.code == "INVALID_PROJECTION_UNIT"
    assert registry.units == ()


def test_register_disposer_removes_the_key_with_its_cells_and_frees_it_for_re_registration(
    registry: ProjectionRegistry, session: Session
) -> None:
    """After release the key is gone; a fresh registration refolds from the log, not from a stale cell."""
    dispose = registry.register(marks_unit())
    mark(session, ["cached"])
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["cached"]}
    dispose()
    assert registry.snapshot(session)["values"] == {}
    registry.register(marks_unit(view=lambda state: {"marks": ["refolded", *(state or {"marks": []})["marks"]]}))
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["refolded", "cached"]}


def test_removes_registrations_and_change_listeners_when_their_owning_fiber_unloads(
    registry: ProjectionRegistry, session: Session
) -> None:
    """HMR safety: an owner lifetime that closes both disposers leaves no notification and no value."""
    notifications: list[str] = []
    with contextlib.ExitStack() as owner:
        owner.callback(registry.register(marks_unit()))
        owner.callback(registry.on_changed(lambda _session, key, _value, _seq: notifications.append(key)))
        mark(session, ["live"])
        assert notifications == ["test/marks"]
    mark(session, ["after-dispose"])
    assert notifications == ["test/marks"]
    assert registry.snapshot(session)["values"] == {}


def test_snapshot_serves_client_views_and_excludes_host_only_state(
    registry: ProjectionRegistry, session: Session
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit())
    mark(session, ["a", "b"])
    values = registry.snapshot(session)["values"]
    assert values["test/marks"] == {"marks": ["a", "b"]}
    assert "test/count" not in values
    assert registry.state_of(session, "test/count") == 1
    assert "test/unregistered" not in values
    assert registry.state_of(session, "test/unregistered") is None


def test_checkpoints_every_persisted_unit_with_its_state_version_and_per_cell_watermark(
    registry: ProjectionRegistry, store: SessionStore, session: Session
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit(state_version=7))
    mark_event = mark(session, ["a"])
    rows = registry.checkpoint(session)
    assert rows["test/marks"] == {"ver": 1, "seq": mark_event.seq, "val": {"marks": ["a"]}}
    assert rows["test/count"] == {"ver": 7, "seq": mark_event.seq, "val": 1}
    fresh = store.create("fresh")
    assert registry.checkpoint(fresh)["test/marks"] == {"ver": 1, "seq": -1, "val": None}


def test_checkpoint_states_are_detached_clones(registry: ProjectionRegistry, session: Session) -> None:
    """Mutating a handed-out ``val`` (it is a plain, mutable copy) cannot corrupt the cells."""
    registry.register(marks_unit())
    mark(session, ["a"])
    rows = registry.checkpoint(session)
    val = rows["test/marks"]["val"]
    assert type(val) is dict and type(val["marks"]) is list
    val["marks"].append("INJECTED")
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["a"]}
    assert registry.checkpoint(session)["test/marks"]["val"] == {"marks": ["a"]}


def test_restore_floor_anchors_one_below_the_lowest_usable_watermark_and_at_0_for_missing_or_mismatched_rows(
    registry: ProjectionRegistry,
) -> None:
    assert registry.restore_floor({}) is None  # no unit registered: no read needed
    registry.register(marks_unit())
    registry.register(count_unit())
    assert registry.restore_floor({}) == 0
    assert (
        registry.restore_floor(
            {"test/marks": {"ver": 1, "seq": 10, "val": {"marks": []}}, "test/count": {"ver": 1, "seq": 5, "val": 6}}
        )
        == 5
    )
    assert (
        registry.restore_floor(
            {"test/marks": {"ver": 2, "seq": 10, "val": {"marks": []}}, "test/count": {"ver": 1, "seq": 5, "val": 6}}
        )
        == 0
    )
    assert (
        registry.restore_floor(
            {"test/marks": {"ver": 1, "seq": -1, "val": None}, "test/count": {"ver": 1, "seq": -1, "val": 0}}
        )
        == 0
    )
    assert (
        registry.restore_floor(
            {"test/marks": {"ver": 1, "seq": 9, "val": None}, "test/count": {"ver": 1, "seq": 9, "val": 10}}
        )
        == 9
    )


def test_restore_folds_the_tail_past_each_usable_row_and_refolds_from_init_on_version_mismatch(
    registry: ProjectionRegistry,
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit())
    tail = [ev(3, MARK, {"marks": ["new"]}), turn_end(4, 1)]
    mismatched = {
        "test/marks": {"ver": 1, "seq": 2, "val": {"marks": ["old"]}},
        "test/count": {"ver": 99, "seq": 2, "val": 3},
    }
    with pytest.raises(
        ProjectionRestoreError,
        match=r'^session projection "test/count" cannot restore from seq 3: its checkpoint row is missing, '
        r"version-mismatched, or beyond the supplied log end; re-read from seq 0$",
    ) as raised:
        registry.restore(mismatched, tail, 3)
    assert raised.value.code == "PROJECTION_RESTORE_REREAD"
    full = [
        ev(0, "turn/start", {"turn": 1}),
        ev(1, MARK, {"marks": ["old"]}),
        ev(2, MARK, {"marks": ["old", "2"]}),
        *tail,
    ]
    restored = registry.restore(
        {
            "test/marks": {"ver": 1, "seq": 2, "val": {"marks": ["old", "2"]}},
            "test/count": {"ver": 99, "seq": 2, "val": 3},
        },
        full,
        0,
    )
    assert restored["snapshot"]["asOfSeq"] == 4
    assert restored["snapshot"]["values"]["test/marks"] == {"marks": ["new"]}
    assert "test/count" not in restored["snapshot"]["values"]
    assert restored["checkpoint"]["test/marks"] == {"ver": 1, "seq": 4, "val": {"marks": ["new"]}}
    assert restored["checkpoint"]["test/count"] == {"ver": 1, "seq": 4, "val": 5}


def test_restore_over_a_suffix_folds_only_past_each_row_watermark_and_serves_an_exact_empty_tail_cut(
    registry: ProjectionRegistry,
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit())
    rows = {
        "test/marks": {"ver": 1, "seq": 4, "val": {"marks": ["done"]}},
        "test/count": {"ver": 1, "seq": 2, "val": 3},
    }
    tail = [ev(3, "turn/start", {"turn": 2}), turn_end(4, 2)]
    restored = registry.restore(rows, tail, 3)
    assert restored["snapshot"]["asOfSeq"] == 4
    assert restored["snapshot"]["values"]["test/marks"] == {"marks": ["done"]}  # nothing re-applied
    assert restored["checkpoint"]["test/count"] == {"ver": 1, "seq": 4, "val": 5}  # seqs 3 and 4 only
    assert "test/count" not in restored["snapshot"]["values"]
    current = registry.restore(
        {"test/marks": {"ver": 1, "seq": 4, "val": {"marks": ["done"]}}, "test/count": {"ver": 1, "seq": 4, "val": 5}},
        [],
        5,
    )
    assert current["snapshot"]["asOfSeq"] == 4
    assert "test/count" not in current["snapshot"]["values"]
    assert current["checkpoint"]["test/count"] == {"ver": 1, "seq": 4, "val": 5}


def test_view_checkpoint_serves_version_matching_rows_without_any_log_and_skips_mismatched_keys(
    registry: ProjectionRegistry,
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit(client_visible=True))
    values = registry.view_checkpoint(
        {
            "test/marks": {"ver": 1, "seq": 4, "val": {"marks": ["stored"]}},
            "test/count": {"ver": 99, "seq": 4, "val": 5},
        }
    )
    assert values == {"test/marks": {"marks": ["stored"]}}
    assert registry.view_checkpoint({}) == {}


def test_view_checkpoint_and_restore_exclude_host_only_state_while_retaining_its_checkpoint(
    registry: ProjectionRegistry,
) -> None:
    registry.register(marks_unit())
    registry.register(count_unit())
    rows = {
        "test/marks": {"ver": 1, "seq": 4, "val": {"marks": ["stored"]}},
        "test/count": {"ver": 1, "seq": 4, "val": 5},
    }
    assert registry.view_checkpoint(rows) == {"test/marks": {"marks": ["stored"]}}
    restored = registry.restore(rows, [], 5)
    assert restored["snapshot"]["values"] == {"test/marks": {"marks": ["stored"]}}
    assert restored["checkpoint"]["test/count"] == rows["test/count"]


def test_rejects_version_matching_rows_whose_state_no_longer_matches_the_registered_schema(
    registry: ProjectionRegistry,
) -> None:
    """The view omits the key; restore raises a typed row error carrying the schema's failure."""
    registry.register(marks_unit())
    drifted = {"test/marks": {"ver": 1, "seq": 2, "val": {"marks": "not-an-array"}}}
    assert registry.view_checkpoint(drifted) == {}
    with pytest.raises(
        ProjectionRowError, match=r'^session projection "test/marks" checkpoint row does not match'
    ) as raised:
        registry.restore(drifted, [], 3)
    assert isinstance(raised.value.__cause__, ValueError)
    assert raised.value.code == "PROJECTION_ROW_INVALID"


def test_restore_rejects_a_row_claiming_events_past_the_supplied_log_end(registry: ProjectionRegistry) -> None:
    """A shrunk log: the anchored read proves the end; an empty tail throws; the full re-read refolds."""
    registry.register(count_unit())
    rows = {"test/count": {"ver": 1, "seq": 9, "val": 10}}
    floor = registry.restore_floor(rows)
    assert floor == 9
    anchored = registry.restore(rows, [turn_end(9, 2)], 9)
    assert anchored["snapshot"]["values"] == {}
    assert anchored["checkpoint"]["test/count"] == {"ver": 1, "seq": 9, "val": 10}
    with pytest.raises(ProjectionRestoreError, match="re-read from seq 0"):
        registry.restore(rows, [], 9)
    restored = registry.restore(rows, [ev(0, "turn/start", {"turn": 1}), turn_end(1, 1)], 0)
    assert restored["snapshot"] == {"asOfSeq": 1, "values": {}}
    assert restored["checkpoint"]["test/count"] == {"ver": 1, "seq": 1, "val": 2}


def test_fails_loud_when_a_unit_view_violates_its_own_schema(registry: ProjectionRegistry, session: Session) -> None:
    """An accidentally async view returns an awaitable, which is not JSON: the snapshot raises."""

    async def view(state: Any) -> Any:
        return {"marks": []}

    registry.register(marks_unit(view=view))
    with pytest.raises(ProjectionViewError, match="its view returned an awaitable") as raised:
        registry.snapshot(session)
    assert raised.value.code == "PROJECTION_VIEW_INVALID"


# --- beyond the original's inventory ----------------------------------------------------------------


def test_a_view_that_is_not_lossless_json_is_never_served(registry: ProjectionRegistry, session: Session) -> None:
    registry.register(marks_unit(view=lambda state: {"marks": {"a", "b"}}))
    with pytest.raises(ProjectionViewError, match=r'"test/marks" cannot be served: its view is not lossless JSON'):
        registry.snapshot(session)
    with pytest.raises(ProjectionViewError):
        registry.view_checkpoint({"test/marks": {"ver": 1, "seq": -1, "val": None}})


def test_a_served_view_is_detached_from_the_state(registry: ProjectionRegistry, session: Session) -> None:
    """A view that returns its state as is still cannot hand out the cell: the served value is a copy."""
    registry.register(marks_unit(view=lambda state: state))
    mark(session, ["a"])
    value = registry.snapshot(session)["values"]["test/marks"]
    assert value == {"marks": ["a"]}
    assert value is not registry.state_of(session, "test/marks")


def test_states_are_frozen_so_a_reducer_that_mutates_its_input_is_caught(
    registry: ProjectionRegistry, session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    """The second mark makes the reducer append to the state it was given: a typed failure, not drift.

    The failure is recorded at that event for that session: later reads raise it (cause: FrozenError),
    other units keep folding, and the eager drive's failure is logged by the store.
    """

    def mutating(state: Any, event: Any) -> Any:
        if event["type"] != MARK:
            return state
        if state is None:
            return {"marks": list(event["data"]["marks"])}
        state["marks"].append(event["data"]["marks"][0])
        return state

    registry.register(marks_unit(reduce=mutating))
    registry.register(count_unit())
    registry.on_changed(lambda *args: None)
    mark(session, ["a"])
    assert registry.state_of(session, "test/marks") == {"marks": ["a"]}
    with pytest.raises(FrozenError):
        registry.state_of(session, "test/marks")["marks"].append("x")
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        bad = mark(session, ["b"])
    assert "session/event listener threw: ProjectionReducerError" in caplog.text
    session.append("turn/start", {"turn": 1})
    with pytest.raises(
        ProjectionReducerError, match=rf'"test/marks" reducer mutated its input at seq {bad.seq}'
    ) as raised:
        registry.snapshot(session)
    assert isinstance(raised.value.__cause__, FrozenError)
    with pytest.raises(ProjectionReducerError):
        registry.checkpoint(session)
    assert registry.state_of(session, "test/count") == 3


def test_a_lazily_folded_mutating_reducer_fails_the_same_way(registry: ProjectionRegistry, session: Session) -> None:
    """Without a listener the cells fold at the read: the same typed failure names the same event."""

    def mutating(state: Any, event: Any) -> Any:
        if state is not None and event["type"] == MARK:
            state["marks"].append("x")
            return state
        return event["data"] if event["type"] == MARK else state

    registry.register(marks_unit(reduce=mutating))
    mark(session, ["a"])
    bad = mark(session, ["b"])
    with pytest.raises(ProjectionReducerError, match=rf"mutated its input at seq {bad.seq} \(test/mark\)"):
        registry.snapshot(session)


def test_a_state_that_is_not_lossless_json_fails_at_the_event_that_produced_it(
    registry: ProjectionRegistry, session: Session
) -> None:
    registry.register(
        marks_unit(reduce=lambda state, event: {"marks": float("nan")} if event["type"] == MARK else state)
    )
    session.append("turn/start", {"turn": 1})
    bad = mark(session, ["a"])
    with pytest.raises(
        ProjectionStateError, match=rf'"test/marks" state is not lossless JSON after seq {bad.seq}'
    ) as raised:
        registry.checkpoint(session)
    assert raised.value.code == "PROJECTION_STATE_NOT_JSON"


def test_an_initial_state_that_is_not_lossless_json_is_refused(registry: ProjectionRegistry, session: Session) -> None:
    """The cache's precondition (a Map state in the original's test): refused before any checkpoint row."""
    registry.register(count_unit(initial=lambda: {1: "not a string key"}))
    with pytest.raises(ProjectionStateError, match="after its initial state"):
        registry.checkpoint(session)
    with pytest.raises(ProjectionStateError):
        registry.restore({}, [], 0)


def test_a_raising_reducer_fails_only_its_own_unit(registry: ProjectionRegistry, session: Session) -> None:
    def explode(state: Any, event: Any) -> Any:
        if event["type"] == MARK:
            raise KeyError("boom")
        return state

    registry.register(marks_unit(reduce=explode))
    registry.register(count_unit())
    mark(session, ["a"])
    with pytest.raises(
        ProjectionReducerError, match=r"reducer failed at seq 0 \(test/mark\): KeyError: 'boom'"
    ) as raised:
        registry.state_of(session, "test/marks")
    assert raised.value.code == "PROJECTION_REDUCER_FAILED"
    assert registry.state_of(session, "test/count") == 1
    with pytest.raises(ProjectionReducerError, match="reducer failed at seq 0"):
        registry.restore({}, [ev(0, MARK, {"marks": []})], 0)


def test_a_failing_change_listener_is_contained_and_logged(
    registry: ProjectionRegistry, session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    registry.register(marks_unit())
    seen: list[int] = []

    def broken(*args: Any) -> None:
        raise RuntimeError("listener bug")

    registry.on_changed(broken)
    registry.on_changed(lambda _session, _key, _value, seq: seen.append(seq))
    with caplog.at_level(logging.WARNING, logger="agentlog"):
        event = mark(session, ["a"])
    assert seen == [event.seq]
    assert 'session "projected": session projection change listener threw: RuntimeError: listener bug' in caplog.text
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["a"]}


def test_appends_pay_nothing_while_no_change_listener_is_registered(store: SessionStore, session: Session) -> None:
    """The eager drive is held only while it is observable; reads fold the events they have not seen."""
    calls: list[int] = []

    def counting(state: int, event: Any) -> int:
        calls.append(event["seq"])
        return state + 1

    registry = ProjectionRegistry(store)
    registry.register(count_unit(reduce=counting))
    for turn in range(1, 4):
        session.append("turn/start", {"turn": turn})
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    assert calls == []
    assert registry.state_of(session, "test/count") == 6
    assert calls == [0, 1, 2, 3, 4, 5]
    dispose = registry.on_changed(lambda *args: None)
    session.append("turn/start", {"turn": 4})
    assert calls[-1] == 6  # driven eagerly now
    dispose()
    session.append("turn/end", {"turn": 4, "reason": {"kind": "completed"}})
    assert calls[-1] == 6
    assert registry.checkpoint(session)["test/count"] == {"ver": 1, "seq": 7, "val": 8}


def test_a_read_inside_the_publication_does_not_swallow_the_change_notification(
    store: SessionStore, session: Session
) -> None:
    """A store listener that reads the registry before the drive sees the event folds it first; the
    drive still notifies that event's change, once, with its seq, and the cut includes the event."""
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    cuts: list[Any] = []
    store.on_event(lambda changed, event: cuts.append(registry.snapshot(changed)))  # before the drive's subscription
    seen: list[tuple[Any, int]] = []
    registry.on_changed(lambda _session, _key, value, seq: seen.append((value, seq)))
    first = mark(session, ["a"])
    session.append("turn/start", {"turn": 1})
    second = mark(session, ["b"])
    assert seen == [({"marks": ["a"]}, first.seq), ({"marks": ["b"]}, second.seq)]
    assert [cut["asOfSeq"] for cut in cuts] == [0, 1, 2]
    assert cuts[-1]["values"]["test/marks"] == {"marks": ["b"]}


def test_a_unit_registered_mid_stream_folds_the_prefix_before_the_triggering_event(
    registry: ProjectionRegistry, session: Session
) -> None:
    """§2.3: the drive builds a missing cell from the events before the event it is folding."""
    registry.register(marks_unit())
    registry.on_changed(lambda *args: None)
    seen: list[tuple[str, Any, int]] = []
    registry.on_changed(
        lambda _session, key, value, seq: seen.append((key, value, seq)) if key == "test/count" else None
    )
    for turn in (1, 2):
        session.append("turn/start", {"turn": turn})
    registry.register(count_unit(client_visible=True))
    event = session.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    assert seen == [("test/count", 3, event.seq)]


def test_dispose_detaches_the_store(registry: ProjectionRegistry, session: Session) -> None:
    registry.register(marks_unit())
    seen: list[int] = []
    registry.on_changed(lambda _session, _key, _value, seq: seen.append(seq))
    mark(session, ["a"])
    registry.dispose()
    mark(session, ["b"])
    assert seen == [0]
    assert registry.snapshot(session)["values"]["test/marks"] == {"marks": ["b"]}  # reads still fold


def test_attach_returns_a_detacher(store: SessionStore, session: Session) -> None:
    registry = ProjectionRegistry()
    registry.register(marks_unit())
    seen: list[int] = []
    registry.on_changed(lambda _session, _key, _value, seq: seen.append(seq))
    mark(session, ["unseen"])
    detach = registry.attach(store)
    mark(session, ["seen"])
    detach()
    detach()
    mark(session, ["unseen again"])
    assert seen == [1]


def test_register_refuses_what_is_not_a_unit(registry: ProjectionRegistry) -> None:
    with pytest.raises(ProjectionUnitError, match="ProjectionUnit instances"):
        registry.register(object())  # type: ignore[arg-type]
    with pytest.raises(ProjectionUnitError, match="key must be a string"):
        registry.register(marks_unit(key=7))


def test_restore_treats_a_malformed_row_as_unusable(registry: ProjectionRegistry) -> None:
    """A row that is not ``{ver, seq, val}`` with integer ``ver``/``seq`` is never seeded from."""
    registry.register(count_unit())
    for row in ({"ver": 1, "seq": "3", "val": 4}, {"ver": True, "seq": 3, "val": 4}, {"ver": 1, "seq": 3}, [1, 3, 4]):
        assert registry.restore_floor({"test/count": row}) == 0
        with pytest.raises(ProjectionRestoreError):
            registry.restore({"test/count": row}, [turn_end(4, 1)], 4)
        restored = registry.restore({"test/count": row}, [ev(0, "turn/start", {"turn": 1}), turn_end(1, 1)], 0)
        assert restored["checkpoint"]["test/count"] == {"ver": 1, "seq": 1, "val": 2}


def test_with_builtin_units_registers_the_five_units_in_the_original_order(session: Session) -> None:
    registry = ProjectionRegistry.with_builtin_units()
    assert [unit.key for unit in registry.units] == [
        "tokenUsage",
        "contextPressure",
        "contextBreakdown",
        "sessionStats",
        "title",
    ]
    assert registry.units == (
        TOKEN_USAGE_UNIT,
        CONTEXT_PRESSURE_UNIT,
        CONTEXT_BREAKDOWN_UNIT,
        SESSION_STATS_UNIT,
        TITLE_UNIT,
    )
    assert registry.units == BUILTIN_UNITS
    assert registry.snapshot(session) == {
        "asOfSeq": -1,
        "values": {
            "tokenUsage": {"uncachedInputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0, "cacheWriteTokens": 0},
            "contextPressure": {},
            "contextBreakdown": {"systemTokens": 0, "toolsTokens": 0, "messageTokens": 0},
            "sessionStats": {
                "turns": 0,
                "steps": 0,
                "llmMs": 0,
                "toolMs": 0,
                "ttftMs": 0,
                "ttftSteps": 0,
                "decodeMs": 0,
                "decodeTokens": 0,
            },
            "title": None,
        },
    }


# --- property: eager drive = lazy cell = restore from any cut ---------------------------------------

PROVIDER = {"provider": "test", "model": "test-model"}


def _price(type: str, data: Any) -> int:
    """The heuristic price of a surface event's message (what a shadow-price event states)."""
    message = derive_event_message({"type": type, "data": data})
    return 0 if message is None else estimate_message(message)


@st.composite
def agent_logs(draw: st.DrawFn) -> list[tuple[int, str, Any, Any]]:
    """A valid agent log as ``(clock delta, type, data, intent)``: turns of steps with streamed chunks,
    usage chunks and messages, tool calls settled in any order, titles, headers and context reports, and
    between turns summaries that replace a surface range (metered by a shadow price, or not)."""
    entries: list[tuple[int, str, Any, Any]] = []
    nodes: list[int] = []  # the surface, tracked as the log is drawn (seq = position in a fresh session)
    prices: dict[int, int] = {}
    delta = st.integers(min_value=-5, max_value=400)  # a little clock skew exercises the clamps

    def add(type: str, data: Any, intent: Any = None) -> None:
        seq = len(entries)
        if intent is not None:
            prices[seq] = _price(type, data)
            op = intent["surfaceOp"]
            if op == "append":
                nodes.append(seq)
            else:
                i, j = nodes.index(op["start"]), nodes.index(op["end"])
                nodes[i : j + 1] = [seq]
        entries.append((draw(delta), type, data, intent))

    for turn in range(1, draw(st.integers(min_value=0, max_value=3)) + 1):
        add("turn/start", {"turn": turn})
        add("user/message", user_message(f"question {turn}"), {"surfaceOp": "append"})
        if draw(st.booleans()):
            add(
                "session/title",
                {"title": f"title {draw(st.integers(0, 2))}", "messageSeqs": [], "source": {"kind": "fallback"}},
            )
        if draw(st.booleans()):
            add("request/context", {"contextWindow": draw(st.integers(1_000, 200_000))})
        if draw(st.booleans()):
            header: dict[str, Any] = {"config": PROVIDER, "system": "s" * draw(st.integers(0, 40))}
            add("request/header", {"header": header, "reason": "change"})
        for step in range(1, draw(st.integers(min_value=0, max_value=3)) + 1):
            add("step/start", {"turn": turn, "step": step})
            for _ in range(draw(st.integers(min_value=0, max_value=3))):
                chunk = draw(
                    st.sampled_from(
                        [
                            text_delta(0, ""),
                            text_delta(0, "x"),
                            reasoning_delta(0, "r"),
                            tool_call_delta(1, "c", ""),
                            tool_call_delta(1, "c", "", name="read"),
                            {
                                "type": "usage",
                                "usage": token_usage(draw(st.integers(0, 900)), draw(st.integers(0, 90))),
                            },
                        ]
                    )
                )
                add("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
            if draw(st.booleans()):  # a cancelled step assembles no message
                calls = [f"t{turn}-{step}-{n}" for n in range(draw(st.integers(min_value=0, max_value=2)))]
                content = [text_block("answer"), *(tool_call_block(call, "read", "{}") for call in calls)]
                data: dict[str, Any] = {"turn": turn, "step": step, "message": assistant_message(content, **PROVIDER)}
                if draw(st.booleans()):
                    data["usage"] = token_usage(draw(st.integers(0, 900)), draw(st.integers(0, 90)))
                add("assistant/message", data, {"surfaceOp": "append", "sourceEventSeqs": []})
                for call in calls:
                    add("tool/call", {"turn": turn, "step": step, "callId": call, "name": "read", "arguments": "{}"})
                for call in draw(st.permutations(calls)):
                    add(
                        "tool/result",
                        {"turn": turn, "step": step, "message": tool_result_message(call, "ok")},
                        {"surfaceOp": "append"},
                    )
            add("step/end", {"turn": turn, "step": step})
        add("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
        summarize: bool = draw(st.booleans())
        if nodes and summarize:
            i = draw(st.integers(0, len(nodes) - 1))
            j = draw(st.integers(i, len(nodes) - 1))
            shadowed = nodes[i : j + 1]
            if draw(st.booleans()):
                add(
                    "compaction/summary",
                    {
                        "compactionId": f"summary-{turn}",
                        "summary": [{"type": "text", "text": "summary"}],
                        "shadowedRange": {"start": shadowed[0], "end": shadowed[-1]},
                        "shadowedSeqs": shadowed,
                        "shadowedTokenCount": sum(prices[seq] for seq in shadowed),
                        "provider": "mock",
                        "model": "mock",
                    },
                )
            add(
                "user/message",
                user_message(f"summary of turn {turn}", source={"kind": "plugin", "plugin": "test"}),
                {
                    "surfaceOp": {"op": "replace", "start": shadowed[0], "end": shadowed[-1]},
                    "sourceEventSeqs": shadowed,
                },
            )
    return entries


def _replay(session: Any, clock: Clock, log: list[tuple[int, str, Any, Any]]) -> Iterator[None]:
    """Append ``log`` (an :func:`agent_logs` draw) to ``session``, advancing ``clock``; yields after each event."""
    for delta, type, data, intent in log:
        clock.now += delta
        if intent is None:
            session.append(type, data)
        else:
            session.append(type, data, intent)
        yield


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=agent_logs(), cut_fraction=st.floats(min_value=0, max_value=1))
def test_eager_drive_lazy_cell_and_restore_from_a_random_cut_agree(
    log: list[tuple[int, str, Any, Any]], cut_fraction: float
) -> None:
    """For random valid logs the three ways to reach a cut give the same views and checkpoint rows."""
    clock = Clock()
    store = SessionStore(now=clock)
    eager = ProjectionRegistry.with_builtin_units(store)
    last_pushed: dict[str, Any] = {}
    eager.on_changed(lambda _session, key, value, _seq: last_pushed.__setitem__(key, value))
    session = store.create("property")
    for _ in _replay(session, clock, log):
        pass
    events = list(session.events)

    snapshot = eager.snapshot(session)
    rows = eager.checkpoint(session)
    lazy = ProjectionRegistry.with_builtin_units()
    assert lazy.snapshot(session) == snapshot
    assert lazy.checkpoint(session) == rows
    for key, value in last_pushed.items():
        assert snapshot["values"][key] == value  # the feed's last value per key is the current one

    cut = round(cut_fraction * len(events)) - 1  # -1 .. last seq
    stored = orjson.loads(orjson.dumps(lazy.restore({}, events[: cut + 1], 0)["checkpoint"]))
    assert all(row["seq"] == cut for row in stored.values())
    floor = lazy.restore_floor(stored)
    assert floor == max(cut, 0)
    restored = lazy.restore(stored, events[floor:], floor)
    assert restored["snapshot"] == snapshot
    assert restored["checkpoint"] == rows
    assert lazy.view_checkpoint(orjson.loads(orjson.dumps(rows))) == snapshot["values"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log=agent_logs())
def test_the_built_in_drive_picks_every_reducer_that_changes(log: list[tuple[int, str, Any, Any]]) -> None:
    """The drive of exactly the built-in units runs only the reducers an event can change (the picks);
    copies of the same units are driven the generic way, every reducer on every event. Both give the
    same change feed (keys, values, seqs, order) and the same states after every event."""
    clock = Clock()
    store = SessionStore(now=clock)
    picked = ProjectionRegistry.with_builtin_units(store)
    generic = ProjectionRegistry(store)
    for unit in BUILTIN_UNITS:
        generic.register(dataclasses.replace(unit))  # equal, but not the built-in objects
    feeds: tuple[list[Any], list[Any]] = ([], [])
    picked.on_changed(lambda _s, key, value, seq: feeds[0].append((key, value, seq)))
    generic.on_changed(lambda _s, key, value, seq: feeds[1].append((key, value, seq)))
    session = store.create("picks")
    for _ in _replay(session, clock, log):
        assert picked.checkpoint(session) == generic.checkpoint(session)
    assert feeds[0] == feeds[1]
    assert picked._builtin and not generic._builtin


def test_reads_from_another_thread_see_consistent_cuts_while_appends_are_driven() -> None:
    """Cells are only touched under the session's lock: a reader thread never sees a torn cut (a count
    that disagrees with ``asOfSeq``), and the final values equal a fresh fold."""
    store = SessionStore(now=Clock())
    registry = ProjectionRegistry(store)
    registry.register(count_unit(client_visible=True))
    registry.register(marks_unit())
    registry.on_changed(lambda *args: None)
    session = store.create("threaded")
    done = threading.Event()
    torn: list[Any] = []

    def read() -> None:
        while not done.is_set():
            cut = registry.snapshot(session)
            if cut["values"]["test/count"] != cut["asOfSeq"] + 1:
                torn.append(cut)

    reader = threading.Thread(target=read)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: a race would show
    reader.start()
    try:
        for n in range(300):
            mark(session, [str(n)])
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(interval)
    assert torn == []
    fresh = ProjectionRegistry()
    fresh.register(count_unit(client_visible=True))
    fresh.register(marks_unit())
    assert (
        fresh.snapshot(session)
        == registry.snapshot(session)
        == {
            "asOfSeq": 299,
            "values": {"test/count": 300, "test/marks": {"marks": ["299"]}},
        }
    )


def test_attaching_a_store_twice_drives_its_events_once(store: SessionStore, session: Session) -> None:
    """The attachment is counted: one notification per change, and the drive stops after both detach."""
    registry = ProjectionRegistry(store)
    registry.register(marks_unit())
    seen: list[int] = []
    registry.on_changed(lambda _session, _key, _value, seq: seen.append(seq))
    detach = registry.attach(store)
    mark(session, ["a"])
    assert seen == [0]
    detach()
    detach()  # counts once
    mark(session, ["b"])
    assert seen == [0, 1]  # the constructor's attachment still holds
    registry.dispose()
    mark(session, ["c"])
    assert seen == [0, 1]


def test_cells_are_weakly_keyed_by_session() -> None:
    """A registry that has served a session does not keep it (or its log) alive."""
    registry = ProjectionRegistry.with_builtin_units()
    registry.on_changed(lambda *args: None)
    session = Session.create("transient", now=Clock())
    session.append("turn/start", {"turn": 1})
    assert registry.snapshot(session)["asOfSeq"] == 0
    alive = weakref.ref(session)
    del session
    gc.collect()
    assert alive() is None
