"""The session-title service and the model-written title (runtime spec §6.10) against the original's specs.

One test per case of ``packages/session/session-title/tests/{session-title,rename,provider,service-contracts,
persistence}.spec.ts`` and ``packages/session/session-title-llm/tests/llm.spec.ts``, named after the case.
The original settles its microtasks with ``setTimeout(0)``; here ``await service.settle()`` is that
boundary (the documented way to wait for deferred title work). Where the original's framework hook has
no kernel equivalent the test says how the Python rule stands in for it (``assistant/chunk`` in an open
step for the ``llm/stream`` hook; task cancellation for an ignored abort signal).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import (
    InvalidOptionError,
    LlmError,
    SessionNotLiveError,
    SessionTitleCancelledError,
    SessionTitleInvalidError,
    SessionTitleProviderError,
)
from agentlog.kernel.events import Event
from agentlog.kernel.messages import user_message
from agentlog.kernel.session import Session
from agentlog.kernel.store import SessionStore
from agentlog.llm.types import ABORTED, GenerateRequest, StreamChunk, failure_chunk, finish_chunk
from agentlog.projection.title import (
    SESSION_TITLE,
    SESSION_TITLE_LLM_REQUEST,
    fold_session_title,
    normalize_session_title,
    title_event_problem,
)
from agentlog.projection.title_service import (
    DEFAULT_SESSION_TITLE_CONFIG,
    DEFAULT_SESSION_TITLE_LLM_CONFIG,
    MAX_TIMER_DELAY_MS,
    SESSION_TITLE_TIMEOUT_CODE,
    AutomaticMode,
    LlmSessionTitleProvider,
    SessionTitleConfig,
    SessionTitleLlmConfig,
    SessionTitleProviderRequest,
    SessionTitleProviderResult,
    SessionTitleService,
    generate_session_title_with_llm,
)
from agentlog.testing.provider import ScriptedProvider, failure_reply, text_reply

CONFIG = {"fallbackMaxWords": 5, "fallbackMaxBytes": 40, "maxTitleBytes": 80}
SURFACE = {"surfaceOp": "append"}


# --- helpers ---------------------------------------------------------------------------------------------


def prompt(session: Session, text: str, source: dict[str, Any] | None = None) -> Event:
    return session.append("user/message", user_message(text, source=source), SURFACE)


def route(session: Session, reason: str = "initial") -> None:
    session.append(
        "request/header", {"header": {"config": {"provider": "main-route", "model": "chat-model"}}, "reason": reason}
    )


def start(store: SessionStore, id: str) -> Session:
    session = store.create(id)
    session.append("turn/start", {"turn": 1})
    return session


def titles(session: Session) -> list[Event]:
    return [event for event in session.events if event["type"] == SESSION_TITLE]


def kind(service: SessionTitleService, session: Session) -> str | None:
    snapshot = service.get(session)
    return snapshot["source"]["kind"] if snapshot is not None else None


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition`` holds (bounded by steps, never by time)."""
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


class Recorder:
    """A title provider that records its requests and answers through ``reply``."""

    def __init__(
        self, id: str, automatic: AutomaticMode, reply: Callable[[SessionTitleProviderRequest], Awaitable[Any] | Any]
    ) -> None:
        self.id = id
        self.automatic: AutomaticMode = automatic
        self.reply = reply
        self.requests: list[SessionTitleProviderRequest] = []

    async def generate(self, request: SessionTitleProviderRequest) -> Any:
        self.requests.append(request)
        answer = self.reply(request)
        return await answer if isinstance(answer, Awaitable) else answer


def all_seqs(title: str) -> Callable[[SessionTitleProviderRequest], Any]:
    return lambda request: {"title": title, "messageSeqs": [m.seq for m in request.messages]}


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(main())  # type: ignore[arg-type]


# --- session-title.spec.ts ----------------------------------------------------------------------------


def test_logs_and_folds_an_immediate_fallback_after_the_first_eligible_human_text_message() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "fresh")
        message = prompt(session, "  Build\nlog-backed session titles please  ")
        assert titles(session) == []  # deferred: never appended inside the prompt's publication
        await service.settle()
        (event,) = titles(session)
        assert event["seq"] == 2
        assert event["data"] == {
            "title": "Build log-backed session titles please",
            "messageSeqs": [message.seq],
            "source": {"kind": "fallback"},
        }
        assert service.get(session) == {**event["data"], "eventSeq": 2, "updatedAt": event["time"]}
        assert len(session.derive_messages()) == 1  # log-only: never on the model surface
        assert list(session.surface.nodes) == [message.seq]

    run(main)


def test_without_a_running_loop_the_fallback_waits_for_settle() -> None:
    """Synchronous appends queue the work; ``settle`` runs it."""
    store = SessionStore()
    service = SessionTitleService(store, CONFIG)
    session = start(store, "sync")
    prompt(session, "queued until settled")
    assert titles(session) == []
    asyncio.run(service.settle(session))
    assert service.get(session) is not None and service.get(session)["title"] == "queued until settled"  # type: ignore[index]


def test_derives_a_fallback_title_from_the_direct_prompt_instead_of_injected_context() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = store.create("prefixed-title")
        reference = {"kind": "session-reference", "form": "recall", "version": 1, "references": []}
        prompt(session, "Referenced session snapshot", reference)
        session.append("turn/start", {"turn": 1})
        prompt(session, "Explain this referenced session")
        await service.settle()
        assert service.get(session)["title"] == "Explain this referenced session"  # type: ignore[index]

    run(main)


def test_waits_through_synthetic_empty_and_non_text_messages_then_keeps_the_first_fallback() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "eligibility")
        prompt(session, "plugin text", {"kind": "plugin", "plugin": "seed"})
        session.append("user/message", user_message([{"type": "reasoning", "text": "not visible text"}]), SURFACE)
        prompt(session, " \n\t ")
        await service.settle()
        assert service.get(session) is None
        eligible = prompt(session, "first real prompt")
        await service.settle()
        first = service.get(session)
        prompt(session, "later prompt")
        await service.settle()
        assert first is not None and first["messageSeqs"] == [eligible.seq]
        assert service.get(session) == first
        assert len(titles(session)) == 1

    run(main)


# --- rename.spec.ts -------------------------------------------------------------------------------------

RENAME_CONFIG = {"fallbackMaxWords": 5, "fallbackMaxBytes": 40, "maxTitleBytes": 40}


def test_rename_appends_a_normalized_user_source_title() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, RENAME_CONFIG)
        session = start(store, "rename-accept")
        prompt(session, "Original prompt text")
        await service.settle()
        accepted = service.rename(session, "  Hand\tpicked   name  ")
        assert (accepted["title"], accepted["messageSeqs"], accepted["source"]) == (
            "Hand picked name",
            [],
            {"kind": "user"},
        )
        assert titles(session)[-1]["data"] == {
            "title": "Hand picked name",
            "messageSeqs": [],
            "source": {"kind": "user"},
        }
        assert fold_session_title(session.events)["source"] == {"kind": "user"}  # type: ignore[index]

    run(main)


