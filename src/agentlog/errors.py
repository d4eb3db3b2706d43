"""Typed errors: every public error agentlog raises is defined here.

Every refusal agentlog makes is an :class:`AgentlogError` with a stable ``code`` so callers (and the
command-line tool's ``--json`` output) can branch on the code instead of parsing messages. Messages
start with the original harness's exact text so logs stay comparable across implementations; detail
that the original did not give (a JSON path, a remedy) follows after ``": "``.

The modules that raise an error re-export it (``from agentlog.agent.loop import ReconstructionError``
works), but the class lives here, so this module is the one place to read every error and its code. It
imports nothing of agentlog (the kernel imports it).

**Codes.** Each class that declares a ``code`` owns it: no two classes declare the same code. A class
whose instances may carry another code (set at the raise site with ``code=``) lists that closed set in
``codes``; a listed code is either owned by this class alone or is the code of the class that owns it
(``SessionForkError`` reports ``SESSION_NOT_FOUND``, the code of :class:`SessionNotFoundError`). Three
classes are open on purpose: :class:`LlmError` (``HTTP_<status>`` and upper-cased finish reasons beside
``codes``), :class:`TurnFailedError` (relays the code recorded in ``turn/end``) and the base class
(``AgentlogError(message, code=...)`` is kept for compatibility; agentlog itself no longer raises it
with an inline code). A *refinement* declares no code and keeps its parent's: ``ReaderLimitError`` and
``FrameTooLargeError`` are ``SESSION_CORRUPT`` for every caller, ``AppendRollbackError`` and
``EncodeError`` are ``PERSISTENCE_ERROR``; ``except`` on the refinement tells them apart.
``tests/test_errors.py`` checks all of this.

**Hierarchy** (code in brackets; a second base class in parentheses)::

    AgentlogError [AGENTLOG_ERROR]
    ├── FrozenError (TypeError) [FROZEN]
    ├── NonJsonValueError (ValueError) [NON_JSON_VALUE]
    ├── SessionHeaderError (ValueError) [INVALID_HEADER]
    │   └── UnknownMetaKeyError [UNKNOWN_META_KEY]
    ├── InvalidSeedError (ValueError) [INVALID_SEED]
    ├── InvalidEventError (ValueError) [INVALID_EVENT]
    │   ├── LegacyFormatError [UNSUPPORTED_LEGACY_FORMAT]
    │   └── UnknownEventTypeError [UNKNOWN_EVENT_TYPE]
    ├── MessageShapeError (ValueError) [INVALID_MESSAGE]
    ├── SurfaceError (ValueError) [INVALID_SURFACE]
    ├── EventDataError (ValueError) [INVALID_EVENT_DATA]
    │   └── SessionLabelError [SESSION_LABEL_INVALID]
    ├── EventTypeError (ValueError) [EVENT_TYPE_CONFLICT]
    ├── ReentrantAppendError (RuntimeError) [REENTRANT_APPEND]
    ├── SessionExistsError (ValueError) [SESSION_ALREADY_EXISTS]
    ├── SessionAttachedError (RuntimeError) [SESSION_ALREADY_ATTACHED]
    ├── SessionAnnouncedError (RuntimeError) [SESSION_ALREADY_ANNOUNCED]
    ├── SessionNotLiveError (RuntimeError) [SESSION_NOT_LIVE]
    ├── SessionForkError (ValueError) [SESSION_FORK_ERROR; codes: SESSION_NOT_FOUND, SESSION_NOT_LIVE,
    │                                  SESSION_ALREADY_EXISTS, INVALID_BOUNDARY, OPEN_TURN]
    ├── InvariantError (ValueError) [INVARIANT]
    ├── ChunkRowError (ValueError) [MALFORMED_STORAGE_ROW]
    ├── SessionDisposedError (RuntimeError) [SESSION_DISPOSED]
    ├── InvalidSessionIdError (ValueError) [INVALID_SESSION_ID]
    ├── ToolPairingError (ValueError) [UNPAIRED_TOOL_CALL]
    ├── JsonDecodeError (ValueError) [INVALID_JSON]
    ├── SeqOutOfRangeError (IndexError) [SEQ_OUT_OF_RANGE]
    ├── ArgumentTypeError (TypeError) [INVALID_ARGUMENT_TYPE]
    ├── AsyncFlushInLoopError [ASYNC_FLUSH_IN_LOOP]
    ├── InvalidOptionError (ValueError) [INVALID_OPTION]
    │   └── UnknownBackendError [UNKNOWN_BACKEND]
    ├── PersistenceError [PERSISTENCE_ERROR]
    │   ├── SessionNotFoundError (LookupError) [SESSION_NOT_FOUND]
    │   ├── StoreNotFoundError (LookupError) [STORE_NOT_FOUND]
    │   ├── SessionPersistenceCorruptionError [SESSION_CORRUPT]
    │   │   ├── ReaderLimitError (refinement)
    │   │   └── FrameTooLargeError (refinement)
    │   ├── SessionFormatUnsupportedError [SESSION_FORMAT_UNSUPPORTED]
    │   ├── SessionLockedError [SESSION_LOCKED]
    │   ├── SessionCollisionError [SESSION_COLLISION]
    │   ├── SessionHasChildrenError [SESSION_HAS_CHILDREN]
    │   ├── SessionTailChangedError [SESSION_TAIL_CHANGED]
    │   ├── SessionConflictError [SESSION_CONFLICT]
    │   ├── DatabaseUnavailableError [DATABASE_UNAVAILABLE]
    │   ├── DatabaseAuthError [DATABASE_AUTH]
    │   ├── DatabaseSchemaError [DATABASE_SCHEMA]
    │   ├── CopyConflictError [COPY_CONFLICT]
    │   ├── CopyVerificationError [COPY_VERIFY_FAILED]
    │   ├── StorageAccessError [STORAGE_IO; codes: STORAGE_PERMISSION_DENIED, STORAGE_FULL,
    │   │                       STORAGE_READ_ONLY, STORAGE_NOT_A_FILE, STORAGE_NOT_A_DIRECTORY, STORAGE_IO]
    │   ├── ResourceExhaustedError (MemoryError) [RESOURCE_EXHAUSTED]
    │   ├── AppendRollbackError (refinement)
    │   └── EncodeError (TypeError) (refinement)
    ├── LlmError [LLM_ERROR; codes: the provider failure codes, HTTP_<status>, finish reasons]
    │   └── MissingApiKeyError [MISSING_API_KEY]
    ├── ReplayError [REPLAY_ERROR]
    │   ├── ReplayMismatchError [REPLAY_MISMATCH]
    │   ├── ReplayExhaustedError [REPLAY_EXHAUSTED]
    │   └── ReplayRecordingError (ValueError) [REPLAY_INVALID_RECORDING]
    ├── ToolConflictError (ValueError) [TOOL_CONFLICT]
    ├── ToolDefinitionError (ValueError) [INVALID_TOOL]
    ├── ToolSchedulerError (ValueError) [INVALID_SCHEDULE]
    ├── InboxError (ValueError) [INVALID_INBOX_OPERATION]
    ├── AgentError (RuntimeError) [AGENT_ERROR]
    │   ├── ReconstructionError [RECONSTRUCTION_DESYNC]
    │   ├── TurnAborted [TURN_ABORTED]
    │   ├── StepLimitError [MAX_STEPS_EXCEEDED]
    │   ├── AgentNotDurableError [AGENT_NOT_DURABLE]
    │   ├── InvalidAgentOptionError (ValueError) [INVALID_AGENT_OPTION]
    │   ├── OpenTurnError [TURN_OPEN]
    │   ├── TurnBlockedError [TURN_BLOCKED]
    │   ├── TurnFailedError [TURN_FAILED; relays the code recorded in turn/end]
    │   ├── SubagentDepthError [SUBAGENT_DEPTH_EXCEEDED]
    │   └── SubagentLabelError (ValueError) [SUBAGENT_LABEL_CONFLICT]
    ├── SessionTitleError [SESSION_TITLE_ERROR]
    │   ├── SessionTitleInvalidError (ValueError) [SESSION_TITLE_INVALID]
    │   ├── SessionTitleStateError (ValueError) [SESSION_TITLE_STATE]
    │   ├── SessionTitleProviderError [SESSION_TITLE_PROVIDER; codes: SESSION_TITLE_TIMEOUT]
    │   └── SessionTitleCancelledError [SESSION_TITLE_CANCELLED]
    ├── ProjectionError [PROJECTION_ERROR]
    │   ├── ProjectionUnitError (ValueError) [INVALID_PROJECTION_UNIT]
    │   ├── ProjectionKeyConflictError (ValueError) [PROJECTION_KEY_CONFLICT]
    │   ├── ProjectionStateError (TypeError) [PROJECTION_STATE_NOT_JSON]
    │   │   └── ProjectionCheckpointNotJsonError [PROJECTION_CHECKPOINT_NOT_JSON]
    │   ├── ProjectionViewError (TypeError) [PROJECTION_VIEW_INVALID]
    │   ├── ProjectionReducerError [PROJECTION_REDUCER_FAILED]
    │   ├── ProjectionRowError (ValueError) [PROJECTION_ROW_INVALID]
    │   └── ProjectionRestoreError (ValueError) [PROJECTION_RESTORE_REREAD]
    ├── CompactionError [COMPACTION_ERROR]
    │   ├── CompactionConfigError (ValueError) [INVALID_COMPACTION_CONFIG]
    │   │   └── TargetPressureConfigError [COMPACTION_TARGET_CONFIG]
    │   ├── CompactionRangeError (ValueError) [INVALID_COMPACTION_RANGE]
    │   ├── CompactionStateError [COMPACTION_STATE]
    │   ├── SurfaceChangedError [COMPACTION_SURFACE_CHANGED]
    │   ├── SummaryNotSmallerError [COMPACTION_NOT_SMALLER]
    │   ├── SummarizationError [SUMMARIZATION_FAILED; codes: NO_SUMMARIZATION_TARGET, EMPTY_SUMMARY,
    │   │                                     INVALID_SUMMARY_RESULT]
    │   ├── CompactionThresholdError [COMPACTION_ABOVE_THRESHOLD]
    │   └── ManualCompactionError [MANUAL_COMPACTION_FAILED; codes: COMPACTION_BUSY, COMPACTION_CANCELLED,
    │       │                      COMPACTION_CHANGED, COMPACTION_SUMMARY, COMPACTION_COMMIT,
    │       │                      COMPACTION_PERSISTENCE]
    │       └── CompactionBusyError [COMPACTION_BUSY] (every compaction path's busy refusal)
    ├── SessionQueryError [SESSION_QUERY_PERSISTENCE_FAILED; codes: the closed SESSION_QUERY_* set]
    ├── InspectorRequestError [INSPECTOR_BAD_REQUEST; codes: INSPECTOR_UNAUTHORIZED,
    │                          INSPECTOR_METHOD_NOT_ALLOWED, INSPECTOR_NOT_FOUND]
    ├── InteropError [INTEROP_ERROR]
    │   ├── ConversionError (ValueError) [CONVERSION_UNSUPPORTED]
    │   ├── RecorderStateError (RuntimeError) [RECORDER_STATE]
    │   ├── TranscriptAlreadyImportedError [TRANSCRIPT_ALREADY_IMPORTED]
    │   └── TranscriptError (ValueError) [TRANSCRIPT_INVALID]
    ├── OtelError [OTEL_EXPORT_FAILED; codes: OTEL_NOT_INSTALLED]
    └── TelemetrySinkError [TELEMETRY_SINK_FAILED; codes: TELEMETRY_SINK_STALLED]

Not here, on purpose: internal exceptions that never leave their module and are no ``AgentlogError``
— ``StorageRowError`` (a ``ValueError`` of :mod:`agentlog.persistence.sqlite._codec` that the row
scanner turns into a typed error or a skipped row), ``_TooDeep`` (JSONL scanner), ``_GiveUp`` (JSON
gate), ``_Refusal`` (built-in tools; it carries a tool outcome, not an error) — and the demo's
``DemoFailure`` (:mod:`agentlog.cli.demo`, code ``DEMO_FAILED``), which only the demo raises and prints.
"""

