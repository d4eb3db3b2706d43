"""Schema-17 physical row codec of the SQLite backend (spec ``persistence.md`` §5.5, §5.5.1, §5.6).

Checklist items of §8.11 (``compression.spec.ts``) and §8.12 #312 run here against the pure codec in
``agentlog.persistence._sqlite_codec``: a batch is encoded into the exact ``INSERT`` tuples the backend
binds, the tuples are turned back into fetched rows, and :func:`scan_rows` / :func:`decode_row` read them.
Each test is named after its checklist item and carries a ``# spec 8.11 #<n>`` comment. Behaviour that
needs a real database (ignorable tag names in a stored log, differential runs) lives in
``test_sqlite.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.errors import PersistenceError, SessionPersistenceCorruptionError
from agentlog.kernel.jsoncodec import dumps, loads
from agentlog.persistence.sqlite import _codec as codec
from agentlog.persistence.sqlite._codec import (
    MAX_PACKED_DATA_BYTES,
    MAX_PACKED_ROW_MEMBERS,
    EncodeError,
    StorageRowError,
    decode_packed_record,
    decode_row,
    decode_source_event_seqs,
    encode_batch,
    encode_data,
    encode_source_event_seqs,
    scan_prefix,
    scan_rows,
)

MAX_SAFE = 2**53 - 1
SID = "s1"
LOC = "/db/sessions.sqlite"


# --- builders -------------------------------------------------------------------------------------


def delta(seq: int, text: str, *, kind: str = "text-delta", time: int | None = None, **data: Any) -> dict[str, Any]:
    """A whitelisted text/reasoning delta in the live-append shape."""
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 1000 + seq if time is None else time,
        "data": {
            "turn": data.get("turn", 1),
            "step": data.get("step", 1),
            "chunk": {"type": kind, "index": data.get("index", 0), "text": text},
        },
    }


def tool_delta(seq: int, args: str, *, call_id: str = "call-1", name: str | None = None, **data: Any) -> dict[str, Any]:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": data.get("index", 0), "id": call_id}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": 1000 + seq,
        "data": {"turn": data.get("turn", 1), "step": data.get("step", 1), "chunk": chunk},
    }


def event(kind: str, seq: int, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1000 + seq, "data": data, **extra}


def turn_end(seq: int) -> dict[str, Any]:
    return event("turn/end", seq, {"turn": 1, "reason": {"kind": "completed"}})


def fetched(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Insert tuples → the rows a SELECT returns: ``(seq, type, time, data, sources, surface_op, ignorable)``."""
    return [row[1:] for row in rows]


def round_trip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return scan_rows(fetched(encode_batch(SID, events)), 0, location=LOC)


def packed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [row for row in rows if row[7] == 0]


def data_text(value: str | bytes) -> bytes:
    """The stored data column's JSON bytes (decompressing a BLOB)."""
    if isinstance(value, str):
        return value.encode()
    return zstandard.ZstdDecompressor().decompressobj().decompress(value)


def packed_row(tag: str, seq: int, time: int, data: Any, **columns: Any) -> tuple[Any, ...]:
    text = data if isinstance(data, (str, bytes)) else dumps(data).decode()
    return (seq, tag, time, text, columns.get("sources"), columns.get("surface"), 0)


def scalar_row(kind: str, seq: int, data: Any = None, **columns: Any) -> tuple[Any, ...]:
    text = data if isinstance(data, (str, bytes)) else dumps({} if data is None else data).decode()
    return (seq, kind, 1000 + seq, text, columns.get("sources"), columns.get("surface"), columns.get("ignorable"))


TEXT_DATA = {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "texts": ["a", "b", "c"]}


# --- §8.11 ----------------------------------------------------------------------------------------


def test_295_stores_a_100_member_run_in_one_row_and_restores_every_logical_event() -> None:
    # spec 8.11 #295
    events = [delta(seq, f"t{seq}") for seq in range(100)]
    rows = encode_batch(SID, events)
    assert len(rows) == 1
    assert rows[0][1:3] == (0, "text-chunks") and rows[0][7] == 0
    assert round_trip(events) == events