def test_rename_rejects_titles_that_normalize_to_empty_and_dead_sessions() -> None:
    store = SessionStore()
    service = SessionTitleService(store, RENAME_CONFIG)
    session = store.create("rename-reject")
    with pytest.raises(SessionTitleInvalidError, match="visible characters"):
        service.rename(session, "  \x1b[31m  ")
    with pytest.raises(SessionNotLiveError, match="not live in this store"):
        service.rename(Session.create("detached"), "name")
    assert titles(session) == []


def test_rename_pins_the_title_later_prompts_schedule_nothing_and_refresh_unpins() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, RENAME_CONFIG)
        provider = Recorder("pin-provider", "all-prompts", all_seqs("Provider title"))
        service.register(provider)
        session = start(store, "rename-pin")
        prompt(session, "First prompt")
        await service.settle()
        service.rename(session, "Pinned by hand")
        prompt(session, "Second prompt after the pin")
        await service.settle()
        route(session, "change")
        await service.settle()
        assert provider.requests == []
        assert service.get(session)["title"] == "Pinned by hand"  # type: ignore[index]
        refreshed = await service.refresh(session)
        assert len(provider.requests) == 1
        assert refreshed is not None and refreshed["title"] == "Provider title"
        assert kind(service, session) == "provider"

    run(main)


def test_fallback_only_refresh_also_unpins_the_user_title_yields_to_a_rederived_fallback() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, RENAME_CONFIG)
        session = start(store, "rename-unpin-fallback")
        prompt(session, "Derivable prompt words")
        await service.settle()
        service.rename(session, "Pinned without provider")
        assert kind(service, session) == "user"
        refreshed = await service.refresh(session)
        assert refreshed is not None
        assert (refreshed["title"], refreshed["source"]) == ("Derivable prompt words", {"kind": "fallback"})
        assert kind(service, session) == "fallback"

    run(main)


def test_rename_supersedes_in_flight_automatic_generation_a_late_result_cannot_override_it() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, RENAME_CONFIG)
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def parked(request: SessionTitleProviderRequest) -> Any:
            await asyncio.shield(gate)
            return {"title": "Late provider title", "messageSeqs": [m.seq for m in request.messages]}

        provider = Recorder("deferred-provider", "all-prompts", parked)
        service.register(provider)
        session = start(store, "rename-supersede")
        prompt(session, "Prompt that triggers generation")
        route(session, "change")
        await until(lambda: len(provider.requests) == 1)
        service.rename(session, "User wins")
        assert provider.requests[0].signal.is_set()
        resolve(gate, None)
        await service.settle()
        latest = titles(session)[-1]["data"]
        assert (latest["title"], latest["source"]) == ("User wins", {"kind": "user"})

    run(main)


def test_fallback_only_refresh_keeps_the_user_title_when_no_fallback_is_derivable() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, {**RENAME_CONFIG, "fallbackMaxBytes": 3})
        session = start(store, "rename-unpin-empty")
        prompt(session, "😀😀")
        await service.settle()
        service.rename(session, "Sticky emoji pin")
        refreshed = await service.refresh(session)
        assert refreshed is not None and refreshed["title"] == "Sticky emoji pin"
        assert kind(service, session) == "user"

    run(main)


# --- provider.spec.ts -----------------------------------------------------------------------------------

PROVIDER_CONFIG = {"fallbackMaxWords": 5, "fallbackMaxBytes": 24, "maxTitleBytes": 24}


def test_inherits_title_events_across_forks_skips_first_prompt_retitling_and_all_prompts_updates_later() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        parent = start(store, "title-parent")
        inherited = prompt(parent, "Inherited title prompt")
        await service.settle()
        parent.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        child = store.fork(parent, None, "title-child")
        assert service.get(child) == service.get(parent)
        assert titles(child) == titles(parent)

        first = Recorder(
            "fork-first", "first-prompt", lambda r: {"title": "Should not run", "messageSeqs": [r.messages[0].seq]}
        )
        dispose_first = service.register(first)
        child.append("turn/start", {"turn": 2})
        child_message = prompt(child, "Child follow-up prompt")
        await service.settle()
        route(child)
        await service.settle()
        child.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
        assert first.requests == []
        await dispose_first()

        every = Recorder("fork-all", "all-prompts", all_seqs("Fork all prompts"))
        service.register(every)
        child.append("turn/start", {"turn": 3})
        latest = prompt(child, "Retitle the fork now")
        await service.settle()
        route(child, "change")
        await service.settle()
        assert len(every.requests) == 1
        snapshot = service.get(child)
        assert snapshot is not None
        assert snapshot["title"] == "Fork all prompts"
        assert snapshot["messageSeqs"] == [inherited.seq, child_message.seq, latest.seq]
        assert snapshot["source"] == {"kind": "provider", "provider": "fork-all"}
        assert service.get(parent)["title"] == "Inherited title prompt"  # type: ignore[index]

    run(main)


def test_runs_a_first_prompt_provider_once_after_the_routed_request_and_retries_only_through_refresh() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        provider = Recorder(
            "first-model",
            "first-prompt",
            lambda r: {
                "title": "\x1b[31m  A   model-generated title that is too long  ",
                "messageSeqs": [r.messages[0].seq],
                "model": {"provider": "aux-route", "model": "title-model"},
            },
        )
        service.register(provider)
        session = start(store, "first-provider")
        first = prompt(session, "Explain asynchronous title generation")
        await service.settle()
        assert kind(service, session) == "fallback"  # the provider waits for the loop's request
        route(session)
        await service.settle()
        assert len(provider.requests) == 1
        request = provider.requests[0]
        assert request.session is session
        assert [(m.seq, m.text) for m in request.messages] == [(first.seq, "Explain asynchronous title generation")]
        assert request.route == {"provider": "main-route", "model": "chat-model"}
        snapshot = service.get(session)
        assert snapshot is not None
        assert (snapshot["title"], snapshot["messageSeqs"]) == ("A model-generated title", [first.seq])
        assert snapshot["source"] == {
            "kind": "provider",
            "provider": "first-model",
            "model": {"provider": "aux-route", "model": "title-model"},
        }
        second = prompt(session, "A later prompt")
        route(session, "change")
        await service.settle()
        assert len(provider.requests) == 1
        await service.refresh(session)
        assert [m.seq for m in provider.requests[1].messages] == [first.seq, second.seq]

    run(main)


