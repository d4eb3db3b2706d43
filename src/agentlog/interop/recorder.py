"""A recorder for users who keep their own agent loop: the turn/step/tool-call protocol, written for them.

Crash repair, ``session.at(seq)``, :class:`~agentlog.llm.replay.ReplayProvider` and ``store.fork`` all
read the same protocol the agent loop writes (``turn/start``, ``step/start``, ``assistant/chunk``,
``assistant/message``, ``tool/call``, ``tool/result``, ``step/end``, ``turn/end``). A user who appends only
messages gets none of them: repair cannot see an open turn, replay has no chunks or request header, a
fork refuses an unbalanced boundary. So the recorder writes exactly what
:class:`agentlog.agent.loop.Agent` writes for the same conversation — same event types, same order, same
data shapes (tests drive the real agent and compare) — from a few calls a home-made loop already has
the data for::

    rec = Recorder(session, provider="openai", model="gpt-4o", system="Be brief.", tools=schemas)
    with rec.turn("What is in /tmp?") as t:
        t.assistant(text="Let me look.", tool_calls=[("call-1", "ls", '{"path": "/tmp"}')])
        with t.tool("call-1") as call:      # tool/call is durable before the body runs
            call.result(run_ls(call.args))
        t.assistant(text="Two files.")

Why it is built this way:

* **Every exit closes what it opened.** However the ``with`` block ends — normally, an exception, a
  ``KeyboardInterrupt`` or an asyncio cancellation, :meth:`RecordedTurn.abort` — every tool call the model
  asked for gets a ``tool/result`` before ``step/end`` and ``turn/end`` (the loop's texts: a call whose
  body was started is ``TOOL_OUTCOME_UNKNOWN``, one never started ``ABORTED_BEFORE_DISPATCH``), and the
  ending kind is the loop's (``completed``, ``max-tokens``, ``error``, ``aborted``). If even the closers
  cannot be written, the turn is left open for crash repair rather than closed over an unanswered call.
* **Durable at the loop's barriers.** When the session is live in a store, the recorder flushes after
  opening a step (before the model request), after ``tool/call`` (before the tool body runs) and when a
  turn ends, so a ``kill -9`` anywhere leaves a log crash repair closes exactly as it closes the loop's.
* **Replayable.** A reply given whole (:meth:`RecordedTurn.assistant`) is logged as the canonical chunk
  stream the scripted test provider yields, a streamed one (:meth:`RecordedTurn.stream`) chunk by chunk
  as it arrives; the message is assembled from those chunks by the loop's own
  :class:`~agentlog.llm.assembler.Assembler`, and a ``request/header`` precedes the first model call.
* **Misuse is refused before anything is written** (:class:`~agentlog.errors.RecorderStateError`): a
  result for a call the model never made, a second result, a new reply while calls are unanswered, a
  turn inside a turn, a write after the turn ended.

The recorder is not thread-safe: one turn is driven by one thread (or one asyncio task) at a time.
Flushes are synchronous; inside an event loop they block it for the write, as ``store.flush`` does.
"""

from __future__ import annotations

import json
import logging
import types
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import orjson

from ..errors import AgentlogError, LlmError, RecorderStateError, describe_error
from ..kernel.events import (
    ASSISTANT_CHUNK,
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
    ToolErrorIdentity,
    ToolResultData,
    TurnEndReason,
)
from ..kernel.jsonvalue import thaw
from ..kernel.messages import tool_result_message, user_message
from ..kernel.repair import interrupted_tool_result_data, interrupted_turn_closers
from ..kernel.request_header import canonical_header, header_equals
from ..kernel.session import Session
from ..kernel.store import store_of
from ..llm.assembler import Assembler
from ..llm.openai_compat import StreamTranslator

__all__ = ["RecordedStream", "RecordedTurn", "Recorder", "ToolRun"]

logger = logging.getLogger("agentlog")

ABORTED_BEFORE_DISPATCH = "ABORTED_BEFORE_DISPATCH"
"""The code the agent loop records for a call cancelled before its body started (``agent.checkpoint``;
spelled here because interop may not import the agent — a test checks both stay equal)."""
_ABORTED_TEXT = "Error: tool call aborted before dispatch"
TOOL_ERROR = "TOOL_ERROR"
"""The code of a tool body that raised (as the agent's scheduler records it)."""

Finish = Literal["stop", "tool-calls", "max-tokens"]
ToolCallLike = Mapping[str, Any] | tuple[str, str, Any]
"""A requested tool call: ``(id, name, arguments)``, an agentlog ``tool-call`` block
``{"type": "tool-call", "id", "name", "arguments"}``, or an OpenAI chat-completions tool call
``{"id", "type": "function", "function": {"name", "arguments"}}``. ``arguments`` is the raw JSON text
the model produced (kept verbatim), or a mapping (serialized with ``json.dumps``)."""


