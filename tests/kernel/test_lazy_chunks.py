"""Lazy chunk runs at cold load (issue 14): a compact restore is observably the eager one.

A cold load keeps packed chunk runs as :class:`~agentlog.kernel.chunkrows.ChunkRun` items and builds
their ``assistant/chunk`` events only when something reads them. These tests compare, for random
sessions with chunk runs of every shape (text, reasoning, tool-call deltas with and without a name,
unpackable chunks in between, interleaved block indexes, turn/step changes, runs split across flushes,
i.e. across frames and batches), the coordinator's compact restore against

* the eager restore of the same stored log (``load_stored`` without compaction + ``Session.from_restore``),
* the live session that wrote it (built by appending the same events),

on every derived view (messages, surface, request header and context, ``at(seq)`` for every seq) and on
the events themselves (equal, same ``json_bytes``). Damaged rows must fail the load exactly as before.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import AgentlogError, InvariantError
from agentlog.kernel.chunkrows import ChunkRun, compact_chunk_runs, expand_items
from agentlog.kernel.events import Event
from agentlog.kernel.invariants import replay
from agentlog.kernel.messages import (
    assistant_message,
    reasoning_delta,
    text_block,
    text_delta,
    tool_call_block,
    tool_call_delta,
    tool_result_message,
    user_message,
)
from agentlog.kernel.session import LazyLog, Session
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend
from agentlog.persistence.sqlite.backend import SqliteBackend
from agentlog.query.documents import build_documents, build_event_records

SID = "lazy"
BACKENDS = ("jsonl-zstd", "jsonl-none", "sqlite")
HEADER = {
    "config": {"provider": "p", "model": "m"},
    "system": "be brief",
    "tools": [],
}


def make_backend(kind: str, root: str) -> Any:
    if kind == "sqlite":
        return SqliteBackend(os.path.join(root, "s.sqlite3"))
    return JsonlBackend(root, compression="zstd" if kind == "jsonl-zstd" else "none")


@contextmanager
def store_root() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="agentlog-lazy-") as root:
        yield root


# --- random sessions --------------------------------------------------------------------------------

texts = st.text(alphabet="ab é\n\"\\{}", max_size=6)
numbers = st.sampled_from([0, 1, 2])
chunk_shapes = st.one_of(
    st.builds(lambda i, t: text_delta(i, t), numbers, texts),
    st.builds(lambda i, t: reasoning_delta(i, t), numbers, texts),
    st.builds(lambda i, c, t: tool_call_delta(i, c, t), numbers, st.sampled_from(["c1", "c2"]), texts),
    st.builds(lambda i, c, t: tool_call_delta(i, c, t, name="read"), numbers, st.sampled_from(["c1", "c2"]), texts),
    st.builds(lambda i: {"type": "block-start", "index": i, "kind": "text"}, numbers),
    st.just({"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 4}}),
    st.just({"type": "finish", "reason": "stop"}),
)


@st.composite
def runs(draw: Any) -> list[dict[str, Any]]:
    """A stretch of chunks: mostly long runs of one shape (packable), sometimes a mixture."""
    shape = draw(chunk_shapes)
    count = draw(st.integers(min_value=0, max_value=12))
    out = []
    for _ in range(count):
        chunk = dict(shape)
        for key in ("text", "argumentsDelta"):
            if key in chunk:
                chunk[key] = draw(texts)
        out.append(chunk)
    if draw(st.booleans()):
        out.insert(draw(st.integers(0, len(out))), draw(chunk_shapes))
    return out


@st.composite
def sessions(draw: Any) -> dict[str, Any]:
    """A script: per turn, steps of chunk stretches, messages, flush points; maybe an open last turn."""
    turns = []
    for turn in range(1, draw(st.integers(1, 3)) + 1):
        steps = []
        for _step in range(draw(st.integers(1, 3))):
            stretches = draw(st.lists(runs(), min_size=1, max_size=3))
            steps.append(
                {
                    "stretches": stretches,
                    "message": draw(st.booleans()),
                    "tool": draw(st.booleans()),
                    "flush": draw(st.lists(st.integers(0, 40), max_size=3)),
                }
            )
        turns.append({"turn": turn, "steps": steps, "header": turn == 1 and draw(st.booleans())})
    gaps = draw(st.lists(st.sampled_from([0, 1, 7, -3, 1000, 2**40]), min_size=1, max_size=5))
    return {"turns": turns, "open": draw(st.sampled_from([None, "chunks", "step"])), "gaps": gaps}


def write(kind: str, root: str, script: dict[str, Any], backend: Any = None) -> list[Event]:
    """Append the script through a live, persisted session; return the live session's events.

    ``backend``: the backend to persist through instead of ``kind``'s default one (another layout)."""
    ticks = itertools.cycle(script["gaps"])
    clock = {"now": 1_700_000_000_000}

    def now() -> int:
        clock["now"] += next(ticks)
        return clock["now"]

    store = al.SessionStore(now=now)
    coordinator = PersistenceCoordinator(store, make_backend(kind, root) if backend is None else backend)
    session = store.create(SID, meta={"cwd": "/lazy"})
    append = session.append
    appended = 0

    def maybe_flush(points: list[int]) -> None:
        if appended in points or (appended % 17) in points:
            store.flush(session)

    turns = script["turns"]
    for number, turn in enumerate(turns):
        last = number == len(turns) - 1
        t = turn["turn"]
        append("turn/start", {"turn": t})
        append("user/message", user_message(f"q{t}", id=f"u{t}"), {"surfaceOp": "append"})
        if turn["header"]:
            append("request/header", {"header": HEADER, "reason": "initial"})
            append("request/context", {"cwd": "/lazy", "turn": t})
        for s, step in enumerate(turn["steps"], start=1):
            append("step/start", {"turn": t, "step": s})
            seqs = []
            for stretch in step["stretches"]:
                for chunk in stretch:
                    seqs.append(session.seq)
                    append("assistant/chunk", {"turn": t, "step": s, "chunk": chunk})
                    appended += 1
                    maybe_flush(step["flush"])
            if last and script["open"] == "chunks" and s == len(turn["steps"]):
                break
            blocks: list[Any] = [text_block(f"a{t}.{s}")]
            call = f"call{t}.{s}"
            if step["tool"]:
                blocks.append(tool_call_block(call, "read", "{}"))
            if step["message"] or step["tool"]:
                intent: dict[str, Any] = {"surfaceOp": "append"}
                if seqs:
                    intent["sourceEventSeqs"] = seqs
                message = assistant_message(blocks, provider="p", model="m", id=f"a{t}.{s}")
                append("assistant/message", {"turn": t, "step": s, "message": message}, intent)
            if step["tool"]:
                append("tool/call", {"turn": t, "step": s, "callId": call, "name": "read", "arguments": "{}"})
                if not (last and script["open"] == "step"):
                    result = tool_result_message(call, f"r{t}.{s}", id=f"t{t}.{s}")
                    append("tool/result", {"turn": t, "step": s, "message": result}, {"surfaceOp": "append"})
            if last and script["open"] == "step" and s == len(turn["steps"]):
                break
            append("step/end", {"turn": t, "step": s})
        else:
            if not (last and script["open"]):
                append("turn/end", {"turn": t, "reason": {"kind": "completed"}})
    store.flush(session)
    events = list(session.events)
    coordinator.close()
    return events


