"""Writer locks that name their holder: the holder record, the SESSION_LOCKED refusal, waiting.

The original takes no locks (spec §4.13: one live writer per session is assumed), so the lock files of
the JSONL and SQLite stores are agentlog's own format. The lock itself is the ``flock`` on
``<encode_segment(id)>.lock``, held while its descriptor is open (the kernel drops it when the holder
dies); the file's content only says who holds it. Once a writer holds the lock it writes one JSON line
into the file — ``{"pid":4242,"hostname":"build-7","acquiredAt":1733339195123}`` (``acquiredAt`` in
epoch milliseconds) — and empties the file when it releases, so a refused writer can name the holder
and how long it has held the session. The record is best-effort: a holder that cannot write it (a full
disk) still holds a valid lock, and a refused writer that looks in the instant between the holder's
``flock`` and its write finds an empty file (holder unknown) or, after a holder that was killed, that
holder's stale line (the message then says the process is gone).

:func:`locked_error` builds the refusal every backend raises (the PostgreSQL lease passes what the
database reports); :func:`wait_for_writer` is the opt-in wait of ``coordinator.resume(wait=True)``.
"""

from __future__ import annotations

import datetime
import fcntl
import logging
import math
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

import orjson

from ..errors import InvalidOptionError, SessionLockedError

__all__ = [
    "clear_holder",
    "deadline_of",
    "describe_holder",
    "holder_record",
    "lock_or_refuse",
    "locked_error",
    "read_holder",
    "record_holder",
    "wait_for_writer",
]

logger = logging.getLogger("agentlog")

_MAX_RECORD_BYTES: Final = 4096
_POLL_FIRST_S: Final = 0.01
_POLL_MAX_S: Final = 0.25
"""A waiting writer probes the lock with a doubling interval up to this (flock has no timed wait)."""


class _Lock(Protocol):
    def release(self) -> None: ...


def holder_record() -> dict[str, Any]:
    """Who this process is, for the lock it has just taken."""
    return {"pid": os.getpid(), "hostname": socket.gethostname(), "acquiredAt": time.time_ns() // 1_000_000}


def record_holder(fd: int) -> None:
    """Write this process's holder record into the lock file it holds (best-effort)."""
    line = orjson.dumps(holder_record()) + b"\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, line, 0)
    except OSError:
        pass  # the lock holds without its record; a refused writer then reads "holder unknown"


def clear_holder(fd: int) -> None:
    """Empty the lock file before releasing it, so no later refusal names a writer that has left."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass


def read_holder(fd: int) -> dict[str, Any] | None:
    """The holder record in an open lock file, or ``None`` when there is none (or it is not one)."""
    try:
        data = os.pread(fd, _MAX_RECORD_BYTES, 0)
        value = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(value, dict):
        return None
    pid, hostname, acquired = value.get("pid"), value.get("hostname"), value.get("acquiredAt")
    if type(pid) is not int or not isinstance(hostname, str) or type(acquired) is not int:
        return None
    return {"pid": pid, "hostname": hostname, "acquiredAt": acquired}


def _since(acquired_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(acquired_ms / 1000, tz=datetime.UTC)
    held = max(0.0, time.time() - acquired_ms / 1000)
    return f"since {moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} (for {held:.0f} s)"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (another user's process: EPERM)
    return False


def describe_holder(holder: Mapping[str, Any] | None) -> str:
    """``pid 4242 on host "build-7" since <ISO time> (for 12 s)``, or why the holder is unknown."""
    if holder is None:
        return "a writer that left no holder record (it may be taking the lock right now)"
    parts: list[str] = []
    pid = holder.get("pid")
    hostname = holder.get("hostname")
    if pid is not None:
        parts.append(f"pid {pid}")
    elif holder.get("backendPid") is not None:  # a PostgreSQL lease: the server's view of its client
        parts.append(f"the client of PostgreSQL backend pid {holder['backendPid']}")
    if hostname is not None:
        parts.append(f'on host "{hostname}"')
    if holder.get("application"):
        parts.append(f'as "{holder["application"]}"')
    acquired = holder.get("acquiredAt")
    if type(acquired) is int:
        parts.append(_since(acquired))
    text = " ".join(parts) if parts else "a writer that left no holder record"
    if type(pid) is int and hostname == socket.gethostname():
        if pid == os.getpid():
            text += " (this very process: another store or backend instance in it)"
        elif _gone(pid):
            text += " (that process is gone: a process it started may still hold the lock)"
    return text


def locked_error(
    session_id: str, holder: Mapping[str, Any] | None, *, lock: str = "its writer lock"
) -> SessionLockedError:
    """The SESSION_LOCKED refusal: who holds the session, and how to wait for it instead of failing."""
    return SessionLockedError(
        f'session "{session_id}" is already open for writing: {describe_holder(holder)} holds {lock}. '
        f"Close the session there (or end that process), or wait for it: "
        f'coordinator.resume("{session_id}", wait=True, timeout=SECONDS) or '
        f'AgentlogSession("{session_id}", ..., wait=True, timeout=SECONDS)',
        holder=holder,
    )


def deadline_of(wait: bool, timeout: float | None) -> float | None:
    """The monotonic deadline of an opt-in wait (``math.inf``: no limit), or ``None``: fail at once.

    ``timeout`` alone also asks to wait (up to that many seconds).
    """
    if type(wait) is not bool:
        raise InvalidOptionError(f"wait must be True or False, got {wait!r}")
    if timeout is None:
        return math.inf if wait else None
    if type(timeout) not in (int, float) or not timeout >= 0 or math.isinf(timeout):
        raise InvalidOptionError(f"timeout must be a finite number of seconds >= 0 (or None), got {timeout!r}")
    return time.monotonic() + timeout


def wait_for_writer(
    session_id: str,
    take: Callable[[], _Lock],
    refusal: SessionLockedError,
    deadline: float,
    timeout: float | None,
) -> None:
    """Block until ``take()`` (the backend's ``lock_writer``) succeeds, then release at once.

    The caller retries its operation afterwards (which takes the lock for itself; losing that race
    brings it back here). Past ``deadline``: SESSION_LOCKED naming the last holder seen.
    """
    logger.info(
        'session "%s" is locked by %s; waiting for it%s',
        session_id,
        describe_holder(refusal.holder),
        "" if timeout is None else f" (up to {timeout} s)",
    )
    pause = _POLL_FIRST_S
    while True:
        try:
            lock = take()
        except SessionLockedError as err:
            refusal = err
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SessionLockedError(
                    f"{refusal.message} (gave up after waiting {timeout} s)", holder=refusal.holder
                ) from None
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _POLL_MAX_S)
            continue
        lock.release()
        return


def lock_or_refuse(fd: int, session_id: str) -> None:
    """Take the exclusive ``flock`` of an open lock file and record this process as its holder, or close
    ``fd`` and raise ``SessionLockedError`` naming the current holder (the file backends' one lock step)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = read_holder(fd)
        os.close(fd)
        raise locked_error(session_id, holder) from None
    except BaseException:
        os.close(fd)
        raise
    record_holder(fd)