def test_rejects_a_second_provider_and_drains_stale_work_when_the_winner_is_disposed() -> None:
    """Python cancels the disposed provider's call (the original waits for it to ignore its abort)."""

    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        pending: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        winner = Recorder("winner", "all-prompts", lambda r: pending)
        dispose = service.register(winner)
        with pytest.raises(SessionTitleProviderError, match="already registered"):
            service.register(Recorder("duplicate", "first-prompt", lambda r: {"title": "x", "messageSeqs": [0]}))
        session = start(store, "dispose-provider")
        message = prompt(session, "Generate this title")
        await service.settle()
        route(session)
        await until(lambda: len(winner.requests) == 1)
        assert not winner.requests[0].signal.is_set()
        await dispose()
        assert winner.requests[0].signal.is_set()
        resolve(pending, {"title": "stale provider result", "messageSeqs": [message.seq]})
        await service.settle()
        assert kind(service, session) == "fallback"
        assert service.provider is None
        dispose_replacement = service.register(
            Recorder("replacement", "first-prompt", lambda r: {"title": "r", "messageSeqs": [message.seq]})
        )
        await dispose_replacement()

    run(main)


def test_supersedes_an_older_all_prompts_revision_and_cannot_commit_an_ignored_abort() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        first_result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def reply(request: SessionTitleProviderRequest) -> Any:
            if len(provider.requests) == 1:
                return asyncio.shield(first_result)  # ignores cancellation of its caller
            return {"title": "Newest complete title", "messageSeqs": [m.seq for m in request.messages]}

        provider = Recorder("all-model", "all-prompts", reply)
        service.register(provider)
        session = start(store, "supersede")
        first = prompt(session, "First prompt")
        await service.settle()
        route(session)
        await until(lambda: len(provider.requests) == 1)
        second = prompt(session, "Second prompt")
        assert provider.requests[0].signal.is_set()
        route(session, "change")
        await service.settle()
        snapshot = service.get(session)
        assert snapshot is not None
        assert (snapshot["title"], snapshot["messageSeqs"]) == ("Newest complete title", [first.seq, second.seq])
        resolve(first_result, {"title": "Old ignored result", "messageSeqs": [first.seq]})
        await service.settle()
        assert service.get(session)["title"] == "Newest complete title"  # type: ignore[index]

    run(main)


def test_runs_an_all_prompts_revision_when_the_next_main_request_reuses_its_logged_header() -> None:
    """No new ``request/header``: the first ``assistant/chunk`` of an open step after the prompt starts it
    (the runtime appends prompts right after ``step/start``, so that chunk's request carried the prompt)."""

    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        provider = Recorder(
            "unchanged-route",
            "all-prompts",
            lambda r: {"title": f"Revision {len(provider.requests)}", "messageSeqs": [m.seq for m in r.messages]},
        )
        service.register(provider)
        session = start(store, "unchanged-route")
        session.append("step/start", {"turn": 1, "step": 1})
        first = prompt(session, "First routed prompt")
        await service.settle()
        route(session)
        await service.settle()
        session.append("step/end", {"turn": 1, "step": 1})
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        session.append("turn/start", {"turn": 2})
        session.append("step/start", {"turn": 2, "step": 1})
        second = prompt(session, "Second prompt on the same route")
        await service.settle()
        assert len(provider.requests) == 1
        session.append(
            "assistant/chunk", {"turn": 2, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "hi"}}
        )
        await service.settle()
        assert len([e for e in session.events if e["type"] == "request/header"]) == 1
        assert len(provider.requests) == 2
        assert [(m.seq, m.text) for m in provider.requests[1].messages] == [
            (first.seq, "First routed prompt"),
            (second.seq, "Second prompt on the same route"),
        ]
        assert provider.requests[1].route == {"provider": "main-route", "model": "chat-model"}
        assert service.get(session)["title"] == "Revision 2"  # type: ignore[index]

    run(main)


def test_ignores_model_streams_that_are_not_a_matching_loop_request() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)
        provider = Recorder("request-filter", "all-prompts", all_seqs("Unexpected title"))
        service.register(provider)
        chunk = {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}
        quiet = start(store, "quiet")  # nothing pending
        quiet.append("step/start", {"turn": 1, "step": 1})
        quiet.append("assistant/chunk", chunk)
        outside = start(store, "outside-step")  # a prompt, but the chunk is in no open step
        prompt(outside, "Wait for a matching request boundary")
        route_less = start(store, "no-route")  # an open step, but no logged route
        route_less.append("step/start", {"turn": 1, "step": 1})
        prompt(route_less, "Wait for a route")
        await service.settle()
        outside.append("assistant/chunk", chunk)
        route_less.append("assistant/chunk", chunk)
        closed = start(store, "closed-step")
        closed.append("step/start", {"turn": 1, "step": 1})
        prompt(closed, "Then the step closes")
        closed.append("step/end", {"turn": 1, "step": 1})
        closed.append("assistant/chunk", chunk)
        await service.settle()
        assert provider.requests == []

    run(main)


def test_contains_automatic_failures_but_lets_explicit_refresh_reject(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, PROVIDER_CONFIG)

        async def failing(request: SessionTitleProviderRequest) -> Any:
            raise RuntimeError("title backend failed")

        service.register(Recorder("failing", "all-prompts", failing))
        session = start(store, "failure")
        prompt(session, "Keep a fallback")
        await service.settle()
        route(session)
        await service.settle()
        assert kind(service, session) == "fallback"
        assert any("automatic title generation failed" in r.getMessage() for r in caplog.records)
        with pytest.raises(RuntimeError, match="title backend failed"):
            await service.refresh(session)

    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(main)


# --- service-contracts.spec.ts ----------------------------------------------------------------------------


def test_requires_explicit_positive_limits_with_a_fallback_cap_no_larger_than_the_accepted_title_cap() -> None:
    store = SessionStore()
    for missing in (None, "config"):
        with pytest.raises(InvalidOptionError, match="session-title: configuration is required"):
            SessionTitleService(store, missing)  # type: ignore[arg-type]
    for bad in (0, 1.5, None):
        with pytest.raises(InvalidOptionError, match="fallbackMaxWords must be a positive integer"):
            SessionTitleService(store, {**CONFIG, "fallbackMaxWords": bad})
    with pytest.raises(InvalidOptionError, match="maxTitleBytes must be a positive integer"):
        SessionTitleConfig(5, 40, 0)
    with pytest.raises(InvalidOptionError, match="fallbackMaxBytes must not exceed maxTitleBytes"):
        SessionTitleService(store, {**CONFIG, "fallbackMaxBytes": 81})
    assert SessionTitleConfig.from_mapping(CONFIG) == DEFAULT_SESSION_TITLE_CONFIG == SessionTitleConfig(5, 40, 80)


def test_returns_no_title_for_empty_input_with_or_without_a_provider_and_rejects_detached_or_preaborted_refreshes() -> (
    None
):
    async def main() -> None:
        store = SessionStore()
        fallback_only = SessionTitleService(store, CONFIG)
        assert await fallback_only.refresh(store.create("empty-fallback")) is None
        fallback_only.close()

        with_provider = SessionTitleService(store, CONFIG)
        provider = Recorder("empty-provider", "first-prompt", lambda r: {"title": "unused", "messageSeqs": [0]})
        with_provider.register(provider)
        empty = store.create("empty-provider")
        assert await with_provider.refresh(empty) is None
        assert provider.requests == []
        with pytest.raises(SessionNotLiveError, match="not live in this store"):
            await with_provider.refresh(Session.create("detached"))
        cancelled = asyncio.Event()
        cancelled.set()
        with pytest.raises(SessionTitleCancelledError, match="cancelled by the caller"):
            await with_provider.refresh(empty, cancelled)

    run(main)