# --- comparisons ------------------------------------------------------------------------------------


def eager_session(kind: str, root: str) -> Session:
    """The pre-issue-14 restore: every stored event expanded and frozen at load."""
    stored = make_backend(kind, root).load_stored(SID)
    assert stored is not None
    assert not any(isinstance(item, ChunkRun) for item in stored.events)
    return Session.from_restore(SID, list(stored.events), dict(stored.meta))


def view_state(view: Any) -> tuple[Any, ...]:
    return (
        list(view.derive_messages()),
        list(view.surface.nodes),
        view.request_header(),
        view.request_context(),
    )


def holds_runs(session: Session) -> bool:
    return any(item.__class__ is ChunkRun for item in session._log)


def assert_same_session(lazy: Session, eager: Session, live: list[Event]) -> None:
    assert len(lazy) == len(eager)
    compact = holds_runs(lazy)
    if compact:
        assert isinstance(lazy._log, LazyLog)
    # Derived state first: none of it may need a chunk event.
    assert view_state(lazy) == view_state(eager)
    for seq in range(len(eager) - 1):
        assert view_state(lazy.at(seq)) == view_state(eager.at(seq)), seq
    assert holds_runs(lazy) == compact  # nothing above materialised a run
    # Random access, then iteration and whole-list reads: the same frozen events, byte for byte (but
    # the end-seed marker each restore appends, stamped by its own clock).
    assert lazy.events[-1]["type"] == eager.events[-1]["type"] == "session/end-seed"
    n = len(eager) - 1
    for seq in range(n - 1, -1, -1):
        mine, theirs = lazy.events[seq], eager.events[seq]
        assert type(mine) is Event
        assert mine == theirs
        assert mine.json_bytes == theirs.json_bytes
        assert lazy.events[seq] is mine  # stable identity once built
    assert list(lazy.events)[:n] == list(eager.events)[:n]
    assert lazy.events.to_list()[:n] == eager.events.to_list()[:n]
    assert lazy.events[:n] == eager.events[:n]
    assert [e.json_bytes for e in lazy.events][:n] == [e.json_bytes for e in eager.events][:n]
    for seq in range(0, n, 5):
        assert list(lazy.at(seq).events) == list(eager.at(seq).events)
    # The live session that wrote the log saw the very same events (the restore may add closers).
    assert [e.json_bytes for e in lazy.events[: len(live)]] == [e.json_bytes for e in live]


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=sessions())
def test_lazy_restore_equals_eager_restore(kind: str, script: dict[str, Any]) -> None:
    with store_root() as root:
        live = write(kind, root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        preparation = coordinator.prepare(SID)  # commits the repair of an open turn first
        lazy = preparation.session
        eager = eager_session(kind, root)
        try:
            # Compact items actually take part whenever the log has a packed row.
            with compact_chunk_runs():
                stored = make_backend(kind, root).load_stored(SID)
            assert stored is not None
            assert holds_runs(lazy) == any(isinstance(item, ChunkRun) for item in stored.events)
            assert_same_session(lazy, eager, live)
            expanded = expand_items(stored.events)
            assert expanded == list(eager.events)[: len(expanded)]
        finally:
            preparation.dispose()
            coordinator.close()


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=sessions())
def test_snapshot_view_and_resume_equal_eager(kind: str, script: dict[str, Any]) -> None:
    """``inspect``/``view`` (cold, uncommitted) and ``resume`` (live again) see the eager data."""
    with store_root() as root:
        live = write(kind, root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        try:
            snapshot = coordinator.inspect(SID)
            view = coordinator.view(SID)
            assert [e.json_bytes for e in snapshot.events[: len(live)]] == [e.json_bytes for e in live]
            assert list(view.events) == list(snapshot.events)
            resumed = coordinator.resume(SID)
            resumed.append("turn/start", {"turn": 99})
            coordinator.store.flush(resumed)
        finally:
            coordinator.close()
        eager = eager_session(kind, root)
        assert [e.json_bytes for e in eager.events[: len(live)]] == [e.json_bytes for e in live]
        assert eager.events[-2]["data"] == {"turn": 99}


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=sessions())
def test_fork_replay_and_search_of_a_lazy_session_see_the_eager_data(kind: str, script: dict[str, Any]) -> None:
    """Over the closed prefix both share, a resumed (lazy) session replays through the invariant
    checker as the eager one does (same trace or same refusal), yields the same search documents and
    event records, and forks at its last closed turn into the eager prefix's events."""
    with store_root() as root:
        write(kind, root, script)
        eager = eager_session(kind, root)
        ends = [e["seq"] for e in eager.events if e["type"] == "turn/end"]
        closed = ends[-1] + 1 if ends else 0
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        try:
            lazy = coordinator.resume(SID)
            mine, theirs = lazy.events[:closed], eager.events[:closed]
            assert _replayed(mine) == _replayed(theirs)
            assert build_documents(SID, mine) == build_documents(SID, theirs)
            assert build_event_records(SID, mine) == build_event_records(SID, theirs)
            if closed:
                child = coordinator.store.fork(lazy, closed - 1, child_id="child")  # through the turn end
                assert [e.json_bytes for e in child.events][:closed] == [e.json_bytes for e in theirs]
        finally:
            coordinator.close()


