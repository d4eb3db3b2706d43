"""The registry ``agentlog``'s commands share, and keeping a stored session's cache record current.

The commands compose the five built-in units plus four agentlog units (:func:`command_registry`):
``lastActivity`` (the time of the newest event: ``ls``'s "last activity"), ``usageSteps``
(:mod:`~agentlog.projection.usage_steps`: whether a token total is known at all), ``labels``
(:mod:`~agentlog.projection.labels`: the user labels and tags ``ls --label``/``--tag`` filter on) and
``lastTurn`` (:mod:`~agentlog.projection.last_turn`: open, ended or interrupted, the inspector's status).
It lives here, below the CLI, so every writer agentlog ships can keep the store's cache as
``agentlog run`` does without importing the command line: :func:`cache_stored_session` is what a writer
calls once its log is flushed (``agentlog import``, the openai-agents adapter when it owns its store).
Code that never calls it is still listed truly: ``ls`` folds a log whose record is missing or stale.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from ..errors import InvalidOptionError, describe_error
from ..kernel.events import Event
from ..kernel.store import SessionStore
from .cache import InlineWriter, ProjectionCache
from .cache_storage import cache_path_for, open_cache_storage
from .labels import LABELS_UNIT
from .last_turn import LAST_TURN_UNIT
from .registry import ProjectionRegistry
from .units import ProjectionUnit
from .usage_steps import USAGE_STEPS_UNIT

__all__ = ["LAST_ACTIVITY_KEY", "LAST_ACTIVITY_UNIT", "cache_stored_session", "command_registry"]

logger = logging.getLogger("agentlog.projection.cache")

LAST_ACTIVITY_KEY: Final = "lastActivity"


def _last_activity_reduce(state: int | None, event: Event) -> int | None:
    when = event.get("time")
    return state if type(when) is not int or when == state else when


def _parse_last_activity(value: object) -> int | None:
    if value is None or (type(value) is int and value >= 0):
        return value
    raise InvalidOptionError(f"lastActivity projection state must be a non-negative integer or null, got {value!r}")


LAST_ACTIVITY_UNIT: Final[ProjectionUnit[int | None, int | None]] = ProjectionUnit(
    key=LAST_ACTIVITY_KEY,
    state_version=1,
    initial=lambda: None,
    reduce=_last_activity_reduce,
    view=lambda state: state,
    client_visible=True,
    parse_state=_parse_last_activity,
)
"""The ``time`` (ms) of the newest event, ``None`` for an empty log: ``ls``'s "last activity" column,
served from the cache like the other units (the built-in five carry no event times)."""


def command_registry(store: SessionStore | None = None) -> ProjectionRegistry:
    """The registry every command uses: the five built-in units, then :data:`LAST_ACTIVITY_UNIT`,
    ``usageSteps``, ``labels`` (:mod:`~agentlog.projection.labels`) and ``lastTurn``."""
    registry = ProjectionRegistry.with_builtin_units(store)
    registry.register(LAST_ACTIVITY_UNIT)
    registry.register(USAGE_STEPS_UNIT)
    registry.register(LABELS_UNIT)
    registry.register(LAST_TURN_UNIT)
    return registry


def cache_stored_session(coordinator: Any, session_id: str) -> None:
    """Bring ``session_id``'s record in the store's cache up to its stored log (fail-soft: only warns).

    Call it after the log was flushed. It is the cold read ``ls`` would do (the rows plus the stored
    tail past them; the whole log when there is no record), written back bound to the stored
    revision, so the next ``ls`` serves the record without reading the log. ``coordinator`` is the
    writer's :class:`~agentlog.persistence.PersistenceCoordinator` (only its backend and reads are
    used: a live session is not touched). The cache file is created beside the store when missing,
    as ``agentlog run`` creates it.
    """
    if cache_path_for(coordinator.backend) is None:
        return  # an in-process store: its cache would be a throw-away memory medium
    try:
        storage = open_cache_storage(coordinator.backend)
        cache = ProjectionCache(
            command_registry(), coordinator, storage, writer=InlineWriter(), store=SessionStore(), owns_storage=True
        )
        try:
            cache.cold_snapshot(session_id)
        finally:
            cache.close()
    except Exception as err:  # the cache is never required for correctness
        logger.warning('session projection cache: record for "%s" not written: %s', session_id, describe_error(err))
