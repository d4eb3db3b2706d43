"""Raw chunk lines kept compact at cold load (issue 14): the compact load is observably the eager one.

A log written without packing (or with runs too short to pack) holds one ``assistant/chunk`` line per
delta. A cold compact load turns each stretch of such lines that has exactly a packed run's members'
shape into a :class:`~agentlog.kernel.chunkrows.ChunkRun`; everything else stays an ordinary event.
These tests compare it with the eager load on random sessions (unpacked, and mixed: short runs raw,
long runs packed, runs split across flushes, i.e. frames) and on hand-written lines with every kind of
deviation from that shape, which must load exactly as the eager load does: the same events, or the same
error (type, code, message, offset).
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentlog as al
from agentlog.errors import AgentlogError
from agentlog.kernel import chunkrows
from agentlog.kernel.chunkrows import MIN_RAW_RUN, ChunkRun, compact_chunk_runs, compact_raw_chunks, expand_items
from agentlog.kernel.events import Event
from agentlog.kernel.session import Session
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl import _scanner
from agentlog.persistence.jsonl._zstdframes import compress_frame
from agentlog.persistence.jsonl.backend import JsonlBackend

from .test_lazy_chunks import SID, assert_same_session, benchmark_script, holds_runs, sessions, store_root
from .test_lazy_chunks import write as write_script

# (compression, pack_chunks): unpacked logs, and packed ones whose short runs stay raw lines.
LAYOUTS = [("none", False), ("zstd", False), ("none", True), ("zstd", True)]
LAYOUT_IDS = ["raw-unpacked", "zstd-unpacked", "raw-mixed", "zstd-mixed"]


def backend(compression: str, root: str, pack: bool = True) -> JsonlBackend:
    return JsonlBackend(root, compression="zstd" if compression == "zstd" else "none", pack_chunks=pack)


def write(compression: str, pack: bool, root: str, script: dict[str, Any]) -> list[Event]:
    """Append the script (``test_lazy_chunks.sessions``) through a live session persisted with the layout."""
    return write_script("jsonl", root, script, backend(compression, root, pack))


def eager(compression: str, root: str) -> Session:
    """The eager restore: every stored line frozen into its event at load."""
    stored = backend(compression, root).load_stored(SID)
    assert stored is not None
    assert not any(isinstance(item, ChunkRun) for item in stored.events)
    return Session.from_restore(SID, list(stored.events), dict(stored.meta))


def compact_items(compression: str, root: str) -> list[Any]:
    with compact_chunk_runs():
        stored = backend(compression, root).load_stored(SID)
    assert stored is not None
    return list(stored.events)


@pytest.mark.parametrize(("compression", "pack"), LAYOUTS, ids=LAYOUT_IDS)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=sessions())
def test_compact_load_of_raw_chunk_lines_equals_eager(compression: str, pack: bool, script: dict[str, Any]) -> None:
    with store_root() as root:
        live = write(compression, pack, root, script)
        coordinator = PersistenceCoordinator(al.SessionStore(), backend(compression, root))
        preparation = coordinator.prepare(SID)  # commits the repair of an open turn first
        try:
            lazy = preparation.session
            reference = eager(compression, root)
            items = compact_items(compression, root)
            assert holds_runs(lazy) == any(isinstance(item, ChunkRun) for item in items)
            assert_same_session(lazy, reference, live)
            expanded = expand_items(items)
            assert expanded == list(reference.events)[: len(expanded)]
            assert [orjson.dumps(e) for e in expanded] == [e.json_bytes for e in reference.events[: len(expanded)]]
        finally:
            preparation.dispose()
            coordinator.close()


def test_unpacked_benchmark_shape_keeps_raw_chunk_runs_compact() -> None:
    """A W-like session written unpacked: the cold load keeps its 20-chunk stretches as runs."""
    script = benchmark_script(header=False, gaps=[0, 3], text="w{} ")
    for compression in ("none", "zstd"):
        with store_root() as root:
            live = write(compression, False, root, script)
            coordinator = PersistenceCoordinator(al.SessionStore(), backend(compression, root))
            preparation = coordinator.prepare(SID)
            session = preparation.session
            assert len(session.derive_messages()) == 20
            log = session._log
            assert sum(1 for item in log if item.__class__ is ChunkRun) == 200, compression  # 10 runs x 20
            assert [e.json_bytes for e in session.events[: len(live)]] == [e.json_bytes for e in live]
            preparation.dispose()
            coordinator.close()


# --- hand-written raw lines: every deviation loads as the eager load does ------------------------------

HEADER = {"type": "session", "version": 0, "id": SID, "createdAt": 1, "cwd": "/lazy", "delegationDepth": 0}


def chunk_line(seq: int, time: int | None = None, **chunk: Any) -> dict[str, Any]:
    body = {"type": "text-delta", "index": 0, "text": f"t{seq}"}
    body.update(chunk)
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 100 + seq if time is None else time,
        "data": {"turn": 1, "step": 1, "chunk": body},
    }


def tool_line(seq: int, **chunk: Any) -> dict[str, Any]:
    line = chunk_line(seq)
    body = {"type": "tool-call-delta", "index": 1, "id": "c1", "argumentsDelta": f"a{seq}"}
    body.update(chunk)
    line["data"]["chunk"] = body
    return line


def named_tool_line(seq: int, **chunk: Any) -> dict[str, Any]:
    body = {"type": "tool-call-delta", "index": 1, "id": "c1", "name": "read", "argumentsDelta": f"a{seq}"}
    body.update(chunk)
    line = chunk_line(seq)
    line["data"]["chunk"] = body
    return line


def reordered(line: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: line[key] for key in keys}


def with_data(line: dict[str, Any], **data: Any) -> dict[str, Any]:
    out = dict(line)
    out["data"] = {**line["data"], **data}
    return out


def stretch(n: int = 6, start: int = 2) -> list[Any]:
    return [chunk_line(seq) for seq in range(start, start + n)]


def replace(lines: list[Any], position: int, value: Any) -> list[Any]:
    out = list(lines)
    out[position] = value
    return out


# Each case: the chunk lines after turn/start (seq 0) and step/start (seq 1); a bytes item is written as is.
CASES: dict[str, list[Any]] = {
    "plain": stretch(),
    "one": stretch(1),
    "two": stretch(2),
    "three": stretch(3),
    "reasoning": [chunk_line(seq, type="reasoning-delta") for seq in range(2, 8)],
    "tool": [tool_line(seq) for seq in range(2, 8)],
    "named-tool": [named_tool_line(seq) for seq in range(2, 8)],
    "envelope-extra-key": replace(stretch(), 3, {**chunk_line(5), "ignorable": True}),
    "chunk-extra-key": replace(stretch(), 3, chunk_line(5, extra=1)),
    "data-extra-key": replace(stretch(), 3, with_data(chunk_line(5), extra=1)),
    "envelope-order": replace(stretch(), 3, reordered(chunk_line(5), "seq", "type", "time", "data")),
    "data-order": replace(
        stretch(), 3, {**chunk_line(5), "data": reordered(chunk_line(5)["data"], "step", "turn", "chunk")}
    ),
    "chunk-order": replace(
        stretch(),
        3,
        {**chunk_line(5), "data": {"turn": 1, "step": 1, "chunk": {"index": 0, "type": "text-delta", "text": "x"}}},
    ),
    "tool-order": replace(
        [named_tool_line(seq) for seq in range(2, 8)],
        3,
        {
            **named_tool_line(5),
            "data": {
                "turn": 1,
                "step": 1,
                "chunk": reordered(
                    named_tool_line(5)["data"]["chunk"], "type", "index", "name", "id", "argumentsDelta"
                ),
            },
        },
    ),
    "seq-gap": replace(stretch(), 3, chunk_line(6)),
    "seq-repeat": replace(stretch(), 3, chunk_line(4)),
    "seq-float": replace(stretch(), 3, {**chunk_line(5), "seq": 5.0}),
    "time-backwards": [chunk_line(seq, time=1000 - 7 * seq) for seq in range(2, 8)],
    "time-equal": [chunk_line(seq, time=50) for seq in range(2, 8)],
    "time-negative": [chunk_line(seq, time=-(2**53) + 1 + seq) for seq in range(2, 8)],
    "time-unsafe-gap": [chunk_line(2, time=-(2**53) + 1), chunk_line(3, time=2**53 - 1), *stretch(4, 4)],
    "time-unsafe": replace(stretch(), 3, chunk_line(5, time=2**53)),
    "time-float": replace(stretch(), 3, chunk_line(5, time=105.0)),
    "time-fraction": replace(stretch(), 3, chunk_line(5, time=105.5)),
    "time-string": replace(stretch(), 3, chunk_line(5, time="105")),
    "turn-float": replace(stretch(), 3, with_data(chunk_line(5), turn=1.0)),
    "turn-zero": replace(stretch(), 3, with_data(chunk_line(5), turn=0)),
    "turn-unsafe": [with_data(chunk_line(seq), turn=2**53) for seq in range(2, 8)],
    "turn-bool": replace(stretch(), 3, with_data(chunk_line(5), turn=True)),
    "turn-other": replace(stretch(), 3, with_data(chunk_line(5), turn=2)),
    "step-negative": [with_data(chunk_line(seq), step=-1) for seq in range(2, 8)],
    "step-zero": [with_data(chunk_line(seq), step=0) for seq in range(2, 8)],
    "step-other": replace(stretch(), 3, with_data(chunk_line(5), step=2)),
    "step-string": replace(stretch(), 3, with_data(chunk_line(5), step="1")),
    "index-other": replace(stretch(), 3, chunk_line(5, index=1)),
    "index-float": replace(stretch(), 3, chunk_line(5, index=0.0)),
    "index-string": replace(stretch(), 3, chunk_line(5, index="0")),
    "index-big": [chunk_line(seq, index=2**70) for seq in range(2, 8)],
    "type-mixed": replace(stretch(), 3, chunk_line(5, type="reasoning-delta")),
    "type-unknown": replace(stretch(), 3, chunk_line(5, type="text-delta2")),
    "type-number": replace(stretch(), 3, chunk_line(5, type=3)),
    "text-number": replace(stretch(), 3, chunk_line(5, text=3)),
    "text-missing": replace(
        stretch(), 3, {**chunk_line(5), "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0}}}
    ),
    "data-not-object": replace(stretch(), 3, {**chunk_line(5), "data": [1]}),
    "chunk-not-object": replace(stretch(), 3, with_data(chunk_line(5), chunk="x")),
    "id-mixed": replace([tool_line(seq) for seq in range(2, 8)], 3, tool_line(5, id="c2")),
    "id-number": replace([tool_line(seq) for seq in range(2, 8)], 3, tool_line(5, id=7)),
    "name-presence": replace([tool_line(seq) for seq in range(2, 8)], 3, named_tool_line(5)),
    "name-value": replace([named_tool_line(seq) for seq in range(2, 8)], 3, named_tool_line(5, name="write")),
    "name-number": replace([named_tool_line(seq) for seq in range(2, 8)], 3, named_tool_line(5, name=1)),
    "args-number": replace([tool_line(seq) for seq in range(2, 8)], 3, tool_line(5, argumentsDelta=1)),
    "damaged-middle": replace(stretch(), 3, b'{"type":"assistant/chunk","seq":5,'),
    "not-utf8-middle": replace(stretch(), 3, b'{"type":"assistant/chunk","seq":5,"x":"\xff"}'),
    "not-object-middle": replace(stretch(), 3, b"[5]"),
    "lone-surrogate-middle": replace(
        stretch(),
        3,
        b'{"type":"assistant/chunk","seq":5,"time":105,"data":{"turn":1,"step":1,'
        b'"chunk":{"type":"text-delta","index":0,"text":"\\ud800"}}}',
    ),
    "empty-middle": replace(stretch(), 3, b""),
    "row-middle": [
        *stretch(3),
        {
            "type": "text-chunks",
            "seq0": 5,
            "time0": 9,
            "data": {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
        },
        *stretch(3, 8),
    ],
    "bad-row-middle": [*stretch(3), {"type": "text-chunks", "seq0": 5, "time0": 9}, *stretch(3, 6)],
}
TAILS = ["closed", "open", "damaged-last", "torn"]


def _encode(lines: list[Any]) -> list[bytes]:
    # json, not orjson: a line may hold an integer beyond 64 bits.
    return [line if isinstance(line, bytes) else json.dumps(line, separators=(",", ":")).encode() for line in lines]


def write_lines(compression: str, root: str, chunks: list[Any], tail: str, frames: int) -> None:
    """The header, turn/start, step/start, ``chunks`` and a tail, as a raw file or in ``frames`` frames."""
    last_seq = 2 + len(chunks)
    body = _encode(
        [
            {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}},
            {"type": "step/start", "seq": 1, "time": 2, "data": {"turn": 1, "step": 1}},
            *chunks,
        ]
    )
    if tail == "closed":
        body += _encode(
            [
                {"type": "step/end", "seq": last_seq, "time": 900, "data": {"turn": 1, "step": 1}},
                {
                    "type": "turn/end",
                    "seq": last_seq + 1,
                    "time": 901,
                    "data": {"turn": 1, "reason": {"kind": "completed"}},
                },
            ]
        )
    elif tail == "damaged-last":
        body.append(b'{"type":"step/end","seq":')
    text = [line + b"\n" for line in body]
    if tail == "torn":
        text[-1] = text[-1][: len(text[-1]) // 2]  # a torn final write inside the stretch
    path = backend(compression, root).locate(HEADER)
    assert path is not None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    header = orjson.dumps(HEADER) + b"\n"
    with open(path, "wb") as fh:
        if compression == "none":
            fh.write(header + b"".join(text))
            return
        fh.write(compress_frame(header))
        cut = [round(len(text) * k / frames) for k in range(frames + 1)]
        for lo, hi in itertools.pairwise(cut):
            if hi > lo:
                part = b"".join(text[lo:hi])
                frame = compress_frame(part)
                if tail == "torn" and hi == len(text):
                    frame = frame[: len(frame) - 3]  # a torn final frame
                fh.write(frame)


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        result = call()
    except AgentlogError as err:
        return ("error", type(err), err.code, str(err), getattr(err, "offset", None))
    return ("ok", result)


def _stored(compression: str, root: str, compact: bool) -> Any:
    def read() -> Any:
        stored = backend(compression, root).load_stored(SID)
        assert stored is not None
        marker = stored.torn_marker
        events = expand_items(stored.events)
        return (
            [orjson.dumps(event) for event in events],
            None if marker is None else (type(marker).__name__, getattr(marker, "truncate_to", None)),
        )

    if not compact:
        return read()
    with compact_chunk_runs():
        return read()


def _restored(compression: str, root: str) -> Any:
    """A cold compact restore through the coordinator (no repair): its events as JSON."""
    coordinator = PersistenceCoordinator(al.SessionStore(), backend(compression, root))
    try:
        snapshot = coordinator.inspect(SID)
        return [event.json_bytes for event in snapshot.events]
    finally:
        coordinator.close()


def _restored_plain(compression: str, root: str) -> Any:
    stored = backend(compression, root).load_stored(SID)
    assert stored is not None
    session = Session.from_restore(SID, list(stored.events), dict(stored.meta))
    return [event.json_bytes for event in session.events][:-1]  # without the end-seed marker


ENCODINGS = [
    ("none", 1, None),
    ("none", 1, 150),
    ("none", 1, 400),
    ("zstd", 1, None),
    ("zstd", 2, None),
    ("zstd", 3, 400),
]
"""(compression, zstd frames, compact-scan slice bytes): with tiny slices, stretches, defects and torn tails
fall on and across slice boundaries (a raw log is read, a long frame consumed, slice by slice)."""


def _check_deviating_lines(case: str, tail: str, compression: str, frames: int) -> None:
    """One case of :func:`test_deviating_raw_chunk_lines_load_as_the_eager_load`."""
    with store_root() as root:
        write_lines(compression, root, CASES[case], tail, frames)
        eager_read = _outcome(lambda: _stored(compression, root, False))
        assert _outcome(lambda: _stored(compression, root, True)) == eager_read
        cold = _outcome(lambda: _restored(compression, root))
        if eager_read[0] == "error":
            assert cold == eager_read
            return
        plain = _outcome(lambda: _restored_plain(compression, root))
        if plain[0] == "error":
            # The seed validation refuses a stored event: the coordinator reports the same refusal as
            # corruption of the stored session, whichever way the load holds the chunks.
            assert cold[0] == "error"
            with compact_chunk_runs():
                stored = backend(compression, root).load_stored(SID)
            assert stored is not None
            with pytest.raises(AgentlogError) as lazy:
                Session.from_restore(SID, list(stored.events), dict(stored.meta))
            assert (type(lazy.value), lazy.value.code, str(lazy.value)) == plain[1:4]
            return
        assert cold[0] == "ok"
        assert cold[1][: len(plain[1])] == plain[1]


def test_deviating_raw_chunk_lines_load_as_the_eager_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every deviating case, under every tail, in every encoding (CASES x TAILS x ENCODINGS): the compact load is the
    eager one, and a cold restore equals it (or refuses exactly as it does). One test looping over the
    cases; a failure names every case that failed."""
    failures: list[str] = []
    for case in sorted(CASES):
        for tail in TAILS:
            for compression, frames, slice_bytes in ENCODINGS:
                with monkeypatch.context() as patch:
                    if slice_bytes is not None:
                        patch.setattr(_scanner, "_PARSE_SLICE_BYTES", slice_bytes)
                    try:
                        _check_deviating_lines(case, tail, compression, frames)
                    except (Exception, pytest.fail.Exception) as err:  # reported with its case below
                        failures.append(f"{case}-{tail}-{compression}-{frames}-{slice_bytes}: {err!r}")
    assert not failures, f"{len(failures)} of {len(CASES) * len(TAILS) * len(ENCODINGS)} failed:\n" + "\n".join(
        failures
    )


