"""Write-behind of live sessions: buffered, ordered, batched writes on one deadline thread.

A :class:`WriteBehind` buffers one live session's committed events and writes them in batches: the
first queued event opens one fixed window (``delay`` seconds), at whose end a :class:`Scheduler`
thread drains what the window admitted; ``flush`` drains everything in the caller's thread. A failed
batch is put back, in order, before anything queued since, and the buffer pauses until the next
flush or event: no seq is lost or written twice.

It holds no coordinator: the verbs it needs — write one batch, retry a failed attach — are injected
as callables, and it knows the store only by name (for its log line).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ResourceExhaustedError, describe_error
from ..kernel.session import Session

__all__ = ["Scheduler", "WriteBehind"]

logger = logging.getLogger("agentlog")


class Scheduler:
    """One daemon thread that fires batch deadlines (a heap of monotonic times)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, WriteBehind]] = []
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def schedule(self, when: float, target: WriteBehind) -> None:
        with self._cond:
            if self._closed:
                return
            entry = (when, next(self._counter), target)
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="agentlog-write-behind", daemon=True)
                try:
                    thread.start()
                except RuntimeError as err:  # no memory (or thread quota) for the thread: typed, and retried
                    self._heap.remove(entry)  # on the next schedule, never a scheduler without a thread
                    heapq.heapify(self._heap)
                    raise ResourceExhaustedError(
                        f"cannot start agentlog's write-behind thread ({err}); nothing was queued. Retry with "
                        "more memory (a higher ulimit -v) or fewer threads available"
                    ) from err
                self._thread = thread
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    self._cond.wait(timeout)
                if self._closed:
                    return
                when, _, target = heapq.heappop(self._heap)
            target.deadline_reached(when)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


class WriteBehind:
    """Buffered, ordered writes of one live session.

    ``write(self, batch)`` makes one batch durable (raising leaves it buffered); ``reattach(self)`` is
    asked, at a flush, to retry a failed attach (``init_error``) and answers whether it succeeded.
    ``writer_lock`` and ``retired`` are the owner's bookkeeping, kept here beside the buffer.
    """

    def __init__(
        self,
        session: Session,
        *,
        delay: float,
        scheduler: Scheduler,
        write: Callable[[WriteBehind, list[Any]], None],
        reattach: Callable[[WriteBehind], bool],
        store_name: str,
    ) -> None:
        self.session = session
        self.pending: list[Any] = []
        self.state_lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.deadline: float | None = None
        self.paused = False
        self.init_error: BaseException | None = None
        self.writer_lock: Any = None
        self.retired = False
        self._delay = delay
        self._scheduler = scheduler
        self._write = write
        self._reattach = reattach
        self._store_name = store_name

    @property
    def has_work(self) -> bool:
        return bool(self.pending) or self.write_lock.locked()

    def enqueue(self, events: Sequence[Any]) -> None:
        with self.state_lock:
            self.pending.extend(events)
            if self.deadline is None and self.pending:
                self.paused = False
                self.deadline = time.monotonic() + self._delay
                self._scheduler.schedule(self.deadline, self)

    def replace_pending(self, events: Sequence[Any]) -> None:
        """Buffer exactly ``events`` (a re-attach queues the whole unstored tail)."""
        with self.state_lock:
            self.pending = list(events)

    def deadline_reached(self, when: float) -> None:
        with self.state_lock:
            if self.deadline != when or self.paused:
                return  # superseded by a flush or a newer window
        try:
            self._drain(background=True)
        except Exception:  # already logged by _drain
            pass

    def cancel_wait(self) -> None:
        with self.state_lock:
            self.deadline = None

    def _drain(self, *, background: bool) -> None:
        with self.write_lock:
            while True:
                with self.state_lock:
                    batch = self.pending
                    self.pending = []
                    self.deadline = None
                    self.paused = False
                if not batch:
                    return
                try:
                    self._write(self, batch)
                except BaseException as err:
                    with self.state_lock:
                        self.pending = batch + self.pending
                        self.paused = True
                        self.deadline = None
                    if background:
                        logger.warning(
                            '%s: background write for session "%s" failed (buffered events retained): %s',
                            self._store_name,
                            self.session.id,
                            describe_error(err),
                        )
                    raise
                if background:
                    # A background write drains only what its window admitted; later events keep their own.
                    with self.state_lock:
                        if self.pending and self.deadline is None:
                            self.deadline = time.monotonic() + self._delay
                            self._scheduler.schedule(self.deadline, self)
                    return

    def flush(self) -> None:
        if self.init_error is not None and not self._reattach(self):
            self.cancel_wait()
            raise self.init_error
        self._drain(background=False)