def test_passes_an_absent_route_and_caller_cancellation_into_explicit_generation() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        provider = Recorder(
            "explicit-no-route",
            "first-prompt",
            lambda r: {"title": "Explicit title", "messageSeqs": [r.messages[0].seq]},
        )
        service.register(provider)
        session = start(store, "explicit-no-route")
        prompt(session, "Refresh before any request header")
        await service.settle()
        refreshed = await service.refresh(session, asyncio.Event())
        assert refreshed is not None and refreshed["title"] == "Explicit title"
        assert provider.requests[0].route is None
        assert not provider.requests[0].signal.is_set()

    run(main)


def test_propagates_explicit_cancellation_and_session_disposal_to_active_work() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        pending: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        provider = Recorder("caller-cancel", "first-prompt", lambda r: pending)
        service.register(provider)
        session = start(store, "caller-cancel")
        message = prompt(session, "Cancel this refresh")
        await service.settle()
        caller = asyncio.Event()
        refresh = asyncio.ensure_future(service.refresh(session, caller))
        await until(lambda: len(provider.requests) == 1)
        caller.set()
        resolve(pending, {"title": "ignored", "messageSeqs": [message.seq]})
        with pytest.raises(SessionTitleCancelledError, match="cancelled by the caller"):
            await refresh
        assert provider.requests[0].signal.is_set()

        disposed_pending: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        provider.reply = lambda r: disposed_pending
        disposed = start(store, "session-dispose")
        message = prompt(disposed, "Dispose this session")
        await service.settle()
        disposed_refresh = asyncio.ensure_future(service.refresh(disposed))
        await until(lambda: len(provider.requests) == 2)
        store.dispose(disposed)
        resolve(disposed_pending, {"title": "ignored", "messageSeqs": [message.seq]})
        with pytest.raises(SessionTitleCancelledError, match="session disposed"):
            await disposed_refresh
        assert provider.requests[1].signal.is_set()
        assert [e["data"]["title"] for e in titles(disposed)] == ["Dispose this session"]

    run(main)


def test_shares_one_fallback_across_concurrent_refreshes() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        seed = Session.create("fallback-concurrency-seed")
        seed.append("turn/start", {"turn": 1})
        source = prompt(seed, "Create exactly one fallback title")
        seed.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        session = store.create("fallback-concurrency", seed=seed.events)
        results = await asyncio.gather(service.refresh(session), service.refresh(session))
        assert results[0] == results[1]
        assert len(titles(session)) == 1
        assert [e["type"] for e in session.events] == [
            "turn/start",
            "user/message",
            "turn/end",
            "session/end-seed",
            "session/title",
        ]
        assert service.get(session)["messageSeqs"] == [source.seq]  # type: ignore[index]

    run(main)


def test_reuses_a_title_accepted_before_the_queued_fallback_commits() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "fallback-already-accepted")
        source = prompt(session, "Reuse the title that wins the fallback race")
        refresh = asyncio.ensure_future(service.refresh(session))
        session.append(
            SESSION_TITLE, {"title": "Already accepted", "messageSeqs": [source.seq], "source": {"kind": "fallback"}}
        )
        refreshed = await refresh
        await service.settle()
        assert refreshed is not None and refreshed["title"] == "Already accepted"
        assert len(titles(session)) == 1

    run(main)


def test_lets_the_newest_overlapping_explicit_refresh_win() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "refresh-order")
        source = prompt(session, "Keep the newest explicit refresh")
        await service.settle()
        session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        results: list[asyncio.Future[Any]] = []

        def reply(request: SessionTitleProviderRequest) -> Any:
            results.append(asyncio.get_running_loop().create_future())
            return results[-1]

        provider = Recorder("refresh-order", "first-prompt", reply)
        service.register(provider)
        older = asyncio.ensure_future(service.refresh(session))
        await until(lambda: len(provider.requests) == 1)
        newer = asyncio.ensure_future(service.refresh(session))
        await until(lambda: len(provider.requests) == 2)
        assert provider.requests[0].signal.is_set()
        assert not provider.requests[1].signal.is_set()
        resolve(results[0], {"title": "Obsolete title", "messageSeqs": [source.seq]})
        with pytest.raises(SessionTitleCancelledError, match="superseded"):
            await older
        resolve(results[1], {"title": "Newest explicit title", "messageSeqs": [source.seq]})
        assert (await newer)["title"] == "Newest explicit title"  # type: ignore[index]

    run(main)


def test_cancels_a_queued_fallback_when_the_session_title_service_unloads() -> None:
    store = SessionStore()
    service = SessionTitleService(store, CONFIG)
    session = start(store, "service-dispose-fallback")
    prompt(session, "Do not publish after service disposal")  # queued: no running loop
    service.close()
    prompt(session, "Ignore prompts after disposal")
    asyncio.run(service.settle())
    assert titles(session) == []
    with pytest.raises(SessionTitleCancelledError, match=r"^session-title service disposed$"):
        asyncio.run(service.refresh(session))
    with pytest.raises(SessionTitleCancelledError, match=r"^session-title service disposed$"):
        service.rename(session, "too late")
    with pytest.raises(SessionTitleCancelledError, match=r"^session-title service disposed$"):
        service.register(Recorder("late", "first-prompt", all_seqs("late")))


def test_suppresses_a_queued_fallback_failure_after_service_unload_begins(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "service-unload-started-fallback")
        prompt(session, "Start fallback before unloading the service")
        await service.aclose()
        assert titles(session) == []

    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(main)
    assert not caplog.records


def test_aborts_pending_and_active_provider_work_during_service_unload() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        result: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        provider = Recorder("service-unload", "all-prompts", lambda r: asyncio.shield(result))
        service.register(provider)
        active = start(store, "service-unload-active")
        active_message = prompt(active, "Active provider work")
        await service.settle()
        refresh = asyncio.ensure_future(service.refresh(active))
        await until(lambda: len(provider.requests) == 1)
        pending = start(store, "service-unload-pending")
        prompt(pending, "Pending provider work")
        route(pending)
        closing = asyncio.ensure_future(service.aclose())
        await until(lambda: provider.requests[0].signal.is_set())
        resolve(result, {"title": "Ignored service abort", "messageSeqs": [active_message.seq]})
        await closing
        with pytest.raises(SessionTitleCancelledError, match=r"^session-title service disposed$"):
            await refresh
        assert len(provider.requests) == 1  # the pending session's work never started
        assert [e["data"]["source"]["kind"] for e in titles(active)] == ["fallback"]
        assert [e["data"]["source"]["kind"] for e in titles(pending)] == ["fallback"]  # ran before the unload

    run(main)


