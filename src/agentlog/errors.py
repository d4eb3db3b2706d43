"""Typed errors.

Every refusal agentlog makes is an :class:`AgentlogError` with a stable ``code`` so callers (and the
command-line tool's ``--json`` output) can branch on the code instead of parsing messages. Messages
start with the original harness's exact text so logs stay comparable across implementations; detail
that the original did not give (a JSON path, a remedy) follows after ``": "``.
"""

from __future__ import annotations


class AgentlogError(Exception):
    """Base class of every error agentlog raises on purpose."""

    code: str = "AGENTLOG_ERROR"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class FrozenError(AgentlogError, TypeError):
    """Committed data is immutable; a TypeError subclass so generic immutability checks still work."""

    code = "FROZEN"


class NonJsonValueError(AgentlogError, ValueError):
    """A value is not lossless JSON; ``path`` points at the offending value (``$`` is the root)."""

    code = "NON_JSON_VALUE"

    def __init__(self, message: str, *, path: str = "$", reason: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class SessionHeaderError(AgentlogError, ValueError):
    code = "INVALID_HEADER"


class InvalidSeedError(AgentlogError, ValueError):
    """A seed (restored or borrowed log) failed validation; ``index`` is the offending position."""

    code = "INVALID_SEED"

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class InvalidEventError(AgentlogError, ValueError):
    code = "INVALID_EVENT"


class LegacyFormatError(InvalidEventError):
    code = "UNSUPPORTED_LEGACY_FORMAT"


class MessageShapeError(AgentlogError, ValueError):
    code = "INVALID_MESSAGE"


class SurfaceError(AgentlogError, ValueError):
    code = "INVALID_SURFACE"


class EventDataError(AgentlogError, ValueError):
    code = "INVALID_EVENT_DATA"


class EventTypeError(AgentlogError, ValueError):
    code = "EVENT_TYPE_CONFLICT"


class ReentrantAppendError(AgentlogError, RuntimeError):
    code = "REENTRANT_APPEND"


class SessionExistsError(AgentlogError, ValueError):
    code = "SESSION_ALREADY_EXISTS"


class SessionAttachedError(AgentlogError, RuntimeError):
    code = "SESSION_ALREADY_ATTACHED"


class SessionAnnouncedError(AgentlogError, RuntimeError):
    code = "SESSION_ALREADY_ANNOUNCED"


class SessionNotLiveError(AgentlogError, RuntimeError):
    code = "SESSION_NOT_LIVE"


class SessionForkError(AgentlogError, ValueError):
    """Fork refusal; ``code`` is one of the original's five fork codes."""

    code = "SESSION_FORK_ERROR"

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, code=code)


class InvariantError(AgentlogError, ValueError):
    code = "INVARIANT"

    def __init__(self, text: str, package_name: str = "@deepseek-ai/dsh-session") -> None:
        super().__init__(f'invariant violated by "{package_name}": {text}')
        self.package_name = package_name
        self.text = text


class ChunkRowError(AgentlogError, ValueError):
    code = "MALFORMED_STORAGE_ROW"


def describe_error(err: BaseException) -> str:
    """Stable rendering of an exception for log lines (the original's ``String(error)``)."""
    return f"{type(err).__name__}: {err}"


# --- persistence ---------------------------------------------------------------------------------


class PersistenceError(AgentlogError):
    """A storage operation failed (I/O, a refused write); nothing committed was lost."""

    code = "PERSISTENCE_ERROR"


class SessionNotFoundError(PersistenceError, LookupError):
    code = "SESSION_NOT_FOUND"


class SessionPersistenceCorruptionError(PersistenceError):
    """Stored bytes are damaged (bad magic, failed checksum, unparsable committed line, seq gap...).

    ``location`` names the file (or database) and ``offset`` the byte offset or line where the damage
    was found, when known. The stored data is left exactly as it was.
    """

    code = "SESSION_CORRUPT"

    def __init__(self, message: str, *, location: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.location = location
        self.offset = offset


class SessionFormatUnsupportedError(PersistenceError):
    """The log is intact but this build cannot interpret it (future version, unknown required event type)."""

    code = "SESSION_FORMAT_UNSUPPORTED"

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class SessionLockedError(PersistenceError):
    """Another writer (process or store) holds the session open for writing."""

    code = "SESSION_LOCKED"


class SessionCollisionError(PersistenceError):
    """A live session's id collides with different persisted or live state."""

    code = "SESSION_COLLISION"


# --- added for the trust fixes (issue 7); helpers raise these, never bare OSError/RuntimeError ------


class SessionDisposedError(AgentlogError, RuntimeError):
    """The session was disposed: an append now would never reach the store, so it is refused."""

    code = "SESSION_DISPOSED"


class InvalidSessionIdError(AgentlogError, ValueError):
    """A session id the backend cannot hold (too long for the file system, forbidden characters)."""

    code = "INVALID_SESSION_ID"


class UnknownEventTypeError(InvalidEventError):
    """An unregistered, non-ignorable event type; register it with ``event_types.register(...)``."""

    code = "UNKNOWN_EVENT_TYPE"


class ToolPairingError(AgentlogError, ValueError):
    """Derived messages hold a tool call without its result (or a result without its call)."""

    code = "UNPAIRED_TOOL_CALL"


class StoreNotFoundError(PersistenceError, LookupError):
    """A read-only command was pointed at a store that does not exist (nothing was created)."""

    code = "STORE_NOT_FOUND"


class StorageAccessError(PersistenceError):
    """The operating system refused a storage operation; ``path`` names the file, the message the remedy.

    ``code`` is one of ``STORAGE_PERMISSION_DENIED``, ``STORAGE_FULL``, ``STORAGE_READ_ONLY``,
    ``STORAGE_NOT_A_FILE`` (a directory, FIFO, device or symlink where a regular file belongs),
    ``STORAGE_NOT_A_DIRECTORY`` or ``STORAGE_IO``. Committed data is untouched.
    """

    code = "STORAGE_IO"

    def __init__(self, message: str, *, code: str | None = None, path: str | None = None) -> None:
        super().__init__(message, code=code)
        self.path = path


class ResourceExhaustedError(PersistenceError, MemoryError):
    """Out of memory (or over a configured load budget) while reading: never treated as corruption.

    Nothing was truncated or repaired; retry with more memory or a larger budget.
    """

    code = "RESOURCE_EXHAUSTED"


class SessionTailChangedError(PersistenceError):
    """The stored log no longer ends where this writer last wrote or read it (another writer appended,
    e.g. after the lock file was removed); nothing was written. Reload the session before appending."""

    code = "SESSION_TAIL_CHANGED"

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location