def test_296_partitions_long_and_large_runs_within_schema_owned_row_limits() -> None:
    # spec 8.11 #296
    def check(events: list[dict[str, Any]], expected_rows: list[tuple[str, int]]) -> None:
        rows = encode_batch(SID, events)
        shape = [(row[2], row[1]) for row in rows]
        assert shape == expected_rows
        for row in packed(rows):
            assert len(data_text(row[4])) <= MAX_PACKED_DATA_BYTES
        assert round_trip(events) == events

    long_run = [delta(seq, "x") for seq in range(1027)]
    check(long_run, [("text-chunks", 0), ("text-chunks", 1024)])

    big = "y" * 300_000
    check([delta(seq, big) for seq in range(4)], [("text-chunks", 0), ("assistant/chunk", 3)])

    huge = "z" * 400_000
    check(
        [delta(seq, huge) for seq in range(3)], [("assistant/chunk", 0), ("assistant/chunk", 1), ("assistant/chunk", 2)]
    )

    medium = "w" * 150_000
    check([delta(seq, medium) for seq in range(10)], [("text-chunks", 0), ("text-chunks", 6)])


def test_297_packs_every_owned_kind_and_preserves_optional_tool_call_names() -> None:
    # spec 8.11 #297
    events = [
        *(delta(seq, f"r{seq}", kind="reasoning-delta") for seq in range(3)),
        *(delta(seq, f"t{seq}") for seq in range(3, 6)),
        *(tool_delta(seq, f'{{"a":{seq}', name="bash") for seq in range(6, 9)),
        *(tool_delta(seq, f"{seq}", call_id="call-2", index=1) for seq in range(9, 12)),
    ]
    rows = encode_batch(SID, events)
    assert [(row[2], row[1]) for row in rows] == [
        ("reasoning-chunks", 0),
        ("text-chunks", 3),
        ("tool-call-chunks", 6),
        ("tool-call-chunks", 9),
    ]
    assert loads(rows[2][4])["name"] == "bash"
    assert "name" not in loads(rows[3][4])
    restored = round_trip(events)
    assert restored == events
    assert [list(e["data"]["chunk"]) for e in restored[6:12:3]] == [
        ["type", "index", "id", "name", "argumentsDelta"],
        ["type", "index", "id", "argumentsDelta"],
    ]


