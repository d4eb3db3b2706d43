"""The last complete line of a JSONL log: which shapes are a torn tail, exactly as the original decides.

The original decodes each complete line leniently (bytes that are not UTF-8 become U+FFFD, as Node's
``Buffer.toString`` does), then ``JSON.parse`` and ``decodeStorageRecord``; a line that fails there, or
whose record does not continue the seq, is a defect, and a defect with nothing after it is a torn tail
(truncated, the prefix loaded) — unless the defective record itself holds a ``turn/end``, which is damage.
Inside a complete (checksummed) zstd frame any defect is damage; inside a torn final frame the raw rules
hold. agentlog never *replaces* bytes: a line the original would keep as a record only through
replacement characters is refused as damage, the file untouched. Everything else must come out as the
original has it, with and without the C accelerator (CI runs this file both ways), through every reader
(``load_stored``, the coordinator's load, the seek read ``load_stored_from`` and ``read_prefix``).
"""

from __future__ import annotations

import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentlog import SessionStore
from agentlog.errors import AgentlogError, ChunkRowError, SessionPersistenceCorruptionError
from agentlog.kernel.chunkrows import decode_storage_record
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl._zstdframes import compress_frame
from agentlog.persistence.jsonl.backend import JsonlBackend

from .conftest import SID, closed_turn, header, seqs

Outcome = Literal["torn", "record", "damage"]
Placement = Literal["raw", "zstd-complete-frame", "zstd-torn-frame"]
PLACEMENTS: list[Placement] = ["raw", "zstd-complete-frame", "zstd-torn-frame"]
EVENTS = [*closed_turn(0, 1), *closed_turn(6, 2)]
N = len(EVENTS)


def _no_constants(name: str) -> Any:
    raise ValueError(f"JSON.parse refuses {name}")


def original_outcome(line: bytes, next_seq: int) -> tuple[Outcome, str | None]:
    """The original's verdict on a last complete line (``consumeEventLine`` with nothing after it), and
    why agentlog cannot take it as the original does, if it cannot: replacement characters needed, or
    a value orjson (and the lossless-JSON gate) cannot hold."""
    text = line.decode("utf-8", "replace")
    replaced: str | None = None
    if text != line.decode("utf-8", "surrogateescape"):
        replaced = "not UTF-8"
    else:
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            replaced = "cannot hold losslessly"
    try:
        value = json.loads(text, parse_constant=_no_constants)
        decoded = decode_storage_record(value)
    except (ValueError, ChunkRowError, RecursionError):
        return "torn", replaced
    for index, event in enumerate(decoded):
        seq = event.get("seq") if isinstance(event, dict) else None
        if type(seq) is bool or seq != next_seq + index:
            ends_turn = any(isinstance(e, dict) and e.get("type") == "turn/end" for e in decoded)
            return ("damage" if ends_turn else "torn"), replaced
    return "record", replaced


def _base_log(zstd: bool) -> bytes:
    head = dumps({"type": "session", **header()}) + b"\n"
    body = b"".join(dumps(event) + b"\n" for event in EVENTS)
    return compress_frame(head) + compress_frame(body) if zstd else head + body


@cache
def base_logs() -> dict[bool, bytes]:
    return {False: _base_log(False), True: _base_log(True)}


def place(placement: Placement, line: bytes) -> tuple[bytes, bytes]:
    """``(valid log, valid log + the line as placed)``."""
    zstd = placement != "raw"
    base = base_logs()[zstd]
    if placement == "raw":
        return base, base + line + b"\n"
    frame = compress_frame(line + b"\n")
    if placement == "zstd-torn-frame":
        frame = frame[:-1]  # one checksum byte short: torn, yet all of its text decodes
    return base, base + frame


def expected(placement: Placement, line: bytes) -> tuple[Outcome, str | None]:
    outcome, replaced = original_outcome(line, N)
    if placement == "zstd-complete-frame" and outcome == "torn":
        outcome = "damage"  # a checksummed complete frame was written whole: its defects are damage
    return outcome, replaced


def _backend(root: Path, placement: Placement) -> JsonlBackend:
    return JsonlBackend(str(root), compression="none" if placement == "raw" else "zstd")


