"""The openai-agents SDK's ``Session`` protocol over an agentlog session: ``AgentlogSession``.

Why it is built this way:

* **One item, one surface event, the item kept verbatim.** The SDK hands a session typed Responses
  items (``message``, ``function_call``, ``function_call_output``, ``reasoning``, hosted tool calls, …)
  and expects exactly those back: ids, ``status``, ``annotations`` and ``provider_data`` included. Each
  item becomes one ``user/message``, ``assistant/message`` or ``tool/result`` whose content is
  agentlog's rendering of the item (so ``agentlog show``, search, the converters and agentlog's own
  agent read the conversation), and whose ``source`` keeps the item itself under ``openaiAgentsItem``.
  :meth:`AgentlogSession.get_items` is derived from the session's surface: every visible message gives
  back its stored item (a message agentlog wrote itself — a crash-repair closer, a turn of
  :class:`agentlog.agent.Agent` — is rendered as items). Item types agentlog has no block for (images,
  files, hosted tools) are rendered as a ``[type]`` text placeholder; the item itself is never lost.
* **Pop and clear hide, the log keeps.** ``pop_item`` and ``clear_session`` append a surface
  *replacement* (an ``assistant/message`` without content, which derives no message) that shadows the
  hidden items, after an ignorable record event (``openai-agents/pop-item``, ``openai-agents/clear-session``)
  saying what was hidden. Nothing is deleted: ``session.at(seq)`` still shows the conversation as it was.
* **Turns like an agent's, so crash repair means something.** A batch that starts with the user's input
  opens a turn; every ``add_items`` call is one step of it (a step whose call has no output yet stays
  open for the batch that brings it); a ``function_call`` is logged with its ``tool/call`` (the SDK
  saves a call after running it, so it counts as started); the turn ends when a batch ends with an
  assistant message and no call is unanswered (or when the next run's input arrives). A process
  killed mid-run leaves the turn open, and the next open repairs it: the turn is closed as
  interrupted and a call without its output gets a ``TOOL_OUTCOME_UNKNOWN`` result, which the SDK
  then reads as that call's ``function_call_output``: the model is never sent a dangling call.
* **What the SDK never hands a session, the run hooks record.** The SDK saves a model response's items
  only after its tools ran, so with the session alone a process killed inside a tool loses the call;
  and the agent's instructions, tools and model never reach a session at all. :class:`AgentlogRunHooks`
  (``hooks=`` of ``Runner.run``) writes the ``request/header`` and opens the step before each model call
  and logs the response's items, each call with its ``tool/call``, durably before any tool runs; the
  SDK's own save of those items later is matched (a call by its ``call_id``, anything else by its JSON)
  and skipped, so each item is held once.
* **Durable on return.** Every mutation appends its events synchronously (one batch, in order, under a
  per-session lock) and then awaits the coordinator's flush barrier, so when ``add_items``,
  ``pop_item`` or ``clear_session`` returns, the change is on disk (``wait_durable=False`` returns at once
  and leaves it to the write-behind window, 200 ms by default). If the caller is cancelled during the
  flush, the flush still completes before the cancellation propagates. With the JSONL zstd or SQLite
  backend a batch is normally written as one checksummed frame or one transaction; a crash inside a
  write keeps a prefix of it, which the repair above closes.
* **Bad input writes nothing.** Every item is checked (a mapping, lossless JSON, the fields its type
  needs) before the first event is appended; a refusal is a :class:`~agentlog.errors.ConversionError`
  naming the item's index and JSON path.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import os
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import orjson

try:
    from agents.items import TResponseInputItem
    from agents.lifecycle import RunHooks
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "agentlog.integrations.openai_agents needs the openai-agents SDK: pip install 'agentlog[openai-agents]'"
    ) from err

from ..errors import AgentlogError, ConversionError, RecorderStateError, SessionLockedError
from ..kernel import messages as m
from ..kernel.events import (
    ASSISTANT_MESSAGE,
    REQUEST_CONTEXT,
    REQUEST_HEADER,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    AssistantMessageData,
    EpochHeader,
    Message,
    MessageSource,
    RequestContextData,
    SurfaceIntent,
    ToolCallData,
    ToolResultData,
    event_types,
)
from ..kernel.jsonvalue import snapshot_json, thaw
from ..kernel.request_header import canonical_header, header_equals
from ..kernel.session import Session, derive_event_message
from ..kernel.store import SessionStore
from ..persistence.coordinator import PersistenceCoordinator
from ..persistence.writer_lock import deadline_of, wait_for_writer

if TYPE_CHECKING:
    from agents.memory import Session as _SdkSession

__all__ = [
    "CLEAR_SESSION_EVENT",
    "ITEM_KEY",
    "POP_ITEM_EVENT",
    "AgentlogRunHooks",
    "AgentlogSession",
    "items_of_message",
]

ITEM_KEY: Final = "openaiAgentsItem"
"""The key of a message's ``source`` that holds the SDK item the message was written from."""
PROVIDER: Final = "openai-agents"
POP_ITEM_EVENT: Final = "openai-agents/pop-item"
"""Log-only record before a ``pop_item`` replacement: ``{"shadowedSeqs": [...], "item": <popped item>}``."""
CLEAR_SESSION_EVENT: Final = "openai-agents/clear-session"
"""Log-only record before a ``clear_session`` replacement: ``{"shadowedSeqs": [...], "items": n}``."""