def test_warns_when_a_detached_session_prevents_queued_fallback_publication(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        session = start(store, "fallback-detach")
        prompt(session, "Detach before the fallback runs")
        store.dispose(session)
        await service.settle()
        assert service.get(session) is None

    with caplog.at_level(logging.WARNING, logger="agentlog"):
        run(main)
    messages = [r.getMessage() for r in caplog.records]
    assert any("fallback title update failed" in m and "not live in this store" in m for m in messages), messages


def test_leaves_a_title_absent_when_the_byte_cap_cannot_hold_the_first_code_point() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, {"fallbackMaxWords": 5, "fallbackMaxBytes": 1, "maxTitleBytes": 2})
        session = start(store, "no-code-point")
        prompt(session, "😀")
        await service.settle()
        assert service.get(session) is None
        assert await service.refresh(session) is None

    run(main)


def test_rejects_malformed_provider_registrations_before_publishing_them() -> None:
    store = SessionStore()
    service = SessionTitleService(store, CONFIG)

    async def generate(request: Any) -> Any:
        return {"title": "title", "messageSeqs": [0]}

    cases: list[tuple[Any, str]] = [
        (None, "must be an object"),
        ("provider", "must be an object"),
        (SimpleNamespace(id=1, automatic="first-prompt", generate=generate), "id must be a non-empty string"),
        (SimpleNamespace(id="", automatic="first-prompt", generate=generate), "id must be a non-empty string"),
        (SimpleNamespace(id="bad-mode", automatic="sometimes", generate=generate), "automatic mode is invalid"),
        (SimpleNamespace(id="missing-generate", automatic="first-prompt", generate=None), "requires generate"),
    ]
    for provider, message in cases:
        with pytest.raises(SessionTitleProviderError, match=message):
            service.register(provider)
    assert service.provider is None


def test_drops_automatic_work_when_its_provider_is_disposed_before_the_queued_start() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        provider = Recorder(
            "queued-dispose", "all-prompts", lambda r: {"title": "too late", "messageSeqs": [r.messages[0].seq]}
        )
        dispose = service.register(provider)
        session = start(store, "queued-dispose")
        prompt(session, "Queue provider work")
        await service.settle()
        route(session)  # the provider's start is now queued
        pending = start(store, "pending-provider-dispose")
        prompt(pending, "Drop pending provider work")
        await dispose()
        await service.settle()
        assert provider.requests == []
        assert kind(service, session) == kind(service, pending) == "fallback"

    run(main)


MALFORMED: list[tuple[Any, str]] = [
    (None, "invalid result"),
    (1, "invalid result"),
    ({"title": 1, "messageSeqs": "first"}, "title must be a string"),
    ({"title": "\x1b[31m", "messageSeqs": "first"}, "empty title"),
    ({"title": "valid"}, "at least one source message"),
    ({"title": "valid", "messageSeqs": []}, "at least one source message"),
    ({"title": "valid", "messageSeqs": ["not-a-seq"]}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": [1.5]}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": [True]}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": [-1]}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": [999]}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": "first-first"}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": "second-first"}, "unique, ordered seqs"),
    ({"title": "valid", "messageSeqs": "first", "model": None}, "provider result model"),
    ({"title": "valid", "messageSeqs": "first", "model": "route"}, "provider result model"),
    ({"title": "valid", "messageSeqs": "first", "model": {"provider": 1, "model": "m"}}, "provider result model"),
    ({"title": "valid", "messageSeqs": "first", "model": {"provider": "", "model": "m"}}, "provider result model"),
    ({"title": "valid", "messageSeqs": "first", "model": {"provider": "p", "model": 1}}, "provider result model"),
    ({"title": "valid", "messageSeqs": "first", "model": {"provider": "p", "model": ""}}, "provider result model"),
]


def test_rejects_malformed_provider_results_without_replacing_the_fallback() -> None:
    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG)
        answer: list[Any] = [None]
        service.register(Recorder("invalid-results", "first-prompt", lambda r: answer[0]))
        session = start(store, "invalid-results")
        first = prompt(session, "First source").seq
        await service.settle()
        second = prompt(session, "Second source").seq
        await service.settle()
        named = {"first": [first], "first-first": [first, first], "second-first": [second, first]}
        for value, message in MALFORMED:
            if isinstance(value, dict) and isinstance(value.get("messageSeqs"), str):
                value = {**value, "messageSeqs": named[value["messageSeqs"]]}
            answer[0] = value
            with pytest.raises(SessionTitleProviderError, match=message):
                await service.refresh(session)
            assert kind(service, session) == "fallback"
        answer[0] = SessionTitleProviderResult("Typed result", [first, second])
        accepted = await service.refresh(session)
        assert accepted is not None and (accepted["title"], accepted["messageSeqs"]) == (
            "Typed result",
            [first, second],
        )

    run(main)


# --- persistence.spec.ts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_session_titles_round_trip_through_a_remounted_backend(tmp_path: Path, backend: str) -> None:
    from agentlog.persistence.coordinator import PersistenceCoordinator
    from agentlog.persistence.jsonl.backend import JsonlBackend
    from agentlog.persistence.sqlite.backend import SqliteBackend

    def open_backend() -> Any:
        return JsonlBackend(tmp_path) if backend == "jsonl" else SqliteBackend(tmp_path / "sessions.db")

    store = SessionStore()
    coordinator = PersistenceCoordinator(store, open_backend())
    service = SessionTitleService(store, CONFIG)
    session = store.create("title-round-trip")
    session.append("turn/start", {"turn": 1})
    prompt(session, "Persist this session title")
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    asyncio.run(service.settle())
    store.flush(session)
    coordinator.close()

    reader = PersistenceCoordinator(SessionStore(), open_backend())
    loaded = reader.load("title-round-trip")
    snapshot = fold_session_title(loaded.events)
    assert snapshot is not None
    assert (snapshot["title"], snapshot["messageSeqs"], snapshot["source"], snapshot["eventSeq"]) == (
        "Persist this session title",
        [1],
        {"kind": "fallback"},
        3,
    )
    assert [e["type"] for e in loaded.events] == ["turn/start", "user/message", "turn/end", "session/title"]
    reader.close()


# --- session-title-llm: llm.spec.ts -------------------------------------------------------------------------

LLM_CONFIG = SessionTitleLlmConfig(
    target_words=5, target_cjk_characters=10, max_input_bytes=1_000, max_output_tokens=32, timeout_ms=1_000
)
TITLE_PROVIDER = "test-title-provider"
CURRENT = {"provider": "current-route", "model": "current-model"}


def llm_request(store: SessionStore, name: str, signal: asyncio.Event | None = None) -> SessionTitleProviderRequest:
    session = start(store, name)
    first = prompt(session, "first prompt")
    second = prompt(session, "第二个问题")
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    from agentlog.projection.title import collect_session_title_messages

    messages = tuple(collect_session_title_messages(session.events))
    assert [m.seq for m in messages] == [first.seq, second.seq]
    return SessionTitleProviderRequest(session, messages, dict(CURRENT), signal or asyncio.Event())  # type: ignore[arg-type]


