"""The ``usageSteps`` projection unit (agentlog addition): how many model steps reported token usage.

``tokenUsage`` (the original's unit) starts at four zero buckets and adds what steps report, so a log
in which no step ever reported usage (the openai-agents ``Session`` protocol hands over items without
usage; a transcript that keeps none; a home-made loop that never passed ``usage=``) folds to a total
of 0, which is false: tokens were spent, the log just does not say how many. This unit counts the
distinct ``(turn, step)`` pairs with a usage sample — an ``assistant/chunk`` of type ``usage`` or an
``assistant/message`` carrying ``usage``, the very samples ``tokenUsage`` adds — so a reader can tell
"0 tokens" (nothing reported by any step of a log that has steps means *unknown*) from a real total.

A legal log reports one step's samples adjacently (the ``tokenUsage`` reducer relies on the same), so
one ``last`` slot is enough to count each step once. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypedDict

from ..errors import ProjectionRowError
from ..kernel.events import ASSISTANT_CHUNK, ASSISTANT_MESSAGE, Event
from .units import ProjectionUnit

__all__ = ["USAGE_STEPS_KEY", "USAGE_STEPS_STATE_VERSION", "USAGE_STEPS_UNIT", "UsageStepsState", "usage_known"]

USAGE_STEPS_KEY: Final = "usageSteps"
USAGE_STEPS_STATE_VERSION: Final = 1


class UsageStepsState(TypedDict):
    """``steps``: distinct steps with a usage sample so far; ``last``: ``[turn, step]`` of the newest."""

    steps: int
    last: list[int] | None


def _initial() -> UsageStepsState:
    return {"steps": 0, "last": None}


def _has_usage(event: Event) -> bool:
    etype = event["type"]
    if etype == ASSISTANT_CHUNK:
        chunk = event["data"].get("chunk")
        return isinstance(chunk, Mapping) and chunk.get("type") == "usage" and chunk.get("usage") is not None
    return etype == ASSISTANT_MESSAGE and event["data"].get("usage") is not None


def _reduce(state: UsageStepsState, event: Event) -> UsageStepsState:
    etype = event["type"]
    if (etype != ASSISTANT_CHUNK and etype != ASSISTANT_MESSAGE) or not _has_usage(event):
        return state  # returned as is: the registry's change feed compares with ``is``
    data = event["data"]
    step = [data["turn"], data["step"]]
    last = state["last"]
    if last is not None and list(last) == step:
        return state
    return {"steps": state["steps"] + 1, "last": step}


def _view(state: UsageStepsState) -> int:
    return state["steps"]


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0


def _parse(value: object) -> UsageStepsState:
    if isinstance(value, Mapping) and set(value) == {"steps", "last"} and _is_count(value["steps"]):
        last: Any = value["last"]
        if last is None:
            return {"steps": value["steps"], "last": None}
        if isinstance(last, list | tuple) and len(last) == 2 and all(_is_count(part) for part in last):
            return {"steps": value["steps"], "last": [last[0], last[1]]}
    raise ProjectionRowError(f"usageSteps projection state must be {{steps, last: [turn, step] | null}}, got {value!r}")


USAGE_STEPS_UNIT: Final[ProjectionUnit[UsageStepsState, int]] = ProjectionUnit(
    key=USAGE_STEPS_KEY,
    state_version=USAGE_STEPS_STATE_VERSION,
    initial=_initial,
    reduce=_reduce,
    view=_view,
    client_visible=True,
    parse_state=_parse,
)
"""The number of model steps whose usage the log records (see the module docstring)."""


def usage_known(values: Mapping[str, Any]) -> bool:
    """Whether the ``tokenUsage`` of a snapshot's ``values`` is the log's figure, not an unknown shown as 0.

    Known when some step reported usage, or when the log has no model step at all (then nothing was
    spent). Unknown when steps exist and none reported usage, or when ``usageSteps`` or
    ``sessionStats`` was not served (nothing to tell the two apart with).
    """
    reported = values.get(USAGE_STEPS_KEY)
    stats = values.get("sessionStats")
    if type(reported) is not int or reported < 0 or not isinstance(stats, Mapping):
        return False
    return reported > 0 or stats.get("steps") == 0