# Ignorable: a reader that does not import this module (the agentlog command, another harness) skips them.
event_types.register(POP_ITEM_EVENT, ignorable=True)
event_types.register(CLEAR_SESSION_EVENT, ignorable=True)

_WITHDRAWN_TEXT = "This tool call was withdrawn from the conversation (openai-agents pop_item/clear_session)."
_INPUT_ROLES = frozenset({"user", "system", "developer"})
_SESSION_LOCKS: weakref.WeakKeyDictionary[Session, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def _lock_of(session: Session) -> threading.Lock:
    """One lock per live session, shared by every adapter over it, so batches never interleave."""
    with _LOCKS_GUARD:
        lock = _SESSION_LOCKS.get(session)
        if lock is None:
            lock = _SESSION_LOCKS[session] = threading.Lock()
        return lock


# --- items → agentlog messages ---------------------------------------------------------------------


def _refuse(index: int, path: str, what: str) -> ConversionError:
    return ConversionError(f"openai-agents item {index} cannot be stored: {what} (at {path})", index=index, path=path)


def _required_str(item: Mapping[str, Any], key: str, index: int, *, nonempty: bool = True) -> str:
    value = item.get(key)
    if not isinstance(value, str) or (nonempty and not value):
        kind = "a non-empty string" if nonempty else "a string"
        raise _refuse(index, f"$[{index}].{key}", f"{item.get('type')!r} needs {key!r} as {kind}, got {value!r}")
    return value


def _part_text(part: Any) -> str:
    """The text of one content part; a ``[type]`` placeholder for a part agentlog has no block for."""
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping):
        kind = part.get("type")
        for key in ("text", "refusal"):
            if isinstance(part.get(key), str) and kind in (None, "input_text", "output_text", "text", "refusal"):
                return cast(str, part[key])
        return f"[{kind}]"
    return "[content]"


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [m.text_block(content)]
    if isinstance(content, Sequence):
        return [m.text_block(_part_text(part)) for part in content]
    return []


def _model_of(item: Mapping[str, Any]) -> str:
    data = item.get("provider_data")
    model = data.get("model") if isinstance(data, Mapping) else None
    return model if isinstance(model, str) and model else "unknown"


_SurfaceType = Literal["user/message", "assistant/message", "tool/result"]


