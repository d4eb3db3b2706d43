"""Copy stored sessions from one backend to another, verified, resumable, all or nothing per session.

A user who outgrows one machine moves a JSONL or SQLite store to PostgreSQL (or back) with
:func:`copy_sessions` (``agentlog copy``). Each session is read as stored (no repair: a copy must not
write to its source), written to the target through :meth:`PersistenceCoordinator.stage` (published
whole or not at all, so a crash mid-copy leaves no partial session), then read back and compared by
:func:`events_digest`. Everything a session carries lives in its header (lineage: ``parentSession``,
``origin``, ``delegationDepth``) or its events (titles, labels), so copying both copies all of it.

Resuming is re-running: a session the target already holds with the source's digest and header is
skipped, one it holds with other content is refused (:class:`~agentlog.errors.CopyConflictError`) and the
others are copied. A torn tail of the source (a JSONL write cut short) is not durable and is left out; a
session that a writer moved while it was copied has its durable prefix, as read, copied; the report says
both.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ..errors import AgentlogError, CopyConflictError, CopyVerificationError
from ..kernel.jsoncodec import dumps
from ..kernel.jsonvalue import thaw
from ..kernel.store import SessionStore
from .backend import Backend
from .coordinator import DurableRead, PersistenceCoordinator

__all__ = ["CopiedSession", "CopyProgress", "CopyReport", "copy_sessions", "events_digest"]

COPY_BATCH_EVENTS = 4096
"""Events handed to the staged log per append (its backend splits or joins them as it writes)."""

CopyProgress = Callable[[int, int, str], None]
"""``progress(done, total, session_id)``: called after each session (copied, skipped or failed)."""

CopyStatus = Literal["copied", "skipped", "failed"]


def _sorted_keys(value: Any) -> Any:
    """``value`` with every object's keys in sorted order, built without recursion (any nesting depth)."""
    root: list[Any] = [None]
    work: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while work:
        item, parent, slot = work.pop()
        if isinstance(item, dict):
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key in sorted(item):
                copy[key] = None
                work.append((item[key], copy, key))
        elif isinstance(item, list):
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            work.extend((child, items, index) for index, child in enumerate(item))
        else:
            parent[slot] = item
    return root[0]


def _canonical(event: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: the same bytes, the slow way
        return dumps(_sorted_keys(event))


def events_digest(events: Iterable[Mapping[str, Any]]) -> str:
    """``sha256:<hex>`` over the events' canonical JSON (keys sorted, compact), one line each.

    Independent of how a backend stores an event (key order, packed chunk rows, compression): equal
    digests mean equal events in equal order, which is what a copy must keep.
    """
    digest = hashlib.sha256()
    for event in events:
        digest.update(_canonical(event))
        digest.update(b"\n")
    return f"sha256:{digest.hexdigest()}"


@dataclass
class CopiedSession:
    """What happened to one session: ``copied``, ``skipped`` (the target already held it, same digest) or
    ``failed`` (``error`` says why; nothing of it was written to the target, or a verification failed).

    ``torn``: the source ended in a torn tail, left out. ``moved``: a writer appended to the source while
    it was copied; the durable prefix read (``events`` events) was copied, a re-run cannot add the rest
    (the target then holds other content).
    """

    id: str
    status: CopyStatus
    events: int = 0
    digest: str | None = None
    torn: bool = False
    moved: bool = False
    error: AgentlogError | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"id": self.id, "status": self.status, "events": self.events, "digest": self.digest}
        if self.torn:
            document["torn"] = True
        if self.moved:
            document["moved"] = True
        if self.error is not None:
            document["error"] = {"code": self.error.code, "message": str(self.error)}
        return document


@dataclass
class CopyReport:
    """Every session a copy looked at, in order (:func:`copy_sessions`)."""

    sessions: list[CopiedSession] = field(default_factory=list)

    def _with(self, status: CopyStatus) -> list[CopiedSession]:
        return [session for session in self.sessions if session.status == status]

    @property
    def copied(self) -> list[CopiedSession]:
        return self._with("copied")

    @property
    def skipped(self) -> list[CopiedSession]:
        return self._with("skipped")

    @property
    def failed(self) -> list[CopiedSession]:
        return self._with("failed")

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "copied": len(self.copied),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "events": sum(session.events for session in self.copied),
            "sessions": [session.to_json() for session in self.sessions],
        }