def check_final_line(placement: Placement, line: bytes) -> None:
    outcome, replaced = expected(placement, line)
    base, data = place(placement, line)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        backend = _backend(root, placement)
        location = backend.locate(header())
        assert location is not None
        path = Path(location)
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        if outcome == "torn":
            stored = backend.load_stored(SID)
            assert stored is not None and seqs(stored.events) == list(range(N))
            assert stored.torn_marker is not None and stored.torn_marker.truncate_to == len(base)
            for from_seq in (0, 3, N - 1, N):
                suffix = backend.load_stored_from(SID, from_seq)
                assert suffix is not None and seqs(suffix.events) == list(range(from_seq, N))
            partial = backend.read_prefix(SID)
            assert partial is not None and partial.damage is None and partial.torn_offset == len(base)
            assert seqs(partial.events) == list(range(N))
            coordinator = PersistenceCoordinator(SessionStore(), _backend(root, placement))
            try:
                snapshot = coordinator.load(SID)
            finally:
                coordinator.close()
            assert seqs(snapshot.events) == list(range(N))  # the log ends with a closed turn: no closers
            assert path.read_bytes() == base  # the torn line was truncated, nothing else touched
            return
        if outcome == "damage" or replaced:
            with pytest.raises(SessionPersistenceCorruptionError) as caught:
                backend.load_stored(SID)
            assert caught.value.code == "SESSION_CORRUPT"
            if outcome == "record":  # a record agentlog cannot take as the original does: never cut
                assert replaced is not None and replaced in str(caught.value)
            partial = backend.read_prefix(SID)
            assert partial is not None and partial.damage is not None and seqs(partial.events) == list(range(N))
            coordinator = PersistenceCoordinator(SessionStore(), _backend(root, placement))
            try:
                with pytest.raises(SessionPersistenceCorruptionError):
                    coordinator.load(SID)
            finally:
                coordinator.close()
        else:  # a record, as the original reads it: kept (or refused by validation), never cut
            stored = backend.load_stored(SID)
            assert stored is not None and len(stored.events) > N  # (a packed row stands for several)
            if placement == "zstd-torn-frame":  # recovered from the torn frame, to be written whole again
                assert stored.torn_marker is not None and stored.torn_marker.truncate_to == len(base)
                assert stored.torn_marker.recovered_events == stored.events[N:]
            else:
                assert stored.torn_marker is None
            coordinator = PersistenceCoordinator(SessionStore(), _backend(root, placement))
            try:
                loaded = len(coordinator.load(SID).events)
            except AgentlogError:
                loaded = None  # refused by the session's own validation: nothing was repaired
            finally:
                coordinator.close()
            if loaded is not None and placement == "zstd-torn-frame":
                assert loaded >= N + 1 and path.read_bytes().startswith(base)
                return
        assert path.read_bytes() == data  # refused or read: the file as it was


NOT_UTF8 = [b"\xff", b"\xfe", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]
TEMPLATES = [
    dumps({"type": "llm/retry", "seq": N, "time": 2000, "data": {"attempt": 1, "note": "ab"}}),
    dumps({"type": "llm/retry", "seq": N + 1, "time": 2000, "data": {"note": "ab"}}),
    dumps({"type": "turn/end", "seq": N + 3, "time": 2000, "data": {"turn": 3, "reason": {"kind": "completed"}}}),
    dumps({"type": "turn/end", "seq": N, "time": 2000, "data": {"turn": 2, "reason": {"kind": "comp"}}}),
    dumps(
        {
            "type": "text-chunks",
            "seq0": N,
            "time0": 2000,
            "data": {"turn": 3, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]},
        }
    ),
    b'{"type":"llm/retry","seq":%d,"time":2000,"data":{"note":"\\ud800"}}' % N,  # JSON.parse keeps it
    b'{"type":"llm/retry","seq":%d,"time":2000,"data":{"note":"\\udc00"}}' % (N + 1),
    b'{"type":"llm/retry","seq":%d,"time":2000,"data":{"big":1e400}}' % N,
    b'["ab", 1]',
    b'"ab"',
    b"null",
]


def _splice(template: bytes, at: int, bad: bytes) -> bytes:
    cut = at % (len(template) + 1)
    return template[:cut] + bad + template[cut:]


