"""A provider that re-serves the model answers recorded in a session log (offline regression runs).

A recorded session already holds everything a model call produced: the ``assistant/chunk`` events are
the provider's stream verbatim (see :mod:`agentlog.llm.types`). :class:`ReplayProvider` plays them back
so a user can re-run a recorded agent session without a network or an API key, and — because it also
checks every incoming request against the request the log reconstructs for that call — a replayed run
doubles as a regression test: a changed system prompt, tool schema, config value or message history is
reported at the first call where it shows, with the first differing field.

**Calls.** The recording is split into model calls. A call is the run of ``assistant/chunk`` events of
one attempt; an attempt ends at its ``finish`` chunk, and a ``step/start``, ``llm/retry-started`` (and,
defensively, any other turn/step/retry/message boundary) starts a new one even when the previous run
never finished. Retries are separate calls, so a recorded error finish (a 429, say) is served again and
the loop retries exactly as it did when recording.

**Recorded requests.** The request of a call is not stored as such; it is rebuilt from the log as it was
just before the call's first chunk (``session.at(first_seq - 1)``): messages = ``derive_messages()``,
config/system/tools = ``request_header()``. That is the same reconstruction the agent loop checks its own
requests against, so what is compared is what the model was actually sent.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, cast

import orjson

from ..errors import ABSENT as _ABSENT
from ..errors import MAX_SHOWN as MAX_SHOWN
from ..errors import (
    ReplayError,
    ReplayExhaustedError,
    ReplayMismatchError,
    ReplayRecordingError,
)
from ..kernel.events import ASSISTANT_CHUNK, ASSISTANT_MESSAGE, STEP_END, STEP_START, TURN_END, TURN_START
from ..kernel.jsonvalue import thaw
from ..kernel.session import Session
from .events import LLM_RETRY, LLM_RETRY_STARTED
from .types import ABORTED, STREAM_CLOSED, GenerateRequest, LlmError, StreamChunk, failure_chunk

__all__ = [
    "DEFAULT_NAME",
    "RecordedCall",
    "ReplayError",
    "ReplayExhaustedError",
    "ReplayMismatchError",
    "ReplayProvider",
    "ReplayRecordingError",
    "first_request_difference",
    "split_calls",
]

DEFAULT_NAME: Final = "replay"
"""``Provider.name`` when neither ``name=`` nor a recorded request header names a provider."""

RECORDING_ID: Final = "replay-recording"
"""Session id of the private session a plain event list is restored into (it is never published)."""

_BOUNDARIES: Final = frozenset(
    {
        STEP_START,
        LLM_RETRY_STARTED,
        LLM_RETRY,
        STEP_END,
        TURN_START,
        TURN_END,
        ASSISTANT_MESSAGE,
    }
)
"""Events that end the current chunk run. ``step/start`` and ``llm/retry-started`` are the loop's own
delimiters; the others can only appear between attempts too, and listing them keeps an unfinished
run (a cancelled or crashed stream) from being glued to the next attempt's chunks."""

# --- the recording -----------------------------------------------------------------------------------


class RecordedCall:
    """One recorded model call: its chunks (as logged), their timing, and — lazily — its request.

    ``number`` is 1-based (as in error messages); ``first_seq`` is the seq of its first chunk;
    ``gaps_ms[i]`` is the recorded wait before ``chunks[i]`` (for the first chunk: since the last event
    before the call, i.e. the model's latency). ``complete`` is false when no ``finish`` was recorded.
    """

    __slots__ = ("_request", "_session", "chunks", "complete", "first_seq", "gaps_ms", "number", "step", "turn")

    def __init__(
        self,
        session: Session,
        number: int,
        first_seq: int,
        chunks: Sequence[Mapping[str, Any]],
        gaps_ms: Sequence[int],
        turn: int | None,
        step: int | None,
    ) -> None:
        self._session = session
        self._request: GenerateRequest | None = None
        self.number = number
        self.first_seq = first_seq
        self.chunks: tuple[Mapping[str, Any], ...] = tuple(chunks)
        self.gaps_ms: tuple[int, ...] = tuple(gaps_ms)
        self.turn = turn
        self.step = step
        self.complete = bool(self.chunks) and self.chunks[-1].get("type") == "finish"

    @property
    def request(self) -> GenerateRequest:
        """The request the log reconstructs just before this call's first chunk.

        Computed on first use (one ``session.at`` view costs a pass over the prefix), so a replay that
        fails at call 2 never pays for the rest of a long recording.
        """
        if self._request is None:
            view = self._session.at(self.first_seq - 1) if self.first_seq > 0 else None
            header = view.request_header() if view is not None else None
            if header is None:
                raise ReplayRecordingError(
                    f"recorded call {self.number} (seq {self.first_seq}) has no request/header before it:"
                    " its config, system prompt and tools are unknown"
                )
            assert view is not None
            self._request = GenerateRequest.from_config(
                header["config"],
                list(view.derive_messages()),
                system=header.get("system"),
                tools=list(header.get("tools") or ()),
                session_id=self._session.id,
            )
        return self._request

    def __repr__(self) -> str:
        return (
            f"<RecordedCall {self.number} seq {self.first_seq} turn {self.turn} step {self.step}:"
            f" {len(self.chunks)} chunks{'' if self.complete else ', unfinished'}>"
        )