def _replayed(events: Sequence[Any]) -> Any:
    try:
        return replay(events)
    except InvariantError as err:
        return ("refused", str(err))


def benchmark_script(turns: int = 5, *, header: bool = True, gaps: list[int] | None = None, text: str = "w{}") -> Any:
    """A W(T)-shaped script: two steps per turn of 20 text deltas each, the first with a tool call."""
    return {
        "turns": [
            {
                "turn": t,
                "header": header and t == 1,
                "steps": [
                    {
                        "stretches": [[text_delta(0, text.format(k)) for k in range(20)]],
                        "message": True,
                        "tool": s == 1,
                        "flush": [],
                    }
                    for s in (1, 2)
                ],
            }
            for t in range(1, turns + 1)
        ],
        "open": None,
        "gaps": [3] if gaps is None else gaps,
    }


@contextmanager
def cold_prepared(kind: str, script: dict[str, Any]) -> Iterator[tuple[list[Event], Session]]:
    """``script`` written on ``kind`` in a fresh store, then a coordinator's cold load of it (prepared,
    not live): ``(the live session's events, the restored session)``; disposed afterwards."""
    with store_root() as root:
        live = write(kind, root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), make_backend(kind, root))
        preparation = coordinator.prepare(SID)
        try:
            yield live, preparation.session
        finally:
            preparation.dispose()
            coordinator.close()


