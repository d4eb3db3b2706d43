"""A session loaded without ever holding its whole log: read, checked and paged a batch at a time.

The inspector's plain load (:meth:`~agentlog.persistence.coordinator.PersistenceCoordinator.stored_view`)
restores the whole log into a session: every payload as a frozen JSON tree, about 2 KB per message, so
a million-event session costs the server half a gigabyte at its peak even though the pager lets it go
two seconds later. A backend that can stream a log (:class:`~agentlog.persistence.backend.StreamsStored`)
is read here instead a batch at a time (about 2 MB of text), and each batch is

* checked as a cold load checks it: the coordinator's checks of stored events (identity, format,
  vocabulary, known types: :meth:`~agentlog.persistence.coordinator.PersistenceCoordinator.interpret_part`),
  the kernel's restore of its events (:meth:`~agentlog.kernel.session.Session.from_restore`, every
  envelope, data and message rule, on a copy of the batch whose seqs count from 0 and whose surface
  events are plain appends) and, on the events as stored, the surface rules the restore applies
  (:func:`~agentlog.kernel.surface.plan_surface_event`, against the surface of the whole log so far, the
  replacements through the surface timeline, which plans them with it) and the packed runs' own rules;
* indexed (turns, steps, pairs) and folded into the surface timeline, as :func:`~.views._build_index`
  does over a restored log;
* written to compressed pages (:class:`~.paged.PageWriter`) and let go.

What the server then holds is what a paged-out session holds. Only the whole read judges a log that
is not plainly valid, so anything unusual ends the stream and the caller loads the log the plain way,
which accepts or refuses it exactly: damage (the error the whole read raises), a torn tail or an open
turn (the repair a load would make, shown as ``repairable``), a legacy shape (normalised with the whole
log). So a streamed load accepts only logs the plain load accepts, with the same events.
"""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import AgentlogError
from ..kernel.chunkrows import ChunkRun
from ..kernel.events import ASSISTANT_CHUNK, SURFACE_EVENT_TYPES, TURN_END, TURN_START
from ..kernel.repair import interrupted_turn_closers
from ..kernel.seeds import check_seed_data
from ..kernel.session import Session
from ..kernel.surface import APPEND, SurfaceTimeline, plan_surface_event
from ..persistence.backend import StreamsStored
from .paged import PagedLog, PageWriter

if TYPE_CHECKING:
    from ..persistence.coordinator import PersistenceCoordinator
    from .views import LoadedSession

__all__ = ["BATCH_BYTES", "load_streamed"]

BATCH_BYTES = 1 << 21
"""About how much stored text one batch holds (what is parsed and checked at a time)."""


class _NotPlain(Exception):
    """The stream met something only the whole read judges (the caller reads the log whole)."""


def load_streamed(
    reader: PersistenceCoordinator, session_id: str, page_events: int
) -> tuple[LoadedSession, str] | None:
    """``session_id`` loaded a batch at a time, paged as it is read (see the module docstring), with the
    revision it was read at; ``None`` when the backend cannot stream or the log is not plainly valid
    (the caller then loads it whole, which reports what is wrong).

    What is kept besides the pages (the index with its surface timeline, the header) is made anew once
    everything of the stream is gone (pickled before, unpickled after, as a page-out keeps it): made
    while the batches were read, its seqs and call ids would sit among the freed batches in the
    allocator's arenas and keep them from the system."""
    from .views import LoadedSession, _bound

    parts = _stream(reader, session_id, page_events)
    if parts is None:
        return None
    paged, kept, stored, closers, revision = parts
    gc.collect()  # (the batches' restored sessions, should any cycle hold one)
    index, header = pickle.loads(kept)
    index = _bound(index, paged)
    assert index is not None  # (it was one when pickled)
    loaded = LoadedSession(session_id, revision, None)
    loaded.header = header
    loaded.stored_events = stored
    loaded.closers = closers
    loaded.last_seq = len(paged) - 1
    loaded.adopt_pages(paged, index, stored_index=None if closers else index)
    return loaded, revision