def split_calls(session: Session) -> list[RecordedCall]:
    """Split a recorded session's ``assistant/chunk`` events into model calls (see the module doc)."""
    calls: list[RecordedCall] = []
    chunks: list[Mapping[str, Any]] = []
    gaps: list[int] = []
    first_seq = 0
    turn: int | None = None
    step: int | None = None
    previous_time: int | None = None

    def close() -> None:
        if chunks:
            calls.append(RecordedCall(session, len(calls) + 1, first_seq, chunks, gaps, turn, step))
        chunks.clear()
        gaps.clear()

    for event in session.events:
        kind = event["type"]
        time = event.get("time")
        if kind == ASSISTANT_CHUNK:
            data = event["data"]
            if not chunks:
                first_seq = event["seq"]
                turn, step = data.get("turn"), data.get("step")
            gaps.append(_gap(previous_time, time))
            chunks.append(data["chunk"])
            if data["chunk"].get("type") == "finish":
                close()
        elif kind in _BOUNDARIES:
            close()
        previous_time = time if isinstance(time, int) else previous_time
    close()
    return calls


def _gap(before: int | None, after: Any) -> int:
    if before is None or not isinstance(after, int):
        return 0
    return max(after - before, 0)


# --- comparison ----------------------------------------------------------------------------------------


def _without_id(message: Any) -> Any:
    if isinstance(message, Mapping) and "id" in message:
        return {key: value for key, value in message.items() if key != "id"}
    return message


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{orjson.dumps(key).decode()}]"


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _first_difference(recorded: Any, now: Any, path: str) -> tuple[str, Any, Any] | None:
    """Depth-first, in document order: the path and values of the first place two JSON values differ.

    Objects are compared key by key (recorded key order first, then keys only the new value has); arrays
    element by element. Key order inside an object is not a difference: JSON objects are unordered and
    the log stores them canonically anyway.
    """
    if isinstance(recorded, Mapping) and isinstance(now, Mapping):
        keys = list(recorded) + [key for key in now if key not in recorded]
        for key in keys:
            found = _first_difference(recorded.get(key, _ABSENT), now.get(key, _ABSENT), _key_path(path, str(key)))
            if found is not None:
                return found
        return None
    if isinstance(recorded, list | tuple) and isinstance(now, list | tuple):
        for index in range(max(len(recorded), len(now))):
            found = _first_difference(
                recorded[index] if index < len(recorded) else _ABSENT,
                now[index] if index < len(now) else _ABSENT,
                f"{path}[{index}]",
            )
            if found is not None:
                return found
        return None
    if recorded is _ABSENT or now is _ABSENT:
        return None if recorded is now else (path, recorded, now)
    if isinstance(recorded, Mapping | list | tuple) or isinstance(now, Mapping | list | tuple):
        return path, recorded, now
    return None if _same_scalar(recorded, now) else (path, recorded, now)


def first_request_difference(recorded: GenerateRequest, now: GenerateRequest) -> tuple[str, Any, Any] | None:
    """The first field (with a path) where ``now`` differs from ``recorded``, or ``None``.

    Fields are checked in this order: provider, model, reasoning_effort, temperature, max_tokens, stop,
    system, tools, messages. The top-level ``id`` of every message is ignored: ids are minted afresh by
    whoever writes a message (the replayed run mints new ones for its prompts, assistant answers and tool
    results), so they can never match and say nothing about what the model saw. ``session_id`` and
    ``purpose`` are not compared either: the replay runs in a new session, and ``purpose`` is not logged.
    """
    fields: tuple[tuple[str, Any, Any], ...] = (
        ("provider", recorded.provider, now.provider),
        ("model", recorded.model, now.model),
        ("reasoning_effort", recorded.reasoning_effort, now.reasoning_effort),
        ("temperature", recorded.temperature, now.temperature),
        ("max_tokens", recorded.max_tokens, now.max_tokens),
        ("stop", _listed(recorded.stop), _listed(now.stop)),
        ("system", recorded.system, now.system),
        ("tools", list(recorded.tools), list(now.tools)),
        ("messages", [_without_id(m) for m in recorded.messages], [_without_id(m) for m in now.messages]),
    )
    for field, old, new in fields:
        found = _first_difference(old, new, field)
        if found is not None:
            return found
    return None


def _listed(values: Sequence[str] | None) -> list[str] | None:
    return None if values is None else list(values)


# --- the provider ----------------------------------------------------------------------------------------