def test_benchmark_shape_stays_compact_through_derive() -> None:
    """The M4 path (prepare + derive_messages) keeps every packed run packed."""
    script = benchmark_script()
    for kind in BACKENDS:
        with cold_prepared(kind, script) as (live, session):
            assert len(session.derive_messages()) == 20
            assert session.request_header() is not None
            log = session._log
            assert sum(1 for item in log if item.__class__ is ChunkRun) == 200, kind  # 10 runs x 20 slots
            assert [e.json_bytes for e in session.events[: len(live)]] == [e.json_bytes for e in live]


# --- damaged rows fail the load exactly as before ------------------------------------------------------


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        stored = call()
    except AgentlogError as err:
        return ("error", type(err), err.code, str(err), getattr(err, "offset", None))
    assert stored is not None
    marker = stored.torn_marker
    return (
        "ok",
        orjson.dumps(expand_items(stored.events)),
        None if marker is None else (type(marker).__name__, getattr(marker, "truncate_to", None)),
    )


def _row(seq0: int, **data: Any) -> dict[str, Any]:
    row_data = {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]}
    row_data.update(data)
    return {"type": "text-chunks", "seq0": seq0, "time0": 5, "data": row_data}


BAD_ROWS = [
    _row(2, dt=[1]),  # dt length
    _row(2, dt=[1, "x"]),  # dt type
    _row(2, dt=[1, 2**53]),  # unsafe gap
    _row(2, texts=[]),  # no members
    _row(2, texts=["a", 1, "c"]),  # member type
    _row(2, turn=True),  # bool is not a number
    _row(2, extra=1),  # data keys
    {"type": "text-chunks", "seq0": 2, "time0": 5},  # envelope
    {"type": "text-chunks", "seq0": -1, "time0": 5, "data": {}},  # seq0
    {"type": "reasoning-chunks", "seq0": 2, "time0": 2**53 - 2, "data": _row(2)["data"]},  # member times
    {"type": "tool-call-chunks", "seq0": 2, "time0": 5, "data": {**_row(2)["data"], "id": 3}},  # tool keys
    _row(3),  # seq gap
    _row(1),  # seq overlap
]


@pytest.mark.parametrize("position", ["last", "followed"])
@pytest.mark.parametrize("row", BAD_ROWS, ids=[str(i) for i in range(len(BAD_ROWS))])
def test_damaged_row_fails_the_compact_load_as_the_eager_one(row: dict[str, Any], position: str) -> None:
    header = {"type": "session", "version": 0, "id": SID, "createdAt": 1, "cwd": "/lazy", "delegationDepth": 0}
    lines = [
        header,
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}},
        row,
    ]
    if position == "followed":
        lines.append({"type": "step/end", "seq": 5, "time": 9, "data": {"turn": 1, "step": 1}})
    with store_root() as root:
        path = JsonlBackend(root, compression="none").locate(header)
        assert path is not None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        eager = _outcome(lambda: JsonlBackend(root, compression="none").load_stored(SID))

        def compact() -> Any:
            with compact_chunk_runs():
                return JsonlBackend(root, compression="none").load_stored(SID)

        assert _outcome(compact) == eager
        if eager[0] == "error":
            with pytest.raises(AgentlogError) as caught:
                PersistenceCoordinator(al.SessionStore(), JsonlBackend(root, compression="none")).inspect(SID)
            assert caught.value.code == eager[2]