PACKED_ROW_WITH_A_BAD_BYTE = _splice(
    b'{"type":"text-chunks","seq0":12,"time0":2000,"data":{"turn":3,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}}',
    102,
    b"\xff",
)

lines_after_a_valid_log = st.one_of(
    st.binary(max_size=60),
    st.tuples(st.binary(max_size=20), st.sampled_from(NOT_UTF8), st.binary(max_size=20)).map(b"".join),
    st.builds(_splice, st.sampled_from(TEMPLATES), st.integers(0, 200), st.sampled_from(NOT_UTF8)),
    st.sampled_from(TEMPLATES),
).map(lambda line: line.replace(b"\n", b""))


def _in_string(template: bytes, text: bytes) -> bytes:
    """``template`` with a byte that is not UTF-8 inside its string ``text``."""
    at = template.index(b'"' + text + b'"') + 2
    return template[:at] + b"\xff" + template[at:]


GARBAGE = b"\xff\xfegarbage \x80 not a record"


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_garbage_final_line_holding_bytes_that_are_not_utf8_is_a_torn_tail(placement: Placement) -> None:
    """The reported case: 12 events, then a newline-terminated garbage line with invalid UTF-8. The
    original truncates it and loads the 12 events (in a complete zstd frame it is damage)."""
    assert expected(placement, GARBAGE)[0] == ("damage" if placement == "zstd-complete-frame" else "torn")
    check_final_line(placement, GARBAGE)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize(
    "line",
    [
        _in_string(TEMPLATES[1], b"ab"),  # a record out of seq: torn, replacement or not
        _in_string(TEMPLATES[2], b"completed"),  # a turn/end out of seq: damage (the original throws)
        _in_string(TEMPLATES[0], b"ab"),  # in seq, readable only with U+FFFD: refused, never replaced
        _splice(TEMPLATES[0], 5, b"\xff"),  # the invalid byte breaks the JSON itself: torn
        TEMPLATES[0],  # a valid record: kept
        TEMPLATES[5],  # in seq, a lone surrogate escape orjson refuses: a record all the same, never cut
        TEMPLATES[6],  # out of seq with a lone surrogate escape: torn
        TEMPLATES[7],  # in seq, a number beyond the double range: a record (refused), never cut
    ],
    ids=["gap", "turn-end-gap", "needs-replacement", "unparsable", "valid", "lone-surrogate", "lone-gap", "inf"],
)
def test_each_final_line_shape_comes_out_as_the_original_decides(placement: Placement, line: bytes) -> None:
    check_final_line(placement, line)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(placement=st.sampled_from(PLACEMENTS), line=lines_after_a_valid_log)
@example(placement="raw", line=GARBAGE)
@example(placement="zstd-torn-frame", line=GARBAGE)
# An in-seq packed chunk row with a byte that is not UTF-8 inside a text: with the C accelerator its
# members decode as frozen events (dict subclasses), and the seq check must still see the row's seq.
@example(placement="raw", line=PACKED_ROW_WITH_A_BAD_BYTE)
@example(placement="zstd-complete-frame", line=PACKED_ROW_WITH_A_BAD_BYTE)
def test_any_bytes_as_the_final_line_come_out_as_the_original_decides(placement: Placement, line: bytes) -> None:
    check_final_line(placement, line)


def test_a_defective_line_with_invalid_utf8_followed_by_a_record_is_damage(tmp_path: Path) -> None:
    """Only the last line can be torn: the same garbage with a complete record after it is damage."""
    base = base_logs()[False]
    backend = JsonlBackend(str(tmp_path / "store"), compression="none")
    location = backend.locate(header())
    assert location is not None
    path = Path(location)
    path.parent.mkdir(parents=True)
    record = dumps({"type": "llm/retry", "seq": N, "time": 2000, "data": {"attempt": 1}})
    path.write_bytes(base + GARBAGE + b"\n" + record + b"\n")
    with pytest.raises(SessionPersistenceCorruptionError, match="a complete record follows it") as caught:
        backend.load_stored(SID)
    assert caught.value.offset == len(base)
    assert os.path.getsize(path) == len(base) + len(GARBAGE) + len(record) + 2
