"""The session-title service (runtime spec §6.10): fallback titles, renames, refreshes, model-written titles.

:class:`SessionTitleService` attaches to a :class:`~agentlog.kernel.store.SessionStore` and writes
``session/title`` events; it never keeps a title anywhere but the log (:meth:`SessionTitleService.get` is
:func:`~agentlog.projection.title.fold_session_title` of the session's events). It does four things:

* after the **first eligible prompt** (a ``user/message`` with source kind ``user`` whose text normalizes
  to non-empty) of an untitled session it appends the deterministic fallback
  ``{title, messageSeqs: [seq], source: {kind: "fallback"}}``;
* :meth:`~SessionTitleService.rename` appends a ``{kind: "user"}`` title with no message seqs, which
  **pins** the title: no automatic title is scheduled while it is the latest, until an explicit
  :meth:`~SessionTitleService.refresh`;
* :meth:`~SessionTitleService.refresh` retries the registered provider over every eligible prompt (or,
  without one, re-derives the fallback, overwriting a pinned rename);
* one optional :class:`SessionTitleProvider` (``first-prompt``: once, for the first prompt of a session
  that is no fork; ``all-prompts``: after every prompt) proposes a title, which the service normalizes,
  validates against the exact messages it was given, and appends with source ``{kind: "provider", ...}``.
  :class:`LlmSessionTitleProvider` is the model-written provider: it logs
  ``session/title-llm-request`` **before** it dispatches a ``purpose="session-title"`` request.

**Timing.** A provider call for a prompt starts only once the agent loop's own request for that prompt
is on its way, so a title request never races ahead of the conversation it names: at the
``request/header`` the loop appends after the prompt (the route it records is the title's route), or —
when the route did not change and the loop appended no header — at the first ``assistant/chunk`` of an
open step after the prompt (the original hooks the model call itself; the kernel has no such hook, and
in this runtime prompts are appended right after ``step/start``, before the request is built, so the
first chunk after the prompt always comes from a request that carried it). A newer prompt, refresh or
rename supersedes older work: its signal is set, the call is cancelled, and its result is never appended.

**Deferral.** The store calls listeners inside the append they observe, and the kernel refuses an append
from there (``REENTRANT_APPEND``). The original defers its appends to a microtask; here a listener only
records what is due and hands the work to the **running event loop** as a task, which starts after the
current append (and its whole publication) has returned. Appends made by that work are standalone
log-only events: they land wherever the log is at that moment (inside a turn or between turns). Without
a running loop in the appending thread (synchronous use, a worker thread) the work is queued instead.
``await service.settle()`` (or ``settle(session)``) runs the queued work and waits until every started
piece has finished — the explicit boundary a caller uses before reading the title (tests, a command that
prints it, an agent runner after ``agent.run()``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, cast, runtime_checkable

from ..errors import (
    InvalidOptionError,
    LlmError,
    SessionNotLiveError,
    SessionTitleCancelledError,
    SessionTitleInvalidError,
    SessionTitleProviderError,
    describe_error,
)
from ..kernel.events import ASSISTANT_CHUNK, REQUEST_HEADER, STEP_END, STEP_START, USER_MESSAGE, Event
from ..kernel.jsonvalue import MAX_SAFE_INTEGER
from ..kernel.messages import text_block, user_message
from ..kernel.session import Session
from ..kernel.store import SessionStore
from ..llm.assembler import Assembler
from ..llm.types import GenerateRequest, Provider
from .events import SessionTitleLlmRequestData
from .title import (
    DEFAULT_FALLBACK_MAX_BYTES,
    DEFAULT_FALLBACK_MAX_WORDS,
    DEFAULT_MAX_TITLE_BYTES,
    SESSION_TITLE,
    SESSION_TITLE_LLM_REQUEST,
    SessionTitleData,
    SessionTitleModel,
    SessionTitleSnapshot,
    SessionTitleSource,
    SessionTitleUserMessage,
    collect_session_title_messages,
    fallback_session_title,
    fold_session_title,
    normalize_session_title,
)

__all__ = [
    "DEFAULT_SESSION_TITLE_CONFIG",
    "DEFAULT_SESSION_TITLE_LLM_CONFIG",
    "MAX_TIMER_DELAY_MS",
    "SESSION_TITLE_LLM_PLUGIN",
    "SESSION_TITLE_TIMEOUT_CODE",
    "AutomaticMode",
    "LlmSessionTitleProvider",
    "SessionTitleConfig",
    "SessionTitleLlmConfig",
    "SessionTitleProvider",
    "SessionTitleProviderRequest",
    "SessionTitleProviderResult",
    "SessionTitleService",
    "generate_session_title_with_llm",
    "session_title_system_prompt",
]

logger = logging.getLogger("agentlog")

AutomaticMode = Literal["first-prompt", "all-prompts"]
_MODES: Final = ("first-prompt", "all-prompts")

MAX_TIMER_DELAY_MS: Final = 2**31 - 1
"""The longest title-request deadline the original accepts (its timer limit)."""

SESSION_TITLE_TIMEOUT_CODE: Final = "SESSION_TITLE_TIMEOUT"
SESSION_TITLE_LLM_PLUGIN: Final = "dsh-session-title-llm"
"""The plugin name in the source of the framed title prompt (the original's, so logs stay comparable)."""


# --- configuration -----------------------------------------------------------------------------------


def _positive(prefix: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidOptionError(f"{prefix}: {name} must be a positive integer")
    if isinstance(value, float) and not value.is_integer():
        raise InvalidOptionError(f"{prefix}: {name} must be a positive integer")
    return int(value)


@dataclass(frozen=True)
class SessionTitleConfig:
    """The service's limits; all required (the original has no defaults; the bundle's are
    :data:`DEFAULT_SESSION_TITLE_CONFIG`). ``fallback_max_bytes`` may not exceed ``max_title_bytes``."""

    fallback_max_words: int
    fallback_max_bytes: int
    max_title_bytes: int

    def __post_init__(self) -> None:
        for name, value in (
            ("fallbackMaxWords", self.fallback_max_words),
            ("fallbackMaxBytes", self.fallback_max_bytes),
            ("maxTitleBytes", self.max_title_bytes),
        ):
            _positive("session-title", name, value)
        if self.fallback_max_bytes > self.max_title_bytes:
            raise InvalidOptionError("session-title: fallbackMaxBytes must not exceed maxTitleBytes")

    @classmethod
    def from_mapping(cls, config: object) -> SessionTitleConfig:
        """From the original's wire keys ``{fallbackMaxWords, fallbackMaxBytes, maxTitleBytes}``."""
        if not isinstance(config, Mapping):
            raise InvalidOptionError("session-title: configuration is required")
        return cls(config.get("fallbackMaxWords"), config.get("fallbackMaxBytes"), config.get("maxTitleBytes"))  # type: ignore[arg-type]


DEFAULT_SESSION_TITLE_CONFIG: Final = SessionTitleConfig(
    DEFAULT_FALLBACK_MAX_WORDS, DEFAULT_FALLBACK_MAX_BYTES, DEFAULT_MAX_TITLE_BYTES
)


# --- the provider contract -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionTitleProviderRequest:
    """One provider call: the live session, its eligible messages through this revision, the route of
    the loop's current request (``None`` before any was logged) and the cancellation signal."""

    session: Session
    messages: tuple[SessionTitleUserMessage, ...]
    route: SessionTitleModel | None
    signal: asyncio.Event


@dataclass(frozen=True)
class SessionTitleProviderResult:
    """A proposed title, the exact seqs (from the request's messages, in order) it was made from, and the
    model route that wrote it, if any. A provider may return the wire mapping
    ``{title, messageSeqs, model?}`` instead."""

    title: str
    message_seqs: Sequence[int]
    model: SessionTitleModel | None = None


@runtime_checkable
class SessionTitleProvider(Protocol):
    """The one optional title implementation: a stable ``id`` (recorded with its titles), its automatic
    cadence, and ``generate``."""

    id: str
    automatic: AutomaticMode

    def generate(self, request: SessionTitleProviderRequest) -> Awaitable[object]: ...


# --- the service's bookkeeping --------------------------------------------------------------------------


@dataclass(eq=False)
class _Registration:
    provider: SessionTitleProvider
    closing: bool = False
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)


@dataclass(eq=False)
class _Pending:
    registration: _Registration
    revision: int
    through_seq: int


@dataclass(eq=False)
class _Work(_Pending):
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    upstream: asyncio.Event | None = None
    reason: BaseException | None = None

    def abort(self, reason: BaseException) -> None:
        if self.reason is None:
            self.reason = reason
        self.signal.set()


@dataclass(eq=False)
class _SessionState:
    revision: int = 0
    pending: _Pending | None = None
    active: _Work | None = None


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _route_of(session: Session) -> SessionTitleModel | None:
    header = session.request_header()
    if header is None:
        return None
    config = header["config"]
    return {"provider": config["provider"], "model": config["model"]}


class SessionTitleService:
    """Log-backed titles for every session of ``store`` (see the module docstring for the rules).

    ``config`` is a :class:`SessionTitleConfig` or the original's wire mapping. ``provider`` registers
    a title provider at once (same as :meth:`register`). Close with :meth:`close` / ``await aclose()``.
    """

    def __init__(
        self,
        store: SessionStore,
        config: SessionTitleConfig | Mapping[str, Any],
        *,
        provider: SessionTitleProvider | None = None,
    ) -> None:
        self.config = config if isinstance(config, SessionTitleConfig) else SessionTitleConfig.from_mapping(config)
        self.store = store
        self._closed = False
        self._registration: _Registration | None = None
        self._states: weakref.WeakKeyDictionary[Session, _SessionState] = weakref.WeakKeyDictionary()
        self._tasks: dict[asyncio.Task[Any], Session] = {}
        self._queued: list[tuple[Session, Callable[[], Coroutine[Any, Any, None]]]] = []
        self._unsubscribe = [store.on_event(self._on_event), store.on_disposed(self._on_disposed)]
        if provider is not None:
            self.register(provider)

    # -- reading --------------------------------------------------------------------------------------
    def get(self, session: Session) -> SessionTitleSnapshot | None:
        """The latest logged title of ``session`` (live or replayed), or ``None``."""
        return fold_session_title(session.events)

    @property
    def provider(self) -> SessionTitleProvider | None:
        """The registered provider, if any."""
        return self._registration.provider if self._registration is not None else None

    # -- explicit operations --------------------------------------------------------------------------
    def rename(self, session: Session, title: str) -> SessionTitleSnapshot:
        """Accept a user title (normalized to ``max_title_bytes``) and pin it; supersedes automatic work.

        Raises :class:`~agentlog.errors.SessionTitleInvalidError` when ``title`` normalizes to empty.
        """
        self._assert_usable(session)
        normalized = normalize_session_title(title, self.config.max_title_bytes)
        if not normalized:
            raise SessionTitleInvalidError("session title must contain visible characters")
        self._supersede(self._state_for(session), "user rename superseded automatic title generation")
        data: SessionTitleData = {"title": normalized, "messageSeqs": [], "source": {"kind": "user"}}
        session.append_custom(SESSION_TITLE, data)
        snapshot = self.get(session)
        assert snapshot is not None  # the append above committed a title
        return snapshot

    async def refresh(self, session: Session, signal: asyncio.Event | None = None) -> SessionTitleSnapshot | None:
        """Retry the provider over every eligible prompt (the deliberate unpin), or without a provider
        materialize the fallback (over a pinned rename too). ``None`` when no eligible text exists.

        Unlike automatic work, a failure here is raised to the caller. ``signal`` cancels the call
        (:class:`~agentlog.errors.SessionTitleCancelledError`).
        """
        if signal is not None and signal.is_set():
            raise SessionTitleCancelledError("session title refresh was cancelled by the caller")
        self._assert_usable(session)
        registration = self._registration
        messages = collect_session_title_messages(session.events)
        if registration is None or registration.closing or not messages:
            current = self.get(session)
            if current is not None and current["source"]["kind"] == "user" and messages:
                self._append_fallback(session, messages[0])
                return self.get(session)
            return self._ensure_fallback(session)
        state = self._state_for(session)
        revision = self._supersede(state, "explicit title refresh superseded older generation")
        work = _Work(registration, revision, messages[-1].seq, upstream=signal)
        state.active = work
        task = self._spawn(session, self._run_provider(session, work, _route_of(session)), registration)
        return cast(SessionTitleSnapshot | None, await task)

    def register(self, provider: SessionTitleProvider) -> Callable[[], Awaitable[None]]:
        """Register the one optional provider; returns its async disposer, which cancels its pending and
        active work and returns once that work has finished."""
        self._validate_provider(provider)
        if self._closed:
            raise SessionTitleCancelledError("session-title service disposed")
        if self._registration is not None:
            raise SessionTitleProviderError(
                f'session-title provider "{self._registration.provider.id}" is already registered'
            )
        registration = _Registration(provider)
        self._registration = registration

        async def dispose() -> None:
            registration.closing = True
            for state in list(self._states.values()):
                if state.pending is not None and state.pending.registration is registration:
                    state.pending = None
                if state.active is not None and state.active.registration is registration:
                    state.active.abort(
                        SessionTitleCancelledError(f'session-title provider "{provider.id}" was disposed')
                    )
            while registration.tasks:
                await asyncio.wait(set(registration.tasks))
            if self._registration is registration:
                self._registration = None

        return dispose

    async def settle(self, session: Session | None = None) -> None:
        """Run the queued work (of ``session``, or of every session) and wait until all started work of
        it has finished — including work that finishing work started."""
        while True:
            due = [item for item in self._queued if session is None or item[0] is session]
            self._queued = [item for item in self._queued if item not in due]
            for owner, job in due:
                self._spawn(owner, job())
            tasks = {task for task, owner in self._tasks.items() if session is None or owner is session}
            if not tasks:
                return
            await asyncio.wait(tasks)

    def close(self) -> None:
        """Stop: unsubscribe, drop queued work, cancel pending and active work. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._queued.clear()
        if self._registration is not None:
            self._registration.closing = True
        self._registration = None
        for state in list(self._states.values()):
            state.pending = None
            if state.active is not None:
                state.active.abort(SessionTitleCancelledError("session-title service disposed"))

    async def aclose(self) -> None:
        """:meth:`close`, then wait for the cancelled work to finish."""
        self.close()
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    # -- listeners (never append: they record what is due and defer it) --------------------------------
    def _on_event(self, session: Session, event: Event) -> None:
        etype = event["type"]
        if self._closed:
            return
        if etype == USER_MESSAGE:
            self._on_user_message(session, event)
        elif etype == REQUEST_HEADER:
            state = self._states.get(session)
            pending = state.pending if state is not None else None
            if state is not None and pending is not None and pending.through_seq < event["seq"]:
                config = event["data"]["header"]["config"]
                self._start_pending(session, state, pending, {"provider": config["provider"], "model": config["model"]})
        elif etype == ASSISTANT_CHUNK:
            state = self._states.get(session)
            if state is not None and state.pending is not None:
                self._on_model_stream(session, state, state.pending, event)

    def _on_user_message(self, session: Session, event: Event) -> None:
        if not collect_session_title_messages([event]):
            return
        current = self.get(session)
        if current is not None and current["source"]["kind"] == "user":
            return  # a rename pins the title
        registration = self._registration
        if registration is not None and not registration.closing:
            schedule = registration.provider.automatic == "all-prompts"
            if not schedule and current is None and session.header.get("parentSession") is None:
                schedule = len(collect_session_title_messages(session.events, event["seq"])) == 1
            if schedule:
                state = self._state_for(session)
                revision = self._supersede(state, "newer user message superseded title generation")
                state.pending = _Pending(registration, revision, event["seq"])
        if current is None:
            self._defer(session, lambda: self._fallback_job(session))

    def _on_model_stream(self, session: Session, state: _SessionState, pending: _Pending, event: Event) -> None:
        """A chunk streamed by a loop request built after the prompt: start with the header's route."""
        route = _route_of(session)
        if route is None or event["seq"] <= pending.through_seq:
            return  # without a logged route the next request/header starts the work (and names the route)
        events = session.events
        for index in range(len(events) - 1, -1, -1):
            etype = events[index]["type"]
            if etype == STEP_END:
                return  # not inside an open step: not the loop's request
            if etype == STEP_START:
                break
        else:
            return
        self._start_pending(session, state, pending, route)

    def _on_disposed(self, session: Session) -> None:
        state = self._states.pop(session, None)
        if state is not None and state.active is not None:
            state.active.abort(SessionTitleCancelledError("session disposed during title generation"))

    # -- scheduling ------------------------------------------------------------------------------------
    def _defer(self, session: Session, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._queued.append((session, job))
            return
        self._spawn(session, job())

    def _spawn(
        self, session: Session, coro: Coroutine[Any, Any, Any], registration: _Registration | None = None
    ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = session
        if registration is not None:
            registration.tasks.add(task)

        def settled(done: asyncio.Task[Any]) -> None:
            self._tasks.pop(done, None)
            if registration is not None:
                registration.tasks.discard(done)

        task.add_done_callback(settled)
        return task

    def _start_pending(
        self, session: Session, state: _SessionState, pending: _Pending, route: SessionTitleModel
    ) -> None:
        state.pending = None

        async def job() -> None:
            if (
                self._closed
                or self._registration is not pending.registration
                or pending.registration.closing
                or self._states.get(session) is not state
                or state.revision != pending.revision
            ):
                return
            work = _Work(pending.registration, pending.revision, pending.through_seq)
            state.active = work
            try:
                await self._spawn(session, self._run_provider(session, work, route), pending.registration)
            except Exception as err:
                if work.signal.is_set() or self._closed:
                    return
                logger.warning('session "%s": automatic title generation failed: %s', session.id, describe_error(err))

        self._defer(session, job)

    async def _fallback_job(self, session: Session) -> None:
        if self._closed:
            return
        try:
            self._ensure_fallback(session)
        except Exception as err:
            if self._closed:
                return
            logger.warning('session "%s": fallback title update failed: %s', session.id, describe_error(err))

    # -- the work itself -------------------------------------------------------------------------------
    def _ensure_fallback(self, session: Session) -> SessionTitleSnapshot | None:
        """The current title, or the fallback appended now (synchronously: nothing can slip between the
        check and the append, so concurrent callers share one fallback)."""
        self._assert_usable(session)
        current = self.get(session)
        if current is not None:
            return current
        messages = collect_session_title_messages(session.events)
        if not messages:
            return None
        self._append_fallback(session, messages[0])
        return self.get(session)

    def _append_fallback(self, session: Session, first: SessionTitleUserMessage) -> None:
        title = fallback_session_title(first.text, self.config.fallback_max_words, self.config.fallback_max_bytes)
        if title:  # a cap too small for the first code point derives nothing: no title
            data: SessionTitleData = {"title": title, "messageSeqs": [first.seq], "source": {"kind": "fallback"}}
            session.append_custom(SESSION_TITLE, data)

    async def _run_provider(
        self, session: Session, work: _Work, route: SessionTitleModel | None
    ) -> SessionTitleSnapshot | None:
        state = self._states.get(session)
        try:
            self._assert_current(session, work)
            self._ensure_fallback(session)
            self._assert_current(session, work)
            messages = collect_session_title_messages(session.events, work.through_seq)
            request = SessionTitleProviderRequest(session, tuple(messages), route, work.signal)
            result = await self._generate(session, work, work.registration.provider.generate(request))
            self._assert_current(session, work)
            title, seqs, model = self._validate_result(result, messages)
            source: SessionTitleSource = {"kind": "provider", "provider": work.registration.provider.id}
            if model is not None:
                source["model"] = model
            data: SessionTitleData = {"title": title, "messageSeqs": seqs, "source": source}
            session.append_custom(SESSION_TITLE, data)
            return self.get(session)
        finally:
            if state is not None and state.active is work:
                state.active = None

    async def _generate(self, session: Session, work: _Work, call: object) -> object:
        """Await the provider, but stop at once (cancelling it) when the work's signal or the caller's is set.

        A provider that ignores its signal is cancelled rather than waited for (the original waits for it
        and discards the answer): disposal and supersession never hang on a slow model.
        """
        if not inspect.isawaitable(call):  # a plain ``def generate`` answered synchronously
            self._assert_current(session, work)
            return call
        generation = asyncio.ensure_future(call)
        generation.add_done_callback(_consume)
        waiters = [asyncio.ensure_future(work.signal.wait())]
        if work.upstream is not None:
            waiters.append(asyncio.ensure_future(work.upstream.wait()))
        try:
            await asyncio.wait({generation, *waiters}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            if not generation.done():
                generation.cancel()
        self._assert_current(session, work)
        return generation.result()

    def _assert_current(self, session: Session, work: _Work) -> None:
        if self._closed:
            raise SessionTitleCancelledError("session-title service disposed")
        if work.upstream is not None and work.upstream.is_set():
            work.abort(SessionTitleCancelledError("session title refresh was cancelled by the caller"))
        if work.signal.is_set():
            raise work.reason or SessionTitleCancelledError("session title generation was cancelled")
        state = self._states.get(session)
        if (
            self._registration is not work.registration
            or state is None
            or state.active is not work
            or state.revision != work.revision
            or self.store.get(session.id) is not session
        ):
            raise SessionTitleCancelledError("session title generation state changed without cancellation")

    def _validate_result(
        self, result: object, messages: Sequence[SessionTitleUserMessage]
    ) -> tuple[str, list[int], SessionTitleModel | None]:
        if isinstance(result, SessionTitleProviderResult):
            raw: Mapping[str, Any] = {"title": result.title, "messageSeqs": result.message_seqs}
            if result.model is not None:
                raw = {**raw, "model": result.model}
        elif isinstance(result, Mapping):
            raw = result
        else:
            raise SessionTitleProviderError("session-title provider returned an invalid result")
        if not isinstance(raw.get("title"), str):
            raise SessionTitleProviderError("session-title provider title must be a string")
        title = normalize_session_title(raw["title"], self.config.max_title_bytes)
        if not title:
            raise SessionTitleProviderError("session-title provider returned an empty title")
        candidates = raw.get("messageSeqs")
        if not isinstance(candidates, Sequence) or isinstance(candidates, str) or not candidates:
            raise SessionTitleProviderError("session-title provider must identify at least one source message seq")
        order = {message.seq: index for index, message in enumerate(messages)}
        seqs: list[int] = []
        previous = -1
        for seq in candidates:
            index = order.get(seq) if isinstance(seq, int) and not isinstance(seq, bool) else None
            if index is None or index <= previous:
                raise SessionTitleProviderError(
                    "session-title provider messageSeqs must be unique, ordered seqs from the request"
                )
            seqs.append(cast(int, seq))
            previous = index
        model: SessionTitleModel | None = None
        if "model" in raw:  # present means checked: an explicit null is refused too
            candidate = raw["model"]
            if (
                not isinstance(candidate, Mapping)
                or not isinstance(candidate.get("provider"), str)
                or not candidate["provider"]
                or not isinstance(candidate.get("model"), str)
                or not candidate["model"]
            ):
                raise SessionTitleProviderError(
                    "session-title provider result model must contain non-empty provider and model strings"
                )
            model = {"provider": candidate["provider"], "model": candidate["model"]}
        return title, seqs, model

    # -- small helpers -----------------------------------------------------------------------------------
    def _assert_usable(self, session: Session) -> None:
        if self._closed:
            raise SessionTitleCancelledError("session-title service disposed")
        if self.store.get(session.id) is not session:
            raise SessionNotLiveError(f'session "{session.id}" is not live in this store')

    def _state_for(self, session: Session) -> _SessionState:
        state = self._states.get(session)
        if state is None:
            state = self._states[session] = _SessionState()
        return state

    @staticmethod
    def _supersede(state: _SessionState, reason: str) -> int:
        if state.active is not None:
            state.active.abort(SessionTitleCancelledError(reason))
        state.pending = None
        state.revision += 1
        return state.revision

    @staticmethod
    def _validate_provider(provider: object) -> None:
        if provider is None or isinstance(provider, str | int | float | bool):
            raise SessionTitleProviderError("session-title provider must be an object")
        ident = getattr(provider, "id", None)
        if not isinstance(ident, str) or not ident:
            raise SessionTitleProviderError("session-title provider id must be a non-empty string")
        if getattr(provider, "automatic", None) not in _MODES:
            raise SessionTitleProviderError("session-title provider automatic mode is invalid")
        if not callable(getattr(provider, "generate", None)):
            raise SessionTitleProviderError(f'session-title provider "{ident}" requires generate()')


# --- the model-written title ---------------------------------------------------------------------------

_LLM: Final = "session-title-llm"
_LLM_KEYS: Final = (
    "targetWords",
    "targetCjkCharacters",
    "maxInputBytes",
    "maxOutputTokens",
    "timeoutMs",
    "provider",
    "model",
)


@dataclass(frozen=True)
class SessionTitleLlmConfig:
    """A model-written title's policy (all limits required; the route pair is optional and all-or-none:
    without it the title is written by the route of the loop's current request)."""

    target_words: int
    target_cjk_characters: int
    max_input_bytes: int
    max_output_tokens: int
    timeout_ms: int
    provider: str | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("targetWords", self.target_words),
            ("targetCjkCharacters", self.target_cjk_characters),
            ("maxInputBytes", self.max_input_bytes),
            ("maxOutputTokens", self.max_output_tokens),
            ("timeoutMs", self.timeout_ms),
        ):
            _positive(_LLM, name, value)
        if self.timeout_ms > MAX_TIMER_DELAY_MS:
            raise InvalidOptionError(f"{_LLM}: timeoutMs must not exceed {MAX_TIMER_DELAY_MS}")
        if (self.provider is None) != (self.model is None):
            raise InvalidOptionError(f"{_LLM}: provider and model must be supplied together")
        if self.provider is not None and (
            not isinstance(self.provider, str) or not self.provider or not isinstance(self.model, str) or not self.model
        ):
            raise InvalidOptionError(f"{_LLM}: provider and model overrides must be non-empty strings")

    @classmethod
    def from_mapping(cls, config: object) -> SessionTitleLlmConfig:
        """From the original's wire keys (unknown keys are refused)."""
        if not isinstance(config, Mapping):
            raise InvalidOptionError(f"{_LLM}: configuration is required")
        for key in config:
            if key not in _LLM_KEYS:
                raise InvalidOptionError(f'{_LLM}: unknown config key "{key}"')
        return cls(
            config.get("targetWords"),  # type: ignore[arg-type]
            config.get("targetCjkCharacters"),  # type: ignore[arg-type]
            config.get("maxInputBytes"),  # type: ignore[arg-type]
            config.get("maxOutputTokens"),  # type: ignore[arg-type]
            config.get("timeoutMs"),  # type: ignore[arg-type]
            config.get("provider"),
            config.get("model"),
        )


DEFAULT_SESSION_TITLE_LLM_CONFIG: Final = SessionTitleLlmConfig(
    target_words=5, target_cjk_characters=10, max_input_bytes=4096, max_output_tokens=64, timeout_ms=60_000
)
"""The original bundle's policy (``session-title-first-prompt-llm`` in ``cordis.patch.yml``)."""


def session_title_system_prompt(config: SessionTitleLlmConfig) -> str:
    """The language-aware system instruction of a title request (the original's text)."""
    return "\n".join(
        [
            "Create a concise title for an AI coding-assistant session from the supplied human messages.",
            "Return only the title on one line, **in plain text of natural language**, with no quotes, prefix, "
            "explanation, Markdown, XML, or terminal control codes. No code is allowed.",
            "Use the language of the messages.",
            f"Aim for about {config.target_words} words in non-CJK languages or "
            f"{config.target_cjk_characters} CJK characters.",
        ]
    )


def _frame(messages: Sequence[SessionTitleUserMessage]) -> str:
    """The messages as a JSON array (so user text cannot break the prompt's structure)."""
    payload = json.dumps([m.wire() for m in messages], ensure_ascii=False, separators=(",", ":"))
    return f"Generate the session title from this JSON array of human messages:\n{payload}"


def _finish_error(finish: Mapping[str, Any]) -> Exception | None:
    kind = finish.get("kind")
    if kind == "stop":
        return None
    if kind in ("error", "aborted"):
        return LlmError.from_failure(finish["failure"])
    if kind == "max-tokens":
        return SessionTitleProviderError(f"{_LLM}: title output reached maxOutputTokens")
    if kind == "tool-calls":
        return SessionTitleProviderError(f"{_LLM}: title model unexpectedly requested a tool")
    return SessionTitleProviderError(f'{_LLM}: unsupported finish reason "{kind}"')


async def generate_session_title_with_llm(
    llm: Provider,
    config: SessionTitleLlmConfig,
    request: SessionTitleProviderRequest,
    selected: Sequence[SessionTitleUserMessage],
    title_provider: str,
) -> SessionTitleProviderResult:
    """One model-written title over ``selected``: logged as ``session/title-llm-request`` before dispatch.

    Nothing is logged or sent when the selection is empty, the framed prompt exceeds
    ``max_input_bytes``, no route is known, or the request is already cancelled. A failed finish raises
    :class:`~agentlog.errors.LlmError` (its failure's code); a truncated, tool-calling or textless answer,
    or one later than ``timeout_ms`` (code ``SESSION_TITLE_TIMEOUT``), raises
    :class:`~agentlog.errors.SessionTitleProviderError`.
    """
    if request.signal.is_set():
        raise SessionTitleCancelledError("session title generation was cancelled")
    if not selected:
        raise SessionTitleProviderError(f"{_LLM}: at least one source message is required")
    framed = _frame(selected)
    size = len(framed.encode("utf-8", "surrogatepass"))
    if size > config.max_input_bytes:
        raise SessionTitleProviderError(
            f"{_LLM}: input is {size} bytes, exceeding maxInputBytes {config.max_input_bytes}"
        )
    route: SessionTitleModel
    if config.provider is not None and config.model is not None:
        route = {"provider": config.provider, "model": config.model}
    elif request.route is not None:
        route = {"provider": request.route["provider"], "model": request.route["model"]}
    else:
        raise SessionTitleProviderError(
            f"{_LLM}: no logged request route is available; configure provider and model together"
        )
    messages = [user_message([text_block(framed)], source={"kind": "plugin", "plugin": SESSION_TITLE_LLM_PLUGIN})]
    system = session_title_system_prompt(config)
    seqs = [message.seq for message in selected]
    logged: SessionTitleLlmRequestData = {
        "titleProvider": title_provider,
        "messageSeqs": seqs,
        "route": route,
        "system": system,
        "messages": messages,
        "maxTokens": config.max_output_tokens,
    }
    request.session.append_custom(SESSION_TITLE_LLM_REQUEST, logged)
    call = GenerateRequest(
        provider=route["provider"],
        model=route["model"],
        messages=messages,
        system=system,
        max_tokens=config.max_output_tokens,
        session_id=request.session.id,
        purpose="session-title",
    )
    assembler = Assembler()
    try:
        async with asyncio.timeout(config.timeout_ms / 1000):
            async for chunk in llm.stream(call, signal=request.signal):
                assembler.push(chunk)
    except TimeoutError:
        raise SessionTitleProviderError(
            f"{_LLM}: title request exceeded timeoutMs {config.timeout_ms}", code=SESSION_TITLE_TIMEOUT_CODE
        ) from None
    failure = _finish_error(assembler.finish)
    if failure is not None:
        raise failure
    blocks = assembler.blocks()
    if any(block.get("type") == "tool-call" for block in blocks):
        raise SessionTitleProviderError(f"{_LLM}: title output must contain text only")
    text = " ".join(str(block.get("text", "")) for block in blocks if block.get("type") == "text")
    title = normalize_session_title(text, MAX_SAFE_INTEGER)
    if not title:
        raise SessionTitleProviderError(f"{_LLM}: title model produced no text")
    return SessionTitleProviderResult(title, seqs, route)


class LlmSessionTitleProvider:
    """A model-written title through an :class:`~agentlog.llm.types.Provider` (the original's
    ``session-title-first-prompt-llm`` / ``session-title-all-prompts-llm``): ``first-prompt`` titles the
    first human message only, ``all-prompts`` every eligible message so far."""

    def __init__(
        self,
        llm: Provider,
        config: SessionTitleLlmConfig | Mapping[str, Any] = DEFAULT_SESSION_TITLE_LLM_CONFIG,
        *,
        automatic: AutomaticMode = "first-prompt",
        id: str | None = None,
    ) -> None:
        if automatic not in _MODES:
            raise InvalidOptionError("session-title provider automatic mode is invalid")
        self.llm = llm
        self.config = (
            config if isinstance(config, SessionTitleLlmConfig) else SessionTitleLlmConfig.from_mapping(config)
        )
        self.automatic: AutomaticMode = automatic
        self.id = id if id is not None else f"session-title-{automatic}-llm"

    async def generate(self, request: SessionTitleProviderRequest) -> SessionTitleProviderResult:
        selected: Sequence[SessionTitleUserMessage] = request.messages
        if self.automatic == "first-prompt":
            if not request.messages:
                raise SessionTitleProviderError("first-prompt title provider requires one human message")
            selected = request.messages[:1]
        return await generate_session_title_with_llm(self.llm, self.config, request, selected, self.id)