def _message_of(item: Mapping[str, Any], index: int) -> tuple[_SurfaceType, Message]:
    """The event type and agentlog message that stand for one SDK item (``source`` keeps the item)."""
    kind = item.get("type")
    role = item.get("role")
    event: _SurfaceType
    message: Message
    if kind in (None, "message") and role in _INPUT_ROLES:
        source: dict[str, Any] = {"kind": "user"} if role == "user" else {"kind": "plugin", "plugin": PROVIDER}
        if role != "user":
            source["form"] = role
        event, message = USER_MESSAGE, m.user_message(_blocks(item.get("content")), source=source)
    elif kind in (None, "message") and role == "assistant":
        blocks = _blocks(item.get("content"))
        event = ASSISTANT_MESSAGE
        message = m.assistant_message(blocks, provider=PROVIDER, model=_model_of(item))
    elif kind in ("function_call", "custom_tool_call"):
        call_id = _required_str(item, "call_id", index)
        name = _required_str(item, "name", index, nonempty=False)
        arguments = _required_str(item, "arguments" if kind == "function_call" else "input", index, nonempty=False)
        block = m.tool_call_block(call_id, name, arguments)
        event = ASSISTANT_MESSAGE
        message = m.assistant_message([block], provider=PROVIDER, model=_model_of(item))
    elif kind in ("function_call_output", "custom_tool_call_output"):
        call_id = _required_str(item, "call_id", index)
        event, message = TOOL_RESULT, m.tool_result_message(call_id, _blocks(item.get("output")))
    elif kind == "reasoning":
        parts = [p for key in ("summary", "content") for p in (item.get(key) or ()) if isinstance(p, Mapping)]
        text = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))
        event = ASSISTANT_MESSAGE
        message = m.assistant_message([m.reasoning_block(text)], provider=PROVIDER, model=_model_of(item))
    elif kind is None:
        raise _refuse(index, f"$[{index}].role", f"an item without a 'type' needs a message role, got {role!r}")
    elif not isinstance(kind, str):
        raise _refuse(index, f"$[{index}].type", f"'type' must be a string, got {kind!r}")
    elif kind.endswith("_output") or kind in ("mcp_approval_response", "item_reference"):
        source = {"kind": "plugin", "plugin": PROVIDER, "form": kind}
        event, message = USER_MESSAGE, m.user_message(f"[{kind}]", source=source)
    else:
        event = ASSISTANT_MESSAGE
        message = m.assistant_message(f"[{kind}]", provider=PROVIDER, model=_model_of(item))
    # The SDK item rides along in the source, under a key ``MessageSource`` does not name (the session checks
    # the message on append like any other): the one untyped step of the conversion.
    message["source"] = cast(MessageSource, {**message["source"], ITEM_KEY: item})
    return event, message


# --- agentlog messages → items ---------------------------------------------------------------------


def _text_of(blocks: Any) -> list[str]:
    return [b["text"] for b in blocks or () if isinstance(b, Mapping) and isinstance(b.get("text"), str)]