class ReplayProvider:
    """Serves the recorded model calls of a session in order, after checking each request.

    ``recorded`` is the recorded session — a :class:`~agentlog.session.Session` (used as is, read only)
    or its events (``session.events``, a loaded snapshot's ``events``, parsed JSONL records), which are
    restored once into a private session through the kernel's strict restore path, so a damaged log is
    refused up front with the kernel's own error.

    ``stream(request)`` takes the next recorded call, compares ``request`` with the recorded request
    (:func:`first_request_difference`; message ids are ignored) and, if they match, yields the recorded
    chunks exactly as logged — including an error ``finish``, so a recorded retry is retried again. A
    mismatch raises :class:`ReplayMismatchError` (the call is not consumed); a request beyond the
    recording raises :class:`ReplayExhaustedError`. These are raised, not turned into a failure
    ``finish``: they are not model failures and must never be retried or mistaken for the model's answer.

    ``pace=True`` sleeps before each chunk for the recorded gap divided by ``speed`` (e.g. to watch a run
    at its original or a faster rhythm); off by default, since a regression run wants no waiting.
    ``max_gap_s`` caps each recorded gap before the division (a model that once stalled for a minute
    need not stall the playback); ``None`` keeps the gaps as recorded.
    ``signal`` is honoured like a real provider: once set, the stream ends with an ``aborted`` finish.
    A call recorded without a ``finish`` (a stream cut by a crash or a cancellation) ends with a
    ``STREAM_CLOSED`` error finish, so the stream still ends with exactly one ``finish``.
    """

    def __init__(
        self,
        recorded: Session | Sequence[Mapping[str, Any]],
        *,
        name: str | None = None,
        pace: bool = False,
        speed: float = 1.0,
        max_gap_s: float | None = None,
    ) -> None:
        if not _positive(speed):
            raise ValueError(f"speed must be a positive finite number, got {speed!r}")
        if max_gap_s is not None and not (_positive(max_gap_s) or max_gap_s == 0):
            raise ValueError(f"max_gap_s must be None or a non-negative finite number, got {max_gap_s!r}")
        self.session = recorded if isinstance(recorded, Session) else _restore(recorded)
        self.calls: tuple[RecordedCall, ...] = tuple(split_calls(self.session))
        self.name = name if name is not None else self._recorded_name()
        self.pace = pace
        self.speed = float(speed)
        self.max_gap_s = max_gap_s
        self._next = 0

    def _recorded_name(self) -> str:
        header = self.session.at(self.calls[0].first_seq).request_header() if self.calls else None
        provider = header["config"].get("provider") if header is not None else None
        return provider if isinstance(provider, str) and provider else DEFAULT_NAME

    @property
    def served(self) -> int:
        """How many recorded calls have been served so far."""
        return self._next

    @property
    def remaining(self) -> int:
        """Recorded calls not yet served; 0 after a faithful replay (a run that stops early leaves some)."""
        return len(self.calls) - self._next

    def __repr__(self) -> str:
        return f"ReplayProvider(name={self.name!r}, calls={len(self.calls)}, served={self._next})"

    def _take(self, request: GenerateRequest) -> RecordedCall:
        number = self._next + 1
        if self._next >= len(self.calls):
            raise ReplayExhaustedError(number, len(self.calls))
        call = self.calls[self._next]
        found = first_request_difference(call.request, request)
        if found is not None:
            raise ReplayMismatchError(number, *found)
        self._next += 1
        return call

    def _delay_s(self, gap_ms: int) -> float:
        gap_s = gap_ms / 1000
        if self.max_gap_s is not None:
            gap_s = min(gap_s, self.max_gap_s)
        return gap_s / self.speed

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        """Check ``request`` against the next recorded call and yield that call's recorded chunks."""
        call = self._take(request)
        aborted = failure_chunk(LlmError("model request aborted by caller", code=ABORTED).failure)
        for gap_ms, chunk in zip(call.gaps_ms, call.chunks, strict=True):
            if self.pace and gap_ms > 0 and await _wait(self._delay_s(gap_ms), signal):
                yield aborted
                return
            if signal is not None and signal.is_set():
                yield aborted
                return
            yield cast(StreamChunk, thaw(chunk))  # a fresh copy: consumers may keep or mutate it
        if not call.complete:
            message = f"recorded call {call.number} has no finish chunk (the recorded stream was cut off)"
            yield failure_chunk(LlmError(message, code=STREAM_CLOSED).failure)


def _positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


async def _wait(seconds: float, signal: asyncio.Event | None) -> bool:
    """Sleep ``seconds``; True if ``signal`` was set meanwhile (the sleep is cut short then)."""
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(signal.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


def _restore(events: Sequence[Mapping[str, Any]]) -> Session:
    """Restore a plain event list once (strict kernel validation) into a private, unpublished session."""
    plain = [thaw(event) for event in events]
    first_time = plain[0].get("time") if plain and isinstance(plain[0], dict) else None
    created = first_time if isinstance(first_time, int) and first_time >= 0 else 0
    header = {"version": 0, "id": RECORDING_ID, "createdAt": created}
    return Session.from_restore(RECORDING_ID, plain, header)