class Observing(ScriptedProvider):
    """A scripted model that notes, at dispatch, whether the title request was already logged."""

    def __init__(self, script: list[list[StreamChunk]], session: Session) -> None:
        super().__init__(script, name="current-route")
        self.session = session
        self.logged_at_dispatch: list[bool] = []

    def stream(self, request: GenerateRequest, *, signal: asyncio.Event | None = None) -> AsyncIterator[StreamChunk]:
        self.logged_at_dispatch.append(any(e["type"] == SESSION_TITLE_LLM_REQUEST for e in self.session.events))
        return super().stream(request, signal=signal)


def test_uses_the_exact_logged_route_language_targets_full_framed_input_and_output_token_cap() -> None:
    async def main() -> None:
        store = SessionStore()
        request = llm_request(store, "title-call")
        model = Observing([text_reply("  五个字标题  ")], request.session)
        result = await generate_session_title_with_llm(model, LLM_CONFIG, request, request.messages, TITLE_PROVIDER)
        assert result == SessionTitleProviderResult("五个字标题", [m.seq for m in request.messages], CURRENT)  # type: ignore[arg-type]
        assert model.logged_at_dispatch == [True]
        (sent,) = model.requests
        assert (sent.provider, sent.model, sent.max_tokens, sent.session_id, sent.purpose) == (
            "current-route",
            "current-model",
            32,
            request.session.id,
            "session-title",
        )
        assert sent.system is not None and "5 words" in sent.system and "10 CJK characters" in sent.system
        framed = sent.messages[0]["content"][0]["text"]
        assert "first prompt" in framed and "第二个问题" in framed
        assert framed.endswith('[{"seq":1,"text":"first prompt"},{"seq":2,"text":"第二个问题"}]')
        logged = [e for e in request.session.events if e["type"] == SESSION_TITLE_LLM_REQUEST][-1]["data"]
        assert logged == {
            "titleProvider": TITLE_PROVIDER,
            "messageSeqs": [1, 2],
            "route": CURRENT,
            "system": sent.system,
            "messages": list(sent.messages),
            "maxTokens": 32,
        }

    run(main)


def test_uses_paired_explicit_overrides_and_bounds_the_final_framed_input_before_model_dispatch() -> None:
    async def main() -> None:
        store = SessionStore()
        model = ScriptedProvider([text_reply("title")], name="explicit-route")
        oversized = llm_request(store, "oversized")
        selected = oversized.messages[0]
        config = SessionTitleLlmConfig(
            5, 10, len(selected.text.encode()), 32, 1_000, "explicit-route", "explicit-model"
        )
        with pytest.raises(SessionTitleProviderError, match=r"input is \d+ bytes, exceeding maxInputBytes"):
            await generate_session_title_with_llm(model, config, oversized, [selected], TITLE_PROVIDER)
        assert model.requests == []
        assert not any(e["type"] == SESSION_TITLE_LLM_REQUEST for e in oversized.session.events)
        within = llm_request(store, "within")
        config = SessionTitleLlmConfig(5, 10, 1_000, 32, 1_000, "explicit-route", "explicit-model")
        await generate_session_title_with_llm(model, config, within, within.messages[:1], TITLE_PROVIDER)
        assert (model.requests[0].provider, model.requests[0].model) == ("explicit-route", "explicit-model")

    run(main)


def test_requires_every_deployment_limit_and_a_complete_optional_route_pair() -> None:
    wire = {
        "targetWords": 5,
        "targetCjkCharacters": 10,
        "maxInputBytes": 1_000,
        "maxOutputTokens": 32,
        "timeoutMs": 1_000,
    }
    cases: list[tuple[Any, str]] = [
        (None, "configuration is required"),
        ("invalid", "configuration is required"),
        ({**wire, "extra": True}, 'unknown config key "extra"'),
        ({**wire, "targetWords": 0}, "targetWords must be a positive integer"),
        ({**wire, "targetWords": 1.5}, "targetWords must be a positive integer"),
        ({**wire, "provider": "only-provider"}, "provider and model must be supplied together"),
        ({**wire, "model": "only-model"}, "provider and model must be supplied together"),
        ({**wire, "provider": "", "model": "model"}, "overrides must be non-empty strings"),
        ({**wire, "provider": "provider", "model": ""}, "overrides must be non-empty strings"),
        ({**wire, "provider": 1, "model": "model"}, "overrides must be non-empty strings"),
        ({**wire, "provider": "provider", "model": 1}, "overrides must be non-empty strings"),
        ({**wire, "timeoutMs": MAX_TIMER_DELAY_MS + 1}, "timeoutMs must not exceed"),
    ]
    for value, message in cases:
        with pytest.raises(InvalidOptionError, match=f"session-title-llm: .*{message}"):
            SessionTitleLlmConfig.from_mapping(value)
    assert SessionTitleLlmConfig.from_mapping(wire) == LLM_CONFIG
    assert DEFAULT_SESSION_TITLE_LLM_CONFIG == SessionTitleLlmConfig(5, 10, 4096, 64, 60_000)


def test_rejects_an_absent_route_empty_selection_and_preaborted_caller_before_model_dispatch() -> None:
    async def main() -> None:
        store = SessionStore()
        model = ScriptedProvider([text_reply("unused")])
        routed = llm_request(store, "unrouted")
        unrouted = SessionTitleProviderRequest(routed.session, routed.messages, None, asyncio.Event())
        with pytest.raises(SessionTitleProviderError, match="no logged request route"):
            await generate_session_title_with_llm(model, LLM_CONFIG, unrouted, unrouted.messages, TITLE_PROVIDER)
        empty = llm_request(store, "empty")
        with pytest.raises(SessionTitleProviderError, match="at least one source message"):
            await generate_session_title_with_llm(model, LLM_CONFIG, empty, [], TITLE_PROVIDER)
        stopped = asyncio.Event()
        stopped.set()
        aborted = llm_request(store, "aborted", stopped)
        with pytest.raises(SessionTitleCancelledError):
            await generate_session_title_with_llm(model, LLM_CONFIG, aborted, aborted.messages, TITLE_PROVIDER)
        assert model.requests == []

    run(main)