def _ending_of(err: BaseException, cause: Mapping[str, Any]) -> TurnEndReason:
    """The ``turn/end`` reason for an exception leaving a turn, exactly as the agent loop words it."""
    if not isinstance(err, Exception):  # KeyboardInterrupt, SystemExit, asyncio.CancelledError
        return {"kind": "aborted", "reason": dict(cause)}
    if isinstance(err, LlmError):
        return {"kind": "error", "error": thaw(err.failure)}
    if isinstance(err, AgentlogError):
        return {"kind": "error", "error": {"message": str(err), "code": err.code}}
    return {"kind": "error", "error": {"message": describe_error(err), "code": "UNKNOWN"}}


def _describe_tool_error(err: BaseException) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _arguments_text(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return json.dumps(dict(value), ensure_ascii=False)
    raise RecorderStateError(f"{where}: arguments must be the raw JSON text or a mapping, got {type(value).__name__}")


def _tool_call_block(call: Any, position: int) -> dict[str, Any]:
    """One requested call in any accepted shape → an agentlog ``tool-call`` block (refusing others)."""
    where = f"tool_calls[{position}]"
    if isinstance(call, tuple) and len(call) == 3:
        call_id, name, arguments = call
    elif isinstance(call, Mapping):
        function = call.get("function")
        if isinstance(function, Mapping):
            call_id, name, arguments = call.get("id"), function.get("name"), function.get("arguments", "")
        else:
            call_id, name, arguments = call.get("id"), call.get("name"), call.get("arguments", "")
    else:
        raise RecorderStateError(
            f"{where}: expected (id, name, arguments), a tool-call block or an OpenAI tool call, got {call!r}"
        )
    if not isinstance(call_id, str) or not call_id:
        raise RecorderStateError(f"{where}: the call id must be a non-empty string, got {call_id!r}")
    if not isinstance(name, str) or not name:
        raise RecorderStateError(f'{where}: call "{call_id}" needs a non-empty tool name, got {name!r}')
    return {"type": "tool-call", "id": call_id, "name": name, "arguments": _arguments_text(arguments, where)}


def reply_chunks(
    blocks: Sequence[Mapping[str, Any]], *, usage: Mapping[str, Any] | None = None, finish: Finish | None = None
) -> list[dict[str, Any]]:
    """The canonical chunk stream of a whole reply: every block's start and one delta, then every
    block-end, then usage and finish — the layout the scripted test provider and the OpenAI-compatible
    provider yield, so a recorded reply replays like a streamed one."""
    starts: list[dict[str, Any]] = []
    ends: list[dict[str, Any]] = []
    has_calls = False
    for index, block in enumerate(blocks):
        kind = block.get("type")
        starts.append({"type": "block-start", "index": index, "blockType": kind})
        if kind == "text" or kind == "reasoning":
            starts.append({"type": f"{kind}-delta", "index": index, "text": block["text"]})
        elif kind == "tool-call":
            has_calls = True
            starts.append(
                {
                    "type": "tool-call-delta",
                    "index": index,
                    "id": block["id"],
                    "name": block["name"],
                    "argumentsDelta": block["arguments"],
                }
            )
        ends.append({"type": "block-end", "index": index, "block": dict(block)})
    tail: list[dict[str, Any]] = [] if usage is None else [{"type": "usage", "usage": dict(usage)}]
    kind_of_finish = finish if finish is not None else ("tool-calls" if has_calls else "stop")
    return [*starts, *ends, *tail, {"type": "finish", "reason": {"kind": kind_of_finish}}]


class Recorder:
    """Writes a home-made loop's turns into ``session`` with the agent loop's protocol.

    ``provider``/``model`` name the route (the assistant messages' source and the request header's
    config); ``system``, ``tools`` (``[{name, description, parameters}]``), ``reasoning_effort``,
    ``temperature`` and ``max_tokens`` complete the request header, which is written before the first
    model call of this recorder (reason ``initial``, or ``resume`` when the log already has one) and again
    whenever :meth:`configure` changes it. ``flush=False`` skips the durability barriers (tests, or a
    caller that flushes itself).
    """

    def __init__(
        self,
        session: Session,
        *,
        provider: str,
        model: str,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        reasoning_effort: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        context_window: int | None = None,
        flush: bool = True,
    ) -> None:
        if not isinstance(session, Session):
            raise RecorderStateError(f"Recorder needs an agentlog Session, got {type(session).__name__}")
        self.session = session
        self._settings: dict[str, Any] = {}
        self._flush = flush
        self._first_request = True
        self._turn: RecordedTurn | None = None
        self.configure(
            provider=provider,
            model=model,
            system=system,
            tools=tools,
            reasoning_effort=reasoning_effort,
            temperature=temperature,
            max_tokens=max_tokens,
            context_window=context_window,
        )

    # -- configuration ------------------------------------------------------------------------------
    _UNSET: Any = object()

    def configure(
        self,
        *,
        provider: str = _UNSET,
        model: str = _UNSET,
        system: str | None = _UNSET,
        tools: Sequence[Mapping[str, Any]] | None = _UNSET,
        reasoning_effort: str | None = _UNSET,
        temperature: float | None = _UNSET,
        max_tokens: int | None = _UNSET,
        context_window: int | None = _UNSET,
    ) -> None:
        """Change the route or request settings; the next model call's step records the new header."""
        given = {
            "provider": provider,
            "model": model,
            "system": system,
            "tools": tools,
            "reasoning_effort": reasoning_effort,
            "temperature": temperature,
            "max_tokens": max_tokens,
            "context_window": context_window,
        }
        settings = dict(self._settings)
        settings.update({k: v for k, v in given.items() if v is not self._UNSET})
        for key in ("provider", "model"):
            if not isinstance(settings.get(key), str) or not settings[key]:
                raise RecorderStateError(f"{key} must be a non-empty string, got {settings.get(key)!r}")
        header = self._header_of(settings)  # refuses a header no reader accepts, before anything is kept
        self._settings = settings
        self._header = header

    @staticmethod
    def _header_of(settings: Mapping[str, Any]) -> EpochHeader:
        config: dict[str, Any] = {"provider": settings["provider"], "model": settings["model"]}
        if settings.get("reasoning_effort") is not None:
            config["reasoningEffort"] = settings["reasoning_effort"]
        if settings.get("temperature") is not None:
            config["temperature"] = settings["temperature"]
        if settings.get("max_tokens") is not None:
            config["maxTokens"] = settings["max_tokens"]
        candidate: dict[str, Any] = {"config": config}
        if settings.get("system"):
            candidate["system"] = settings["system"]
        if settings.get("tools"):
            candidate["tools"] = [dict(tool) for tool in settings["tools"]]
        try:
            return canonical_header(candidate)
        except AgentlogError as err:
            raise RecorderStateError(f"the request settings do not make a valid request header: {err}") from err

    @property
    def provider(self) -> str:
        return str(self._settings["provider"])

    @property
    def model(self) -> str:
        return str(self._settings["model"])

    # -- turns ----------------------------------------------------------------------------------------
    def turn(self, prompt: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None) -> RecordedTurn:
        """A turn for ``prompt`` (a string, a user message, several, or ``None``); use it as a context
        manager. Entering writes ``turn/start``, the first ``step/start``, the prompt and the request
        header, and flushes: the model may be called then."""
        if self._turn is not None and self._turn._entered and not self._turn.closed:
            raise RecorderStateError(
                f'turn {self._turn.number} of session "{self.session.id}" is still open: end it before the next one'
            )
        messages: list[Any]
        if prompt is None:
            messages = []
        elif isinstance(prompt, str):
            messages = [user_message(prompt)]
        elif isinstance(prompt, Mapping):
            messages = [dict(prompt)]
        else:
            messages = [dict(m) for m in prompt]
        for index, message in enumerate(messages):
            if message.get("role") != "user":
                raise RecorderStateError(
                    f"prompt[{index}] must be a user message (build it with agentlog.user_message(text)), "
                    f"got role {message.get('role')!r}"
                )
        turn = RecordedTurn(self, messages)
        self._turn = turn
        return turn

    # -- internals shared with the turn ------------------------------------------------------------------
    def _flush_now(self) -> None:
        if not self._flush:
            return
        store = store_of(self.session)
        if store is not None:
            store.flush(self.session)

    def _write_request_header(self) -> None:
        """``request/header`` and ``request/context`` before a model call, as the loop's request building does."""
        session = self.session
        persisted = session.request_header()
        if self._first_request:
            reason: Literal["initial", "resume"] = "initial" if persisted is None else "resume"
            session.append(REQUEST_HEADER, {"header": self._header, "reason": reason})
        elif persisted is None or not header_equals(persisted, self._header):
            session.append(REQUEST_HEADER, {"header": self._header, "reason": "change"})
        self._first_request = False
        context: RequestContextData = {"provider": self.provider, "model": self.model}
        if self._settings.get("context_window") is not None:
            context["contextWindow"] = self._settings["context_window"]
        if session.request_context() != context:
            session.append(REQUEST_CONTEXT, context)


class RecordedTurn:
    """One turn of a :class:`Recorder` (from :meth:`Recorder.turn`); a context manager.

    Each model call is one step: :meth:`assistant` (a whole reply) or :meth:`stream` (a streamed one)
    records the call's answer, and a later reply opens the next step once every tool call of the previous
    one has its result. :meth:`tool` / :meth:`tool_call` / :meth:`tool_result` record the tools,
    :meth:`user` adds steering input for the next model call, :meth:`abort` ends the turn early.
    """

    def __init__(self, recorder: Recorder, prompt: list[Any]) -> None:
        self._recorder = recorder
        self.session = recorder.session
        self._prompt = prompt
        self.number = 0
        self.step = 0
        self._entered = False
        self.closed = False
        self.outcome: dict[str, Any] | None = None
        """The ``turn/end`` reason once the turn ended (``None`` while open)."""
        self._step_open = False
        self._replied = False  # the open step has its model answer
        self._requested: dict[str, tuple[str, str]] = {}  # this step's calls, in order
        self._recorded: dict[str, int] = {}  # call id → tool/call seq (the body may have started)
        self._answered: set[str] = set()
        self._ending: TurnEndReason | None = None
        self._cause: dict[str, Any] = {"kind": "user"}
        self._streaming = False
        self._stream: RecordedStream | None = None

    # -- the context manager -------------------------------------------------------------------------
    def __enter__(self) -> RecordedTurn:
        if self._entered:
            raise RecorderStateError("a recorded turn can be entered only once; start another with rec.turn(...)")
        session = self.session
        current = self._recorder._turn
        if current is not None and current is not self and current._entered and not current.closed:
            raise RecorderStateError(
                f'turn {current.number} of session "{session.id}" is still open: end it before the next one'
            )
        if interrupted_turn_closers(session.events):
            raise RecorderStateError(
                f'session "{session.id}" ends inside an open turn; reload it from its store '
                "(coordinator.resume), which repairs the turn, before recording the next one"
            )
        last = 0
        for event in session.events:
            if event["type"] == TURN_START:
                last = event["data"]["turn"]
        self._entered = True
        self._recorder._turn = self
        self.number = last + 1
        try:
            session.append(TURN_START, {"turn": self.number})
        except BaseException:
            self.closed = True  # nothing was opened: the recorder is free for another turn
            raise
        try:
            self._open_step(self._prompt)
        except BaseException as err:
            self._close(_ending_of(err, self._cause), propagating=True)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        if self.closed:
            return  # abort() ended it already
        if exc is not None:
            self._close(_ending_of(exc, self._cause), propagating=True)
            return
        unanswered = self.open_calls
        if unanswered or self._streaming:
            what = "a stream is still open" if self._streaming else f"tool calls without a result: {unanswered}"
            problem = RecorderStateError(f"turn {self.number} ended while {what}")
            self._close(_ending_of(problem, self._cause), propagating=True)
            raise problem
        self._close(self._ending or {"kind": "completed"}, propagating=False)

    # -- state ------------------------------------------------------------------------------------------
    @property
    def open_calls(self) -> list[str]:
        """The ids of this step's requested calls that have no result yet, in request order."""
        return [call_id for call_id in self._requested if call_id not in self._answered]

    def _check_open(self, what: str, *, streaming_ok: bool = False) -> None:
        if not self._entered:
            raise RecorderStateError(f"{what}: enter the turn first (with rec.turn(...) as t: ...)")
        if self.closed:
            raise RecorderStateError(f"{what}: turn {self.number} has already ended")
        if self._streaming and not streaming_ok:
            raise RecorderStateError(f"{what}: a stream of turn {self.number} is still open")

    def _open_step(self, messages: Sequence[Any]) -> None:
        session = self.session
        self.step += 1
        session.append(STEP_START, {"turn": self.number, "step": self.step})
        self._step_open = True
        self._replied = False
        self._requested = {}
        self._recorded = {}
        self._answered = set()
        for message in messages:
            session.append(USER_MESSAGE, message, {"surfaceOp": "append"})
        self._recorder._write_request_header()
        self._recorder._flush_now()  # the model may be called now: everything before it is durable

    def _next_step(self, what: str, messages: Sequence[Any] = ()) -> None:
        """Make the open step ready for a new model answer, closing the previous one if it has one."""
        if not self._replied:
            for message in messages:
                self.session.append(USER_MESSAGE, message, {"surfaceOp": "append"})
            return
        unanswered = self.open_calls
        if unanswered:
            raise RecorderStateError(
                f"{what}: step {self.step} of turn {self.number} has tool calls without a result: {unanswered}; "
                "record them with t.tool_result(...) first"
            )
        self.session.append(STEP_END, {"turn": self.number, "step": self.step})
        self._step_open = False
        self._open_step(messages)

    def _take_reply(self, data: AssistantMessageData, chunk_seqs: list[int], finish: Mapping[str, Any]) -> Any:
        event = self.session.append(ASSISTANT_MESSAGE, data, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs})
        self._replied = True
        for block in event.data["message"]["content"]:
            if block.get("type") == "tool-call":
                self._requested[block["id"]] = (block["name"], block["arguments"])
        kind = "max-tokens" if finish.get("kind") == "max-tokens" else "completed"
        if self._ending is None or self._ending["kind"] != "max-tokens":
            self._ending = {"kind": kind}
        return event.data["message"]

    def _message_data(
        self, content: list[Any], usage: Any, replay_state: Any, id: str | None
    ) -> AssistantMessageData:
        source: MessageSource = {
            "kind": "model",
            "provider": self._recorder.provider,
            "model": self._recorder.model,
        }
        if replay_state is not None:
            source["replayState"] = replay_state
        message: Message = {"role": "assistant", "content": content, "source": source, "id": id or str(uuid.uuid4())}
        data: AssistantMessageData = {"turn": self.number, "step": self.step, "message": message}
        if usage is not None:
            data["usage"] = usage
        return data

    # -- input ----------------------------------------------------------------------------------------------
    def user(self, message: str | Mapping[str, Any]) -> None:
        """Steering input for the next model call: written in the step that call answers (a new step if
        the open one already has its answer)."""
        self._check_open("user")
        payload = user_message(message) if isinstance(message, str) else dict(message)
        if payload.get("role") != "user":
            raise RecorderStateError(f"user: expected a user message, got role {payload.get('role')!r}")
        self._next_step("user", [payload])

    def step_boundary(self) -> int:
        """Open the next step now (before the model call, so its step/start is durable when the request
        goes out); replies open one on their own when needed. Returns the step number."""
        self._check_open("step_boundary")
        self._next_step("step_boundary")
        return self.step

    # -- the model's answer ------------------------------------------------------------------------------
    def assistant(
        self,
        text: str | None = None,
        *,
        tool_calls: Sequence[ToolCallLike] = (),
        reasoning: str | None = None,
        content: Sequence[Mapping[str, Any]] | None = None,
        usage: Mapping[str, Any] | None = None,
        finish: Finish | None = None,
        replay_state: Any = None,
        id: str | None = None,
    ) -> Any:
        """Record one whole model answer (reasoning, text, then tool calls — or ``content`` blocks as
        given) as the loop records a streamed one: ``assistant/chunk`` events, then the assembled
        ``assistant/message``. Returns the committed message. ``finish="max-tokens"`` drops the tool calls
        (their arguments may be cut off) and ends the turn with ``max-tokens``, as the loop does."""
        self._check_open("assistant")
        if content is not None and (text is not None or reasoning is not None or tool_calls):
            raise RecorderStateError("assistant: give either content=[...] or text/reasoning/tool_calls, not both")
        blocks: list[dict[str, Any]] = []
        if content is not None:
            blocks = [dict(block) for block in content]
        else:
            if reasoning is not None:
                blocks.append({"type": "reasoning", "text": reasoning})
            if text is not None:
                blocks.append({"type": "text", "text": text})
            blocks.extend(_tool_call_block(call, i) for i, call in enumerate(tool_calls))
        self._check_blocks(blocks)
        if finish not in (None, "stop", "tool-calls", "max-tokens"):
            raise RecorderStateError(f'assistant: finish must be "stop", "tool-calls" or "max-tokens", got {finish!r}')
        chunks = reply_chunks(blocks, usage=usage, finish=finish)
        if replay_state is not None:
            chunks[-1]["replayState"] = replay_state
        self._next_step("assistant")
        assembler = Assembler()
        seqs: list[int] = []
        for chunk in chunks:
            seqs.append(
                self.session.append(ASSISTANT_CHUNK, {"turn": self.number, "step": self.step, "chunk": chunk}).seq
            )
            assembler.push(chunk)
        result = assembler.result()
        data = self._message_data(result.content, result.usage, result.replay_state, id)
        return self._take_reply(data, seqs, result.finish)

    def _check_blocks(self, blocks: Sequence[Mapping[str, Any]]) -> None:
        if not blocks:
            raise RecorderStateError("assistant: a reply needs text, reasoning, tool calls or content blocks")
        seen: set[str] = set()
        for index, block in enumerate(blocks):
            kind = block.get("type")
            if kind in ("text", "reasoning") and not isinstance(block.get("text"), str):
                raise RecorderStateError(f"assistant: content[{index}] ({kind}) needs a string text")
            if kind == "tool-call":
                call_id = block.get("id")
                if not all(isinstance(block.get(key), str) and block.get(key) for key in ("id", "name")):
                    raise RecorderStateError(f"assistant: content[{index}] (tool-call) needs a string id and name")
                if not isinstance(block.get("arguments"), str):
                    raise RecorderStateError(f"assistant: content[{index}] (tool-call) needs raw JSON text arguments")
                if call_id in seen or call_id in self._answered:
                    raise RecorderStateError(f'assistant: tool call id "{call_id}" is used twice')
                seen.add(str(call_id))

    @contextmanager
    def stream(self) -> Iterator[RecordedStream]:
        """Record a streamed model answer as it arrives (see :class:`RecordedStream`); on leaving the
        block the message is assembled from the logged chunks. An exception inside it keeps the
        non-blank text and reasoning streamed so far as an ``interrupted`` message, then ends the turn."""
        self._check_open("stream")
        self._next_step("stream")
        recording = RecordedStream(self)
        self._streaming = True
        self._stream = recording
        try:
            yield recording
        except BaseException:
            recording._interrupted()
            raise
        finally:
            self._streaming = False
            self._stream = None
        recording._complete()

    # -- tools -----------------------------------------------------------------------------------------------
    def _check_call(self, what: str, call_id: str) -> None:
        self._check_open(what)
        if call_id not in self._requested:
            known = ", ".join(self._requested) or "none"
            raise RecorderStateError(
                f'{what}: the model did not ask for a call "{call_id}" in step {self.step} of turn '
                f"{self.number} (its calls: {known})"
            )
        if call_id in self._answered:
            raise RecorderStateError(f'{what}: call "{call_id}" already has its result')

    def _record_call(self, call_id: str) -> int:
        name, arguments = self._requested[call_id]
        event = self.session.append(
            TOOL_CALL,
            {"turn": self.number, "step": self.step, "callId": call_id, "name": name, "arguments": arguments},
        )
        self._recorded[call_id] = event.seq
        return event.seq

    def tool_call(self, call_id: str) -> None:
        """Mark ``call_id``'s body as starting: ``tool/call`` is written and made durable, so after a crash
        the call is answered "outcome unknown" (it may have had effects) instead of "not started"."""
        self._check_call("tool_call", call_id)
        if call_id in self._recorded:
            raise RecorderStateError(f'tool_call: call "{call_id}" was already started')
        self._record_call(call_id)
        self._recorder._flush_now()

    def tool_result(
        self,
        call_id: str,
        content: str | Sequence[Mapping[str, Any]],
        *,
        error: str | Mapping[str, str] | BaseException | None = None,
        is_error: bool | None = None,
        meta: Any = None,
    ) -> Any:
        """Record the result the model will see for ``call_id`` (text or content blocks). ``error`` marks
        a failure with a stable identity — a code string, ``{"name", "code"}`` or the exception the body
        raised (code ``TOOL_ERROR``); ``is_error`` defaults to whether ``error`` is given. A call never
        marked with :meth:`tool_call` gets its ``tool/call`` first, as the loop records it."""
        self._check_call("tool_result", call_id)
        identity: ToolErrorIdentity | None
        if error is None:
            identity = None
        elif isinstance(error, str):
            identity = {"name": "ToolError", "code": error}
        elif isinstance(error, BaseException):
            identity = {"name": type(error).__name__, "code": TOOL_ERROR}
        elif isinstance(error, Mapping) and isinstance(error.get("name"), str) and isinstance(error.get("code"), str):
            identity = {"name": error["name"], "code": error["code"]}
        else:
            raise RecorderStateError(
                f'tool_result: error must be a code, {{"name", "code"}} or an exception: {error!r}'
            )
        failed = is_error if is_error is not None else identity is not None
        if isinstance(content, str):
            blocks: Any = content
        elif isinstance(content, Sequence) and all(isinstance(b, Mapping) for b in content):
            blocks = [dict(b) for b in content if isinstance(b, Mapping)]
        else:
            raise RecorderStateError(f"tool_result: content must be text or content blocks, got {content!r}")
        message = tool_result_message(call_id, blocks, is_error=True if failed else None)
        data: ToolResultData = {"turn": self.number, "step": self.step, "message": message}
        if identity is not None:
            data["error"] = identity
        if meta is not None:
            data["meta"] = meta
        seq = self._recorded.get(call_id)
        if seq is None:
            seq = self._record_call(call_id)
        event = self.session.append(TOOL_RESULT, data, {"surfaceOp": "append", "sourceEventSeqs": [seq]})
        self._answered.add(call_id)
        return event.data["message"]

    @contextmanager
    def tool(self, call_id: str) -> Iterator[ToolRun]:
        """Run one call's body inside the block: ``tool/call`` is durable on entry; call
        ``run.result(...)`` in it. A body that raises an ``Exception`` is recorded as the loop records a
        raising tool (``TOOL_ERROR`` naming the exception) and the exception goes on; an interrupt leaves
        the call to the turn's closing (``TOOL_OUTCOME_UNKNOWN``)."""
        self.tool_call(call_id)
        name, arguments = self._requested[call_id]
        run = ToolRun(self, call_id, name, arguments)
        try:
            yield run
        except Exception as err:
            if call_id not in self._answered and not self.closed:
                self.tool_result(call_id, f"Error: {_describe_tool_error(err)}", error=err)
            raise
        if call_id not in self._answered:
            raise RecorderStateError(f'tool: the block for call "{call_id}" ended without run.result(...)')

    # -- ending early ----------------------------------------------------------------------------------------
    def abort(self, cause: Mapping[str, Any] | None = None) -> None:
        """End the turn now as ``aborted`` (``cause`` defaults to ``{"kind": "user"}``), answering every
        open call; leaving the ``with`` block afterwards writes nothing more."""
        if self._stream is not None and not self.closed:
            self._stream._interrupted()  # a stream cut by the user keeps what it said, as the loop's abort does
        self._check_open("abort", streaming_ok=True)
        self._cause = dict(cause or {"kind": "user"})
        self._close({"kind": "aborted", "reason": self._cause}, propagating=False)

    def _close(self, ending: TurnEndReason, *, propagating: bool) -> None:
        """Answer the open calls, close the step and the turn; flush. If a closer cannot be written the
        turn stays open for crash repair (an error then goes on unless another one already is)."""
        session = self.session
        self.closed = True
        self._streaming = False
        self.outcome = dict(ending)
        failure: Exception | None = None
        try:
            if self._step_open:
                for call_id in self.open_calls:
                    seq = self._recorded.get(call_id)
                    data: ToolResultData
                    if seq is not None:
                        data = interrupted_tool_result_data(
                            call_id,
                            started=True,
                            turn=self.number,
                            step=self.step,
                            message_id=f"interrupted-tool-result-{call_id}-{session.seq}",
                        )
                    else:
                        seq = self._record_call(call_id)
                        message = tool_result_message(call_id, _ABORTED_TEXT, is_error=True)
                        data = {
                            "turn": self.number,
                            "step": self.step,
                            "message": message,
                            "error": {"name": "AbortError", "code": ABORTED_BEFORE_DISPATCH},
                        }
                    session.append(TOOL_RESULT, data, {"surfaceOp": "append", "sourceEventSeqs": [seq]})
                    self._answered.add(call_id)
                session.append(STEP_END, {"turn": self.number, "step": self.step})
                self._step_open = False
            session.append(TURN_END, {"turn": self.number, "reason": ending})
        except Exception as err:
            failure = err
        try:
            self._recorder._flush_now()
        except Exception as err:
            failure = failure or err
        if failure is not None:
            if not propagating:
                raise failure
            logger.warning(
                'session "%s": turn %s could not be closed or flushed (left for crash repair): %s',
                session.id,
                self.number,
                describe_error(failure),
            )