def test_plain_stretches_become_runs_and_deviations_stay_events() -> None:
    """What actually compacts: a clean stretch is one run; a deviating line splits it and stays an event."""
    items = [orjson.loads(orjson.dumps(line)) for line in replace(stretch(8), 4, chunk_line(6, extra=1))]
    grouped = compact_raw_chunks(items)
    assert grouped is not None
    assert [type(item).__name__ for item in grouped] == ["ChunkRun", "dict", "ChunkRun"]
    assert grouped[1] is items[4]
    assert expand_items(grouped) == items
    assert [orjson.dumps(e) for e in expand_items(grouped)] == [orjson.dumps(e) for e in items]
    short = [orjson.loads(orjson.dumps(line)) for line in stretch(MIN_RAW_RUN - 1)]
    assert compact_raw_chunks(short) is None


# --- the accelerator's grouping is the pure-Python one ---------------------------------------------------

_values = st.one_of(st.sampled_from([0, 1, 2, -1, 2**53 - 1, 2**53, 2**70, 1.0, True, "1", None]))


@st.composite
def raw_items(draw: Any) -> list[Any]:
    """Parsed lines: mostly clean chunk stretches, with random deviations and other values between."""
    makers = [chunk_line, tool_line, named_tool_line, lambda seq: chunk_line(seq, type="reasoning-delta")]
    items: list[Any] = []
    seq = draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 6))):
        make = draw(st.sampled_from(makers))
        base_time = draw(st.sampled_from([0, 5, -(2**53) + 1, 2**53 - 10]))
        for _ in range(draw(st.integers(0, 6))):
            line = make(seq)
            line["time"] = base_time + draw(st.sampled_from([0, 1, -3, 2**52]))
            roll = draw(st.integers(0, 12))
            if roll == 0:
                line["data"] = dict(line["data"], turn=draw(_values))
            elif roll == 1:
                line["data"] = dict(line["data"], step=draw(_values))
            elif roll == 2:
                line["data"]["chunk"] = dict(line["data"]["chunk"], index=draw(_values))
            elif roll == 3:
                line["seq"] = draw(_values)
            elif roll == 4:
                line["time"] = draw(_values)
            elif roll == 5:
                line = reordered(line, "type", "time", "seq", "data")
            elif roll == 6:
                line["extra"] = 1
            elif roll == 7:
                items.append({"type": "step/end", "seq": seq, "time": 1, "data": {"turn": 1, "step": 1}})
            items.append(orjson.loads(orjson.dumps(line)) if roll not in (0, 1, 2, 3, 4) else line)
            seq += draw(st.sampled_from([1, 1, 1, 1, 2]))
    return items


def _shape(items: list[Any] | None) -> Any:
    if items is None:
        return None
    return [
        ("run", [json.dumps(e) for e in item.plain_events()], item.last_time)
        if item.__class__ is ChunkRun
        else ("item", id(item))
        for item in items
    ]


@pytest.mark.skipif(chunkrows._group_raw is None, reason="needs the C accelerator")
@settings(max_examples=400, deadline=None)
@given(items=raw_items(), start=st.integers(0, 3), min_run=st.integers(1, 4))
def test_accelerated_grouping_equals_the_pure_python_one(items: list[Any], start: int, min_run: int) -> None:
    fast = chunkrows._group_raw(items, start, min_run, chunkrows._ABSENT, ChunkRun)
    slow = chunkrows._py_compact_raw_chunks(items, start, min_run)
    assert _shape(fast) == _shape(slow)
    if fast is not None:
        built = expand_items(fast)
        for item in fast:
            if item.__class__ is ChunkRun:
                assert item.events() == item.plain_events()
        assert len(built) == len(items) - start
