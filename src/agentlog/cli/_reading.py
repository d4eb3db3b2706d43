"""Reading stored sessions without writing: the helpers the read and agent commands share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    AgentlogError,
    StoreNotFoundError,
)
from ..kernel._gc import gc_paused
from ..kernel.events import TURN_END
from ..kernel.jsonvalue import thaw
from ..kernel.store import SessionStore
from ..persistence.backend import Backend, validate_session_id
from ..persistence.coordinator import PersistenceCoordinator
from .options import StoreOptions
from .render import render_error


def _require_store(storage: Backend, session_id: str) -> None:
    """Raise ``STORE_NOT_FOUND`` now if the store is missing (a backend may report it only when first
    used); any other problem is the session's own and is reported with it."""
    try:
        storage.read_revision(session_id)
    except StoreNotFoundError:
        storage.close()
        raise
    except AgentlogError:
        pass


def _reader(storage: Backend) -> PersistenceCoordinator:
    """A coordinator used only to read (no session is made live, so nothing is written or locked)."""
    return PersistenceCoordinator(SessionStore(), storage)


def _last_turn(events: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    for event in reversed(events):
        if event["type"] == TURN_END:
            return {"turn": event["data"].get("turn"), "reason": thaw(event["data"].get("reason"))}
    return None


def _read_view(session_id: str, opts: StoreOptions) -> tuple[Any, Any]:
    """``(header, SessionView)`` of a stored session, read without writing (a cold view is balanced)."""
    header, view, _stored = _open_view(session_id, opts, with_stored=False)
    return header, view


@dataclass(frozen=True, slots=True)
class StoredFacts:
    """What ``show --log`` needs of the stored prefix beside the balanced view: the last stored seq
    (``-1`` when nothing is stored) and whether a torn tail follows it."""

    last_seq: int
    torn: bool


def _open_view(session_id: str, opts: StoreOptions, *, with_stored: bool) -> tuple[Any, Any, StoredFacts | None]:
    """``(header, SessionView, stored facts or None)``: the balanced view and, on request, the facts of
    the stored prefix itself, so a caller can tell stored events from the closers a resume would add.

    The stored prefix is read first and dropped once its facts are taken, so a big session is never in
    memory twice (the prefix and the view). Its read raises what the view's own read would raise, so
    the reported error is unchanged; a session that is not stored is left to the view to report.
    """
    try:
        reader = _reader(opts.open_backend(read_only=True))
        try:
            facts = None
            if with_stored:
                validate_session_id(reader.backend, session_id)  # as the view's read checks it, first
                with gc_paused():  # as the view's own read: a big prefix is a lot of young containers
                    stored = reader.backend.load_stored(session_id)
                if stored is not None:
                    last = stored.events[-1]["seq"] if stored.events else -1
                    facts = StoredFacts(last, stored.torn_marker is not None)
                del stored
            view = reader.view(session_id)
            if with_stored and facts is None:
                facts = StoredFacts(-1, False)
        finally:
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    return view.header, view, facts
