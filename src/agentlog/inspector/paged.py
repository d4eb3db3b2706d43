"""A loaded log kept as compressed pages: what the inspector holds of a session once it is indexed.

A validated read restores the whole log as frozen events (about 2 KB each for a message), so a server
that kept it would hold every payload of every open session. Once the inspector has indexed a session
(turns, pairs, the surface timeline, the chart series), it needs an event's payload only to render a
log page, one event, the surface nodes and the messages of the window it serves. :class:`PagedLog`
keeps the log as pages of about :data:`PAGE_EVENTS` seqs, each one Zstandard frame of the events' JSON
lines (a packed chunk run as its compact state, never as member events), and decodes a page only when a
seq in it is read, keeping the :data:`DECODED_PAGES` most recently read pages decoded. Decoded events are
restored as a read restores them (:func:`~agentlog.kernel.seeds.event_from_restored`), so every answer
is the one the restored session gives.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, overload

import zstandard

from ..kernel.jsoncodec import dumps, loads
from ..kernel.packedrun import ChunkRun
from ..kernel.seeds import event_from_restored
from ..persistence.backend import event_json

__all__ = ["DECODED_PAGES", "PAGE_EVENTS", "PageWriter", "PagedLog"]

PAGE_EVENTS: Final = 2048
"""Seqs per page (a page ends after the item that reaches this many; a long packed run may exceed it)."""
DECODED_PAGES: Final = 16
"""How many decoded pages a paged log keeps (least recently read dropped first)."""
_RUN: Final = b"R"
"""Marks a page line that holds a packed chunk run's state (an event line starts with ``{``)."""
_LEVEL: Final = 1
_DEPTH: Final = 1 << 20
"""The pages hold events a read already accepted (at the backend's nesting limit, whatever it was)."""


class PagedLog(Sequence[Any]):
    """The events of a loaded log by seq, decoded a page at a time (thread-safe).

    ``pages_decoded`` counts page decodes (tests prove laziness with it: a log page after a load decodes
    the pages it shows, not the log).
    """

    def __init__(self, items: Iterable[Any], length: int, *, page_events: int = PAGE_EVENTS) -> None:
        """``items``: the log as :meth:`~agentlog.kernel.session.EventsView.restore_seed` gives it (frozen
        events, packed runs kept packed), standing for ``length`` seqs from 0."""
        writer = PageWriter(page_events)
        for item in items:
            writer.add(item)
        writer.finish(length, self)

    def _take(self, starts: array[int], pages: list[bytes], length: int) -> None:
        self._starts = starts
        self._pages = pages
        self._length = length
        self._decoded: OrderedDict[int, _Page] = OrderedDict()
        self._lock = threading.Lock()
        self.pages_decoded = 0

    @property
    def stored_bytes(self) -> int:
        """The compressed size of the pages (what the log costs in memory while no page is decoded)."""
        return sum(map(len, self._pages))

    @property
    def decoded_pages(self) -> int:
        """How many pages are decoded right now (at most :data:`DECODED_PAGES`)."""
        return len(self._decoded)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, seq: int) -> Any: ...

    @overload
    def __getitem__(self, seq: slice) -> list[Any]: ...

    def __getitem__(self, seq: int | slice) -> Any:
        if isinstance(seq, slice):
            return [self[index] for index in range(*seq.indices(self._length))]
        if seq < 0:
            seq += self._length
        if not 0 <= seq < self._length:
            raise IndexError(f"seq {seq} is outside the log (0..{self._length - 1})")
        page = bisect.bisect_right(self._starts, seq) - 1
        item = self._page(page)[seq - self._starts[page]]
        if item.__class__ is ChunkRun:
            return item.events()[seq - item.seq0]
        return item

    def __iter__(self) -> Iterator[Any]:
        for page in range(len(self._pages)):
            seen: ChunkRun | None = None
            decoded = self._page(page)
            for offset in range(len(decoded)):
                item = decoded[offset]
                if item.__class__ is ChunkRun:
                    if item is not seen:
                        seen = item
                        yield from item.events()
                else:
                    yield item

    def restore_seed(self, n: int) -> list[Any]:
        """The first ``n`` seqs as a seed :meth:`~agentlog.kernel.session.Session.from_restore` takes
        (fresh events, packed runs packed; a run cut by ``n`` gives the members below it)."""
        seed: list[Any] = []
        for page, start in enumerate(self._starts):
            if start >= n:
                break
            for item in self._lines(page):
                if item.__class__ is ChunkRun:
                    if item.seq0 + item.n <= n:
                        seed.append(item)
                    elif item.seq0 < n:
                        seed.extend(item.transient_events()[: n - item.seq0])
                    continue
                if item["seq"] >= n:
                    break
                seed.append(item)
        return seed

    def _page(self, page: int) -> _Page:
        """The page's items by seq offset, decompressed once and each event parsed when first read."""
        with self._lock:
            items = self._decoded.get(page)
            if items is not None:
                self._decoded.move_to_end(page)
                return items
        items = _Page(zstandard.ZstdDecompressor().decompress(self._pages[page]))
        with self._lock:
            self.pages_decoded += 1
            self._decoded[page] = items
            while len(self._decoded) > DECODED_PAGES:
                self._decoded.popitem(last=False)
        return items

    def _lines(self, page: int) -> Iterator[Any]:
        text = zstandard.ZstdDecompressor().decompress(self._pages[page])
        for line in text.split(b"\n"):
            if line[:1] == _RUN:
                yield ChunkRun.from_state(loads(line[1:], max_depth=_DEPTH))
            else:
                yield event_from_restored(loads(line, max_depth=_DEPTH))


