"""The compaction invariant companion (spec §5.3, §1.6; the original's compaction invariant spec files).

One test per case of ``packages/compaction/compaction/tests/invariant.spec.ts`` and
``packages/compaction/command-compact/tests/invariant.spec.ts``, on a real :class:`SessionStore` with
real appends; then the property that what the real engine, region transaction and pruner write always
passes these rules and the kernel's :class:`SessionInvariants` together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as event_note
from hypothesis import strategies as st

from agentlog.agent.loop import Agent, AgentOptions
from agentlog.agent.tools import FunctionTool, ToolContext, ToolOutcome, ToolRegistry
from agentlog.compaction import (
    CompactionEngine,
    CompactionInvariants,
    RegionOptions,
    SummarizationInput,
    SummaryResult,
    TokenMeter,
    ToolResultPruner,
    checkpoint_source,
    compact_surface_region,
    select_compactable_range,
)
from agentlog.compaction.invariants import (
    CompactionTrace,
    OpenCompaction,
    advance,
    inherited_orphan_start_seqs,
    replay,
)
from agentlog.errors import AgentlogError, InvariantError, SessionForkError
from agentlog.kernel.invariants import SessionInvariants
from agentlog.kernel.invariants import replay as kernel_replay
from agentlog.kernel.repair import interrupted_turn_closers
from agentlog.kernel.session import Session
from agentlog.kernel.store import SessionStore
from agentlog.llm.types import GenerateRequest, StreamChunk
from agentlog.testing import ScriptedProvider, failure_reply, text_reply, tool_call_reply
from agentlog.testing.builders import intent, user_msg

PACKAGE = "@deepseek-ai/dsh-compaction"
PREFIX = f'invariant violated by "{PACKAGE}": '

TEST_COMPACTION_ID = "test-compaction"
NEXT_COMPACTION_ID = "next-test-compaction"
TEST_COMMAND_ID = "test-command"
NEXT_COMMAND_ID = "next-test-command"


@pytest.fixture
def store() -> Iterator[SessionStore]:
    """A store with only the compaction companion installed (the original's ``setup()``)."""
    store = SessionStore()
    invariants = CompactionInvariants(store).install()
    yield store
    invariants.dispose()


def summary(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "compactionId": TEST_COMPACTION_ID,
        "summary": [{"type": "text", "text": "short"}],
        "shadowedRange": {"start": 2, "end": 4},
        "shadowedSeqs": [2, 3, 4],
        "shadowedTokenCount": 12,
        "provider": "mock",
        "model": "mock",
    }
    data.update(overrides)
    return data


def start_turn(session: Session, turn: int = 1) -> None:
    session.append("turn/start", {"turn": turn})


def end_turn(session: Session, turn: int = 1, kind: str = "completed") -> None:
    session.append("turn/end", {"turn": turn, "reason": {"kind": kind}})


def lifecycle(compaction_id: str = TEST_COMPACTION_ID, turn: int | None = 1, **extra: Any) -> dict[str, Any]:
    return {"compactionId": compaction_id, "turn": turn, **extra}


def checkpoint(compaction_id: str, source_command_id: str | None = None) -> dict[str, Any]:
    return user_msg("checkpoint", source=checkpoint_source(compaction_id, source_command_id))


def original_message(session: Session) -> int:
    """Append a plain user message the checkpoint tests replace; its seq."""
    return session.append("user/message", user_msg("original"), intent()).seq


def replace_intent(seq: int) -> dict[str, Any]:
    return intent({"op": "replace", "start": seq, "end": seq}, [seq])


def expect_violation(session: Session, pattern: str, action: Callable[[], Any]) -> InvariantError:
    """``action`` is vetoed with the companion's error matching ``pattern``, committing nothing."""
    before = list(session.events)
    nodes = list(session.surface.nodes)
    with pytest.raises(InvariantError) as excinfo:
        action()
    err = excinfo.value
    assert err.code == "INVARIANT"
    assert err.package_name == PACKAGE
    assert str(err).startswith(PREFIX)
    assert re.search(pattern, err.text), err.text
    assert list(session.events) == before
    assert list(session.surface.nodes) == nodes
    return err


def seeded(store: SessionStore, session_id: str, source: Session) -> Session:
    """A new session seeded with ``source``'s whole log (the replay the original's tests build)."""
    return store.create(session_id, seed=list(source.events))


def types_of(session: Session) -> list[str]:
    return [event["type"] for event in session.events]


# --- compaction/tests/invariant.spec.ts ----------------------------------------------------------------


def test_accepts_successful_and_failed_compaction_lifecycles(store: SessionStore) -> None:
    """A numbered bracket inside its turn: success (with a summary) and failure (with an error) both pass."""
    success = store.create()
    start_turn(success)
    success.append("compaction/start", lifecycle())
    success.append("compaction/summary", summary())
    success.append("compaction/end", lifecycle())

    failed = store.create()
    start_turn(failed, 2)
    failed.append("compaction/start", lifecycle(turn=2))
    failed.append("compaction/end", lifecycle(turn=2, error="provider failed"))
    assert types_of(failed)[-2:] == ["compaction/start", "compaction/end"]


def test_accepts_standalone_successful_and_failed_compaction_lifecycles_between_turns(store: SessionStore) -> None:
    """A ``null`` (manual) bracket needs no turn: success and failure pass between turns."""
    success = store.create()
    success.append("compaction/start", lifecycle(turn=None))
    success.append("compaction/summary", summary())
    success.append("compaction/end", lifecycle(turn=None))

    failed = store.create()
    failed.append("compaction/start", lifecycle(turn=None))
    failed.append("compaction/end", lifecycle(turn=None, error="provider failed"))
    assert types_of(success) == ["compaction/start", "compaction/summary", "compaction/end"]


def test_clears_an_inherited_open_compaction_trace_at_end_seed_during_replay() -> None:
    """A crashed bracket inherited through a seed is retired by the end-seed: a new attempt may start."""
    store = SessionStore()
    source = Session.create("stale-compaction-source")
    source.append("compaction/start", lifecycle(turn=None))
    replayed = seeded(store, "stale-compaction-replay", source)
    assert types_of(replayed) == ["compaction/start", "session/end-seed"]

    invariants = CompactionInvariants(store).install()
    assert invariants.trace(replayed) == CompactionTrace()
    replayed.append("compaction/start", lifecycle(NEXT_COMPACTION_ID, turn=None))
    replayed.append("compaction/end", lifecycle(NEXT_COMPACTION_ID, turn=None, error="new attempt failed"))
    invariants.dispose()


def test_allows_repair_turn_boundaries_after_end_seed_clears_a_seeded_numbered_orphan() -> None:
    """After the end-seed retired a numbered orphan, the turn it was in may be closed by a repair."""
    store = SessionStore()
    source = Session.create("stale-numbered-compaction-source")
    start_turn(source)
    source.append("compaction/start", lifecycle())
    replayed = seeded(store, "stale-numbered-compaction-replay", source)
    assert types_of(replayed) == ["turn/start", "compaction/start", "session/end-seed"]

    invariants = CompactionInvariants(store).install()
    end_turn(replayed, kind="interrupted")
    assert invariants.trace(replayed) == CompactionTrace(open_turn=None, compaction=None)
    invariants.dispose()


def test_accepts_inherited_repair_boundaries_before_the_end_seed_that_clears_a_standalone_orphan() -> None:
    """Repair boundaries a seed carries *before* the end-seed do not cross the orphan they outlived."""
    store = SessionStore()
    source = Session.create("stale-repaired-compaction-source")
    source.append("compaction/start", lifecycle(turn=None))
    start_turn(source)
    end_turn(source, kind="interrupted")
    replayed = seeded(store, "stale-repaired-compaction-replay", source)
    assert types_of(replayed) == ["compaction/start", "turn/start", "turn/end", "session/end-seed"]

    invariants = CompactionInvariants(store).install()
    start_turn(replayed, 2)
    end_turn(replayed, 2)
    assert invariants.trace(replayed) == CompactionTrace()
    invariants.dispose()


def test_rejects_a_closed_standalone_bracket_that_contains_a_turn_before_end_seed() -> None:
    """Only an orphan the end-seed retires is excused; a bracket closed around a turn is still refused.

    The refusal comes from ``install()`` itself (it replays every live session first) and installs nothing.
    """
    store = SessionStore()
    source = Session.create("closed-nested-compaction-source")
    source.append("compaction/start", lifecycle(turn=None))
    start_turn(source)
    end_turn(source, kind="interrupted")
    source.append("compaction/end", lifecycle(turn=None, error="failed after crossing turn"))
    replayed = seeded(store, "closed-nested-compaction-replay", source)
    assert types_of(replayed)[-1] == "session/end-seed"

    invariants = CompactionInvariants(store)
    with pytest.raises(InvariantError, match=r"turn/start cannot cross an open standalone compaction"):
        invariants.install()
    replayed.append("compaction/start", lifecycle(turn=5))  # nothing was installed: not checked
    assert invariants.trace(replayed) is None


def test_rebuilds_an_open_trace_when_the_companion_loads_after_the_session() -> None:
    """Installed after a bracket opened, the companion replays the log and knows the bracket is live."""
    store = SessionStore()
    session = store.create()
    start_turn(session)
    session.append("compaction/start", lifecycle())
    invariants = CompactionInvariants(store).install()
    trace = invariants.trace(session)
    assert trace is not None and trace.compaction is not None
    assert trace.compaction.compaction_id == TEST_COMPACTION_ID
    session.append("compaction/end", lifecycle(error="resume failed"))
    end_turn(session)
    invariants.dispose()


def test_adopts_a_bare_session_and_ignores_unrelated_committed_events() -> None:
    """A session the store never announced is traced from its first append; unrelated events change nothing."""
    store = SessionStore()
    invariants = CompactionInvariants(store).install()
    session = store.prepare("bare-compaction-session")
    store.enter(session)  # registered, never announced: the created hook did not see it
    assert invariants.trace(session) is None
    session.append("turn/start", {"turn": 1})
    adopted = invariants.trace(session)
    assert adopted == CompactionTrace(open_turn=1)
    session.append("step/start", {"turn": 1, "step": 1})
    assert invariants.trace(session) is adopted  # an unrelated event returns the identical trace
    session.append("compaction/start", lifecycle())
    # It really is checked: a second start in the live bracket is refused.
    expect_violation(
        session,
        r"^compaction/start while turn 1 is still compacting$",
        lambda: session.append("compaction/start", lifecycle(NEXT_COMPACTION_ID)),
    )
    invariants.dispose()


def test_rejects_compaction_outside_or_for_a_different_open_turn(store: SessionStore) -> None:
    session = store.create()
    expect_violation(
        session,
        r"^compaction/start for turn 1 appended outside any open turn$",
        lambda: session.append("compaction/start", lifecycle()),
    )
    start_turn(session)
    expect_violation(
        session,
        r"^compaction/start names turn 2 but open turn is 1$",
        lambda: session.append("compaction/start", lifecycle(turn=2)),
    )


def test_rejects_a_standalone_bracket_while_a_turn_is_open_and_a_numbered_bracket_between_turns(
    store: SessionStore,
) -> None:
    open_session = store.create()
    start_turn(open_session)
    expect_violation(
        open_session,
        r"^compaction/start is standalone but turn 1 is open$",
        lambda: open_session.append("compaction/start", lifecycle(turn=None)),
    )
    idle = store.create()
    expect_violation(idle, r"outside any open turn", lambda: idle.append("compaction/start", lifecycle()))


def test_attributes_a_nested_standalone_start_to_the_standalone_owner(store: SessionStore) -> None:
    session = store.create()
    session.append("compaction/start", lifecycle(turn=None))
    expect_violation(
        session,
        r"^compaction/start while standalone compaction is still compacting$",
        lambda: session.append("compaction/start", lifecycle(NEXT_COMPACTION_ID, turn=None)),
    )


def test_rejects_an_unenclosed_compaction_event_when_replaying_an_existing_session() -> None:
    """``install()`` replays existing logs: a numbered start after its turn closed is refused there."""
    store = SessionStore()
    session = store.create()
    start_turn(session)
    end_turn(session)
    session.append("compaction/start", lifecycle())
    with pytest.raises(InvariantError, match=r"outside any open turn"):
        CompactionInvariants(store).install()


def test_rejects_turn_boundaries_that_cross_live_standalone_or_numbered_compaction_brackets(
    store: SessionStore,
) -> None:
    standalone = store.create()
    standalone.append("compaction/start", lifecycle(turn=None))
    expect_violation(
        standalone, r"^turn/start cannot cross an open standalone compaction$", lambda: start_turn(standalone)
    )
    standalone.append("compaction/end", lifecycle(turn=None, error="cancelled"))
    start_turn(standalone)
    end_turn(standalone)

    numbered = store.create()
    start_turn(numbered)
    numbered.append("compaction/start", lifecycle())
    expect_violation(numbered, r"^turn/end cannot cross an open compaction for turn 1$", lambda: end_turn(numbered))
    numbered.append("compaction/end", lifecycle(error="cancelled"))
    end_turn(numbered)
    assert types_of(numbered)[-1] == "turn/end"


def test_rejects_a_replacement_checkpoint_for_another_compaction_transaction(store: SessionStore) -> None:
    session = store.create()
    original = original_message(session)
    start_turn(session)
    session.append("compaction/start", lifecycle())
    session.append("compaction/summary", summary())
    expect_violation(
        session,
        rf"^compaction checkpoint id {NEXT_COMPACTION_ID} does not match compaction/start id {TEST_COMPACTION_ID}$",
        lambda: session.append("user/message", checkpoint(NEXT_COMPACTION_ID), replace_intent(original)),
    )
    # The checkpoint naming the open transaction is the accepted one.
    session.append("user/message", checkpoint(TEST_COMPACTION_ID), replace_intent(original))
    session.append("compaction/end", lifecycle())


def test_requires_checkpoint_provenance_to_name_an_open_transaction(store: SessionStore) -> None:
    without_start = store.create()
    original = original_message(without_start)
    expect_violation(
        without_start,
        r"^compaction checkpoint has no matching compaction/start$",
        lambda: without_start.append("user/message", checkpoint(TEST_COMPACTION_ID), replace_intent(original)),
    )

    empty_command = store.create()
    replaced = original_message(empty_command)
    start_turn(empty_command)
    empty_command.append("compaction/start", lifecycle())
    expect_violation(
        empty_command,
        r"^compaction checkpoint sourceCommandId must be a non-empty string$",
        lambda: empty_command.append("user/message", checkpoint(TEST_COMPACTION_ID, ""), replace_intent(replaced)),
    )


def _start(**extra: Any) -> Callable[[Session], None]:
    def run(session: Session) -> None:
        session.append("compaction/start", lifecycle(**extra))

    return run


def _steps(*steps: tuple[str, dict[str, Any]]) -> Callable[[Session], None]:
    def run(session: Session) -> None:
        for event_type, data in steps:
            session.append(event_type, data)

    return run


_START = ("compaction/start", lifecycle())
_START_WITH_COMMAND = ("compaction/start", lifecycle(sourceCommandId=TEST_COMMAND_ID))

REJECTED: list[tuple[str, Callable[[Session], None], str]] = [
    ("empty start id", _start(compaction_id=""), r"^compaction/start compactionId must be a non-empty string$"),
    (
        "empty start source command id",
        _start(sourceCommandId=""),
        r"^compaction/start sourceCommandId must be a non-empty string$",
    ),
    ("summary without start", _steps(("compaction/summary", summary())), r"^compaction/summary has no matching"),
    (
        "nested start",
        _steps(_START, ("compaction/start", lifecycle(NEXT_COMPACTION_ID, turn=2))),
        r"^compaction/start while turn 1 is still compacting$",
    ),
    (
        "repeated summary",
        _steps(_START, ("compaction/summary", summary()), ("compaction/summary", summary())),
        r"^compaction/summary repeated within one compaction$",
    ),
    (
        "summary for another compaction",
        _steps(_START, ("compaction/summary", summary(compactionId=NEXT_COMPACTION_ID))),
        rf"^compaction/summary id {NEXT_COMPACTION_ID} does not match compaction/start id {TEST_COMPACTION_ID}$",
    ),
    (
        "summary for another source command",
        _steps(_START_WITH_COMMAND, ("compaction/summary", summary(sourceCommandId=NEXT_COMMAND_ID))),
        rf"^compaction/summary sourceCommandId {NEXT_COMMAND_ID} does not match compaction/start sourceCommandId "
        rf"{TEST_COMMAND_ID}$",
    ),
    (
        "empty shadow set",
        _steps(_START, ("compaction/summary", summary(shadowedSeqs=[]))),
        r"^compaction/summary shadowedSeqs must be non-empty$",
    ),
    (
        "wrong endpoints",
        _steps(_START, ("compaction/summary", summary(shadowedRange={"start": 1, "end": 4}))),
        r"^compaction/summary shadowedRange must match the first and last shadowedSeqs$",
    ),
    (
        "invalid token count",
        _steps(_START, ("compaction/summary", summary(shadowedTokenCount=-1))),
        r"^compaction/summary shadowedTokenCount must be a non-negative safe integer$",
    ),
    (
        "end without start",
        _steps(("compaction/end", lifecycle(error="failed"))),
        r"^compaction/end has no matching compaction/start$",
    ),
    (
        "wrong end turn",
        _steps(_START, ("compaction/end", lifecycle(turn=2, error="failed"))),
        r"^compaction/end owner 2 does not match compaction/start owner 1$",
    ),
    (
        "end for another compaction",
        _steps(_START, ("compaction/end", lifecycle(NEXT_COMPACTION_ID, error="failed"))),
        rf"^compaction/end id {NEXT_COMPACTION_ID} does not match compaction/start id {TEST_COMPACTION_ID}$",
    ),
    (
        "end missing the source command",
        _steps(_START_WITH_COMMAND, ("compaction/end", lifecycle(error="failed"))),
        rf"^compaction/end sourceCommandId undefined does not match compaction/start sourceCommandId "
        rf"{TEST_COMMAND_ID}$",
    ),
    (
        "empty end source command id",
        _steps(_START_WITH_COMMAND, ("compaction/end", lifecycle(sourceCommandId="", error="failed"))),
        r"^compaction/end sourceCommandId must be a non-empty string$",
    ),
    (
        "success without summary",
        _steps(_START, ("compaction/end", lifecycle())),
        r"^successful compaction/end requires one compaction/summary$",
    ),
]


@pytest.mark.parametrize(("action", "pattern"), [(a, p) for _, a, p in REJECTED], ids=[n for n, _, _ in REJECTED])
def test_rejects(store: SessionStore, action: Callable[[Session], None], pattern: str) -> None:
    """Each malformed bracket is vetoed at the append that breaks it, with the original's text."""
    session = store.create()
    start_turn(session)
    with pytest.raises(InvariantError) as excinfo:
        action(session)
    err = excinfo.value
    assert err.package_name == PACKAGE
    assert re.search(pattern, err.text), err.text
    assert str(err) == PREFIX + err.text


# --- the pure trace ---------------------------------------------------------------------------------


def test_advance_is_pure_and_returns_the_identical_trace_for_events_no_rule_concerns() -> None:
    """``advance`` folds plain event mappings without a store; an unrelated event returns ``trace`` itself."""
    empty = CompactionTrace()
    in_turn = advance(empty, {"type": "turn/start", "seq": 0, "data": {"turn": 1}})
    assert in_turn == CompactionTrace(open_turn=1) and empty == CompactionTrace()
    assert advance(in_turn, {"type": "step/start", "seq": 1, "data": {"turn": 1, "step": 1}}) is in_turn
    opened = advance(in_turn, {"type": "compaction/start", "seq": 2, "data": lifecycle(sourceCommandId="c")})
    assert opened.compaction == OpenCompaction(TEST_COMPACTION_ID, "c", 2, 1)
    with pytest.raises(InvariantError, match=r"turn/end cannot cross an open compaction for turn 1"):
        advance(opened, {"type": "turn/end", "seq": 3, "data": {"turn": 1, "reason": {"kind": "completed"}}})
    # replay excuses only the orphan an end-seed retires.
    log = [
        {"type": "turn/start", "seq": 0, "data": {"turn": 1}},
        {"type": "compaction/start", "seq": 1, "data": lifecycle()},
        {"type": "turn/end", "seq": 2, "data": {"turn": 1, "reason": {"kind": "interrupted"}}},
    ]
    with pytest.raises(InvariantError, match=r"turn/end cannot cross"):
        replay(log)
    assert replay([*log, {"type": "session/end-seed", "seq": 3, "data": {}}]) == CompactionTrace()


def test_dispose_stops_checking_and_install_is_idempotent() -> None:
    store = SessionStore()
    invariants = CompactionInvariants(store)
    assert invariants.install() is invariants and invariants.install() is invariants
    session = store.create()
    expect_violation(session, r"outside any open turn", lambda: session.append("compaction/start", lifecycle()))
    invariants.dispose()
    session.append("compaction/start", lifecycle())  # unchecked once disposed
    assert types_of(session) == ["compaction/start"]


# --- what the real engine writes ---------------------------------------------------------------------

MODEL = "invariant-model"


class WindowedProvider(ScriptedProvider):
    """The scripted model with a context window; past the script it answers ``done`` (never runs dry)."""

    def __init__(self, script: Sequence[Sequence[StreamChunk]], window: int) -> None:
        super().__init__(script, name=MODEL)
        self.window = window

    def context_window_for(self, model: str) -> int | None:
        return self.window

    async def stream(
        self, request: GenerateRequest, *, signal: asyncio.Event | None = None
    ) -> AsyncIterator[StreamChunk]:
        if len(self.requests) >= len(self.script):
            self.script.append(text_reply("done"))
        async for chunk in super().stream(request, signal=signal):
            yield chunk


@dataclass
class PlannedSummarizer:
    """Answers per call as planned (``ok`` past the plan): ``ok``; ``fail`` (raises); ``big`` (not smaller);
    ``crash`` (the log is snapshotted as a kill -9 would leave it, then the call succeeds); ``cancel`` /
    ``cancel-fail`` (the agent is cancelled meanwhile, then the call succeeds / raises); ``steer`` (input
    arrives meanwhile). ``actions`` runs the side effect named by the outcome."""

    plan: list[str] = field(default_factory=list)
    actions: dict[str, Callable[[], None]] = field(default_factory=dict)

    async def summarize(self, input: SummarizationInput) -> SummaryResult:
        outcome = self.plan.pop(0) if self.plan else "ok"
        action = self.actions.get(outcome.removesuffix("-fail"))
        if action is not None:
            action()
        await asyncio.sleep(0)
        if outcome.endswith("fail"):
            raise RuntimeError("planned summarizer failure")
        text = "x " * 5_000 if outcome == "big" else "short summary"
        return SummaryResult(summary=[{"type": "text", "text": text}], provider="summary", model="summary")


async def _echo(args: Any, ctx: ToolContext) -> ToolOutcome:
    return ToolOutcome(content=({"type": "text", "text": "r" * int(args["size"])},))


ECHO = FunctionTool(
    name="echo",
    description="returns size characters",
    parameters={"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
    body=_echo,
    execution="parallel",
)


def checked_store() -> tuple[SessionStore, SessionInvariants, CompactionInvariants]:
    """A store under both companions at once (the kernel's first, as an app would install them)."""
    store = SessionStore()
    return store, SessionInvariants(store).install(), CompactionInvariants(store).install()


def make_agent(
    session: Session, engine: CompactionEngine, script: Sequence[Sequence[StreamChunk]], window: int
) -> Agent:
    provider = WindowedProvider(script, window)
    options = AgentOptions(provider=MODEL, model=MODEL, context_window=window)
    return Agent(session, provider, options, tools=ToolRegistry([ECHO]), durable=False, compaction=engine)


def invariant_errors(err: BaseException | None) -> list[InvariantError]:
    """Every :class:`InvariantError` in ``err``'s cause/context chain (the engine wraps some failures)."""
    found: list[InvariantError] = []
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, InvariantError):
            found.append(err)
        err = err.__cause__ or err.__context__
    return found


def test_command_compact__the_manual_command_adds_no_invariant_of_its_own() -> None:
    """The original's command companion is empty: ``compact_now`` with a command id writes one standalone
    bracket whose every event carries that id, and both companions accept it as it is."""
    store, kernel, companion = checked_store()
    engine = CompactionEngine(summarizer=PlannedSummarizer(), pruner=None)
    session = store.create()
    agent = make_agent(session, engine, [text_reply("answer " * 200)] * 3, 100_000)
    for prompt in ("first question " * 100, "second question " * 100, "third"):
        agent.followup(prompt)
    outcomes = asyncio.run(agent.run())
    assert [o.reason["kind"] for o in outcomes] == ["completed"] * 3
    result = asyncio.run(engine.compact_now(agent, source_command_id=TEST_COMMAND_ID))
    assert result is not None
    bracket = session.events.to_list()[result.start_seq :]
    assert [e["type"] for e in bracket] == ["compaction/start", "compaction/summary", "user/message", "compaction/end"]
    assert bracket[0]["data"]["turn"] is None
    assert {e["data"].get("sourceCommandId") for e in bracket[::3]} == {TEST_COMMAND_ID}
    assert bracket[1]["data"]["sourceCommandId"] == TEST_COMMAND_ID
    assert bracket[2]["data"]["source"]["sourceCommandId"] == TEST_COMMAND_ID
    assert companion.trace(session) == CompactionTrace()
    kernel_replay(session.events)  # and the kernel's rules hold over the whole log
    kernel.dispose()
    companion.dispose()


_STEP = st.lists(st.integers(min_value=0, max_value=1_500), min_size=1, max_size=3)
_TURN = st.fixed_dictionaries(
    {
        "prompt": st.integers(min_value=1, max_value=800),
        "steps": st.lists(_STEP, max_size=3),
        "overflow": st.booleans(),
        "manual_before": st.booleans(),
        "extra": st.sampled_from([None, "prune", "region", "region-span"]),
        "summaries": st.lists(
            st.sampled_from(["ok", "fail", "big", "crash", "cancel", "cancel-fail", "steer"]), max_size=3
        ),
    }
)


def _script(turn: dict[str, Any], number: int) -> list[list[StreamChunk]]:
    replies: list[list[StreamChunk]] = []
    if turn["overflow"]:
        replies.append(failure_reply("CONTEXT_WINDOW_EXCEEDED", "maximum context length exceeded"))
    for index, sizes in enumerate(turn["steps"]):
        calls = [(f"t{number}-s{index}-c{n}", "echo", json.dumps({"size": size})) for n, size in enumerate(sizes)]
        replies.append(tool_call_reply(*calls, text=f"calling {index} " * 20))
    replies.append(text_reply(f"answer {number} " * 40))
    return replies


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(_TURN, min_size=1, max_size=5),
    window=st.sampled_from([400, 1_200, 4_000]),
    fork_at=st.floats(min_value=0, max_value=1),
)
def test_property_engine_region_and_pruner_output_passes_both_companions(
    turns: list[dict[str, Any]], window: int, fork_at: float
) -> None:
    """Random sessions (parallel tool calls, large results, overflow answers, manual compactions between
    turns, extra prunes and region compactions inside turns; failing, not-smaller and crashing summaries,
    cancellation and steering during a summary; resumes from a crash snapshot; a fork that continues): no
    append the engine, the region transaction or the pruner makes is ever vetoed by the kernel's or the
    compaction companion, and every log replays clean under both."""
    store, kernel, companion = checked_store()
    meter = TokenMeter()
    summarizer = PlannedSummarizer()
    engine = CompactionEngine(
        meter=meter,
        pruner=ToolResultPruner(threshold_chars=300, head_chars=100, tail_chars=50, meter=meter),
        summarizer=summarizer,
        config={"maxTokens": 64},
    )
    session = store.create()
    crash: list[list[Any]] = []

    def snapshot() -> None:
        crash.append(list(session.events))  # the current session (rebound after a resume)

    def steer() -> None:
        agent.steer("steering during summarization")

    summarizer.actions = {
        "crash": snapshot,
        "cancel": lambda: agent.cancel(),
        "steer": steer,
    }
    errors: list[InvariantError] = []
    agent = make_agent(session, engine, [], window)

    async def extra_step(agent: Agent, turn: int, step: int, kind: str) -> None:
        if step != 1:
            return
        try:
            if kind == "prune":
                ToolResultPruner(threshold_chars=200, head_chars=50, tail_chars=20, meter=meter).prune_session(
                    agent.session
                )
                return
            span = select_compactable_range(agent.session, meter.measure(agent.session), 50)
            if span is not None:
                options = RegionOptions(stability="selected-span" if kind == "region-span" else "whole-surface")
                await compact_surface_region(
                    agent.session, span.start, span.end, meter=meter, summarize=summarizer.summarize, options=options
                )
        except InvariantError as err:
            errors.append(err)
        except AgentlogError:
            pass  # a refused range or a failed summary is the transaction's business, not a violation
        except RuntimeError:
            pass  # the planned summarizer failure (closed by compaction/end {error})

    async def main() -> None:
        nonlocal agent, session
        for number, turn in enumerate(turns, start=1):
            summarizer.plan = list(turn["summaries"])
            if turn["manual_before"] and len(session.derive_messages()):
                try:
                    await engine.compact_now(agent)
                except AgentlogError as err:
                    errors.extend(invariant_errors(err))
            agent.provider.script.extend(_script(turn, number))  # type: ignore[attr-defined]
            hooks = list(agent.pre_step_hooks)
            if turn["extra"] is not None:
                kind = turn["extra"]

                async def hook(a: Agent, t: int, s: int, kind: str = kind) -> None:
                    await extra_step(a, t, s, kind)

                agent.pre_step_hooks.insert(0, hook)
            agent.followup("question " * turn["prompt"])
            for outcome in await agent.run():
                errors.extend(invariant_errors(outcome.error))
            agent.pre_step_hooks[:] = hooks
            if crash:  # kill -9 during that summarization: resume from the log it left
                snapshot = crash.pop(0)
                crash.clear()
                seed = [*snapshot, *interrupted_turn_closers(snapshot)]
                session = store.create(seed=seed)
                agent = make_agent(session, engine, [], window)
        # A fork at any boundary outside a turn (perhaps inside a manual bracket) continues cleanly too.
        boundaries = [e.seq for e in session.events if fork_at <= e.seq / max(len(session.events), 1)]
        if fork_at < 0.25:  # right after a manual bracket opened: the child inherits an orphan start
            boundaries = [
                e.seq for e in session.events if e["type"] == "compaction/start" and e["data"]["turn"] is None
            ][-1:] or boundaries
        try:
            child = store.fork(session, boundaries[0] if boundaries else None)
        except SessionForkError:
            return  # the boundary is inside a turn: no fork
        session = child
        agent = make_agent(child, engine, [text_reply("forked answer " * 40)], window)
        agent.followup("after the fork " * 50)
        for outcome in await agent.run():
            errors.extend(invariant_errors(outcome.error))
        try:
            await engine.compact_now(agent)
        except AgentlogError as err:
            errors.extend(invariant_errors(err))

    with _capture_warnings() as warnings:
        asyncio.run(main())
    vetoes = [text for text in warnings if "invariant violated" in text]
    assert not errors and not vetoes, (errors, vetoes)
    for live in store.list():
        kernel_replay(live.events)
        assert replay(live.events).compaction is None  # every bracket closed or retired
        _note_coverage(live)
    kernel.dispose()
    companion.dispose()


def _note_coverage(session: Session) -> None:
    """Hypothesis statistics (``--hypothesis-show-statistics``): which kinds of output the examples reached."""
    if inherited_orphan_start_seqs(session.events):
        event_note("end-seed retired an orphan bracket")
    for event in session.events:
        etype, data = event["type"], event["data"]
        if etype == "compaction/start":
            event_note("standalone bracket" if data["turn"] is None else "numbered bracket")
        elif etype == "compaction/end":
            event_note("failed bracket" if "error" in data else "committed bracket")
        elif etype == "compaction/prune":
            event_note("pruned result")
        elif etype == "session/end-seed":
            event_note("forked" if "parentSession" in session.header else "resumed after a crash")


@contextlib.contextmanager
def _capture_warnings() -> Iterator[list[str]]:
    """The ``agentlog`` warnings logged meanwhile (the loop's hooks log a failed compaction and go on)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("agentlog")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