from __future__ import annotations

from collections.abc import Mapping  # (at run time too: typing.get_type_hints resolves annotations here)
from typing import TYPE_CHECKING, Any, ClassVar, Final

import orjson

if TYPE_CHECKING:  # a type only: at run time this module imports nothing of agentlog
    from .kernel.events import LlmFailure


class AgentlogError(Exception):
    """Base class of every error agentlog raises on purpose."""

    code: str = "AGENTLOG_ERROR"
    codes: ClassVar[frozenset[str]] = frozenset()
    """The closed set of other codes an instance may carry (given at the raise site as ``code=``)."""

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


class UnknownMetaKeyError(SessionHeaderError):
    """``create(meta=...)`` named a key the header has no field for.

    The header is the original's fixed record; a key it does not know used to vanish without a word.
    The message names the supported fields and points to ``labels=`` for user metadata.
    """

    code = "UNKNOWN_META_KEY"


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


class SessionLabelError(EventDataError):
    """A label key or value, or a tag, broke the rules of :mod:`agentlog.kernel.labels` (size, characters,
    count). An :class:`EventDataError`, so append and load refuse a bad ``session/labels`` or
    ``session/tags`` event the same way."""

    code = "SESSION_LABEL_INVALID"


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
    codes = frozenset(
        {"SESSION_NOT_FOUND", "SESSION_NOT_LIVE", "SESSION_ALREADY_EXISTS", "INVALID_BOUNDARY", "OPEN_TURN"}
    )

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
    """Another writer (process or store) holds the session open for writing.

    ``holder`` says who, as far as the lock records it: ``{"pid", "hostname", "acquiredAt"}`` (epoch
    ms) for a lock file, plus the database's view for a PostgreSQL lease; ``None`` when the holder left
    no record (it may be taking the lock at this very moment). The message names the holder and how
    to wait for it instead of failing (``wait=`` / ``timeout=`` on ``coordinator.resume`` and the
    framework adapters).
    """

    code = "SESSION_LOCKED"

    def __init__(self, message: str, *, holder: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.holder: dict[str, Any] | None = None if holder is None else dict(holder)


class SessionCollisionError(PersistenceError):
    """A live session's id collides with different persisted or live state."""

    code = "SESSION_COLLISION"


class SessionHasChildrenError(PersistenceError):
    """A session to delete has children (forks, subagents) and the caller did not say what becomes of
    them: a subtree is deleted only on request, so no child loses its parent by accident.

    ``children`` lists every descendant's id (parents before their children).
    """

    code = "SESSION_HAS_CHILDREN"

    def __init__(self, message: str, *, children: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.children = children


# --- storage and resource failures: helpers raise these, never bare OSError/RuntimeError -----------------


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
    codes = frozenset(
        {
            "STORAGE_PERMISSION_DENIED",
            "STORAGE_FULL",
            "STORAGE_READ_ONLY",
            "STORAGE_NOT_A_FILE",
            "STORAGE_NOT_A_DIRECTORY",
            "STORAGE_IO",
        }
    )

    def __init__(self, message: str, *, code: str | None = None, path: str | None = None) -> None:
        super().__init__(message, code=code)
        self.path = path


class ResourceExhaustedError(PersistenceError, MemoryError):
    """Out of memory (or over a configured load budget, or without room for a thread): never corruption.

    The read that ran out truncated or repaired nothing; retry with more memory or a larger budget. (A
    load that repairs reads the session back after committing the repair; if that read-back runs out,
    the message says the repair was committed. A resume whose load succeeded, repair included, may
    still fail to start the write-behind thread: the session is then not made live.)
    """

    code = "RESOURCE_EXHAUSTED"


class SessionTailChangedError(PersistenceError):
    """The stored log no longer ends where this writer last wrote or read it (another writer appended,
    e.g. after the lock file was removed); nothing was written. Reload the session before appending."""

    code = "SESSION_TAIL_CHANGED"

    def __init__(self, message: str, *, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


# --- kernel ----------------------------------------------------------------------------------------


class JsonDecodeError(AgentlogError, ValueError):
    """Stored text is not valid JSON, or exceeds the reader's limits (:mod:`agentlog.kernel.jsoncodec`)."""

    code = "INVALID_JSON"


class SeqOutOfRangeError(AgentlogError, IndexError):
    code = "SEQ_OUT_OF_RANGE"


class ArgumentTypeError(AgentlogError, TypeError):
    """An argument of the wrong type (``session.at("3")``, message content ``42``); a TypeError, as the
    bare one it replaces, and its message names the type given and what to pass instead."""

    code = "INVALID_ARGUMENT_TYPE"


class AsyncFlushInLoopError(AgentlogError):
    """``store.flush()`` was called inside a running event loop while a flush listener is a coroutine;
    ``await store.aflush(session)`` instead."""

    code = "ASYNC_FLUSH_IN_LOOP"

    def __init__(self, message: str) -> None:
        super().__init__(message)


# --- persistence (continued) -------------------------------------------------------------------------


class InvalidOptionError(AgentlogError, ValueError):
    code = "INVALID_OPTION"


class UnknownBackendError(InvalidOptionError):
    """A backend name that is neither built in, nor registered (entry-point group ``agentlog.backends``),
    nor a loadable ``module:attribute`` path (:mod:`agentlog.persistence.registry`)."""

    code = "UNKNOWN_BACKEND"


class ReaderLimitError(SessionPersistenceCorruptionError):
    """A line exceeds the reader's size or nesting limit (a refinement: its code is ``SESSION_CORRUPT``).

    Always fatal, even in a would-be torn tail: a line that cannot be parsed within the limits cannot be
    classified, and silently truncating it could destroy a committed ``turn/end``.
    """


class FrameTooLargeError(SessionPersistenceCorruptionError):
    """A frame decodes (or declares it decodes) to more than the reader's cap (code ``SESSION_CORRUPT``)."""


class AppendRollbackError(PersistenceError):
    """An append failed and truncating the partial bytes failed too; ``errors`` holds both."""

    def __init__(self, message: str, errors: tuple[BaseException, BaseException]) -> None:
        super().__init__(message)
        self.errors = errors


class EncodeError(PersistenceError, TypeError):
    """A logical event cannot be represented in schema-17 columns; nothing was written.

    A ``TypeError`` as in the original (``sourceEventSeqs must contain non-negative safe integers``),
    and a :class:`PersistenceError` so callers that catch refused writes see it too.
    """


# --- llm ---------------------------------------------------------------------------------------------


class LlmError(AgentlogError):
    """A model call failed; :attr:`failure` is the serializable fact sheet logged in ``turn/end``.

    ``code`` is one of :data:`agentlog.llm.types.FAILURE_CODES` (listed in ``codes``), ``HTTP_<status>``
    or an upper-cased finish reason — route on it (retry policy, user notices), never on the message text.
    """

    code = "LLM_ERROR"
    codes = frozenset(
        {
            "AUTH",
            "QUOTA",
            "RATE_LIMIT",
            "CONTEXT_WINDOW_EXCEEDED",
            "INVALID_REQUEST",
            "SERVER",
            "TRANSPORT",
            "TIMEOUT",
            "ABORTED",
            "EMPTY_RESPONSE",
            "STREAM_CLOSED",
            "MALFORMED_RESPONSE",
            "RESPONSE_TOO_LARGE",
            "MISSING_API_KEY",
            "UNKNOWN",
            "MAX_TOKENS",
            "UNSUPPORTED_CONTENT",
        }
    )

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        provider_retry_after_ms: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.status = status
        self.provider_retry_after_ms = provider_retry_after_ms
        self.request_id = request_id

    @property
    def failure(self) -> LlmFailure:
        """The ``LlmFailure`` wire dict (absent optional facts are absent keys, never ``None``)."""
        failure: LlmFailure = {"message": self.message, "code": self.code}
        if self.status is not None:
            failure["status"] = self.status
        if self.provider_retry_after_ms is not None:
            failure["providerRetryAfterMs"] = self.provider_retry_after_ms
        if self.request_id is not None:
            failure["requestId"] = self.request_id
        return failure

    @classmethod
    def from_failure(cls, failure: Mapping[str, Any]) -> LlmError:
        """Rebuild the exception from a logged or streamed ``LlmFailure``."""
        return cls(
            str(failure.get("message", "")),
            code=str(failure.get("code", "UNKNOWN")),
            status=failure.get("status"),
            provider_retry_after_ms=failure.get("providerRetryAfterMs"),
            request_id=failure.get("requestId"),
        )


class MissingApiKeyError(LlmError):
    """No API key was given or found in the environment; raised when the provider is built, not per call,
    so a misconfigured run fails before it opens a turn."""

    code = "MISSING_API_KEY"

    def __init__(self, message: str) -> None:
        super().__init__(message, code="MISSING_API_KEY")


class ReplayError(AgentlogError):
    """Base of the replay refusals: the run being replayed is no longer the run that was recorded."""

    code = "REPLAY_ERROR"


MAX_SHOWN: Final = 80
"""Characters of each value shown in a replay mismatch message: enough to recognize a prompt, short
enough to keep one error on one line."""

ABSENT: Final = object()
"""Stands for an absent key or element in a replay comparison (shown as ``(absent)``)."""


class ReplayMismatchError(ReplayError):
    """The request of call :attr:`call` differs from the recorded one at :attr:`field`.

    The message is ``call N: <field> differs: recorded <value> vs now <value>`` with values shortened to
    about :data:`MAX_SHOWN` characters around the first differing character; :attr:`recorded` and
    :attr:`now` hold the full values (``None`` stands for an absent key or element).
    """

    code = "REPLAY_MISMATCH"

    def __init__(self, call: int, field: str, recorded: Any, now: Any) -> None:
        shown_recorded, shown_now = _show_pair(recorded, now)
        super().__init__(f"call {call}: {field} differs: recorded {shown_recorded} vs now {shown_now}")
        self.call = call
        self.field = field
        self.recorded = None if recorded is ABSENT else recorded
        self.now = None if now is ABSENT else now


def _render(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _show_pair(recorded: Any, now: Any) -> tuple[str, str]:
    """Both values rendered as JSON and cut to :data:`MAX_SHOWN` characters around the first character
    where they differ — two long prompts that differ near the end would otherwise show as the same
    80-character prefix."""
    left, right = _render(recorded), _render(now)
    common = 0
    for a, b in zip(left, right, strict=False):
        if a != b:
            break
        common += 1
    start = max(common - MAX_SHOWN // 4, 0) if max(len(left), len(right)) > MAX_SHOWN else 0
    return _window(left, start), _window(right, start)


def _window(text: str, start: int) -> str:
    if start >= len(text):
        start = max(len(text) - MAX_SHOWN, 0)
    cut = text[start : start + MAX_SHOWN]
    prefix = "…" if start > 0 else ""
    suffix = "…" if start + MAX_SHOWN < len(text) else ""
    return f"{prefix}{cut}{suffix}"


class ReplayExhaustedError(ReplayError):
    """The replayed run asked for more model calls than the recording holds."""

    code = "REPLAY_EXHAUSTED"

    def __init__(self, call: int, recorded_calls: int) -> None:
        super().__init__(f"call {call}: the recording has no more model calls (it recorded {recorded_calls})")
        self.call = call
        self.recorded_calls = recorded_calls


class ReplayRecordingError(ReplayError, ValueError):
    """The recording cannot be replayed (a call has no ``request/header`` before it, so its config,
    system prompt and tools are unknown and the request could not be checked)."""

    code = "REPLAY_INVALID_RECORDING"


# --- agent -------------------------------------------------------------------------------------------


class ToolConflictError(AgentlogError, ValueError):
    """A tool with the same name is already registered: the model could not tell the two apart."""

    code = "TOOL_CONFLICT"


class ToolDefinitionError(AgentlogError, ValueError):
    """A tool definition the providers would refuse (bad name, non-object or non-JSON parameters)."""

    code = "INVALID_TOOL"


class ToolSchedulerError(AgentlogError, ValueError):
    """The scheduler was called with settings it cannot honour (e.g. ``max_parallel < 1``)."""

    code = "INVALID_SCHEDULE"


class InboxError(AgentlogError, ValueError):
    code = "INVALID_INBOX_OPERATION"


class AgentError(AgentlogError, RuntimeError):
    code = "AGENT_ERROR"


class ReconstructionError(AgentError):
    """The request about to be sent differs from what the log reconstructs (a loop bug; never sent)."""

    code = "RECONSTRUCTION_DESYNC"


class TurnAborted(AgentError):
    code = "TURN_ABORTED"


class StepLimitError(AgentError):
    """The turn used its ``max_steps`` and the model still wanted another step (it kept calling tools).

    The turn ends with ``{kind: "error", error: {code: "MAX_STEPS_EXCEEDED", message}}``; every call of the
    last step has its result, so the session can be continued with a new prompt.
    """

    code = "MAX_STEPS_EXCEEDED"


class AgentNotDurableError(AgentError):
    """The agent cannot checkpoint its session (not live in a store, or not in the store it was given)."""

    code = "AGENT_NOT_DURABLE"


class InvalidAgentOptionError(AgentError, ValueError):
    code = "INVALID_AGENT_OPTION"


class OpenTurnError(AgentError):
    """The session's log ends inside a turn this agent did not open (an earlier turn could not be closed)."""

    code = "TURN_OPEN"


class TurnBlockedError(AgentError):
    """A turn ended ``blocked`` (the command-line tool's report of such a turn)."""

    code = "TURN_BLOCKED"

    def __init__(self, message: str) -> None:
        super().__init__(message)


class TurnFailedError(AgentError):
    """A turn ended with an error (the command-line tool's report of such a turn).

    The instance carries the code recorded in ``turn/end`` — the code of the error that ended the turn
    (an :class:`LlmError` code, ``MAX_STEPS_EXCEEDED``, any other class's code, or ``UNKNOWN``) — so
    ``TURN_FAILED`` itself is only the class code; see :attr:`relays_codes`.
    """

    code = "TURN_FAILED"
    relays_codes: ClassVar[bool] = True

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


class SubagentDepthError(AgentError):
    """A delegation would make a child deeper than the configured ``max_depth`` (runtime spec §6.8).

    The delegating tool call gets this error as its result (``{name, code}`` on the ``tool/result``);
    no child session is created.
    """

    code = "SUBAGENT_DEPTH_EXCEEDED"


class SubagentLabelError(AgentError, ValueError):
    """A continuable delegation's ``label`` names a session that is not a continuable child of this
    parent (another parent's child, or a one-shot child); nothing is written."""

    code = "SUBAGENT_LABEL_CONFLICT"


# --- compaction ---------------------------------------------------------------------------------------


class CompactionError(AgentlogError):
    """A compaction (summary, prune or measurement) was refused or failed; the log says what happened.

    A failure after ``compaction/start`` has been appended is recorded by exactly one
    ``compaction/end {error}``; the surface is unchanged unless an earlier prune already landed.
    """

    code = "COMPACTION_ERROR"


class CompactionConfigError(CompactionError, ValueError):
    """A compaction, pruner or token-meter setting is unknown or out of range (original's message)."""

    code = "INVALID_COMPACTION_CONFIG"


class TargetPressureConfigError(CompactionConfigError):
    """The routed model has no usable context capacity or budget (warned once per ``provider/model``)."""

    code = "COMPACTION_TARGET_CONFIG"

    def __init__(self, target_key: str, message: str) -> None:
        super().__init__(message)
        self.target_key = target_key


class CompactionRangeError(CompactionError, ValueError):
    """A requested span is not on the surface, reversed, or would split a tool call from its result."""

    code = "INVALID_COMPACTION_RANGE"


class CompactionStateError(CompactionError):
    """The session is not in a state compaction can work in (no open turn, a corrupt surface fold)."""

    code = "COMPACTION_STATE"


class SurfaceChangedError(CompactionError):
    """The surface the summary was built from changed while the summarizer ran; nothing was replaced."""

    code = "COMPACTION_SURFACE_CHANGED"


class SummaryNotSmallerError(CompactionError):
    """The framed summary would cost at least as many tokens as what it replaces; nothing was replaced."""

    code = "COMPACTION_NOT_SMALLER"


class SummarizationError(CompactionError):
    """The summarizer produced nothing usable (no target to ask, no text) — model failures are LlmError."""

    code = "SUMMARIZATION_FAILED"
    codes = frozenset({"NO_SUMMARIZATION_TARGET", "EMPTY_SUMMARY", "INVALID_SUMMARY_RESULT"})


class CompactionThresholdError(CompactionError):
    """Every allowed compaction attempt ran and the request is still above the pressure threshold."""

    code = "COMPACTION_ABOVE_THRESHOLD"


class ManualCompactionError(CompactionError):
    """An explicit compaction (``compact_now`` / ``agentlog compact``) failed; :attr:`kind` classifies it.

    ``kind`` is the original's class (``busy``, ``cancelled``, ``changed``, ``summary``, ``commit``,
    ``persistence``) and ``code`` its stable code (``COMPACTION_<KIND>``); a ``busy`` refusal is raised
    as its refinement :class:`CompactionBusyError`, whose code that is. The underlying failure is
    ``__cause__``.
    """

    code = "MANUAL_COMPACTION_FAILED"
    codes = frozenset(
        {
            "COMPACTION_BUSY",
            "COMPACTION_CANCELLED",
            "COMPACTION_CHANGED",
            "COMPACTION_SUMMARY",
            "COMPACTION_COMMIT",
            "COMPACTION_PERSISTENCE",
        }
    )
    KINDS: ClassVar[tuple[str, ...]] = ("busy", "cancelled", "changed", "summary", "commit", "persistence")

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown manual compaction kind {kind!r}")
        super().__init__(message, code=f"COMPACTION_{kind.upper()}")
        self.kind = kind


class CompactionBusyError(ManualCompactionError):
    """A compaction cannot start now: another one holds the session's durable lock (an unmatched
    ``compaction/start``), or a manual one finds the agent busy or a turn open.

    The original raises ``ManualCompactionError('busy')`` there on every path (pressure, context
    overflow, an explicit region, ``compact_now``), so this is one, of kind ``busy``: ``except
    ManualCompactionError`` and ``except CompactionBusyError`` each catch it wherever it comes from.
    """

    code = "COMPACTION_BUSY"

    def __init__(self, message: str) -> None:
        super().__init__("busy", message)


# --- projections: title -------------------------------------------------------------------------------


class SessionTitleError(AgentlogError):
    """The session-title service refused or lost a title (the family; see its refinements)."""

    code = "SESSION_TITLE_ERROR"


class SessionTitleInvalidError(SessionTitleError, ValueError):
    """An explicit title normalizes to empty: the one rename failure that blames the input."""

    code = "SESSION_TITLE_INVALID"


class SessionTitleStateError(SessionTitleError, ValueError):
    """A stored ``title`` projection state (a checkpoint row) is not a non-empty string or null."""

    code = "SESSION_TITLE_STATE"


class SessionTitleProviderError(SessionTitleError):
    """A title provider is malformed, or its result (or its model's answer) cannot be accepted.

    ``SESSION_TITLE_TIMEOUT``: a model-written title did not arrive within the provider's ``timeout_ms``.
    """

    code = "SESSION_TITLE_PROVIDER"
    codes = frozenset({"SESSION_TITLE_TIMEOUT"})


class SessionTitleCancelledError(SessionTitleError):
    """Title work was cancelled: superseded by a newer prompt, refresh or rename, by the caller, or by
    the disposal of its session, provider or service. Nothing was appended."""

    code = "SESSION_TITLE_CANCELLED"


# --- projections: registry ----------------------------------------------------------------------------


class ProjectionError(AgentlogError):
    """The projection registry refused a unit, a state, a view or a checkpoint row (the family)."""

    code = "PROJECTION_ERROR"


class ProjectionUnitError(ProjectionError, ValueError):
    """``register`` was given something that is not a valid unit (a stateVersion that is not a
    non-negative safe integer, a key that is not a string)."""

    code = "INVALID_PROJECTION_UNIT"


class ProjectionKeyConflictError(ProjectionError, ValueError):
    """A key is already registered at another ``stateVersion``: the two cannot share cells."""

    code = "PROJECTION_KEY_CONFLICT"


class ProjectionStateError(ProjectionError, TypeError):
    """A unit's state (initial, reduced or parsed back) is not lossless JSON: it could not be checkpointed."""

    code = "PROJECTION_STATE_NOT_JSON"


class ProjectionViewError(ProjectionError, TypeError):
    """A unit's view is not lossless JSON (an accidentally async view returns an awaitable): never served."""

    code = "PROJECTION_VIEW_INVALID"


class ProjectionReducerError(ProjectionError):
    """A reducer raised, or mutated its (frozen) input: the unit's value for that session is unavailable.

    The cause is ``__cause__``; every later read of that unit for that session raises it again.
    """

    code = "PROJECTION_REDUCER_FAILED"


class ProjectionRowError(ProjectionError, ValueError):
    """A version-matching checkpoint row's state does not match the unit's state schema."""

    code = "PROJECTION_ROW_INVALID"


class ProjectionRestoreError(ProjectionError, ValueError):
    """A cold restore cannot use a row with the tail it was given: the caller must re-read from seq 0."""

    code = "PROJECTION_RESTORE_REREAD"


# --- projections: persisted cache


class ProjectionCheckpointNotJsonError(ProjectionStateError):
    """The persisted cache refused a checkpoint: a unit state is not lossless JSON (spec §3.1)."""

    code = "PROJECTION_CHECKPOINT_NOT_JSON"


# --- session query and search -------------------------------------------------------------------------


SESSION_QUERY_CODES: Final[frozenset[str]] = frozenset(
    f"SESSION_QUERY_{name}"
    for name in (
        "ABORTED",
        "CORRUPT_SESSION",
        "EVENT_NOT_FOUND",
        "INDEX_FAILED",
        "INVALID_CONFIG",
        "INVALID_CURSOR",
        "INVALID_FILTER",
        "INVALID_LIMIT",
        "INVALID_QUERY",
        "INVALID_LINEAGE",
        "INVALID_SURFACE",
        "INVALID_WINDOW",
        "PERSISTENCE_FAILED",
        "SEARCH_DISABLED",
        "SESSION_NOT_FOUND",
        "STALE_CURSOR",
        "SOURCE_CONFLICT",
    )
)
"""The closed code set of :class:`SessionQueryError` (runtime spec §4.1), exactly the original's."""


class SessionQueryError(AgentlogError):
    """The session query engine or its search index refused a request, or could not answer it.

    Like the original's ``SessionQueryError(message, code)``, one class carries the whole closed
    ``SESSION_QUERY_*`` set: callers branch on ``code`` (``SESSION_QUERY_STALE_CURSOR``: restart the
    search from the first page; ``SESSION_QUERY_INDEX_FAILED``: the derived index could not be used,
    the store itself is untouched). Nothing a query raises has written to the store.
    """

    code = "SESSION_QUERY_PERSISTENCE_FAILED"
    codes = SESSION_QUERY_CODES

    def __init__(self, message: str, code: str) -> None:
        if code not in SESSION_QUERY_CODES:
            raise ValueError(f"unknown session query code {code!r}")
        super().__init__(message, code=code)


# --- the inspector (agentlog serve) ---------------------------------------------------------------------


INSPECTOR_CODES: Final = frozenset(
    {"INSPECTOR_BAD_REQUEST", "INSPECTOR_UNAUTHORIZED", "INSPECTOR_METHOD_NOT_ALLOWED", "INSPECTOR_NOT_FOUND"}
)
"""The codes of :class:`InspectorRequestError`."""


class InspectorRequestError(AgentlogError):
    """The inspector (``agentlog serve``) refused an HTTP request itself: a missing or wrong token
    (``INSPECTOR_UNAUTHORIZED``), a method other than GET/HEAD (``INSPECTOR_METHOD_NOT_ALLOWED``: no
    endpoint writes), a path it does not serve (``INSPECTOR_NOT_FOUND``), a malformed parameter
    (``INSPECTOR_BAD_REQUEST``). Refusals of the store or the session keep their own classes."""

    code = "INSPECTOR_BAD_REQUEST"
    codes = INSPECTOR_CODES

    def __init__(self, message: str, code: str = "INSPECTOR_BAD_REQUEST") -> None:
        if code not in INSPECTOR_CODES:
            raise ValueError(f"unknown inspector code {code!r}")
        super().__init__(message, code=code)


# --- telemetry: OpenTelemetry spans ----------------------------------------------------------------------


OTEL_CODES: Final = frozenset({"OTEL_EXPORT_FAILED", "OTEL_NOT_INSTALLED"})
"""The codes of :class:`OtelError`."""


class OtelError(AgentlogError):
    """The OpenTelemetry span export could not run: the receiver refused or could not be reached
    (``OTEL_EXPORT_FAILED``: is it running at that endpoint?), or the ``otel`` extra is not installed
    (``OTEL_NOT_INSTALLED``: ``pip install 'agentlog[otel]'``). A live exporter never raises into an
    append: its failures stay in the exporter's log."""

    code = "OTEL_EXPORT_FAILED"
    codes = OTEL_CODES

    def __init__(self, message: str, code: str = "OTEL_EXPORT_FAILED") -> None:
        if code not in OTEL_CODES:
            raise ValueError(f"unknown telemetry code {code!r}")
        super().__init__(message, code=code)

    @classmethod
    def not_installed(cls, what: str, err: ImportError) -> OtelError:
        """``OTEL_NOT_INSTALLED``: ``what`` needs the ``otel`` extra, whose import failed with ``err``."""
        return cls(f"{what} needs the otel extra ({err}): pip install 'agentlog[otel]'", code="OTEL_NOT_INSTALLED")


# --- interop: converters, recorder, transcripts ----------------------------------------------------------


class InteropError(AgentlogError):
    """A conversion between agentlog and another format, or a recording, was refused (the family)."""

    code = "INTEROP_ERROR"


class ConversionError(InteropError, ValueError):
    """An item in a foreign format cannot be represented (or an agentlog message cannot be rendered in
    the target format) without loss. ``index`` is the item's position in the input and ``path`` the
    JSON path of the offending part (``$[3].content[1]``); nothing was written."""

    code = "CONVERSION_UNSUPPORTED"

    def __init__(self, message: str, *, index: int | None = None, path: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.path = path


class RecorderStateError(InteropError, RuntimeError):
    """A recorder was used out of order (a tool result for a call that was never made, a turn inside
    a turn, a write after the turn ended); nothing was appended for the refused call."""

    code = "RECORDER_STATE"


class TranscriptError(InteropError, ValueError):
    """A transcript being imported has a line that is not JSON, is truncated or has an unusable shape, or
    is missing, or changed while it was being imported. ``path`` names the file and ``line`` the 1-based
    line (``None`` when no one line is at fault); nothing of the import was committed."""

    code = "TRANSCRIPT_INVALID"

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class TranscriptAlreadyImportedError(InteropError):
    """The transcript was imported before: its session id (the default id of an import, the transcript's
    own) is already stored as ``session_id``. Nothing was written; pass ``--id`` (``session_id=``) to
    import a copy under another id."""

    code = "TRANSCRIPT_ALREADY_IMPORTED"

    def __init__(self, message: str, *, session_id: str) -> None:
        super().__init__(message)
        self.session_id = session_id
# --- telemetry ------------------------------------------------------------------------------------------


TELEMETRY_SINK_CODES: Final = frozenset({"TELEMETRY_SINK_FAILED", "TELEMETRY_SINK_STALLED"})
"""The codes of :class:`TelemetrySinkError`."""


class TelemetrySinkError(AgentlogError):
    """A telemetry sink failed: its ``emit``, ``flush`` or ``shutdown`` raised (``TELEMETRY_SINK_FAILED``,
    the sink's exception is ``__cause__``), or it was still busy when the telemetry closed
    (``TELEMETRY_SINK_STALLED``). Never raised into an append: the session log is untouched and the
    telemetry reports the first failure once (a warning and its ``on_error``), counting later ones in
    its ``stats()``. Fix or replace the sink; records lost meanwhile are not re-sent."""

    code = "TELEMETRY_SINK_FAILED"
    codes = TELEMETRY_SINK_CODES

    def __init__(self, message: str, code: str = "TELEMETRY_SINK_FAILED") -> None:
        if code not in TELEMETRY_SINK_CODES:
            raise ValueError(f"unknown telemetry sink code {code!r}")
        super().__init__(message, code=code)


# --- PostgreSQL backend ------------------------------------------------------------------------------------


class SessionConflictError(PersistenceError):
    """Another writer appended to the session first: the batch started at ``expected`` but the store's
    next seq is ``found``. Nothing of the batch was stored; reload the session and retry."""

    code = "SESSION_CONFLICT"

    def __init__(self, message: str, *, expected: int | None = None, found: int | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class DatabaseUnavailableError(PersistenceError):
    """The database server could not be reached or dropped the connection (wrong DSN, server down,
    connection terminated, statement timeout). Nothing unacknowledged was committed; retry once it is back."""

    code = "DATABASE_UNAVAILABLE"


class DatabaseAuthError(PersistenceError):
    """The database server refused the login (a wrong or missing password, no ``pg_hba.conf`` rule for
    this host, user and database, an unknown role). Not a :class:`DatabaseUnavailableError`: retrying
    cannot help until the credentials or the server's rules change, so a ``tail --follow`` ends on it
    instead of reconnecting forever."""

    code = "DATABASE_AUTH"


class DatabaseSchemaError(PersistenceError):
    """The database holds tables agentlog did not create, or a newer agentlog schema: it is refused untouched."""

    code = "DATABASE_SCHEMA"


class CopyConflictError(PersistenceError):
    """``agentlog copy``: the target already holds the session id with other content (other events or
    another header). The target's session is left untouched; copy it under another store, or remove the
    target's session first if the source's is the one to keep."""

    code = "COPY_CONFLICT"


class CopyVerificationError(PersistenceError):
    """``agentlog copy``: the session published on the target does not read back with the source's digest
    (a backend lost or changed an event). The copy is reported failed; the target's session must not be
    trusted."""

    code = "COPY_VERIFY_FAILED"
