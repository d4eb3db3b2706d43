"""agentlog: an LLM agent's session as an append-only, validated event log.

The log stores what happened; the surface decides what the model sees now; everything else
(messages, transcripts, forks, repairs) is derived from the two.
"""

from .agent.checkpoint import CheckpointPolicy
from .errors import (
    AgentlogError,
    ChunkRowError,
    EventDataError,
    EventTypeError,
    FrozenError,
    InvalidEventError,
    InvalidSeedError,
    InvariantError,
    LegacyFormatError,
    MessageShapeError,
    NonJsonValueError,
    PersistenceError,
    ReentrantAppendError,
    SeqOutOfRangeError,
    SessionAnnouncedError,
    SessionAttachedError,
    SessionCollisionError,
    SessionExistsError,
    SessionForkError,
    SessionFormatUnsupportedError,
    SessionHeaderError,
    SessionLockedError,
    SessionNotFoundError,
    SessionNotLiveError,
    SessionPersistenceCorruptionError,
    SurfaceError,
)
from .kernel.chunkrows import MIN_RUN, decode_storage_record, pack_chunk_runs
from .kernel.events import (
    CORE_EVENT_TYPES,
    KNOWN_SESSION_EVENT_TYPES,
    SESSION_FORMAT_VERSION,
    SURFACE_EVENT_TYPES,
    Event,
    EventTypes,
    event_types,
)
from .kernel.invariants import SessionInvariants
from .kernel.jsonvalue import MAX_SAFE_INTEGER, FrozenDict, FrozenList, is_json_value, snapshot_json, thaw
from .kernel.messages import (
    assistant_message,
    image_block,
    new_message_id,
    plugin_message,
    reasoning_block,
    reasoning_delta,
    text_block,
    text_delta,
    token_usage,
    tool_call_block,
    tool_call_delta,
    tool_result_block,
    tool_result_message,
    user_message,
)
from .kernel.repair import TOOL_NOT_STARTED, TOOL_OUTCOME_UNKNOWN, interrupted_turn_closers
from .kernel.request_header import call_config_equals, canonical_header, fold_request_header, header_equals
from .kernel.seeds import SessionPreparation, adopt_session_event, snapshot_session_event
from .kernel.session import (
    EventsView,
    MessageList,
    Session,
    SessionView,
    derive_event_message,
)
from .kernel.store import Scope, SessionStore
from .kernel.surface import (
    APPEND,
    SurfaceFoldReplacement,
    SurfaceFoldResult,
    SurfaceManager,
    fold_surface,
    is_append_surface_event,
    is_replacement_surface_event,
    is_surface_eligible_type,
    is_surface_event,
    replace_op,
)
from .persistence.coordinator import PersistenceCoordinator, SessionSnapshot
from .persistence.memory import MemoryBackend

__version__ = "0.1.0"

_LAZY = {
    "JsonlBackend": ("agentlog.persistence.jsonl", "JsonlBackend"),
    "SqliteBackend": ("agentlog.persistence.sqlite", "SqliteBackend"),
}


def __getattr__(name: str) -> object:
    """File backends load on first use, so ``import agentlog`` stays light (no sqlite3/zstd import)."""
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        return getattr(importlib.import_module(module_name), attribute)
    raise AttributeError(f"module 'agentlog' has no attribute {name!r}")


__all__ = [
    "APPEND",
    "CORE_EVENT_TYPES",
    "KNOWN_SESSION_EVENT_TYPES",
    "MAX_SAFE_INTEGER",
    "MIN_RUN",
    "SESSION_FORMAT_VERSION",
    "SURFACE_EVENT_TYPES",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "AgentlogError",
    "CheckpointPolicy",
    "ChunkRowError",
    "Event",
    "EventDataError",
    "EventTypeError",
    "EventTypes",
    "EventsView",
    "FrozenDict",
    "FrozenError",
    "FrozenList",
    "InvalidEventError",
    "InvalidSeedError",
    "InvariantError",
    "JsonlBackend",
    "LegacyFormatError",
    "MemoryBackend",
    "MessageList",
    "MessageShapeError",
    "NonJsonValueError",
    "PersistenceCoordinator",
    "PersistenceError",
    "ReentrantAppendError",
    "Scope",
    "SeqOutOfRangeError",
    "Session",
    "SessionAnnouncedError",
    "SessionAttachedError",
    "SessionCollisionError",
    "SessionExistsError",
    "SessionForkError",
    "SessionFormatUnsupportedError",
    "SessionHeaderError",
    "SessionInvariants",
    "SessionLockedError",
    "SessionNotFoundError",
    "SessionNotLiveError",
    "SessionPersistenceCorruptionError",
    "SessionPreparation",
    "SessionSnapshot",
    "SessionStore",
    "SessionView",
    "SqliteBackend",
    "SurfaceError",
    "SurfaceFoldReplacement",
    "SurfaceFoldResult",
    "SurfaceManager",
    "adopt_session_event",
    "assistant_message",
    "call_config_equals",
    "canonical_header",
    "decode_storage_record",
    "derive_event_message",
    "event_types",
    "fold_request_header",
    "fold_surface",
    "header_equals",
    "image_block",
    "interrupted_turn_closers",
    "is_append_surface_event",
    "is_json_value",
    "is_replacement_surface_event",
    "is_surface_eligible_type",
    "is_surface_event",
    "new_message_id",
    "pack_chunk_runs",
    "plugin_message",
    "reasoning_block",
    "reasoning_delta",
    "replace_op",
    "snapshot_json",
    "snapshot_session_event",
    "text_block",
    "text_delta",
    "thaw",
    "token_usage",
    "tool_call_block",
    "tool_call_delta",
    "tool_result_block",
    "tool_result_message",
    "user_message",
]
