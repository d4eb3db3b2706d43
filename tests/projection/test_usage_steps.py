"""The ``usageSteps`` unit: it counts the model steps whose usage the log records, once each, so ``ls``
and ``stats`` tell a real token total from zero buckets of a log that never reported usage; a fold
resumed from a checkpoint row at any cut equals the fresh fold (the cache is possibly stale, never wrong)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import ProjectionRowError
from agentlog.projection.listing import command_registry
from agentlog.projection.usage_steps import USAGE_STEPS_UNIT, usage_known


def _step(session: al.Session, turn: int, step: int, *, chunk_usage: bool, message_usage: bool) -> None:
    session.append("step/start", {"turn": turn, "step": step})
    usage = al.token_usage(7, 3)
    if chunk_usage:
        session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": usage}})
    message = al.assistant_message([al.text_block("ok")], provider="p", model="m", id=f"a{turn}.{step}")
    data: dict[str, Any] = {"turn": turn, "step": step, "message": message}
    if message_usage:
        data["usage"] = usage
    session.append("assistant/message", data, {"surfaceOp": "append"})
    session.append("step/end", {"turn": turn, "step": step})


# Each turn: a list of steps, each (usage chunk?, usage on the message?).
PLANS = st.lists(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=3), max_size=4)


def _session(plan: list[list[tuple[bool, bool]]]) -> al.Session:
    session = al.SessionStore().create("u")
    for turn, steps in enumerate(plan, start=1):
        session.append("turn/start", {"turn": turn})
        session.append("user/message", al.user_message(f"q{turn}", id=f"u{turn}"), {"surfaceOp": "append"})
        for step, (chunk_usage, message_usage) in enumerate(steps, start=1):
            _step(session, turn, step, chunk_usage=chunk_usage, message_usage=message_usage)
        session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
    return session


@settings(max_examples=60, deadline=None)
@given(plan=PLANS, cut=st.integers(min_value=0, max_value=60))
def test_usage_steps_counts_each_reporting_step_once_and_resumes_from_any_cut(
    plan: list[list[tuple[bool, bool]]], cut: int
) -> None:
    session = _session(plan)
    events = list(session.events)
    expected = sum(1 for steps in plan for chunk_usage, message_usage in steps if chunk_usage or message_usage)
    assert USAGE_STEPS_UNIT.view(USAGE_STEPS_UNIT.fold(events)) == expected
    snapshot = command_registry().snapshot(session)
    assert snapshot["values"]["usageSteps"] == expected
    steps = sum(len(turn) for turn in plan)
    assert usage_known(snapshot["values"]) == (expected > 0 or steps == 0)
    # A row at any cut, thawed as the cache stores it, continues to the same figure.
    cut = min(cut, len(events))
    row: Any = al.thaw(USAGE_STEPS_UNIT.fold(events[:cut]))
    resumed = USAGE_STEPS_UNIT.fold_from(USAGE_STEPS_UNIT.parse_state(row), events[cut:])
    assert USAGE_STEPS_UNIT.view(resumed) == expected


@pytest.mark.parametrize(
    "state", [None, 3, {"steps": -1, "last": None}, {"steps": 1, "last": [1]}, {"steps": 1, "last": None, "x": 0}]
)
def test_usage_steps_refuses_a_malformed_row(state: object) -> None:
    with pytest.raises(ProjectionRowError):
        USAGE_STEPS_UNIT.parse_state(state)


def test_tokens_are_unknown_without_the_figures_that_tell_them_apart() -> None:
    assert not usage_known({})
    assert not usage_known({"usageSteps": 0, "sessionStats": {"steps": 2}})
    assert usage_known({"usageSteps": 0, "sessionStats": {"steps": 0}})
    assert usage_known({"usageSteps": 1, "sessionStats": {"steps": 2}})