def _rendered(message: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """Items for a message this adapter did not write, each with the index of the block it came from
    (-1: the whole message). Reasoning blocks are not rendered: providers accept only their own."""
    role = message.get("role")
    content = message.get("content") or ()
    if role == "assistant":
        rendered: list[tuple[int, dict[str, Any]]] = []
        for position, block in enumerate(content):
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind == "text":
                rendered.append((position, {"role": "assistant", "content": block["text"]}))
            elif kind == "tool-call":
                call = {"type": "function_call", "call_id": block["id"], "name": block["name"]}
                rendered.append((position, {**call, "arguments": block["arguments"]}))
        return rendered
    results = [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool-result"]
    if results:
        texts = _text_of(results[0].get("content"))
        output: Any = texts[0] if len(texts) == 1 else [{"type": "input_text", "text": t} for t in texts]
        return [(-1, {"type": "function_call_output", "call_id": results[0]["toolCallId"], "output": output})]
    texts = [b["text"] if b.get("type") == "text" else f"[{b.get('type')}]" for b in content if isinstance(b, Mapping)]
    if not texts:
        return []
    body: Any = texts[0] if len(texts) == 1 else [{"type": "input_text", "text": t} for t in texts]
    return [(-1, {"role": "user", "content": body})]


def _item_pairs(message: Any) -> list[tuple[int, Any]]:
    if message is None:
        return []
    source = message.get("source")
    if isinstance(source, Mapping) and ITEM_KEY in source:
        return [(-1, source[ITEM_KEY])]
    return cast(list[tuple[int, Any]], _rendered(message))


def items_of_message(message: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The SDK items a derived agentlog message stands for (plain, mutable copies).

    A message written by :class:`AgentlogSession` gives back its stored item exactly; any other message
    is rendered: user text as ``{"role": "user", "content": ...}``, assistant text and tool calls as one
    item per block, a tool result as ``function_call_output``.
    """
    return [cast(dict[str, Any], thaw(item)) for _, item in _item_pairs(message)]


# --- the log's turn state --------------------------------------------------------------------------


class _TurnState:
    """Where the log stands: the open turn and step (if any), the turn's unanswered calls and the calls
    the open step has logged with ``tool/call``."""

    __slots__ = ("last_step", "last_turn", "open_step", "open_turn", "step_calls", "unanswered")

    def __init__(self, events: Sequence[Any]) -> None:
        self.open_turn: int | None = None
        self.open_step: int | None = None
        self.last_turn = 0
        self.last_step = 0
        self.unanswered: dict[str, Mapping[str, Any]] = {}
        self.step_calls: set[str] = set()
        start = 0
        for index in range(len(events) - 1, -1, -1):
            etype = events[index]["type"]
            if etype == TURN_END:
                self.last_turn = int(events[index]["data"]["turn"])
                return
            if etype == TURN_START:
                start = index
                break
        else:
            return
        for event in events[start:]:
            etype, data = event["type"], event["data"]
            if etype == TURN_START:
                self.open_turn = self.last_turn = int(data["turn"])
            elif etype == STEP_START:
                self.open_step = self.last_step = int(data["step"])
                self.step_calls = set()
            elif etype == STEP_END:
                self.open_step = None
                self.step_calls = set()
            elif etype == TOOL_CALL:
                self.step_calls.add(data["callId"])
            elif etype == ASSISTANT_MESSAGE:
                for block in data["message"]["content"]:
                    if isinstance(block, Mapping) and block.get("type") == "tool-call":
                        self.unanswered[block["id"]] = block
            elif etype == TOOL_RESULT:
                call_id = data["message"]["source"].get("callId")
                self.unanswered.pop(call_id, None)
                self.step_calls.discard(call_id)


class _Batch:
    """Appends one mutation's events inside a step of the open turn (opening the turn or step if needed).

    A step stays open while one of its calls has no result: crash repair answers only the calls of an
    open step, and the invariants want a result in the step of its ``tool/call``. So a ``function_call``
    saved alone keeps its step open, and the batch bringing its output continues that step.
    """

    def __init__(self, session: Session, *, starts_run: bool) -> None:
        self.session = session
        state = _TurnState(session.events)
        self.state = state
        self.close_previous = starts_run and state.open_turn is not None and not state.unanswered
        self.new_turn = state.open_turn is None or self.close_previous
        """Whether this batch opens its own turn (a pop or clear outside a run then also closes it)."""
        self.turn = state.last_turn + 1 if self.new_turn else cast(int, state.open_turn)
        self.continues_step = not self.new_turn and state.open_step is not None
        self.step = cast(int, state.open_step) if self.continues_step else (1 if self.new_turn else state.last_step + 1)
        self.unanswered = {} if self.new_turn else dict(state.unanswered)
        self.step_calls: set[str] = set(state.step_calls) if self.continues_step else set()
        self._opened = False

    def open(self) -> None:
        if self._opened:
            return
        self._opened = True
        state, append = self.state, self.session.append
        if self.close_previous and state.open_turn is not None:
            if state.open_step is not None:
                append(STEP_END, {"turn": state.open_turn, "step": state.open_step})
            append(TURN_END, {"turn": state.open_turn, "reason": {"kind": "completed"}})
        if self.new_turn:
            append(TURN_START, {"turn": self.turn})
        if not self.continues_step:
            append(STEP_START, {"turn": self.turn, "step": self.step})

    def surface(self, event: _SurfaceType, message: Message, intent: SurfaceIntent) -> Any:
        self.open()
        if event == USER_MESSAGE:
            return self.session.append(USER_MESSAGE, message, intent)
        if event == TOOL_RESULT:
            call_id = message["source"]["callId"]
            if call_id not in self.step_calls:  # a result is recorded with its call in the same step
                call = self.unanswered.get(call_id)
                name = call["name"] if call is not None else ""
                arguments = call["arguments"] if call is not None else ""
                self._tool_call(call_id, name, arguments)
            self.unanswered.pop(call_id, None)
            self.step_calls.discard(call_id)  # answered: another result for it needs its own tool/call
            result: ToolResultData = {"turn": self.turn, "step": self.step, "message": message}
            return self.session.append(TOOL_RESULT, result, intent)
        reply: AssistantMessageData = {"turn": self.turn, "step": self.step, "message": message}
        appended = self.session.append(ASSISTANT_MESSAGE, reply, intent)
        for block in message["content"]:
            if block.get("type") == "tool-call":
                self.unanswered[block["id"]] = block
                self._tool_call(block["id"], block["name"], block["arguments"])
        return appended

    def _tool_call(self, call_id: str, name: str, arguments: str) -> None:
        data: ToolCallData = {
            "turn": self.turn,
            "step": self.step,
            "callId": call_id,
            "name": name,
            "arguments": arguments,
        }
        self.session.append(TOOL_CALL, data)
        self.step_calls.add(call_id)

    def record(self, event: str, data: dict[str, Any]) -> Any:
        self.open()
        return self.session.append_custom(event, data)

    def finish(self, *, end_turn: bool) -> None:
        if not self._opened or self.unanswered:
            return  # a call without its result keeps the step (and the turn) open
        self.session.append(STEP_END, {"turn": self.turn, "step": self.step})
        if end_turn:
            self.session.append(TURN_END, {"turn": self.turn, "reason": {"kind": "completed"}})


def _item_key(item: Mapping[str, Any]) -> bytes:
    """An item's identity for matching the SDK's save against what the run hooks logged: a call's type and
    ``call_id`` (unique in a conversation, whatever fields the SDK adds or drops on save), else its JSON."""
    if item.get("type") in ("function_call", "custom_tool_call") and isinstance(item.get("call_id"), str):
        return orjson.dumps([item["type"], item["call_id"]])
    return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)


def _visible(session: Session) -> Iterator[tuple[int, Any]]:
    """``(seq, derived message or None)`` for every surface node, oldest first (one consistent snapshot)."""
    nodes = list(session.surface.nodes)  # read before the events: the snapshot then covers every node
    events = session.events
    for seq in nodes:
        yield seq, derive_event_message(events[seq])


def _starts_run(item: Mapping[str, Any]) -> bool:
    return item.get("type") in (None, "message") and item.get("role") in _INPUT_ROLES


def _ends_turn(item: Mapping[str, Any]) -> bool:
    return item.get("type") in (None, "message") and item.get("role") == "assistant"


# --- the session -------------------------------------------------------------------------------------

Backend = Literal["jsonl", "sqlite"]


def _open_coordinator(store: str | os.PathLike[str] | None, backend: Backend) -> PersistenceCoordinator:
    """A store and coordinator over the same root the ``agentlog`` command reads (``--store``/``--backend``)."""
    root = Path(store if store is not None else os.environ.get("AGENTLOG_STORE") or ".agentlog").absolute()
    if backend == "sqlite":
        from ..persistence.sqlite.backend import SqliteBackend

        root.mkdir(parents=True, exist_ok=True)
        return PersistenceCoordinator(SessionStore(), SqliteBackend(str(root / "sessions.sqlite3")))
    if backend != "jsonl":
        raise ValueError(f'backend must be "jsonl" or "sqlite", not {backend!r}')
    from ..persistence.jsonl.backend import JsonlBackend

    return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root)))


class AgentlogSession:
    """An openai-agents ``Session`` whose history is a durable agentlog session.

    ``AgentlogSession("conv-1")`` stores under ``$AGENTLOG_STORE`` or ``./.agentlog`` (JSONL, zstd; the
    root the ``agentlog`` command reads, so ``agentlog show conv-1`` shows the conversation);
    ``AgentlogSession("conv-1", "path/to/store", backend="sqlite")`` picks the root and backend; with
    ``coordinator=`` the session lives in that coordinator's store (a session already live there is
    used as it is and left live on :meth:`close`). An existing session is resumed (a crash repaired),
    a new one created. The adapter owns what it opened: :meth:`close` (or leaving a ``with`` block)
    flushes and releases the session (and closes the coordinator it created). One writer per session:
    a second process (or a second adapter with its own store) opening the same id gets
    ``SESSION_LOCKED`` (naming the holder's pid, host and since when) until the first closes or dies;
    ``wait=True`` waits for it instead, ``timeout=`` seconds bounds that wait (``SESSION_LOCKED`` after).
    """

    session_settings: SessionSettings | None

    def __init__(
        self,
        session_id: str,
        store: str | os.PathLike[str] | None = None,
        *,
        backend: Backend = "jsonl",
        coordinator: PersistenceCoordinator | None = None,
        cwd: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        wait_durable: bool = True,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        deadline = deadline_of(wait, timeout)
        self.session_id = session_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self.wait_durable = wait_durable
        if coordinator is not None and store is not None:
            raise ValueError("pass either a store path or a coordinator, not both")
        self._owns_coordinator = coordinator is None
        self.coordinator = coordinator if coordinator is not None else _open_coordinator(store, backend)
        self._closed = False
        self._prerecorded: collections.Counter[bytes] = collections.Counter()
        self._awaiting_reply: set[bytes] | None = None
        """While a model call the run hooks opened a step for has no reply: the keys of its input items."""
        """Items :class:`AgentlogRunHooks` logged when the model returned them, which the SDK's own save
        of the same items (after the tools ran) then skips."""
        try:
            while True:
                try:
                    self.session: Session = self._open(session_id, cwd)
                    break
                except SessionLockedError as err:
                    if deadline is None:
                        raise
                    take = functools.partial(self.coordinator.backend.lock_writer, {"id": session_id})
                    wait_for_writer(session_id, take, err, deadline, timeout)
        except BaseException:
            if self._owns_coordinator:
                self.coordinator.close()
            raise

    def _open(self, session_id: str, cwd: str | None) -> Session:
        """The live session already in the store, the stored one resumed, or a new one."""
        live = self.coordinator.store.get(session_id)
        self._owns_session = live is None
        if live is not None:
            return live
        if self.coordinator.backend.read_revision(session_id) is not None:
            return self.coordinator.resume(session_id)
        meta = {"cwd": cwd} if cwd is not None else None
        return self.coordinator.store.create(session_id, meta=meta)

    # -- the Session protocol -------------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items the model currently sees (the newest ``limit``, oldest first; ``session_settings.limit``
        when no limit is given). Derived from the session's surface, so hidden items never appear."""
        self._check_open()
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None and effective <= 0:
            return []
        items: list[Any] = []
        for _, message in _visible(self.session):
            items.extend(item for _, item in _item_pairs(message))
        if effective is not None:
            items = items[-effective:]
        return [cast(TResponseInputItem, thaw(item)) for item in items]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items (one step of the current turn), then wait until they are durable."""
        self._check_open()
        if not items:
            return
        prepared = [self._prepare(item, index) for index, item in enumerate(items)]  # refuse before writing
        with _lock_of(self.session):
            # While the run hooks' model call awaits its reply, that call's late-saved input belongs to it;
            # anything else (a new run's input after a call that failed) ends the wait.
            if self._awaiting_reply is not None and _item_key(prepared[0][0]) not in self._awaiting_reply:
                self._awaiting_reply = None
            starts_run = _starts_run(prepared[0][0]) and self._awaiting_reply is None
            batch = _Batch(self.session, starts_run=starts_run)
            for item, event, message in prepared:
                key = _item_key(item)
                if self._prerecorded[key] > 0:  # logged already, when the model returned it (run hooks)
                    self._prerecorded[key] -= 1
                    continue
                batch.surface(event, message, {"surfaceOp": "append"})
            if self._awaiting_reply is None:  # else the step stays open for the model's reply
                batch.finish(end_turn=_ends_turn(prepared[-1][0]))
        await self._durable()

    async def _record_request(
        self, header: EpochHeader, context: RequestContextData, *, first: bool, inputs: set[bytes]
    ) -> None:
        """Open the step of a model call and write its ``request/header`` (when new or changed) and
        ``request/context``, as the agent loop does before it sends a request; then wait until durable."""
        self._check_open()
        with _lock_of(self.session):
            session = self.session
            _Batch(session, starts_run=False).open()  # the model call's step (and turn), as the loop opens them
            # A streamed run saves its input only after this hook: that input joins this step (see add_items).
            self._awaiting_reply = inputs
            persisted = session.request_header()
            if persisted is None or first or not header_equals(persisted, header):
                reason: Literal["initial", "resume", "change"] = (
                    "initial" if persisted is None else ("resume" if first else "change")
                )
                session.append(REQUEST_HEADER, {"header": header, "reason": reason})
            if session.request_context() != context:
                session.append(REQUEST_CONTEXT, context)
        await self._durable()

    async def _record_outputs(self, items: Sequence[Any]) -> None:
        """Log a model response's items as they arrive, before any tool of it runs (each call with its
        ``tool/call``), and remember them so the SDK's later save of the same items writes nothing."""
        self._check_open()
        if not items:
            return
        prepared = [self._prepare(item, index) for index, item in enumerate(items)]
        with _lock_of(self.session):
            self._awaiting_reply = None
            batch = _Batch(self.session, starts_run=False)
            for item, event, message in prepared:
                batch.surface(event, message, {"surfaceOp": "append"})
                self._prerecorded[_item_key(item)] += 1
            batch.finish(end_turn=_ends_turn(prepared[-1][0]))
        await self._durable()

    async def pop_item(self) -> TResponseInputItem | None:
        """Hide the most recent item from the model and return it (``None`` when nothing is visible).
        The log keeps it: a surface replacement shadows it."""
        self._check_open()
        with _lock_of(self.session):
            visible = [(seq, message, _item_pairs(message)) for seq, message in _visible(self.session)]
            last = next((i for i in range(len(visible) - 1, -1, -1) if visible[i][2]), None)
            if last is None:
                return None
            _, message, pairs = visible[last]
            block, popped = pairs[-1]
            batch = _Batch(self.session, starts_run=False)
            keep: list[Any] = []
            if block >= 0 and len(pairs) > 1:  # a rendered assistant message: keep its other blocks
                keep = [b for position, b in enumerate(message["content"]) if position != block]
            shadowed = [s for s, _, _ in visible[last:]]
            record = batch.record(POP_ITEM_EVENT, {"shadowedSeqs": shadowed, "item": popped})
            self._replace(batch, shadowed, [record.seq], keep, "pop_item")
            batch.finish(end_turn=batch.new_turn)
        await self._durable()
        return cast(TResponseInputItem, thaw(popped))

    async def clear_session(self) -> None:
        """Hide every item from the model (the log keeps them all: one surface replacement)."""
        self._check_open()
        with _lock_of(self.session):
            visible = [(seq, _item_pairs(message)) for seq, message in _visible(self.session)]
            count = sum(len(pairs) for _, pairs in visible)
            if count == 0:
                return
            batch = _Batch(self.session, starts_run=False)
            shadowed = [seq for seq, _ in visible]
            record = batch.record(CLEAR_SESSION_EVENT, {"shadowedSeqs": shadowed, "items": count})
            self._replace(batch, shadowed, [record.seq], [], "clear_session")
            batch.finish(end_turn=batch.new_turn)
        await self._durable()

    # -- lifecycle ----------------------------------------------------------------------------------------
    def flush(self) -> None:
        """A barrier: every change made so far is durable when it returns (for ``wait_durable=False``)."""
        self.coordinator.flush(self.session)

    def close(self) -> None:
        """Flush and release what this adapter opened (idempotent); the log stays on disk."""
        if self._closed:
            return
        self._closed = True
        from ..projection.listing import cache_stored_session  # the cache code only when a session closes

        try:
            if self._owns_session:
                self.coordinator.store.dispose(self.session)
            else:
                self.coordinator.flush(self.session)
            # The store's projection cache, as ``agentlog run`` keeps it: ``ls`` then serves this session
            # without reading its log (fail-soft; ``ls`` folds the log itself when this did not land).
            cache_stored_session(self.coordinator, self.session_id)
        finally:
            if self._owns_coordinator:
                self.coordinator.close()

    def __enter__(self) -> AgentlogSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AgentlogSession({self.session_id!r}, backend={self.coordinator.backend.name!r})"

    # -- helpers --------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RecorderStateError(f'AgentlogSession "{self.session_id}" is closed')

    @staticmethod
    def _prepare(item: Any, index: int) -> tuple[Mapping[str, Any], _SurfaceType, Message]:
        if not isinstance(item, Mapping):
            raise _refuse(index, f"$[{index}]", f"an item must be a mapping, got {type(item).__name__}")
        try:
            frozen = snapshot_json(dict(item))
        except AgentlogError as err:
            path = getattr(err, "path", "$")
            raise _refuse(index, f"$[{index}]{path[1:]}", f"not lossless JSON: {err}") from None
        event, message = _message_of(frozen, index)
        return frozen, event, message

    @staticmethod
    def _replace(batch: _Batch, shadowed: list[int], sources: list[int], keep: list[Any], operation: str) -> None:
        """Shadow the nodes ``shadowed`` with one assistant message holding ``keep`` (none: it derives nothing).

        A hidden call that has no result yet first gets one (appended, then shadowed with the rest), so
        crash repair never answers a call the SDK can no longer see.
        """
        hidden_calls = set()
        events = batch.session.events
        for seq in shadowed:
            message = derive_event_message(events[seq])
            for block in (message or {}).get("content") or ():
                if isinstance(block, Mapping) and block.get("type") == "tool-call":
                    hidden_calls.add(block["id"])
        kept = {b["id"] for b in keep if b.get("type") == "tool-call"}
        for call_id in sorted(set(batch.unanswered) & (hidden_calls - kept)):
            result = m.tool_result_message(call_id, _WITHDRAWN_TEXT, is_error=True)
            shadowed = [*shadowed, batch.surface(TOOL_RESULT, result, {"surfaceOp": "append"}).seq]
        replacement = m.assistant_message(keep, provider=PROVIDER, model=operation)
        replace = {"op": "replace", "start": shadowed[0], "end": shadowed[-1]}
        batch.surface(ASSISTANT_MESSAGE, replacement, {"surfaceOp": replace, "sourceEventSeqs": [*sources, *shadowed]})

    async def _durable(self) -> None:
        if not self.wait_durable:
            return
        flush = asyncio.ensure_future(self.coordinator.aflush(self.session))
        cancelled: asyncio.CancelledError | None = None
        while not flush.done():  # a cancelled caller still learns the outcome: the write is not abandoned
            try:
                await asyncio.wait({flush})
            except asyncio.CancelledError as err:
                cancelled = cancelled or err
        flush.result()
        if cancelled is not None:
            raise cancelled


if TYPE_CHECKING:
    _protocol_check: type[_SdkSession] = AgentlogSession


# --- run hooks: what the SDK never hands a session --------------------------------------------------------


def _model_name(agent: Any, context: Any) -> str:
    model = getattr(agent, "model", None)
    if model is None:
        config = getattr(context, "run_config", None)
        model = getattr(config, "model", None)
    if isinstance(model, str) and model:
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else "unknown"


def _tool_schema(tool: Any) -> dict[str, Any] | None:
    """A function tool's ``{name, description, parameters}``; hosted tools have no function schema."""
    schema = getattr(tool, "params_json_schema", None)
    name = getattr(tool, "name", None)
    if not isinstance(schema, Mapping) or not isinstance(name, str):
        return None
    description = getattr(tool, "description", None)
    return {"name": name, "description": description or "", "parameters": thaw(snapshot_json(dict(schema)))}


class AgentlogRunHooks(RunHooks[Any]):
    """Run hooks that record what an :class:`AgentlogSession` alone cannot see; pass them with the session:
    ``Runner.run(agent, prompt, session=session, hooks=AgentlogRunHooks(session))``.

    The SDK hands a session a model response's items only after the response's tools have run, and never
    hands it the agent's instructions, tools or model. So, before each model call, the hooks open the
    call's step and write the ``request/header`` (the instructions as the system prompt, the function
    tools' schemas, the model's name; when new or changed) and ``request/context``; when the model
    returns, they log its items at once — each ``function_call`` with its ``tool/call`` — and wait until
    that is durable, before the SDK runs any tool. The SDK's own save of the same items afterwards is
    skipped (the same item JSON), so the session holds each item once. A process killed while a tool
    runs then leaves the call in the log, answered ``TOOL_OUTCOME_UNKNOWN`` on the next open, and
    ``agentlog export --to openai-chat`` has the system message and the model.
    """

    def __init__(self, session: AgentlogSession, *, provider: str = PROVIDER) -> None:
        if not isinstance(session, AgentlogSession):
            raise RecorderStateError(f"AgentlogRunHooks needs an AgentlogSession, got {type(session).__name__}")
        self.session = session
        self.provider = provider
        self._first = True

    async def on_llm_start(
        self, context: Any, agent: Any, system_prompt: str | None, input_items: list[TResponseInputItem]
    ) -> None:
        tools = [schema for tool in await agent.get_all_tools(context) if (schema := _tool_schema(tool)) is not None]
        model = _model_name(agent, context)
        candidate: dict[str, Any] = {"config": {"provider": self.provider, "model": model}}
        if system_prompt:
            candidate["system"] = system_prompt
        if tools:
            candidate["tools"] = tools
        first, self._first = self._first, False
        context_data: RequestContextData = {"provider": self.provider, "model": model}
        inputs = {_item_key(item) for item in input_items if isinstance(item, Mapping)}
        await self.session._record_request(canonical_header(candidate), context_data, first=first, inputs=inputs)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        items = [item.model_dump(exclude_unset=True) for item in response.output]
        await self.session._record_outputs(items)