class ToolRun:
    """One call being run inside :meth:`RecordedTurn.tool`: what the model asked, and where its result goes."""

    def __init__(self, turn: RecordedTurn, call_id: str, name: str, arguments: str) -> None:
        self._turn = turn
        self.id = call_id
        self.name = name
        self.arguments = arguments
        """The raw JSON text the model produced."""

    @property
    def args(self) -> Any:
        """The arguments parsed as JSON (``None`` when the text is not JSON)."""
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            return None

    def result(
        self,
        content: str | Sequence[Mapping[str, Any]],
        *,
        error: str | Mapping[str, str] | BaseException | None = None,
        is_error: bool | None = None,
        meta: Any = None,
    ) -> Any:
        """Record this call's result (see :meth:`RecordedTurn.tool_result`)."""
        return self._turn.tool_result(self.id, content, error=error, is_error=is_error, meta=meta)


class RecordedStream:
    """A streamed model answer being recorded, one ``assistant/chunk`` per call, in one of three modes
    (not mixed within one stream):

    * deltas — :meth:`text`, :meth:`reasoning`, :meth:`tool_call` (blocks are numbered as they open;
      a new text block opens after a block of another kind), :meth:`usage`, :meth:`finish`;
    * :meth:`openai` — each chat-completions stream chunk (a dict, or an SDK object with
      ``model_dump``), translated by the OpenAI-compatible provider's own translator;
    * :meth:`chunk` — agentlog :data:`~agentlog.llm.types.StreamChunk` dicts as given.

    On a normal exit the owed ``block-end`` chunks, the usage and a ``finish`` (``tool-calls`` when a
    call was streamed, else ``stop``) are written if the stream did not give its own, then the message.
    A failure ``finish`` (error/aborted) ends the turn with that error, as the loop does.
    """

    def __init__(self, turn: RecordedTurn) -> None:
        self._turn = turn
        self._assembler = Assembler()
        self._seqs: list[int] = []
        self._mode: str | None = None
        self._blocks: list[dict[str, Any]] = []  # delta mode: the blocks opened, in index order
        self._current: int | None = None  # index of the open text/reasoning block
        self._calls: dict[str, int] = {}
        self._usage: Any = None
        self._finish: Any = None
        self._translator: StreamTranslator | None = None
        self._kept = False
        self.message: Any = None
        """The committed assistant message once the stream ended (``None`` before, or if it failed)."""

    def _use(self, mode: str) -> None:
        if self._turn.closed:
            raise RecorderStateError(f"stream: turn {self._turn.number} has already ended")
        if self._mode is None:
            self._mode = mode
        elif self._mode != mode:
            raise RecorderStateError(f"stream: this stream is fed {self._mode} chunks; {mode} cannot be mixed in")
        if self._finish is not None:
            raise RecorderStateError("stream: the stream has already finished")

    def _write(self, chunk: Mapping[str, Any]) -> None:
        turn = self._turn
        event = turn.session.append(ASSISTANT_CHUNK, {"turn": turn.number, "step": turn.step, "chunk": dict(chunk)})
        self._seqs.append(event.seq)
        self._assembler.push(event.data["chunk"])
        if chunk.get("type") == "finish":
            self._finish = event.data["chunk"]

    def _block(self, kind: str) -> int:
        index = len(self._blocks)
        self._blocks.append({"type": kind})
        self._write({"type": "block-start", "index": index, "blockType": kind})
        return index

    # -- delta mode ---------------------------------------------------------------------------------------
    def text(self, delta: str) -> None:
        """A piece of the answer's text."""
        self._delta("text", delta)

    def reasoning(self, delta: str) -> None:
        """A piece of the model's reasoning."""
        self._delta("reasoning", delta)

    def _delta(self, kind: str, delta: str) -> None:
        self._use("delta")
        if not isinstance(delta, str):
            raise RecorderStateError(f"stream: a {kind} delta must be a string, got {type(delta).__name__}")
        if self._current is None or self._blocks[self._current]["type"] != kind:
            self._current = self._block(kind)
        self._write({"type": f"{kind}-delta", "index": self._current, "text": delta})

    def tool_call(self, call_id: str, name: str | None = None, arguments: str = "") -> None:
        """A piece of a tool call: its id, its name (on the first piece at least) and an arguments fragment."""
        self._use("delta")
        if not isinstance(call_id, str) or not call_id:
            raise RecorderStateError(f"stream: a tool call needs a non-empty id, got {call_id!r}")
        if not isinstance(arguments, str):
            raise RecorderStateError("stream: a tool call's arguments fragment must be a string")
        index = self._calls.get(call_id)
        if index is None:
            if not isinstance(name, str) or not name:
                raise RecorderStateError(f'stream: the first piece of call "{call_id}" must name the tool')
            if call_id in self._turn._answered:
                raise RecorderStateError(f'stream: tool call id "{call_id}" is used twice')
            index = self._calls[call_id] = self._block("tool-call")
        self._current = None
        chunk: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call_id}
        if name:
            chunk["name"] = name
        chunk["argumentsDelta"] = arguments
        self._write(chunk)

    def usage(self, usage: Mapping[str, Any]) -> None:
        """The call's token usage (``agentlog.token_usage(...)``); written before the finish."""
        self._use(self._mode or "delta")
        self._usage = dict(usage)

    def finish(self, kind: Finish = "stop") -> None:
        """End the stream with ``kind`` now (otherwise leaving the block does)."""
        self._use(self._mode or "delta")
        if kind not in ("stop", "tool-calls", "max-tokens"):
            raise RecorderStateError(f'stream: finish must be "stop", "tool-calls" or "max-tokens", got {kind!r}')
        self._end_blocks(kind)

    def _end_blocks(self, kind: str | None) -> None:
        result = self._assembler.result()  # the blocks as assembled so far, in index order
        if self._mode == "delta":
            for index, block in enumerate(result.content):
                self._write({"type": "block-end", "index": index, "block": block})
        if self._usage is not None:
            self._write({"type": "usage", "usage": self._usage})
        if kind is None:
            kind = "tool-calls" if self._calls or self._assembler.result().tool_calls else "stop"
        self._write({"type": "finish", "reason": {"kind": kind}})

    # -- openai and raw modes ----------------------------------------------------------------------------------
    def openai(self, chunk: Any) -> None:
        """One OpenAI chat-completions stream chunk (``choices[].delta`` with content, reasoning_content,
        tool_calls; ``finish_reason``; ``usage``). Errors reported mid-stream raise :class:`LlmError`."""
        self._use("openai")
        if self._translator is None:
            self._translator = StreamTranslator()
        payload = chunk.model_dump(exclude_none=True) if hasattr(chunk, "model_dump") else chunk
        if not isinstance(payload, Mapping):
            raise RecorderStateError(f"stream: an OpenAI chunk must be a mapping or an SDK object, got {chunk!r}")
        for translated in self._translator.feed(orjson.dumps(dict(payload)).decode()):
            self._write(translated)

    def chunk(self, chunk: Mapping[str, Any]) -> None:
        """One agentlog stream chunk, logged verbatim (the provider contract's vocabulary)."""
        self._use("raw")
        if not isinstance(chunk, Mapping) or not isinstance(chunk.get("type"), str):
            raise RecorderStateError(f'stream: a chunk must be a mapping with a string "type", got {chunk!r}')
        self._write(chunk)

    # -- ending -----------------------------------------------------------------------------------------------
    def _complete(self) -> None:
        turn = self._turn
        if turn.closed:
            return
        if self._finish is None:
            if self._translator is not None:
                for translated in self._translator.done():
                    self._write(translated)
            elif self._mode is None:
                raise RecorderStateError("stream: the stream ended without any chunk (the model said nothing)")
            else:
                self._end_blocks(None)
        result = self._assembler.result()
        if result.failure is not None:
            raise LlmError.from_failure(result.failure)
        data = turn._message_data(result.content, result.usage, result.replay_state, None)
        self.message = turn._take_reply(data, self._seqs, result.finish)

    def _interrupted(self) -> None:
        """Keep what streamed (non-blank text/reasoning) as an ``interrupted`` message, as the loop does."""
        turn = self._turn
        if turn.closed or self._kept:
            return
        self._kept = True
        kept = self._assembler.interrupted_blocks()
        if not kept:
            return
        result = self._assembler.result()
        data = turn._message_data(kept, result.usage, None, None)
        data["interrupted"] = True
        try:
            turn.session.append(ASSISTANT_MESSAGE, data, {"surfaceOp": "append", "sourceEventSeqs": self._seqs})
            turn._replied = True
        except Exception as err:  # the exception on its way out matters more; the turn still closes
            logger.warning('session "%s": interrupted reply not kept: %s', turn.session.id, describe_error(err))
