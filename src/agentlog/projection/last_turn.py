"""The ``lastTurn`` projection unit (agentlog addition): how the log's newest turn stands.

A listing needs to tell a session that ended cleanly from one a resume must repair (its newest turn is
still open: a crash or a kill came before ``turn/end``) and from one whose newest turn ended
interrupted. Reading each log's end to find that out costs one log read per listed session; this unit
keeps the answer in the projection cache beside the other listing figures, so the inspector's sessions
page (and ``stats --json``) serve it with no log read. It looks at the whole log, not a bounded tail:
a turn left open thousands of events ago is still open.

The view is ``None`` (no turn yet), ``"open"``, ``"ended"`` or ``"interrupted"`` (the ``turn/end``
reason's ``kind``). A torn last line is not a fact of the log and is not seen here: a backend that can
tear tells it by probing the file's end. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from ..errors import ProjectionRowError
from ..kernel.events import TURN_END, TURN_START, Event
from .units import ProjectionUnit

__all__ = [
    "LAST_TURN_KEY",
    "LAST_TURN_STATE_VERSION",
    "LAST_TURN_UNIT",
    "LastTurn",
    "ended_interrupted",
    "last_turn_of",
]

LAST_TURN_KEY: Final = "lastTurn"
LAST_TURN_STATE_VERSION: Final = 1

LastTurn = Literal["open", "ended", "interrupted"] | None

_STATES: Final = frozenset({None, "open", "ended", "interrupted"})


def ended_interrupted(turn_end_data: Mapping[str, Any]) -> bool:
    """Whether a ``turn/end``'s data says the turn was interrupted (its ``reason.kind``)."""
    reason = turn_end_data.get("reason")
    return isinstance(reason, Mapping) and reason.get("kind") == "interrupted"


def last_turn_of(values: Mapping[str, Any]) -> LastTurn:
    """The ``lastTurn`` view among served ``values`` (``None`` when absent: no turn, or not served)."""
    value = values.get(LAST_TURN_KEY)
    return value if value in _STATES else None


def _reduce(state: LastTurn, event: Event) -> LastTurn:
    etype = event["type"]
    if etype == TURN_START:
        return "open"
    if etype == TURN_END:
        return "interrupted" if ended_interrupted(event["data"]) else "ended"
    return state  # returned as is: the registry's change feed compares with ``is``


def _parse(value: object) -> LastTurn:
    if (value is None or type(value) is str) and value in _STATES:
        return value  # type: ignore[return-value]  # checked against the four states just above
    raise ProjectionRowError(f'lastTurn projection state must be null, "open", "ended" or "interrupted", got {value!r}')


LAST_TURN_UNIT: Final[ProjectionUnit[LastTurn, LastTurn]] = ProjectionUnit(
    key=LAST_TURN_KEY,
    state_version=LAST_TURN_STATE_VERSION,
    initial=lambda: None,
    reduce=_reduce,
    view=lambda state: state,
    client_visible=True,
    parse_state=_parse,
)
"""How the newest turn stands (see the module docstring)."""
