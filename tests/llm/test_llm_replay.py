"""ReplayProvider end to end: record a real agent run over HTTP, then replay it offline.

The recording is made the way a user makes one — the agent loop, the real ``openai`` client and the
scripted local model — and persisted through a JSONL store, so the replay starts from a stored log just
as ``agentlog replay`` would. The replays run the same loop with no server at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import agentlog as al
from agentlog.agent.builtin_tools import builtin_registry
from agentlog.agent.loop import Agent, AgentOptions, RetryPolicy, TurnOutcome
from agentlog.llm.openai_compat import OpenAICompatibleProvider
from agentlog.llm.replay import (
    MAX_SHOWN,
    ReplayExhaustedError,
    ReplayMismatchError,
    ReplayProvider,
    ReplayRecordingError,
    first_request_difference,
)
from agentlog.llm.types import GenerateRequest, Provider, StreamChunk
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.testing.demo_server import DemoModelServer, ErrorReply, Reply, ScriptItem
from agentlog.testing.demo_server import ToolCall as ScriptedCall

FAST_RETRY = RetryPolicy(initial_delay_ms=1, max_delay_ms=50)
SYSTEM = "You are terse."
PROMPTS = ["hi", "what is in notes.txt?", "and again?"]
SCRIPT: list[ScriptItem] = [
    Reply(text="Hello there."),  # turn 1: text
    Reply(text="Reading.", tool_calls=[ScriptedCall("read_file", {"path": "notes.txt"}, id="call-1")]),  # turn 2
    Reply(text="It says 42."),
    ErrorReply(429, "slow down", retry_after="0.01"),  # turn 3: rate limited once, then answered
    Reply(text="Still 42."),
]


@dataclass(frozen=True)
class Recording:
    cwd: Path
    store_root: Path
    session_id: str

    def events(self) -> Sequence[Any]:
        """The recorded log as stored on disk (a fresh read, like a later ``agentlog replay``)."""
        coordinator = PersistenceCoordinator(al.SessionStore(), JsonlBackend(str(self.store_root)))
        try:
            return coordinator.load(self.session_id).events
        finally:
            coordinator.close()


def _options(cwd: Path, **overrides: Any) -> AgentOptions:
    values: dict[str, Any] = {
        "provider": "deepseek",
        "model": "demo-model",
        "system": SYSTEM,
        "cwd": cwd,
        "retry": FAST_RETRY,
    }
    values.update(overrides)
    return AgentOptions(**values)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    cwd = tmp_path_factory.mktemp("cwd")
    (cwd / "notes.txt").write_text("the answer is 42\n")
    root = tmp_path_factory.mktemp("store")
    store = al.SessionStore()
    al.SessionInvariants(store).install()
    coordinator = PersistenceCoordinator(store, JsonlBackend(str(root)))

    async def main() -> list[TurnOutcome]:
        with DemoModelServer(SCRIPT) as server:
            async with OpenAICompatibleProvider(base_url=server.base_url, api_key="test", model="demo-model") as llm:
                session = store.create("recorded", meta={"cwd": str(cwd)})
                agent = Agent(session, llm, _options(cwd), tools=builtin_registry(), store=store)
                for prompt in PROMPTS:
                    agent.followup(prompt)
                outcomes = await agent.run()
                assert len(server.requests) == len(SCRIPT)
                store.flush(session)
                store.dispose(session)
                return outcomes

    try:
        outcomes = asyncio.run(main())
    finally:
        coordinator.close()
    assert [o.reason for o in outcomes] == [{"kind": "completed"}] * 3
    return Recording(cwd, root, "recorded")


def _replay(
    provider: ReplayProvider, cwd: Path, prompts: Sequence[str], **overrides: Any
) -> tuple[al.Session, list[TurnOutcome]]:
    """Run the agent loop against ``provider`` in a fresh session: no server, no API key."""
    store = al.SessionStore()
    al.SessionInvariants(store).install()

    async def main() -> tuple[al.Session, list[TurnOutcome]]:
        session = store.create("replayed", meta={"cwd": str(cwd)})
        agent = Agent(session, provider, _options(cwd, **overrides), tools=builtin_registry(), store=store)
        for prompt in prompts:
            agent.followup(prompt)
        return session, await agent.run()

    return asyncio.run(main())


def _without_ids(messages: Sequence[Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in message.items() if k != "id"} for message in messages]


def _chunks(events: Sequence[Any]) -> list[Any]:
    return [e["data"]["chunk"] for e in events if e["type"] == "assistant/chunk"]


def _restored(events: Sequence[Any]) -> al.Session:
    return al.Session.from_restore("copy", [al.thaw(e) for e in events], {"version": 0, "id": "copy", "createdAt": 0})


async def _drain(stream: Any) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


# --- splitting the recording ------------------------------------------------------------------------


def test_recording_splits_into_one_call_per_attempt(recording: Recording) -> None:
    provider = ReplayProvider(recording.events())
    as_provider: Provider = provider  # mypy checks the protocol here
    assert as_provider.name == "deepseek"
    calls = provider.calls
    assert [(c.number, c.turn, c.step) for c in calls] == [(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 3, 1), (5, 3, 1)]
    assert all(c.complete for c in calls)
    assert provider.name == "deepseek" and provider.remaining == 5 and provider.served == 0
    # the rate-limited attempt is a call of its own: a single error finish
    assert len(calls[3].chunks) == 1
    assert calls[3].chunks[0]["reason"]["failure"]["code"] == "RATE_LIMIT"
    # each call's request is the log as it was just before its first chunk
    second = calls[1].request
    assert second.system == SYSTEM and second.provider == "deepseek" and second.model == "demo-model"
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert [t["name"] for t in second.tools] == ["read_file", "list_dir", "write_file", "run_command"]
    assert calls[3].request.messages == calls[4].request.messages  # a retry resends the same request
    assert ReplayProvider(recording.events(), name="mine").name == "mine"


# --- a faithful replay -------------------------------------------------------------------------------


def test_replay_reproduces_the_recorded_run_without_a_server(recording: Recording) -> None:
    events = recording.events()
    provider = ReplayProvider(events)
    session, outcomes = _replay(provider, recording.cwd, PROMPTS)
    assert [o.reason for o in outcomes] == [{"kind": "completed"}] * 3
    assert provider.remaining == 0 and provider.served == 5
    recorded = _restored(events)
    assert _without_ids(session.derive_messages()) == _without_ids(recorded.derive_messages())
    assert _chunks(session.events) == _chunks(events)  # every chunk, including the 429's error finish
    retries = [e["data"] for e in session.events if e["type"] == "llm/retry"]
    assert [(r["retry"], r["failure"]["code"], r["delayMs"]) for r in retries] == [(1, "RATE_LIMIT", 10)]
    assert [e["type"] for e in session.events].count("llm/retry-started") == 1
    tool_results = [e for e in session.events if e["type"] == "tool/result"]
    assert "the answer is 42" in tool_results[0]["data"]["message"]["content"][0]["content"][0]["text"]


def test_replay_accepts_a_session_and_paces_at_high_speed(recording: Recording) -> None:
    recorded = _restored(recording.events())
    provider = ReplayProvider(recorded, pace=True, speed=1000.0)
    session, outcomes = _replay(provider, recording.cwd, PROMPTS)
    assert [o.reason for o in outcomes] == [{"kind": "completed"}] * 3
    assert provider.remaining == 0
    assert _without_ids(session.derive_messages()) == _without_ids(recorded.derive_messages())


# --- a diverging replay ------------------------------------------------------------------------------


def _turn_end_error(session: al.Session) -> Any:
    return [e for e in session.events if e["type"] == "turn/end"][-1]["data"]["reason"]


def test_a_changed_system_prompt_is_a_mismatch_naming_system(recording: Recording) -> None:
    provider = ReplayProvider(recording.events())
    session, outcomes = _replay(provider, recording.cwd, PROMPTS, system="You are verbose.")
    assert len(outcomes) == 1
    error = outcomes[0].error
    assert isinstance(error, ReplayMismatchError) and error.code == "REPLAY_MISMATCH"
    assert str(error) == 'call 1: system differs: recorded "You are terse." vs now "You are verbose."'
    assert (error.call, error.field, error.recorded, error.now) == (1, "system", SYSTEM, "You are verbose.")
    assert provider.served == 0  # a refused request consumes nothing
    assert _turn_end_error(session)["kind"] == "error"
    assert _turn_end_error(session)["error"]["code"] == "REPLAY_MISMATCH"  # the typed code reaches the log
    assert "call 1: system differs" in _turn_end_error(session)["error"]["message"]


def test_a_changed_prompt_is_a_mismatch_naming_the_message_path(recording: Recording) -> None:
    provider = ReplayProvider(recording.events())
    prompts = [PROMPTS[0], "what is in notes.md?", PROMPTS[2]]
    _, outcomes = _replay(provider, recording.cwd, prompts)
    assert [o.reason["kind"] for o in outcomes] == ["completed", "error"]
    error = outcomes[1].error
    assert isinstance(error, ReplayMismatchError)
    assert error.field == "messages[2].content[0].text"
    assert str(error) == (
        'call 2: messages[2].content[0].text differs: recorded "what is in notes.txt?" vs now "what is in notes.md?"'
    )
    assert provider.served == 1


def test_one_prompt_too_many_exhausts_the_recording(recording: Recording) -> None:
    provider = ReplayProvider(recording.events())
    _, outcomes = _replay(provider, recording.cwd, [*PROMPTS, "one more"])
    assert [o.reason["kind"] for o in outcomes] == ["completed"] * 3 + ["error"]
    error = outcomes[3].error
    assert isinstance(error, ReplayExhaustedError) and error.code == "REPLAY_EXHAUSTED"
    assert str(error) == "call 6: the recording has no more model calls (it recorded 5)"
    assert (error.call, error.recorded_calls) == (6, 5)


# --- the provider on its own ---------------------------------------------------------------------------


def test_stream_yields_the_recorded_chunks_and_checks_every_field(recording: Recording) -> None:
    provider = ReplayProvider(recording.events())
    first = provider.calls[0].request

    def mismatch(request: GenerateRequest) -> ReplayMismatchError:
        with pytest.raises(ReplayMismatchError) as caught:
            asyncio.run(_drain(provider.stream(request)))
        return caught.value

    assert mismatch(dataclasses.replace(first, provider="other")).field == "provider"
    assert mismatch(dataclasses.replace(first, model="other")).field == "model"
    assert mismatch(dataclasses.replace(first, reasoning_effort="high")).field == "reasoning_effort"
    error = mismatch(dataclasses.replace(first, temperature=0.5))
    assert str(error) == "call 1: temperature differs: recorded null vs now 0.5"
    assert mismatch(dataclasses.replace(first, max_tokens=10)).field == "max_tokens"
    assert mismatch(dataclasses.replace(first, stop=["\n"])).field == "stop"
    tools: list[Any] = [dict(t) for t in first.tools]
    tools[1] = {**tools[1], "description": "changed"}
    assert mismatch(dataclasses.replace(first, tools=tools)).field == "tools[1].description"
    assert mismatch(dataclasses.replace(first, tools=list(reversed(first.tools)))).field.startswith("tools[0].")
    extra = [*first.messages, al.user_message("extra")]
    error = mismatch(dataclasses.replace(first, messages=extra))
    assert error.field == "messages[1]" and str(error).startswith("call 1: messages[1] differs: recorded (absent) vs")
    assert provider.served == 0

    # message ids are ignored; session_id is not compared (the replay runs in another session)
    renamed: list[Any] = [{**m, "id": "another-id"} for m in first.messages]
    same = dataclasses.replace(first, messages=renamed, session_id="elsewhere")
    assert first_request_difference(first, same) is None
    chunks = asyncio.run(_drain(provider.stream(same)))
    assert chunks == list(provider.calls[0].chunks) and chunks[-1] == {"type": "finish", "reason": {"kind": "stop"}}
    assert provider.served == 1


def test_long_values_are_shown_around_the_first_difference() -> None:
    base = GenerateRequest(provider="p", model="m", messages=[], system="x" * 300 + " recorded ending")
    changed = dataclasses.replace(base, system="x" * 300 + " changed ending")
    found = first_request_difference(base, changed)
    assert found is not None and found[0] == "system"
    message = str(ReplayMismatchError(3, *found))
    recorded_part, now_part = message.removeprefix("call 3: system differs: recorded ").split(" vs now ")
    assert recorded_part.startswith("…") and "recorded ending" in recorded_part
    assert now_part.startswith("…") and "changed ending" in now_part
    assert len(recorded_part) <= MAX_SHOWN + 2 and len(now_part) <= MAX_SHOWN + 2


def _synthetic(chunk_times: Sequence[int], chunks: Sequence[Any], *, header: bool = True) -> al.Session:
    """A hand-built recording whose clock we choose (the session's injectable ``now``)."""
    now = [1_000]
    clock: Callable[[], int] = lambda: now[0]  # noqa: E731
    session = al.Session.create("synthetic", now=clock)
    if header:
        session.append("request/header", {"header": {"config": {"provider": "p", "model": "m"}}, "reason": "initial"})
    else:
        session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("user/message", al.user_message("hi"), {"surfaceOp": "append"})
    for at, chunk in zip(chunk_times, chunks, strict=True):
        now[0] = at
        session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": chunk})
    return session


TEXT_CHUNKS = [
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": "hello"},
    {"type": "finish", "reason": {"kind": "stop"}},
]


def test_pacing_sleeps_the_recorded_gaps_divided_by_speed() -> None:
    # gaps: 200 ms to the first chunk, then 200 ms, then 0 → 400 ms recorded, 100 ms at speed 4
    recording = _synthetic([1_200, 1_400, 1_400], TEXT_CHUNKS)
    provider = ReplayProvider(recording, pace=True, speed=4)
    assert provider.calls[0].gaps_ms == (200, 200, 0)
    started = time.monotonic()
    chunks = asyncio.run(_drain(provider.stream(provider.calls[0].request)))
    elapsed = time.monotonic() - started
    assert chunks == TEXT_CHUNKS
    assert 0.09 <= elapsed < 1.0
    unpaced = ReplayProvider(recording)
    started = time.monotonic()
    asyncio.run(_drain(unpaced.stream(unpaced.calls[0].request)))
    assert time.monotonic() - started < 0.09
    capped = ReplayProvider(recording, pace=True, speed=1, max_gap_s=0.01)  # 2 gaps of 200 ms → 10 ms each
    started = time.monotonic()
    asyncio.run(_drain(capped.stream(capped.calls[0].request)))
    assert time.monotonic() - started < 0.09
    with pytest.raises(ValueError, match="speed"):
        ReplayProvider(recording, pace=True, speed=0)
    with pytest.raises(ValueError, match="max_gap_s"):
        ReplayProvider(recording, max_gap_s=-1)


def test_a_set_signal_ends_the_stream_with_an_aborted_finish() -> None:
    provider = ReplayProvider(_synthetic([1_000, 1_000, 1_000], TEXT_CHUNKS))

    async def main() -> list[StreamChunk]:
        signal = asyncio.Event()
        signal.set()
        return await _drain(provider.stream(provider.calls[0].request, signal=signal))

    chunks = asyncio.run(main())
    assert len(chunks) == 1 and chunks[0]["type"] == "finish"
    assert chunks[0]["reason"]["kind"] == "aborted"


def test_an_unfinished_recorded_call_ends_with_stream_closed() -> None:
    provider = ReplayProvider(_synthetic([1_000, 1_000], TEXT_CHUNKS[:2]))
    assert not provider.calls[0].complete
    chunks = asyncio.run(_drain(provider.stream(provider.calls[0].request)))
    assert chunks[:2] == TEXT_CHUNKS[:2]
    assert chunks[2]["type"] == "finish" and chunks[2]["reason"]["kind"] == "error"
    assert chunks[2]["reason"]["failure"]["code"] == "STREAM_CLOSED"


def test_a_call_without_a_request_header_cannot_be_checked() -> None:
    provider = ReplayProvider(_synthetic([1_000, 1_000, 1_000], TEXT_CHUNKS, header=False))
    assert provider.name == "replay"
    request = GenerateRequest(provider="p", model="m", messages=[al.user_message("hi")])
    with pytest.raises(ReplayRecordingError, match="no request/header"):
        asyncio.run(_drain(provider.stream(request)))
