"""Reading stored sessions without writing: the helpers the read and agent commands share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import (
    AgentlogError,
    StoreNotFoundError,
)
from ..kernel.events import TURN_END
from ..kernel.jsonvalue import thaw
from ..kernel.store import SessionStore
from ..persistence.backend import Backend
from ..persistence.coordinator import PersistenceCoordinator, StoredView
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


def _open_view(session_id: str, opts: StoreOptions, *, with_stored: bool) -> tuple[Any, Any, StoredView | None]:
    """``(header, SessionView, StoredView or None)``: the balanced view and, on request, the facts of
    the stored prefix itself, so a caller can tell stored events from the closers a resume would add.

    Both come from one read (:meth:`PersistenceCoordinator.stored_view`): the validated read behind
    the view knows the stored prefix's length and torn tail, so a big session is read once.
    """
    try:
        reader = _reader(opts.open_backend(read_only=True))
        try:
            stored = reader.stored_view(session_id) if with_stored else None
            view = stored.view if stored is not None else reader.view(session_id)
        finally:
            reader.close()
    except AgentlogError as err:
        render_error(err, opts.as_json)
    return view.header, view, stored