def _coordinator(side: Backend | PersistenceCoordinator) -> tuple[PersistenceCoordinator, bool]:
    if isinstance(side, PersistenceCoordinator):
        return side, False
    return PersistenceCoordinator(SessionStore(), side), True


def copy_sessions(
    source: Backend | PersistenceCoordinator,
    target: Backend | PersistenceCoordinator,
    ids: Sequence[str] | None = None,
    *,
    progress: CopyProgress | None = None,
) -> CopyReport:
    """Copy the sessions ``ids`` (default: every session the source lists) from ``source`` to ``target``.

    Each session is copied whole or not at all, then verified by digest (:func:`events_digest`) and
    header on the target. A failure of one session (damaged on the source, a conflicting id on the
    target) is recorded in the report and the others go on; an error of the target as a whole (the
    database is gone) is raised. Sources are only read. A backend passed in is closed when the copy
    returns (the coordinator made for it owns it); a coordinator passed in is left open.
    """
    source_side, close_source = _coordinator(source)
    target_side, close_target = _coordinator(target)
    report = CopyReport()
    try:
        wanted = list(ids) if ids is not None else [listing.id for listing in source_side.list()]
        for done, session_id in enumerate(wanted, start=1):
            report.sessions.append(_copy_one(source_side, target_side, session_id))
            if progress is not None:
                progress(done, len(wanted), session_id)
    finally:
        if close_source:
            source_side.close()
        if close_target:
            target_side.close()
    return report


def _same(read: DurableRead, digest: str, meta: Mapping[str, Any]) -> bool:
    return events_digest(read.events) == digest and thaw(read.meta) == thaw(meta)


def _copy_one(source: PersistenceCoordinator, target: PersistenceCoordinator, session_id: str) -> CopiedSession:
    try:
        read = source.read_stored(session_id)
    except AgentlogError as err:
        return CopiedSession(session_id, "failed", error=err)
    digest = events_digest(read.events)
    result = CopiedSession(session_id, "copied", len(read.events), digest, torn=read.torn)
    try:
        if target.backend.read_revision(session_id) is not None:
            held = target.read_stored(session_id)
            if _same(held, digest, read.meta):
                result.status = "skipped"
                return result
            result.status = "failed"
            result.error = CopyConflictError(
                f'the target already holds session "{session_id}" with other content ({len(held.events)} events, '
                f"{events_digest(held.events)}; the source has {len(read.events)} events, {digest}"
                f"{'' if thaw(held.meta) == thaw(read.meta) else ', and another header'}): nothing was written. "
                "Remove the target's session first if the source's is the one to keep"
            )
            return result
        _write(target, read)
        written = target.read_stored(session_id)
        if not _same(written, digest, read.meta):
            result.status = "failed"
            result.error = CopyVerificationError(
                f'session "{session_id}" reads back from the target as {len(written.events)} events, '
                f"{events_digest(written.events)}, not the source's {len(read.events)} events, {digest}"
                f"{'' if thaw(written.meta) == thaw(read.meta) else ' (and another header)'}: do not trust the "
                "target's copy"
            )
            return result
    except AgentlogError as err:
        result.status = "failed"
        result.error = err
        return result
    try:
        result.moved = source.backend.read_revision(session_id) != read.revision
    except AgentlogError:
        pass  # the copy is made and verified; the source answering no more is no failure of it
    return result


def _write(target: PersistenceCoordinator, read: DurableRead) -> None:
    staged = target.stage(thaw(read.meta))
    try:
        for start in range(0, len(read.events), COPY_BATCH_EVENTS):
            staged.append(read.events[start : start + COPY_BATCH_EVENTS])
        staged.publish()
    except BaseException:
        with contextlib.suppress(Exception):  # the write's own error is the one to report
            staged.discard()
        raise
