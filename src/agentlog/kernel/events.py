"""The event envelope, the core vocabulary and the event-type registry.

An :class:`Event` is the committed, immutable record of one thing that happened. It *is* a frozen
``dict`` with the wire keys (``type, seq, time, data, sourceEventSeqs?, surfaceOp?, ignorable?``) so
it compares equal to the wire form and serializes without conversion; the properties are only
conveniences. Its JSON bytes are computed at most once and kept, so persistence never serializes an
event twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict

from .. import _accel
from ..errors import EventDataError, EventTypeError, FrozenError
from .jsoncodec import dumps
from .jsonvalue import FrozenDict, register_frozen_dict_type, seal_as
from .lineage import check_approval_policy, check_sandbox_mode, check_subagent_descriptor

SESSION_FORMAT_VERSION = 0
"""Stamped into every header; an unknown future version is refused by readers."""


class Event(FrozenDict):
    """A committed session event (a frozen wire dict)."""

    __slots__ = ("_json",)
    _json: bytes

    def __setattr__(self, name: str, value: object) -> None:
        # The cached bytes are what persistence writes: nobody may replace them (the cache itself is
        # filled with object.__setattr__ by json_bytes).
        raise FrozenError(f"Event is immutable: cannot set attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"Event is immutable: cannot delete attribute {name!r}")

    @property
    def type(self) -> str:
        return self["type"]  # type: ignore[no-any-return]

    @property
    def seq(self) -> int:
        return self["seq"]  # type: ignore[no-any-return]

    @property
    def time(self) -> int:
        return self["time"]  # type: ignore[no-any-return]

    @property
    def data(self) -> Any:
        return self["data"]

    @property
    def surface_op(self) -> Any:
        return self.get("surfaceOp")

    @property
    def source_event_seqs(self) -> Any:
        return self.get("sourceEventSeqs")

    @property
    def ignorable(self) -> bool:
        return self.get("ignorable") is True

    @property
    def json_bytes(self) -> bytes:
        """The event's compact JSON text, serialized once and cached."""
        try:
            return self._json
        except AttributeError:
            data = dumps(self)
            object.__setattr__(self, "_json", data)
            return data

    def cached_json_bytes(self) -> bytes | None:
        """The JSON text :attr:`json_bytes` has already cached, or ``None`` (never serializes, never caches)."""
        try:
            return self._json
        except AttributeError:
            return None



register_frozen_dict_type(Event)


def _new_event(record: dict[str, Any]) -> Event:
    return seal_as(Event, record)  # type: ignore[no-any-return]


new_event: Callable[[dict[str, Any]], Event] = (
    functools.partial(_accel.seal, Event) if _accel.seal is not None else _new_event
)
"""Seal a wire record whose values are already frozen into a committed :class:`Event`."""

# --- vocabulary -----------------------------------------------------------------------------------
# Each core event type name is spelled once, here; code compares and appends with these names. They are
# plain ``str`` constants (the C accelerator requires exact ``str``), so the wire format is the string.

TURN_START: Final = "turn/start"
TURN_END: Final = "turn/end"
STEP_START: Final = "step/start"
STEP_END: Final = "step/end"
USER_MESSAGE: Final = "user/message"
ASSISTANT_CHUNK: Final = "assistant/chunk"
ASSISTANT_MESSAGE: Final = "assistant/message"
TOOL_CALL: Final = "tool/call"
TOOL_RESULT: Final = "tool/result"
TODO_WRITE: Final = "todo/write"
REQUEST_HEADER: Final = "request/header"
REQUEST_CONTEXT: Final = "request/context"
SESSION_END_SEED: Final = "session/end-seed"
SESSION_LABELS: Final = "session/labels"
"""User labels (agentlog's own, ignorable): ``{"labels": {key: value | null}}``; rules in :mod:`.labels`."""
SESSION_TAGS: Final = "session/tags"
"""User tags (agentlog's own, ignorable): ``{"add": [...], "remove": [...]}``; rules in :mod:`.labels`."""
REQUEST_HEADER_DELTA: Final = "request/header-delta"

# Catalog types written or read by more than one layer (the transcript importer writes compactions and
# titles as the compaction engine and the title service do; the kernel validates subagent descriptors):
# named here, re-exported by their packages' vocabulary modules (compaction.events, projection.events,
# agent.events).
COMPACTION_START: Final = "compaction/start"
COMPACTION_SUMMARY: Final = "compaction/summary"
COMPACTION_END: Final = "compaction/end"
SESSION_TITLE: Final = "session/title"
SUBAGENT_DESCRIPTOR: Final = "subagent/descriptor"
"""The removed (legacy) request-header vocabulary: refused on append and load, migrated by ``legacy``."""

CoreEventType = Literal[
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
    "todo/write",
    "request/header",
    "request/context",
    "session/end-seed",
]
"""The core event type names as a type: the names ``Session.append`` takes (any other type: ``append_custom``)."""

SURFACE_EVENT_TYPES: frozenset[str] = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT})