@pytest.mark.parametrize(
    "data",
    [
        {"turn": 0, "step": 1},  # turn must be positive
        {"turn": 1, "step": -1},  # step must be non-negative
        {"turn": 1.5, "step": 1},  # turn must be an integer
        {"turn": 2**53, "step": 1},  # turn must be safe
    ],
)
def test_a_row_whose_chunks_break_the_data_rule_fails_the_load(data: dict[str, Any]) -> None:
    """A row can be well-formed as a row and still hold chunks the seed validation refuses: the compact
    restore refuses it at load, with the message the plain (pure-Python) restore gives, at its index."""
    row = _row(2, **data)
    with compact_chunk_runs():
        from agentlog.kernel.chunkrows import decode_storage_run

        run = decode_storage_run(row)
    assert run is not None
    prefix = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
        {"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}},
    ]
    meta = {"version": 0, "id": SID, "createdAt": 1, "delegationDepth": 0}
    with pytest.raises(AgentlogError) as plain:
        Session.from_restore(SID, [*map(dict, prefix), *run.plain_events()], dict(meta))
    with pytest.raises(AgentlogError) as lazy:
        Session.from_restore(SID, [*map(dict, prefix), run], dict(meta))
    assert (type(lazy.value), str(lazy.value)) == (type(plain.value), str(plain.value))
    assert getattr(lazy.value, "index", None) == 2


# --- the compact codec agrees with the expanding one ------------------------------------------------

MAX_SAFE = 2**53 - 1
edge_ints = st.sampled_from([0, 1, -1, 7, MAX_SAFE, MAX_SAFE - 1, -MAX_SAFE, MAX_SAFE + 1, 2**62])
loose = st.one_of(edge_ints, st.booleans(), st.just(1.5), st.just("x"), st.none())


