"""The ``lastTurn`` unit: how the newest turn stands (open, ended, interrupted) over the whole log, however
far back its ``turn/start`` lies, so the sessions page serves a status from the cache; a fold resumed from a
checkpoint row at any cut equals the fresh fold (the cache is possibly stale, never wrong)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import ProjectionRowError
from agentlog.projection.last_turn import LAST_TURN_UNIT
from agentlog.projection.listing import command_registry

# Each turn: how many plain user messages it holds, and how it ends (None: it is left open; only the last
# turn of a legal log can be).
ENDINGS = st.sampled_from(["completed", "interrupted", "error"])
PLANS = st.lists(st.tuples(st.integers(min_value=0, max_value=3), ENDINGS), max_size=4)


def _session(plan: list[tuple[int, str]], open_last: bool, trailing: int) -> al.Session:
    session = al.SessionStore().create("t")
    for turn, (messages, ending) in enumerate(plan, start=1):
        session.append("turn/start", {"turn": turn})
        for index in range(messages):
            session.append("user/message", al.user_message(f"q{turn}.{index}"), {"surfaceOp": "append"})
        if not (open_last and turn == len(plan)):
            reason: dict[str, Any] = {"kind": ending}
            if ending == "error":
                reason["error"] = {"message": "boom", "code": "E"}
            session.append("turn/end", {"turn": turn, "reason": reason})
    for index in range(trailing):  # events after the newest boundary: they change nothing
        session.append("session/title", {"title": f"t{index}", "messageSeqs": [], "source": {"kind": "user"}})
    return session


def _expected(plan: list[tuple[int, str]], open_last: bool) -> str | None:
    if not plan:
        return None
    if open_last:
        return "open"
    return "interrupted" if plan[-1][1] == "interrupted" else "ended"


@settings(max_examples=60, deadline=None)
@given(plan=PLANS, open_last=st.booleans(), trailing=st.integers(min_value=0, max_value=3), cut=st.integers(0, 40))
def test_last_turn_tells_the_newest_turn_and_resumes_from_any_cut(
    plan: list[tuple[int, str]], open_last: bool, trailing: int, cut: int
) -> None:
    session = _session(plan, open_last, trailing)
    events = list(session.events)
    expected = _expected(plan, open_last)
    assert LAST_TURN_UNIT.view(LAST_TURN_UNIT.fold(events)) == expected
    assert command_registry().snapshot(session)["values"]["lastTurn"] == expected
    cut = min(cut, len(events))
    row: Any = al.thaw(LAST_TURN_UNIT.fold(events[:cut]))
    resumed = LAST_TURN_UNIT.fold_from(LAST_TURN_UNIT.parse_state(row), events[cut:])
    assert LAST_TURN_UNIT.view(resumed) == expected


def test_a_turn_opened_long_before_the_end_is_still_open() -> None:
    session = al.SessionStore().create("long")
    session.append("turn/start", {"turn": 1})
    for index in range(1000):
        session.append("user/message", al.user_message(f"m{index}"), {"surfaceOp": "append"})
    assert command_registry().snapshot(session)["values"]["lastTurn"] == "open"


@pytest.mark.parametrize("state", ["closed", 1, "", {"state": "open"}, ["open"], True])
def test_last_turn_refuses_a_malformed_row(state: object) -> None:
    with pytest.raises(ProjectionRowError):
        LAST_TURN_UNIT.parse_state(state)


@pytest.mark.parametrize("state", [None, "open", "ended", "interrupted"])
def test_last_turn_accepts_each_state_it_writes(state: object) -> None:
    assert LAST_TURN_UNIT.parse_state(state) == state