@pytest.mark.parametrize(
    ("reply", "message", "code"),
    [
        (failure_reply("SERVER", "provider failed"), "provider failed", "SERVER"),
        ([failure_chunk({"message": "provider aborted", "code": ABORTED})], "provider aborted", "ABORTED"),
    ],
)
def test_preserves_error_and_aborted_terminal_failure_details(
    reply: list[StreamChunk], message: str, code: str
) -> None:
    async def main() -> None:
        request = llm_request(SessionStore(), "failed")
        with pytest.raises(LlmError, match=message) as caught:
            await generate_session_title_with_llm(
                ScriptedProvider([reply]), LLM_CONFIG, request, request.messages, TITLE_PROVIDER
            )
        assert caught.value.code == code
        assert any(e["type"] == SESSION_TITLE_LLM_REQUEST for e in request.session.events)

    run(main)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (text_reply("cut", finish="max-tokens"), "reached maxOutputTokens"),
        ([finish_chunk("tool-calls")], "unexpectedly requested a tool"),
        ([{"type": "finish", "reason": {"kind": "future-finish"}}], 'unsupported finish reason "future-finish"'),
    ],
)
def test_rejects_the_terminal_finish_reason(reply: list[StreamChunk], message: str) -> None:
    async def main() -> None:
        request = llm_request(SessionStore(), "finish")
        with pytest.raises(SessionTitleProviderError, match=message):
            await generate_session_title_with_llm(
                ScriptedProvider([reply]), LLM_CONFIG, request, request.messages, TITLE_PROVIDER
            )

    run(main)


def test_rejects_tool_call_blocks_and_a_successful_response_with_no_text() -> None:
    tool: list[StreamChunk] = [
        {"type": "block-start", "index": 0, "blockType": "tool-call"},
        {"type": "tool-call-delta", "index": 0, "id": "title-tool", "name": "unexpected", "argumentsDelta": "{}"},
        finish_chunk("stop"),
    ]
    reasoning: list[StreamChunk] = [
        {"type": "block-start", "index": 0, "blockType": "reasoning"},
        {"type": "reasoning-delta", "index": 0, "text": "no final title"},
        finish_chunk("stop"),
    ]

    async def main() -> None:
        request = llm_request(SessionStore(), "blocks")
        with pytest.raises(SessionTitleProviderError, match="output must contain text only"):
            await generate_session_title_with_llm(
                ScriptedProvider([tool]), LLM_CONFIG, request, request.messages, TITLE_PROVIDER
            )
        with pytest.raises(SessionTitleProviderError, match="produced no text"):
            await generate_session_title_with_llm(
                ScriptedProvider([reasoning]), LLM_CONFIG, request, request.messages, TITLE_PROVIDER
            )

    run(main)


class Stalling:
    """A model that never answers (``cooperative``: waits for its signal) or answers far too late."""

    def __init__(self, mode: str) -> None:
        self.name = "current-route"
        self.mode = mode

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        if self.mode == "cooperative":
            await asyncio.Event().wait()
        else:
            await asyncio.sleep(3600)
        for chunk in text_reply("too late"):
            yield chunk


@pytest.mark.parametrize("mode", ["cooperative", "late"])
def test_a_title_request_that_misses_its_deadline_fails_with_the_timeout_code(mode: str) -> None:
    """The original's two deadline cases: an endless stream, and a success that would come too late."""

    async def main() -> None:
        request = llm_request(SessionStore(), "deadline")
        config = SessionTitleLlmConfig(5, 10, 1_000, 32, 10)
        with pytest.raises(SessionTitleProviderError, match="timeoutMs 10") as caught:
            await generate_session_title_with_llm(Stalling(mode), config, request, request.messages, TITLE_PROVIDER)
        assert caught.value.code == SESSION_TITLE_TIMEOUT_CODE

    run(main)


# --- the model-written title end to end ---------------------------------------------------------------------


def test_a_first_prompt_model_title_is_logged_before_dispatch_and_accepted_with_its_route() -> None:
    async def main() -> None:
        store = SessionStore()
        model = ScriptedProvider([text_reply("Debugging the flaky login test")], name="main-route")
        titler = LlmSessionTitleProvider(model, DEFAULT_SESSION_TITLE_LLM_CONFIG)
        service = SessionTitleService(store, CONFIG, provider=titler)
        session = start(store, "model-title")
        first = prompt(session, "why does the login test fail sometimes")
        prompt(session, "second prompt is not sent by first-prompt")
        route(session)
        await service.settle()
        types = [e["type"] for e in session.events]
        assert types[-3:] == [SESSION_TITLE, SESSION_TITLE_LLM_REQUEST, SESSION_TITLE]
        logged = session.events[-2]["data"]
        assert logged["titleProvider"] == "session-title-first-prompt-llm" and logged["messageSeqs"] == [first.seq]
        assert logged["maxTokens"] == 64 and logged["route"] == {"provider": "main-route", "model": "chat-model"}
        assert model.requests[0].purpose == "session-title"
        snapshot = service.get(session)
        assert snapshot is not None
        assert snapshot["title"] == "Debugging the flaky login test"
        assert snapshot["source"] == {
            "kind": "provider",
            "provider": "session-title-first-prompt-llm",
            "model": {"provider": "main-route", "model": "chat-model"},
        }

    run(main)


def test_an_all_prompts_model_title_follows_the_real_agent_loop() -> None:
    """With the agent loop's own event order (step/start, prompt, request/header, chunks), each prompt's
    title request starts after the loop's request and titles every prompt so far."""
    from agentlog.agent.loop import Agent, AgentOptions
    from agentlog.kernel.invariants import SessionInvariants

    async def main() -> None:
        store = SessionStore()
        SessionInvariants(store).install()  # every turn/step relation is checked at its append
        titles_model = ScriptedProvider([text_reply("First title"), text_reply("Second title")], name="scripted")
        service = SessionTitleService(
            store, CONFIG, provider=LlmSessionTitleProvider(titles_model, automatic="all-prompts")
        )
        session = store.create("agent-title")
        chat = ScriptedProvider([text_reply("Hello."), text_reply("Again.")], name="scripted")
        agent = Agent(session, chat, AgentOptions(provider="scripted", model="chat-model"), store=store)
        agent.followup("say hello to the world")
        await agent.run()
        await service.settle()
        assert service.get(session)["title"] == "First title"  # type: ignore[index]
        agent.followup("and once more")
        await agent.run()
        await service.settle()
        snapshot = service.get(session)
        assert snapshot is not None and snapshot["title"] == "Second title"
        assert len(snapshot["messageSeqs"]) == 2
        assert [r.purpose for r in titles_model.requests] == ["session-title", "session-title"]
        assert (titles_model.requests[0].provider, titles_model.requests[0].model) == ("scripted", "chat-model")
        requests = [e for e in session.events if e["type"] == SESSION_TITLE_LLM_REQUEST]
        assert [r["data"]["messageSeqs"] for r in requests] == [snapshot["messageSeqs"][:1], snapshot["messageSeqs"]]
        headers = [e.seq for e in session.events if e["type"] == "request/header"]
        assert headers[0] < requests[0].seq  # the title request never runs ahead of the loop's request
        second_prompt = snapshot["messageSeqs"][1]
        first_chunk_after = min(
            e.seq for e in session.events if e["type"] == "assistant/chunk" and e.seq > second_prompt
        )
        assert first_chunk_after < requests[1].seq

    run(main)


