"""``PrefixView``: the first ``n`` items of a list that only ever grows, as an immutable sequence.

The session's events and messages (:class:`~agentlog.kernel.session.EventsView`,
:class:`~agentlog.kernel.session.MessageList`) and the token meter's priced nodes
(``TokenMeasurement.nodes``) are all views of this kind: O(1) to create, because they share the list
their owner keeps appending to, and they never change afterwards, because an owner only ever appends to
a list a view may hold (one that must rewrite a slot switches to a copy first). So a reader keeps what it
read without a copy, and the owner never copies per read.

A view behaves like the tuple of its items: ``len``, indexing, slicing (a slice is a new ``list``),
iteration and ``reversed`` see exactly the first ``n`` items; it compares equal to any view, list or tuple
with equal items, is unhashable (like the list it views), and refuses every mutator with
:class:`~agentlog.errors.FrozenError` (copy it with ``list()`` to reorder).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NoReturn, TypeVar, overload

from ..errors import FrozenError

__all__ = ["PrefixView"]

T = TypeVar("T")


class PrefixView(Sequence[T]):
    """The first ``n`` items of ``items`` (an append-only list shared with its owner); immutable."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[T], n: int) -> None:
        self._items = items
        self._n = n

    # The reads below are hot (the token meter and the session's readers call them per item): each does
    # the least it can, and none copies more than it returns.

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1:  # the common forward slice costs the slice, not a copy of the whole prefix
                return self._items[start:stop]
            return self._items[: self._n][index]
        n = self._n
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._items, self._n)

    def __reversed__(self) -> Iterator[T]:
        items = self._items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        n = self._n
        if isinstance(other, PrefixView):
            if n != other._n:
                return False
            if self._items is other._items:
                return True
            if self._items.__class__ is list and other._items.__class__ is list:
                return self._items[:n] == other._items[:n]
        elif isinstance(other, (list, tuple)):
            if n != len(other):
                return False
            if self._items.__class__ is list:
                return self._items[:n] == list(other)
        else:
            return NotImplemented
        # A subclass reads its items its own way (the session's restored logs): compare what it reads.
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def to_list(self) -> list[T]:
        """A plain list of the items (a copy of the prefix), e.g. for ``orjson.dumps``."""
        return self._items[: self._n]

    def _refuse(self, *args: object) -> NoReturn:
        raise FrozenError(f"{type(self).__name__} is an immutable snapshot; copy it with list() to reorder")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