CORE_EVENT_TYPES: frozenset[str] = frozenset(
    {
        TURN_START,
        TURN_END,
        STEP_START,
        STEP_END,
        USER_MESSAGE,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        TODO_WRITE,
        REQUEST_HEADER,
        REQUEST_CONTEXT,
        SESSION_END_SEED,
    }
)

KNOWN_SESSION_EVENT_TYPES: frozenset[str] = CORE_EVENT_TYPES | frozenset(
    {
        "agent-preset/selected",
        "agent/inbox/spliced",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "command/done",
        "command/run",
        COMPACTION_END,
        "compaction/prune",
        COMPACTION_START,
        COMPACTION_SUMMARY,
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        "llm/retry",
        "llm/retry-started",
        "permission/preset",
        "plan/mode",
        "sandbox/mode",
        "schedule/change",
        SESSION_TITLE,
        "session/title-llm-request",
        SUBAGENT_DESCRIPTOR,
        "team/member",
        "team/message/delivered",
        "team/message/queued",
        "team/task",
        "tool-workflow/agent-end",
        "tool-workflow/agent-start",
        "tool-workflow/run-end",
        "tool-workflow/run-start",
        "tool/code-dispatch",
        "tool/code-dispatch-start",
        "web/deepseek-search-llm-request",
    }
)
assert len(KNOWN_SESSION_EVENT_TYPES) == 48

# --- registry ------------------------------------------------------------------------------------

DataValidator = Callable[[Any], object]
"""Called with the frozen data; raising or returning ``False`` refuses the event."""


APPEND_CHECK_KINDS: dict[str, int] = {
    TURN_START: 1,
    STEP_START: 2,
    STEP_END: 2,
    ASSISTANT_CHUNK: 3,
    TOOL_CALL: 4,
    USER_MESSAGE: 5,
    ASSISTANT_MESSAGE: 6,
    TOOL_RESULT: 7,
    TURN_END: 8,
    REQUEST_HEADER: -1,
}
"""How append checks a type's data (``seeds.check_append_data`` holds the rules): ``1``-``8`` a rule
the C accelerator can also check, ``-1`` checked in Python only, absent: the JSON gate only."""


class EventTypeInfo:
    __slots__ = ("check", "fast_check", "ignorable", "log_only", "name", "surface", "validator")

    def __init__(self, name: str, ignorable: bool, validator: DataValidator | None) -> None:
        self.name = name
        self.ignorable = ignorable
        self.validator = validator
        self.check = APPEND_CHECK_KINDS.get(name, 0)
        self.fast_check = max(self.check, 0)  # the accelerator's rule kind (0: the JSON gate only)
        self.surface = name in SURFACE_EVENT_TYPES
        # the append fast path: a plain log-only event (no surface transition, no envelope extras)
        self.log_only = not ignorable and not self.surface


class EventTypes:
    """Which event types a reader understands, and how to check plugin-owned data.

    The kernel accepts any type string (the original does too); the registry exists so persistence can
    refuse logs with unknown non-ignorable types, and so a plugin's own events are validated on append
    and on load by the plugin's validator instead of by hand-written checks scattered around.
    """

    def __init__(self, known: Iterable[str] = KNOWN_SESSION_EVENT_TYPES) -> None:
        self._types: dict[str, EventTypeInfo] = {name: EventTypeInfo(name, False, None) for name in known}
        self._validators: dict[str, DataValidator] = {}

    def register(self, type: str, *, ignorable: bool = False, validator: DataValidator | None = None) -> None:
        if not isinstance(type, str) or not type:
            raise EventTypeError("event type must be a non-empty string")
        if type in SURFACE_EVENT_TYPES or type in CORE_EVENT_TYPES:
            raise EventTypeError(f'event type "{type}" is owned by the session kernel and cannot be re-registered')
        existing = self._types.get(type)
        if existing is not None and (existing.ignorable != ignorable or existing.validator is not validator):
            if existing.validator is not None or existing.ignorable:
                raise EventTypeError(f'event type "{type}" is already registered with different settings')
        self._types[type] = EventTypeInfo(type, ignorable, validator)
        if validator is not None:
            self._validators[type] = validator
        else:
            self._validators.pop(type, None)

    def unregister(self, type: str) -> None:
        if type in CORE_EVENT_TYPES:
            raise EventTypeError(f'event type "{type}" is owned by the session kernel and cannot be unregistered')
        self._types.pop(type, None)
        self._validators.pop(type, None)

    def is_known(self, type: str) -> bool:
        return type in self._types

    def is_ignorable(self, type: str) -> bool:
        info = self._types.get(type)
        return info is not None and info.ignorable

    def info(self, type: str) -> EventTypeInfo | None:
        return self._types.get(type)

    def types(self) -> frozenset[str]:
        return frozenset(self._types)

    @property
    def infos(self) -> dict[str, EventTypeInfo]:
        """Every known type's info, live (hot path: a session keeps this dict for one lookup per append)."""
        return self._types

    @property
    def validators(self) -> dict[str, DataValidator]:
        """Types with a data validator (hot path: one dict lookup per append)."""
        return self._validators

    def validate(self, type: str, data: Any) -> None:
        validator = self._validators.get(type)
        if validator is None:
            return
        try:
            verdict = validator(data)
        except EventDataError:
            raise
        except Exception as err:  # the plugin's own words, wrapped in our typed error
            raise EventDataError(f'session event "{type}" carries invalid data: {err}') from err
        if verdict is False:
            raise EventDataError(f'session event "{type}" carries invalid data')