def test_a_model_title_over_http_with_the_local_demo_server() -> None:
    """The real OpenAI-compatible client: a ``session-title`` request disables thinking on the wire."""
    from agentlog.llm.openai_compat import OpenAICompatibleProvider
    from agentlog.testing.demo_server import DemoModelServer, Reply

    async def main() -> None:
        with DemoModelServer([Reply(text="  HTTP   written title \n")]) as server:
            http = OpenAICompatibleProvider(
                base_url=server.base_url, api_key="test", model="demo-model", provider="main-route"
            )
            try:
                store = SessionStore()
                service = SessionTitleService(store, CONFIG, provider=LlmSessionTitleProvider(http))
                session = start(store, "http-title")
                prompt(session, "name this session over http")
                route(session)
                await service.settle()
            finally:
                await http.aclose()
            (recorded,) = server.requests
        assert service.get(session)["title"] == "HTTP written title"  # type: ignore[index]
        assert recorded.body["thinking"] == {"type": "disabled"}
        assert recorded.body["max_tokens"] == 64 or recorded.body.get("max_completion_tokens") == 64
        assert '"text":"name this session over http"' in recorded.body["messages"][-1]["content"]

    run(main)


def test_a_provider_may_answer_synchronously() -> None:
    """``generate`` returning a plain result (no coroutine) is accepted like an awaited one."""

    class Sync:
        id = "sync-provider"
        automatic: AutomaticMode = "first-prompt"

        def generate(self, request: SessionTitleProviderRequest) -> Any:
            return {"title": "Sync title", "messageSeqs": [request.messages[0].seq]}

    async def main() -> None:
        store = SessionStore()
        service = SessionTitleService(store, CONFIG, provider=Sync())
        session = start(store, "sync-provider")
        prompt(session, "answer at once")
        route(session)
        await service.settle()
        assert service.get(session)["source"] == {"kind": "provider", "provider": "sync-provider"}  # type: ignore[index]

    run(main)


# --- session-title-first-prompt-llm / session-title-all-prompts-llm: provider.spec.ts ---------------------


def test_first_prompt_llm_provider_rejects_an_impossible_empty_provider_request_at_its_own_boundary() -> None:
    async def main() -> None:
        titler = LlmSessionTitleProvider(ScriptedProvider([]), LLM_CONFIG)
        request = SessionTitleProviderRequest(Session.create("empty-first-provider"), (), None, asyncio.Event())
        with pytest.raises(SessionTitleProviderError, match="requires one human message"):
            await titler.generate(request)

    run(main)


def test_first_prompt_llm_provider_always_selects_only_the_first_eligible_message_including_refresh() -> None:
    async def main() -> None:
        store = SessionStore()
        model = ScriptedProvider([text_reply("First title"), text_reply("Refreshed title")], name="title-route")
        config = SessionTitleLlmConfig(5, 10, 1_000, 32, 1_000, "title-route", "title-model")
        service = SessionTitleService(store, CONFIG, provider=LlmSessionTitleProvider(model, config))
        session = start(store, "first-plugin")
        first = prompt(session, "first input")
        await service.settle()
        session.append(
            "request/header", {"header": {"config": {"provider": "main", "model": "main-model"}}, "reason": "initial"}
        )
        await service.settle()
        prompt(session, "second input must be ignored")
        await service.refresh(session)
        assert len(model.requests) == 2
        for sent in model.requests:
            text = sent.messages[0]["content"][0]["text"]
            assert "first input" in text and "second input must be ignored" not in text
            assert (sent.provider, sent.model) == ("title-route", "title-model")
        assert service.get(session)["messageSeqs"] == [first.seq]  # type: ignore[index]

    run(main)


def test_all_prompts_llm_provider_includes_seeded_history_and_the_latest_prompt_inheriting_the_logged_route() -> None:
    async def main() -> None:
        seeded = Session.create("seed-source")
        seeded.append("turn/start", {"turn": 1})
        inherited = prompt(seeded, "inherited prompt")
        seeded.append(
            SESSION_TITLE,
            {"title": "Inherited fallback", "messageSeqs": [inherited.seq], "source": {"kind": "fallback"}},
        )
        seeded.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
        store = SessionStore()
        model = ScriptedProvider([text_reply("All prompts title")], name="current-route")
        titler = LlmSessionTitleProvider(model, LLM_CONFIG, automatic="all-prompts")
        assert titler.id == "session-title-all-prompts-llm"
        service = SessionTitleService(store, CONFIG, provider=titler)
        session = store.create(
            "all-plugin", seed=seeded.events, meta={"parentSession": seeded.id, "seedLength": seeded.seq}
        )
        session.append("turn/start", {"turn": 2})
        latest = prompt(session, "latest prompt")
        await service.settle()
        session.append("request/header", {"header": {"config": dict(CURRENT)}, "reason": "resume"})
        await service.settle()
        (sent,) = model.requests
        assert (sent.provider, sent.model) == ("current-route", "current-model")
        text = sent.messages[0]["content"][0]["text"]
        assert "inherited prompt" in text and "latest prompt" in text
        assert service.get(session)["messageSeqs"] == [inherited.seq, latest.seq]  # type: ignore[index]

    run(main)


# --- property ------------------------------------------------------------------------------------------------


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("prompt"), st.text(max_size=30)),
        st.tuples(st.just("rename"), st.text(min_size=1, max_size=30)),
        st.tuples(st.just("refresh"), st.none()),
        st.tuples(st.just("route"), st.none()),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(_OPS, st.sampled_from([None, "first-prompt", "all-prompts"]))
def test_property_every_title_is_normalized_cited_and_a_rename_pins_until_refresh(
    ops: list[tuple[str, str | None]], mode: AutomaticMode | None
) -> None:
    """Random prompts, renames, refreshes and routes, with no provider or either cadence: every logged title
    is normalized within its budget and keeps the source invariant, and a rename stays the latest title
    until an explicit refresh."""
    config = SessionTitleConfig(3, 12, 20)

    async def main() -> None:
        store = SessionStore()
        provider = None
        if mode is not None:
            provider = Recorder(
                "prop",
                mode,
                lambda r: {
                    "title": f"p{len(r.messages)} " + r.messages[-1].text,
                    "messageSeqs": [m.seq for m in r.messages],
                },
            )
        service = SessionTitleService(store, config, provider=provider)
        session = start(store, "prop")
        pinned: str | None = None
        for op, text in ops:
            if op == "prompt":
                prompt(session, text or "")
            elif op == "rename":
                try:
                    pinned = service.rename(session, text or "")["title"]
                except SessionTitleInvalidError:
                    pass
            elif op == "refresh":
                await service.refresh(session)
                pinned = None if kind(service, session) != "user" else pinned
            else:
                route(session, "change")
            await service.settle()
            if pinned is not None:
                assert service.get(session)["title"] == pinned  # type: ignore[index]
        for event in titles(session):
            data = event["data"]
            assert title_event_problem(data) is None
            budget = config.fallback_max_bytes if data["source"]["kind"] == "fallback" else config.max_title_bytes
            assert data["title"] and normalize_session_title(data["title"], budget) == data["title"]
        await service.aclose()

    run(main)