def _stream(
    reader: PersistenceCoordinator, session_id: str, page_events: int
) -> tuple[PagedLog, bytes, int, int, str] | None:
    """The stream of :func:`load_streamed`: the pages, the index and header pickled, the stored count,
    the closers' count and the revision read; ``None`` when the whole read must judge the log."""
    from .views import _Index, _index_pass, _unbound

    backend = reader.backend
    if not isinstance(backend, StreamsStored):
        return None
    try:
        stream = backend.stream_stored(session_id, BATCH_BYTES)
    except AgentlogError:
        return None
    if stream is None:
        return None
    meta = stream.meta
    registry = reader.registry
    writer = PageWriter(page_events)
    index = _Index()
    timeline = index.timeline = SurfaceTimeline(writer)
    header: Any = None
    since_boundary: list[Any] = []  # the events from the last turn boundary on: what the closers depend on
    seq = 0

    def stored_order(batch: list[Any]) -> Iterator[Any]:
        """The batch's events in seq order, each checked against the surface and paged before the
        index sees it (packed runs paged and stepped over, as the index steps over them)."""
        for item in batch:
            if item.__class__ is ChunkRun:
                writer.add(item)
                since_boundary.append(item)
                continue
            etype = item["type"]
            at = item["seq"]
            if etype not in SURFACE_EVENT_TYPES:
                if "surfaceOp" in item or "sourceEventSeqs" in item:
                    raise _NotPlain  # (the restore refuses it)
            else:
                op = item.get("surfaceOp")
                if op.__class__ is str and op == APPEND:
                    if "sourceEventSeqs" in item:  # (seq, type and op are known good: its sources remain)
                        plan_surface_event(timeline.nodes, item, at, writer, 0, None)  # raises
                elif op.__class__ is not dict:
                    raise _NotPlain  # no op, or not one (the restore refuses it)
                # (a replacement is planned by the timeline when the index adds it: an invalid one raises)
            writer.add(item)
            if etype in (TURN_START, TURN_END):
                since_boundary.clear()
            since_boundary.append(item)
            yield item

    def check_and_index(batch: list[Any]) -> None:
        """The batch checked by the kernel's restore (a copy whose seqs count from 0, surface events as
        plain appends), then checked against the surface, indexed and paged in seq order."""
        nonlocal seq, header
        seed: list[dict[str, Any]] = []
        for item in batch:
            if item.__class__ is ChunkRun:
                if item.seq0 != seq:
                    raise _NotPlain
                if not item.plainly_valid:
                    check_seed_data(ASSISTANT_CHUNK, item.rule_data, seq)
                seq += item.n
                continue
            if item.__class__ is not dict or item.get("seq").__class__ is not int or item["seq"] != seq:
                raise _NotPlain  # (the copy's seq is an int whatever this one is: the whole read judges it)
            copy = dict(item)
            copy["seq"] = len(seed)
            if item.get("type") in SURFACE_EVENT_TYPES and "surfaceOp" in item:
                copy["surfaceOp"] = APPEND  # (its own surface rules are checked on the stored event)
                copy.pop("sourceEventSeqs", None)
            seed.append(copy)
            seq += 1
        if seed:
            restored = Session.from_restore(session_id, seed, meta, registry=registry)
            if header is None:
                header = restored.header
            del restored
        del seed
        _index_pass(index, stored_order(batch), timeline.add)

    try:
        for batch in stream.batches:
            if not batch:
                continue
            if reader.interpret_part(session_id, meta, batch) is None:
                return None
            check_and_index(batch)
        stored = seq
        if header is None or stored == 0:
            return None  # nothing stored: the whole read says so
        # An open turn gets the closers a load would append (checked as the whole read checks them, with
        # the log they close); the index then covers them, and the index of the stored events alone is
        # made by the first continuation, as for a session read whole.
        closers = interrupted_turn_closers(since_boundary)
        if closers:
            check_and_index(closers)
        if timeline.last_seq < seq - 1:  # the log ends in a packed run: the timeline covers it too
            timeline.add(writer[seq - 1])
        paged = writer.finish(seq)
    except Exception:  # anything at all: the whole read judges the log (and reports it exactly)
        return None
    kept = pickle.dumps((_unbound(index), header), protocol=pickle.HIGHEST_PROTOCOL)
    return paged, kept, stored, len(closers), stream.revision