@st.composite
def row_values(draw: Any) -> Any:
    """A packed row: valid (any size, edge seqs and times, integral or fractional numbers), then maybe one
    field broken; sometimes an ordinary event instead."""
    tag = draw(st.sampled_from(["text-chunks", "reasoning-chunks", "tool-call-chunks", "turn/start"]))
    size = draw(st.integers(1, 6))
    payload: Any = draw(st.lists(texts, min_size=size, max_size=size))
    gaps: Any = draw(st.lists(st.sampled_from([0, 1, -5, 10**6, MAX_SAFE // 4]), min_size=size - 1, max_size=size - 1))
    data: dict[str, Any] = {
        "turn": draw(st.sampled_from([1, 2, 1.0, 3.5])),
        "step": draw(st.sampled_from([0, 1, 2.0])),
        "index": draw(st.sampled_from([0, 1, 0.5, -1])),
        "dt": gaps,
    }
    if tag == "tool-call-chunks":
        data["id"] = "c1"
        if draw(st.booleans()):
            data["name"] = "read"
        data["args"] = payload
    else:
        data["texts"] = payload
    value: dict[str, Any] = {
        "type": tag,
        "seq0": draw(st.sampled_from([0, 5, MAX_SAFE - 6, MAX_SAFE - 1])),
        "time0": draw(st.sampled_from([0, 1_700_000_000_000, -MAX_SAFE, MAX_SAFE - 10**6])),
        "data": data,
    }
    broken = draw(st.integers(0, 12))
    key = draw(st.sampled_from(["seq0", "time0", "turn", "step", "index", "id", "name", "dt", "payload", "extra"]))
    bad = draw(loose)
    if broken < 6:
        if key in ("seq0", "time0"):
            value[key] = bad
        elif key == "extra":
            (value if draw(st.booleans()) else data)["extra"] = 1
        elif key == "payload":
            payload_key = "args" if tag == "tool-call-chunks" else "texts"
            data[payload_key] = draw(st.sampled_from([[], [bad], [*payload, bad], "abc"]))
        elif key == "dt":
            data["dt"] = draw(st.sampled_from([[*gaps, 1], gaps[:-1], [bad] * len(gaps), "x"]))
        else:
            data[key] = bad
    return value


@settings(max_examples=300, deadline=None)
@given(value=row_values())
def test_decode_storage_run_agrees_with_decode_storage_record(value: Any) -> None:
    from agentlog.errors import ChunkRowError
    from agentlog.kernel.chunkrows import decode_storage_record, decode_storage_run

    def eager() -> Any:
        try:
            return ("ok", orjson.dumps(decode_storage_record(orjson.loads(orjson.dumps(value)))))
        except ChunkRowError as err:
            return ("error", str(err))

    def lazy() -> Any:
        try:
            run = decode_storage_run(orjson.loads(orjson.dumps(value)))
        except ChunkRowError as err:
            return ("error", str(err))
        if run is None:
            return ("ok", orjson.dumps([value]))
        assert orjson.dumps(run.plain_events()) == orjson.dumps(run.events())
        assert run.last_time == run.events()[-1]["time"]
        assert run.n == len(run.events())
        return ("ok", orjson.dumps(run.events()))

    assert lazy() == eager()


@settings(max_examples=200, deadline=None)
@given(value=row_values())
def test_a_run_state_makes_an_equal_run(value: Any) -> None:
    """``to_state`` is plain JSON and ``from_state`` of it stands for the same members (text and tool-call
    runs, a tool-call name present or absent): what a reader that keeps a log serialized relies on."""
    from agentlog.errors import ChunkRowError
    from agentlog.kernel.chunkrows import decode_storage_run
    from agentlog.kernel.packedrun import ChunkRun

    try:
        run = decode_storage_run(orjson.loads(orjson.dumps(value)))
    except ChunkRowError:
        return
    if run is None:
        return
    again = ChunkRun.from_state(orjson.loads(orjson.dumps(run.to_state())))
    assert (again.seq0, again.n, again.last_time) == (run.seq0, run.n, run.last_time)
    assert orjson.dumps(again.events()) == orjson.dumps(run.events())
    assert [event.json_bytes for event in again.events()] == [event.json_bytes for event in run.events()]


def test_a_full_pass_leaves_runs_packed_and_equals_the_eager_events() -> None:
    """Iterating a restored log builds each run's members for the pass only (an export of a big session
    holds one run at a time); the events are the eager ones, random access still caches them, and a
    prefix view cut through a run yields exactly its own members."""
    script = {
        "turns": [
            {
                "turn": 1,
                "header": True,
                "steps": [{"stretches": [[text_delta(0, f"w{k}") for k in range(12)]], "message": True,
                           "tool": False, "flush": []}],
            }
        ],
        "open": None,
        "gaps": [1],
    }  # fmt: skip
    for kind in BACKENDS:
        with cold_prepared(kind, script) as (live, session):
            runs_before = sum(1 for item in session._log if item.__class__ is ChunkRun)
            assert runs_before == 12, kind
            passed = list(session.events)
            assert [e.json_bytes for e in passed[: len(live)]] == [e.json_bytes for e in live], kind
            assert sum(1 for item in session._log if item.__class__ is ChunkRun) == runs_before, kind
            first_chunk = next(i for i, e in enumerate(passed) if e["type"] == "assistant/chunk")
            cut = first_chunk + 4
            prefix = session.at(cut)
            assert [e.json_bytes for e in prefix.events] == [e.json_bytes for e in passed[: cut + 1]], kind
            outside = list(session.events.outside_runs())  # steps over the runs, builds none
            assert sum(1 for item in session._log if item.__class__ is ChunkRun) == runs_before, kind
            assert outside == [e for e in passed if e["type"] != "assistant/chunk"], kind
            assert session.events[first_chunk] is session.events[first_chunk], kind  # a read caches
            assert sum(1 for item in session._log if item.__class__ is ChunkRun) == 0, kind
            assert list(session.events) == passed, kind
            assert list(session.events.outside_runs()) == passed, kind  # built runs are events again


def test_a_restore_seed_keeps_runs_packed_and_restores_the_same_events() -> None:
    """``events.restore_seed()`` of a restored log holds each packed run once (a run the view ends inside
    gives its members), and restoring it again gives the same events with the runs still packed."""
    script = {
        "turns": [
            {
                "turn": 1,
                "header": True,
                "steps": [{"stretches": [[text_delta(0, f"w{k}") for k in range(12)]], "message": True,
                           "tool": False, "flush": []}],
            }
        ],
        "open": None,
        "gaps": [1],
    }  # fmt: skip
    for kind in BACKENDS:
        with cold_prepared(kind, script) as (_live, session):
            events = session.events
            seed = events.restore_seed()
            assert sum(1 for item in seed if item.__class__ is ChunkRun) == 1, kind
            again = Session.from_restore(SID, seed, session.header)
            assert sum(1 for item in again._log if item.__class__ is ChunkRun) == 12, kind
            assert [e.json_bytes for e in again.events] == [e.json_bytes for e in events], kind
            first_chunk = next(i for i, e in enumerate(events) if e["type"] == "assistant/chunk")
            cut = events.prefix(first_chunk + 5)
            cut_seed = cut.restore_seed()
            assert not any(item.__class__ is ChunkRun for item in cut_seed), kind
            assert [e.json_bytes for e in cut_seed] == [e.json_bytes for e in cut], kind
            assert sum(1 for item in session._log if item.__class__ is ChunkRun) == 12, kind  # nothing built in