class PageWriter(Sequence[Any]):
    """A :class:`PagedLog` written item by item (a streamed load pages the log as it reads it, so the
    log never exists whole), and meanwhile the events written so far by seq (the surface fold checks a
    ``tool/result`` rewrite against the result it rewrites, read back from its page)."""

    def __init__(self, page_events: int = PAGE_EVENTS) -> None:
        if page_events < 1:
            raise ValueError("page_events must be at least 1")
        self._page_events = page_events
        self._compressor = zstandard.ZstdCompressor(level=_LEVEL)
        self._starts = array("q")
        self._pages: list[bytes] = []
        self._lines: list[bytes] = []
        self._open: list[Any] = []  # the open page's items, by seq offset (a run repeated over its slots)
        self._first = 0
        self._seq = 0

    def add(self, item: Any) -> None:
        """The next item: a frozen event (or a plain parsed one: the same JSON) or a packed run."""
        if item.__class__ is ChunkRun:
            self._lines.append(_RUN + dumps(item.to_state()))
            self._open.extend([item] * item.n)
            self._seq += item.n
        else:
            self._lines.append(event_json(item))
            self._open.append(item)
            self._seq += 1
        if self._seq - self._first >= self._page_events:
            self._close_page()

    def _close_page(self) -> None:
        self._starts.append(self._first)
        self._pages.append(self._compressor.compress(b"\n".join(self._lines)))
        self._lines = []
        self._open = []
        self._first = self._seq

    def finish(self, length: int, into: PagedLog | None = None) -> PagedLog:
        """The paged log of the items written, standing for ``length`` seqs (checked)."""
        if self._lines:
            self._close_page()
        if self._seq != length:
            raise ValueError(f"the items stand for {self._seq} seqs, not {length}")
        paged = into if into is not None else PagedLog.__new__(PagedLog)
        paged._take(self._starts, self._pages, length)
        return paged

    def __len__(self) -> int:
        return self._seq

    @overload
    def __getitem__(self, seq: int) -> Any: ...
    @overload
    def __getitem__(self, seq: slice) -> list[Any]: ...
    def __getitem__(self, seq: int | slice) -> Any:
        if isinstance(seq, slice):
            return [self[index] for index in range(*seq.indices(self._seq))]
        if not 0 <= seq < self._seq:
            raise IndexError(f"seq {seq} is not written yet (0..{self._seq - 1})")
        if seq >= self._first:
            item = self._open[seq - self._first]
        else:  # a closed page: decoded for this one read (the writer keeps no decoded page)
            page = bisect.bisect_right(self._starts, seq) - 1
            text = zstandard.ZstdDecompressor().decompress(self._pages[page])
            item = _Page(text)[seq - self._starts[page]]
        if item.__class__ is ChunkRun:
            return item.events()[seq - item.seq0]
        return item


class _Page:
    """One decompressed page: its lines, each event line parsed and restored when first read (a slider
    move reads the few messages of its window out of pages of thousands of events); a packed run's line
    is parsed with the page, since the seqs after it depend on its length."""

    __slots__ = ("_items", "_lines", "_slots")

    def __init__(self, text: bytes) -> None:
        self._lines = text.split(b"\n")
        self._slots: list[int] = []  # seq offset -> line index
        self._items: list[Any] = []  # seq offset -> item (None until parsed)
        for number, line in enumerate(self._lines):
            if line[:1] == _RUN:
                run = ChunkRun.from_state(loads(line[1:], max_depth=_DEPTH))
                self._slots.extend([number] * run.n)
                self._items.extend([run] * run.n)
            else:
                self._slots.append(number)
                self._items.append(None)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, offset: int) -> Any:
        item = self._items[offset]
        if item is None:
            item = self._items[offset] = event_from_restored(loads(self._lines[self._slots[offset]], max_depth=_DEPTH))
        return item