OFF_FORMAT: dict[str, Any] = {
    "extra envelope key": lambda seq: {**delta(seq, "x"), "ignorable": True},
    "surface metadata": lambda seq: {**delta(seq, "x"), "surfaceOp": "append"},
    "malformed data": lambda seq: event("assistant/chunk", seq, {"turn": 1, "step": 1}),
    "primitive data": lambda seq: event("assistant/chunk", seq, "text"),
    "malformed chunk": lambda seq: event(
        "assistant/chunk", seq, {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": 5}}
    ),
    "extra chunk key": lambda seq: event(
        "assistant/chunk",
        seq,
        {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x", "extra": 1}},
    ),
    "boolean placement": lambda seq: event(
        "assistant/chunk", seq, {"turn": True, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "x"}}
    ),
    "usage": lambda seq: event(
        "assistant/chunk", seq, {"turn": 1, "step": 1, "chunk": {"type": "usage", "usage": {"inputTokens": 1}}}
    ),
}


@pytest.mark.parametrize("case", sorted(OFF_FORMAT))
def test_298_keeps_every_off_format_delta_scalar_and_splits_incompatible_runs(case: str) -> None:
    # spec 8.11 #298 — an off-format event between two 2-member runs leaves everything scalar.
    events = [delta(0, "a"), delta(1, "b"), OFF_FORMAT[case](2), delta(3, "c"), delta(4, "d")]
    rows = encode_batch(SID, events)
    assert packed(rows) == []
    assert round_trip(events) == events


def test_298_splits_incompatible_runs() -> None:
    # spec 8.11 #298 — gaps, step/index changes, unsafe time gaps and mixed name presence split runs.
    def runs(events: list[dict[str, Any]]) -> list[int]:
        return [row[1] for row in packed(encode_batch(SID, events))]

    base = [delta(seq, "x") for seq in range(3)]
    assert runs([*base, *(delta(seq, "x", step=2) for seq in range(3, 6))]) == [0, 3]
    assert runs([*base, *(delta(seq, "x", index=1) for seq in range(3, 6))]) == [0, 3]
    assert runs([*base, *(delta(seq, "x", turn=1.0) for seq in range(3, 6))]) == [0, 3]  # 1 vs 1.0 spelling
    assert runs([*base, *(delta(seq, "x", kind="reasoning-delta") for seq in range(3, 6))]) == [0, 3]
    unsafe = [delta(0, "x", time=-MAX_SAFE), delta(1, "x", time=-MAX_SAFE), delta(2, "x", time=-MAX_SAFE)]
    unsafe += [delta(seq, "x", time=MAX_SAFE) for seq in range(3, 6)]
    assert runs(unsafe) == [0, 3]
    named = [tool_delta(seq, "a", name="bash") for seq in range(3)] + [tool_delta(seq, "a") for seq in range(3, 6)]
    assert runs(named) == [0, 3]
    other_id = [tool_delta(seq, "a") for seq in range(3)] + [tool_delta(seq, "a", call_id="c2") for seq in range(3, 6)]
    assert runs(other_id) == [0, 3]
    # A seq gap cannot occur inside one (contiguous) batch; the continuation rule itself refuses it.
    first, gapped = codec._classify(delta(0, "x")), codec._classify(delta(2, "x"))
    assert first is not None and gapped is not None and not codec._continues(first, gapped)
    # Off-format envelopes the backend would refuse to store are not packable either.
    assert codec._classify({**delta(0, "x"), "seq": -1}) is None
    assert codec._classify({**delta(0, "x"), "time": 1.5}) is None
    for events in (unsafe, named, other_id):
        assert round_trip(events) == events


def _text_row(**overrides: Any) -> dict[str, Any]:
    data = dict(TEXT_DATA)
    data.update(overrides.pop("data", {}))
    for key in overrides.pop("drop", ()):
        data.pop(key)
    return {"type": "text-chunks", "seq0": 0, "time0": 1000, "data": data, **overrides}


def _tool_row(**data: Any) -> dict[str, Any]:
    base = {"turn": 1, "step": 1, "index": 0, "dt": [1, 1], "id": "call-1", "name": "bash", "args": ["a", "b", "c"]}
    base.update(data)
    return {"type": "tool-call-chunks", "seq0": 0, "time0": 1000, "data": base}


MALFORMED: dict[str, Any] = {
    "extra envelope field": _text_row(extra=1),
    "negative sequence": _text_row(seq0=-1),
    "fractional time": _text_row(time0=1.5),
    "primitive data": {"type": "text-chunks", "seq0": 0, "time0": 1000, "data": 5},
    "text fields": _text_row(data={"extra": 1}),
    "non-numeric placement": _text_row(data={"turn": "1"}),
    "non-array members": _text_row(data={"texts": "abc"}),
    "too few members": _text_row(data={"texts": ["a", "b"], "dt": [1]}),
    "too many members": _text_row(data={"texts": ["a"] * 1025, "dt": [0] * 1024}),
    "non-string member": _text_row(data={"texts": ["a", 1, "c"]}),
    "invalid gaps": _text_row(data={"dt": [1.5, 1]}),
    "non-array gaps": _text_row(data={"dt": "1,1"}),
    "gap arity": _text_row(data={"dt": [1]}),
    "oversized data": _text_row(data={"texts": ["x" * 400_000] * 3}),
    "sequence overflow": _text_row(seq0=MAX_SAFE - 1),
    "time overflow": _text_row(time0=MAX_SAFE, data={"dt": [1, 1]}),
    "tool fields": _tool_row(texts=["a"]),
    "tool id": _tool_row(id=5),
    "tool name": _tool_row(name=5),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_299_rejects_malformed_packed_data(case: str) -> None:
    # spec 8.11 #299 — 19 cases.
    with pytest.raises(StorageRowError, match=r"malformed .* storage row"):
        decode_packed_record(MALFORMED[case])


def test_299_every_malformed_case_is_also_refused_as_a_stored_row() -> None:
    # spec 8.11 #299 — the same data reached through the data column of a physical row.
    for case, value in MALFORMED.items():
        if case in {"extra envelope field", "negative sequence", "fractional time"}:
            continue  # envelope values are typed columns; see test_281 for their row-level checks
        row = packed_row(value["type"], value["seq0"], value["time0"], value["data"])
        with pytest.raises(StorageRowError, match=r"malformed .* storage row"):
            decode_row(row)


def test_300_decodes_the_schema_17_row_vocabulary_without_another_package_codec() -> None:
    # spec 8.11 #300
    row = {"type": "text-chunks", "seq0": 4, "time0": 90, "data": {**TEXT_DATA, "dt": [2, -1]}}
    assert [e["time"] for e in decode_packed_record(row)] == [90, 92, 91]
    assert [e["seq"] for e in decode_packed_record(row)] == [4, 5, 6]
    for value in ({"type": "turn/start", "seq": 0}, [1, 2], "text", None):
        assert decode_packed_record(value) == [value]
    source = open(codec.__file__, encoding="utf-8").read()
    assert "chunkrows" not in source.split('"""', 2)[2]  # no import of the JSONL codec


def test_301_rejects_surface_columns_on_packed_rows() -> None:
    # spec 8.11 #301
    for columns in ({"surface": '"append"'}, {"sources": b"\x01"}):
        with pytest.raises(StorageRowError, match="packed surface fields must be null"):
            decode_row(packed_row("text-chunks", 0, 1000, TEXT_DATA, **columns))


def test_302_rejects_the_packed_discriminator_on_a_scalar_event_type() -> None:
    # spec 8.11 #302
    with pytest.raises(StorageRowError, match="packed discriminator requires a chunk tag"):
        decode_row(scalar_row("turn/start", 0, {"turn": 1}, ignorable=0))


@pytest.mark.parametrize("tag", ["text-chunks", "reasoning-chunks", "tool-call-chunks"])
def test_303_preserves_an_ignorable_logical_event_named_as_a_scalar_row(tag: str) -> None:
    # spec 8.11 #303
    logical = event(tag, 0, {"turn": 1, "step": 1, "index": 0, "dt": [], "texts": ["x"]}, ignorable=True)
    rows = encode_batch(SID, [logical])
    assert rows[0][2] == tag and rows[0][7] == 1
    assert round_trip([logical]) == [logical]


def test_304_compresses_large_data_and_delta_encodes_complete_provenance_arrays() -> None:
    # spec 8.11 #304
    large = event("tool/result", 0, {"text": "repetitive " * 1000}, sourceEventSeqs=list(range(1, 101)))
    small = event("turn/start", 1, {"turn": 1})
    rows = encode_batch(SID, [large, small])
    assert isinstance(rows[0][4], bytes) and isinstance(rows[1][4], str)
    assert len(rows[0][4]) < len(dumps(large["data"]))
    blob = rows[0][5]
    assert isinstance(blob, bytes) and len(blob) < len(dumps(large["sourceEventSeqs"]))
    assert decode_source_event_seqs(blob) == large["sourceEventSeqs"]
    assert round_trip([large, small]) == [large, small]
    assert encode_data(b'"' + b"x" * 4093 + b'"') == '"' + "x" * 4093 + '"'  # 4095 bytes: below the threshold


@pytest.mark.parametrize(
    "seqs",
    [[], [7], [9, 5, 3, 0], [0, MAX_SAFE, 0, MAX_SAFE], [MAX_SAFE], [3, 3, 3], list(range(200, 0, -7))],
)
def test_305_round_trips_empty_descending_and_maximum_safe_provenance_deltas(seqs: list[int]) -> None:
    # spec 8.11 #305
    blob = encode_source_event_seqs(seqs)
    assert decode_source_event_seqs(blob) == seqs
    if not seqs:
        assert blob == b""  # empty list = zero-length BLOB, distinct from NULL (absent)
    logical = event("assistant/message", 0, {}, sourceEventSeqs=seqs)
    assert round_trip([logical]) == [logical]


@pytest.mark.parametrize("bad", [-1, 0.5, True, MAX_SAFE + 1, "1"])
def test_306_rejects_invalid_provenance_sequence_before_encoding(bad: Any) -> None:
    # spec 8.11 #306
    with pytest.raises(EncodeError, match="sourceEventSeqs must contain non-negative safe integers") as info:
        encode_batch(SID, [event("assistant/message", 0, {}, sourceEventSeqs=[1, bad])])
    assert isinstance(info.value, TypeError) and isinstance(info.value, PersistenceError)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x80", "truncated varint"),
        (b"\x05\x80", "truncated varint"),
        (b"\x80\x00", "non-canonical varint"),
        (b"\x00\x01", "decoded seq is out of range"),  # 0, then -1
        (b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", "varint is out of range"),  # more than 9 bytes
        (encode_source_event_seqs([MAX_SAFE])[:-1] + b"\x20", "varint is out of range"),  # first > 2^53-1
        (encode_source_event_seqs([MAX_SAFE]) + b"\x02", "decoded seq is out of range"),
    ],
)
def test_307_rejects_malformed_compressed_and_delta_encoded_values(blob: bytes, message: str) -> None:
    # spec 8.11 #307 — provenance varints
    with pytest.raises(StorageRowError, match=f"malformed source_event_seqs storage value: {message}"):
        decode_source_event_seqs(blob)
    with pytest.raises(StorageRowError, match=message):
        decode_row(scalar_row("assistant/message", 0, {}, sources=blob))


def test_307_rejects_malformed_compressed_data() -> None:
    # spec 8.11 #307 — compressed data columns
    frame = zstandard.ZstdCompressor(level=3).compress(dumps({"text": "x" * 5000}))
    for blob in (b"not zstd at all", frame[: len(frame) // 2], b"", frame + b"trailing garbage"):
        with pytest.raises(StorageRowError, match="stored data"):
            decode_row(scalar_row("tool/result", 0, blob))
        with pytest.raises(StorageRowError, match="malformed text-chunks storage row"):
            decode_row(packed_row("text-chunks", 0, 1000, blob))
    invalid_utf8 = zstandard.ZstdCompressor(level=3).compress(b'"\xff\xfe"')
    with pytest.raises(StorageRowError, match="not valid UTF-8"):
        decode_row(scalar_row("tool/result", 0, invalid_utf8))
    assert decode_row(scalar_row("tool/result", 0, frame))[0]["data"] == {"text": "x" * 5000}


def test_308_rejects_an_oversized_packed_data_column_before_json_decoding() -> None:
    # spec 8.11 #308 — the text is not even JSON: only the size check can have produced the error.
    oversized = "{" + "x" * MAX_PACKED_DATA_BYTES
    with pytest.raises(StorageRowError, match=f"data exceeds {MAX_PACKED_DATA_BYTES} UTF-8 bytes"):
        decode_row(packed_row("text-chunks", 0, 1000, oversized))
    multibyte = "{" + "é" * (MAX_PACKED_DATA_BYTES // 2)  # fewer characters than bytes
    with pytest.raises(StorageRowError, match="data exceeds"):
        decode_row(packed_row("text-chunks", 0, 1000, multibyte))


def test_309_bounds_packed_data_while_decompressing() -> None:
    # spec 8.11 #309 — with and without a content size in the frame header.
    payload = dumps({**TEXT_DATA, "texts": ["x" * 700_000, "y" * 700_000, "z"]})
    with_size = zstandard.ZstdCompressor(level=3).compress(payload)
    streamed = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    without_size = streamed.compress(payload) + streamed.flush()
    for blob in (with_size, without_size):
        with pytest.raises(StorageRowError, match=f"decompresses beyond {MAX_PACKED_DATA_BYTES} bytes"):
            decode_row(packed_row("text-chunks", 0, 1000, blob))
    # The scalar cap is the backend's max_frame_bytes limit.
    limits = codec.Limits(max_data_bytes=1000)
    with pytest.raises(StorageRowError, match="decompresses beyond 1000 bytes"):
        decode_row(scalar_row("tool/result", 0, with_size), limits)


def test_310_every_damaged_row_is_committed_corruption_wherever_it_sits() -> None:
    # spec 8.11 #310 — changed by issue 7 defect 13: a SQLite row cannot tear, so a seq gap is committed
    # corruption even after the last turn/end (the original cut it as a "removable" tail).
    rows = fetched(encode_batch(SID, [event("turn/start", 0, {"turn": 1}), event("step/start", 1, {})]))
    gap = scalar_row("step/end", 3, {})
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 3") as info:
        scan_rows([*rows, gap], location=LOC)
    assert info.value.location == LOC and info.value.offset == 3
    assert "restore it from a backup" in str(info.value) and "agentlog export --partial" in str(info.value)
    preserved, damage = scan_prefix([*rows, gap], location=LOC)  # the partial read stops at the damage
    assert [e["seq"] for e in preserved] == [0, 1] and damage is not None and damage.offset == 3

    closer = fetched(encode_batch(SID, [turn_end(4)]))
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 3"):
        scan_rows([*rows, gap, *closer], location=LOC)

    bad_packed = packed_row("text-chunks", 0, 1000, {**TEXT_DATA, "texts": 5})
    tail = fetched(encode_batch(SID, [turn_end(3)]))
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 0"):
        scan_rows([bad_packed, tail[0]], location=LOC)
    assert scan_prefix([*rows], location=LOC) == (scan_rows(rows, location=LOC), None)


def test_311_treats_a_malformed_packed_tail_row_as_corruption() -> None:
    # spec 8.11 #311 — changed by issue 7 defect 13: the whole malformed packed row is reported, not removed.
    bad_packed = packed_row("text-chunks", 0, 1000, {**TEXT_DATA, "texts": ["a", "b"]})
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid committed physical row at seq 0"):
        scan_rows([bad_packed], location=LOC)
    preserved, damage = scan_prefix([bad_packed], location=LOC)
    assert preserved == [] and damage is not None and "3..1024 strings" in str(damage)


# --- §8.12 ------------------------------------------------------------------------------------------


def test_312_keeps_large_data_as_text_when_its_zstandard_frame_is_not_smaller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # spec 8.12 #312 — valid UTF-8 JSON that zstd cannot shrink is hard to build, so the frame is faked
    # to come out as large as (then larger than) the text: "strictly smaller" keeps TEXT both times.
    text = dumps({"text": "q" * 8000})

    class Unprofitable:
        def __init__(self, extra: int) -> None:
            self.extra = extra

        def compress(self, data: bytes) -> bytes:
            return b"\x00" * (len(data) + self.extra)

    for extra in (0, 1):
        monkeypatch.setattr(codec, "_compressor", lambda extra=extra: Unprofitable(extra))
        assert encode_data(text) == text.decode()
    monkeypatch.undo()
    assert isinstance(encode_data(text), bytes)


# --- further codec properties ---------------------------------------------------------------------------


def test_refuses_envelopes_the_columns_cannot_represent() -> None:
    # Anything outside {type, seq, time, data, sourceEventSeqs?, surfaceOp?, ignorable?: true} would be
    # silently dropped by the column layout, so the encoder refuses it before any write.
    cases = [
        ({**event("turn/start", 0, {}), "extra": 1}, "would be lost"),
        ({**event("turn/start", 0, {}), "ignorable": False}, "literal true"),
        ({"type": "turn/start", "seq": 0, "time": 1}, "without 'data'"),
        (event("turn/start", 0, {}) | {"seq": 1.0}, "seq must be a non-negative safe integer"),
        (event("turn/start", 0, {}) | {"time": MAX_SAFE + 1}, "time must be a safe integer"),
        (event("", 0, {}), "type must be a non-empty string"),
    ]
    for logical, message in cases:
        with pytest.raises(EncodeError, match=message):
            encode_batch(SID, [logical])
    with pytest.raises(EncodeError, match="not contiguous"):
        encode_batch(SID, [event("a/b", 0, {}), event("a/b", 2, {})])


def test_row_level_primitives_are_checked_before_json() -> None:
    # spec §5.5 decodeEventRow messages (also pinned end-to-end by test_281 in test_sqlite.py).
    good = scalar_row("turn/start", 0, {"turn": 1})
    cases = [
        ((-1, *good[1:]), "stored seq must be a non-negative safe integer"),
        ((MAX_SAFE + 1, *good[1:]), "stored seq must be a non-negative safe integer"),
        ((0, "", *good[2:]), "stored type must be a non-empty string"),
        ((*good[:2], 2**60, *good[3:]), "stored time must be a safe integer"),
        ((*good[:3], 5, *good[4:]), "stored data must be a string or blob"),
        ((*good[:4], "text", *good[5:]), "stored source_event_seqs must be a blob or null"),
        ((*good[:5], 5, good[6]), "stored surface_op must be a string or null"),
        ((*good[:6], 2), "stored ignorable must be null, 0 or 1"),
        ((*good[:3], codec.InvalidText(b"\xff"), *good[4:]), "stored data is not valid UTF-8 text"),
        (good[:6], "must have 7 columns"),
    ]
    for row, message in cases:
        with pytest.raises(StorageRowError, match=message):
            decode_row(row)
    with pytest.raises(StorageRowError, match="stored data is not valid JSON"):
        decode_row(scalar_row("turn/start", 0, "{nope"))
    with pytest.raises(StorageRowError, match="stored surface_op is not valid JSON"):
        decode_row(scalar_row("user/message", 0, {}, surface="{nope"))


def test_deep_values_decode_within_the_depth_limit_and_fail_typed_beyond_it() -> None:
    deep: Any = "leaf"
    for _ in range(20_000):
        deep = [deep]
    logical = event("custom/deep", 0, deep)
    rows = encode_batch(SID, [logical])
    restored = decode_row(fetched(rows)[0])[0]["data"]
    for _ in range(20_000):
        assert isinstance(restored, list) and len(restored) == 1
        restored = restored[0]
    assert restored == "leaf"
    with pytest.raises(StorageRowError, match="not valid JSON"):
        decode_row(fetched(rows)[0], codec.Limits(max_depth=1000))


def test_bounded_rows_match_the_jsonl_codec_within_the_bounds() -> None:
    # Same eligibility and continuation rules as the session-core codec (§4.3.1): below the bounds
    # both produce the same rows, member for member.
    from agentlog.kernel.chunkrows import pack_chunk_runs

    events = [
        event("turn/start", 0, {"turn": 1}),
        *(delta(seq, f"r{seq}", kind="reasoning-delta") for seq in range(1, 5)),
        *(delta(seq, f"t{seq}") for seq in range(5, 7)),
        *(tool_delta(seq, "{", name="bash") for seq in range(7, 12)),
        *(delta(seq, f"t{seq}", step=2) for seq in range(12, 20)),
        turn_end(20),
    ]
    expected: list[Any] = pack_chunk_runs(events)
    rows = encode_batch(SID, events)
    assert len(rows) == len(expected)
    for row, record in zip(rows, expected, strict=True):
        if row[7] == 0:
            assert (row[2], row[1], row[3]) == (record["type"], record["seq0"], record["time0"])
            assert loads(row[4]) == record["data"]
        else:
            assert row[1] == record["seq"] and row[2] == record["type"]
    assert MAX_PACKED_ROW_MEMBERS == 1024


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 300), st.integers(0, MAX_SAFE)), max_size=12))
def test_provenance_varints_round_trip(seqs: list[int]) -> None:
    assert decode_source_event_seqs(encode_source_event_seqs(seqs)) == seqs


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=24))
def test_provenance_decoding_accepts_only_canonical_encodings(blob: bytes) -> None:
    # Whatever decodes must re-encode to the very same bytes (fast and slow paths alike).
    try:
        seqs = decode_source_event_seqs(blob)
    except StorageRowError:
        return
    assert encode_source_event_seqs(seqs) == blob


def test_the_python_expansion_matches_the_accelerated_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the kernel's C accelerator, packed members come back as frozen Events; without it, as plain
    # dicts. Both must be the same events, key order included.
    events = [
        *(delta(seq, f"t{seq}", time=1000 - seq) for seq in range(5)),
        *(tool_delta(seq, f"{seq}", name="bash", turn=2.5) for seq in range(5, 9)),
        *(tool_delta(seq, f"{seq}", call_id="c2") for seq in range(9, 12)),
    ]
    rows = fetched(encode_batch(SID, events))
    accelerated = [event for row in rows for event in decode_row(row)]
    monkeypatch.setattr(codec, "_expand_row", None)
    plain = [event for row in rows for event in decode_row(row)]
    assert all(type(event) is dict for event in plain)
    assert plain == accelerated == events
    assert dumps(plain) == dumps(accelerated) == dumps(events)