event_types = EventTypes()
"""The default registry, shared by sessions that are not given one."""

# The delegation events' data rules (runtime spec §6.8; the names' vocabulary is agentlog.agent.events):
# in the default registry from the start, so a reader that never imports the agent checks them too.
event_types.register(SUBAGENT_DESCRIPTOR, validator=check_subagent_descriptor)
event_types.register("approval/policy", validator=check_approval_policy)
event_types.register("sandbox/mode", validator=check_sandbox_mode)
# User metadata (session/labels, session/tags: agentlog's own, ignorable) is registered in this registry by
# agentlog.kernel.labels, which the session module imports: every session appends and loads with it.


# --- typed data of the core events ---------------------------------------------------------------


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str


class ToolResultBlock(TypedDict):
    type: Literal["tool-result"]
    toolCallId: str
    content: list[Any]
    isError: NotRequired[bool]


class ImageAttachmentRef(TypedDict):
    attachmentId: str
    mediaType: Literal["image/png", "image/jpeg", "image/webp", "image/gif"]
    bytes: int
    width: int
    height: int
    name: NotRequired[str]
    originalDimensions: NotRequired[dict[str, int]]


class ImageBlock(TypedDict):
    type: Literal["image"]
    attachment: ImageAttachmentRef


ContentBlock = TextBlock | ReasoningBlock | ToolCallBlock | ToolResultBlock | ImageBlock | dict[str, Any]


class MessageSource(TypedDict, total=False):
    kind: str
    plugin: str
    form: str
    provider: str
    model: str
    replayState: Any
    callId: str


class Message(TypedDict):
    id: str
    role: Literal["system", "user", "assistant"]
    content: list[Any]
    source: MessageSource


class TokenUsage(TypedDict):
    inputTokens: int
    outputTokens: int
    cacheReadTokens: NotRequired[int]
    cacheWriteTokens: NotRequired[int]
    reasoningTokens: NotRequired[int]


class LlmFailure(TypedDict):
    message: str
    code: str
    status: NotRequired[int]
    providerRetryAfterMs: NotRequired[int]
    requestId: NotRequired[str]


class TurnStartData(TypedDict):
    turn: int


class TurnEndReason(TypedDict, total=False):
    kind: str
    reason: dict[str, Any]
    error: LlmFailure


class TurnEndData(TypedDict):
    turn: int
    reason: TurnEndReason


class StepData(TypedDict):
    turn: int
    step: int


class AssistantChunkData(TypedDict):
    turn: int
    step: int
    chunk: Mapping[str, Any]
    """One stream chunk (``agentlog.llm.types.StreamChunk``, a ``TypedDict`` the kernel cannot name; or a
    plain chunk such as ``agentlog.text_delta(...)`` builds)."""


class AssistantMessageData(TypedDict):
    turn: int
    step: int
    message: Message
    usage: NotRequired[TokenUsage]
    interrupted: NotRequired[Literal[True]]


class ToolCallData(TypedDict):
    turn: int
    step: int
    callId: str
    name: str
    arguments: str


class ToolErrorIdentity(TypedDict):
    name: str
    code: str


class ToolResultData(TypedDict):
    turn: int
    step: int
    message: Message
    error: NotRequired[ToolErrorIdentity]
    meta: NotRequired[Any]


class SurfaceIntent(TypedDict, total=False):
    """The surface metadata a surface event is appended with (``Session.append``'s ``intent``)."""

    surfaceOp: Literal["append"] | dict[str, Any]
    sourceEventSeqs: list[int]


class TodoItem(TypedDict):
    content: str
    status: Literal["pending", "in_progress", "completed"]


class TodoWriteData(TypedDict):
    todos: list[TodoItem]


class LlmCallConfig(TypedDict):
    provider: str
    model: str
    reasoningEffort: NotRequired[str]
    temperature: NotRequired[float]
    maxTokens: NotRequired[int]
    stop: NotRequired[list[str]]


class ToolSchema(TypedDict):
    name: str
    description: str
    parameters: dict[str, Any]


class EpochHeader(TypedDict):
    config: LlmCallConfig
    adapterDefaults: NotRequired[dict[str, bool]]
    system: NotRequired[str]
    tools: NotRequired[list[ToolSchema]]


class RequestHeaderData(TypedDict):
    header: EpochHeader
    reason: Literal["initial", "resume", "change"]


class RequestContextData(TypedDict):
    provider: str
    model: str
    contextWindow: NotRequired[int]


class SessionHeader(TypedDict):
    version: int
    id: str
    createdAt: int
    cwd: NotRequired[str]
    parentSession: NotRequired[str]
    seedLength: NotRequired[int]
    origin: NotRequired[Literal["subagent"]]
    delegationDepth: NotRequired[int]
    agentPreset: NotRequired[str]
