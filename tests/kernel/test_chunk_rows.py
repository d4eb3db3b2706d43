"""Chunk-row storage codec (spec §15, checklist §19.13 items 224–256).

Every test name starts with ``test_chunk_rows__`` and carries a ``# spec 19.13 #<n>`` comment so a failure
traces back to its checklist item. Round trips go through real JSON (orjson) because the codec's contract
is about what a log line decodes to, not about in-memory objects. Tests after the checklist pin the
decisions this Python port had to make where JS and Python numbers differ.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import ChunkRowError
from agentlog.kernel import chunkrows
from agentlog.kernel.chunkrows import MIN_RUN, decode_storage_record, pack_chunk_runs
from agentlog.kernel.jsonvalue import FrozenDict

MAX_SAFE = 2**53 - 1

Event = dict[str, Any]


def chunk_event(seq: int, time: Any, chunk: Any, turn: Any = 1, step: Any = 1) -> Event:
    """An ``assistant/chunk`` event in the exact live-append shape."""
    return {
        "type": "assistant/chunk",
        "seq": seq,
        "time": time,
        "data": {"turn": turn, "step": step, "chunk": chunk},
    }


def delta_run(kind: str, count: int, seq0: int = 0, index: int = 0) -> list[Event]:
    """``count`` contiguous deltas of one kind, 10 ms apart from t=1000, texts ``t0``, ``t1``…"""
    return [chunk_event(seq0 + k, 1000 + 10 * k, {"type": kind, "index": index, "text": f"t{k}"}) for k in range(count)]


def tool_delta(seq: int, time: int, call_id: str, args: str, *, name: str | None = None, index: int = 0) -> Event:
    chunk: dict[str, Any] = {"type": "tool-call-delta", "index": index, "id": call_id}
    if name is not None:
        chunk["name"] = name
    chunk["argumentsDelta"] = args
    return chunk_event(seq, time, chunk)


def json_round_trip(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def decode_all(records: list[Any]) -> list[Any]:
    """Serialise every record as one log line, parse it back and decode it (what persistence does)."""
    out: list[Any] = []
    for record in records:
        out.extend(decode_storage_record(json_round_trip(record)))
    return out


def assert_exact(decoded: list[Any], events: list[Any]) -> None:
    """Equal values *and* identical bytes: catches key order, absent-vs-null and 1-vs-1.0 drift."""
    assert decoded == events
    assert orjson.dumps(decoded) == orjson.dumps(events)


def text_row(**overrides: Any) -> dict[str, Any]:
    """A valid one-member ``text-chunks`` row, with top-level or data fields overridden."""
    data: dict[str, Any] = {"turn": 1, "step": 1, "index": 0, "dt": [], "texts": ["a"]}
    row: dict[str, Any] = {"type": "text-chunks", "seq0": 0, "time0": 1, "data": data}
    for key, value in overrides.items():
        if key in data:
            data[key] = value
        else:
            row[key] = value
    return row


def raises_malformed(row: Any, tag: str, why: str) -> None:
    """Decoding must raise ChunkRowError with exactly the spec's text for ``why``."""
    with pytest.raises(ChunkRowError) as info:
        decode_storage_record(row)
    assert str(info.value) == f"malformed {tag} storage row: {why}"
    assert info.value.code == "MALFORMED_STORAGE_ROW"


# ---------------------------------------------------------------------------------------------------------
# packChunkRuns (items 224–236)
# ---------------------------------------------------------------------------------------------------------


def test_chunk_rows__packs_text_delta_run_into_one_text_chunks_row_and_round_trips() -> None:
    # spec 19.13 #224
    events = delta_run("text-delta", 5)
    packed = pack_chunk_runs(events)
    assert packed == [
        {
            "type": "text-chunks",
            "seq0": 0,
            "time0": 1000,
            "data": {
                "turn": 1,
                "step": 1,
                "index": 0,
                "dt": [10, 10, 10, 10],
                "texts": ["t0", "t1", "t2", "t3", "t4"],
            },
        }
    ]
    row = packed[0]
    assert list(row) == ["type", "seq0", "time0", "data"]
    assert list(row["data"]) == ["turn", "step", "index", "dt", "texts"]
    assert_exact(decode_all(packed), events)


def test_chunk_rows__packs_reasoning_and_tool_call_runs_under_their_own_tags() -> None:
    # spec 19.13 #225
    reasoning = delta_run("reasoning-delta", 3)
    tool_call = [tool_delta(seq, 1000 + seq, "c1", f"a{seq}", name="write", index=1) for seq in (3, 4, 5)]
    packed = pack_chunk_runs(reasoning + tool_call)
    assert [record["type"] for record in packed] == ["reasoning-chunks", "tool-call-chunks"]
    assert packed[0]["data"] == {
        "turn": 1,
        "step": 1,
        "index": 0,
        "dt": [10, 10],
        "texts": ["t0", "t1", "t2"],
    }
    assert packed[1] == {
        "type": "tool-call-chunks",
        "seq0": 3,
        "time0": 1003,
        "data": {
            "turn": 1,
            "step": 1,
            "index": 1,
            "dt": [1, 1],
            "id": "c1",
            "name": "write",
            "args": ["a3", "a4", "a5"],
        },
    }
    assert list(packed[1]["data"]) == ["turn", "step", "index", "dt", "id", "name", "args"]
    assert_exact(decode_all(packed), reasoning + tool_call)


def test_chunk_rows__packs_name_less_tool_call_run_and_round_trips_field_absence() -> None:
    # spec 19.13 #226
    events = [tool_delta(seq, 1000, "c1", f"a{seq}") for seq in range(3)]
    packed = pack_chunk_runs(events)
    assert len(packed) == 1
    assert "name" not in packed[0]["data"]
    assert list(packed[0]["data"]) == ["turn", "step", "index", "dt", "id", "args"]
    decoded = decode_all(packed)
    assert_exact(decoded, events)
    assert all("name" not in event["data"]["chunk"] for event in decoded)
    assert all(list(event["data"]["chunk"]) == ["type", "index", "id", "argumentsDelta"] for event in decoded)


def test_chunk_rows__leaves_runs_shorter_than_three_events_verbatim() -> None:
    # spec 19.13 #227
    assert MIN_RUN == 3
    events = delta_run("text-delta", 2)
    packed = pack_chunk_runs(events)
    assert packed == events
    assert all(a is b for a, b in zip(packed, events, strict=True))  # verbatim means the same objects
    assert pack_chunk_runs([]) == []


def test_chunk_rows__leaves_non_delta_chunks_and_non_chunk_events_verbatim_between_runs() -> None:
    # spec 19.13 #228
    events = [
        chunk_event(0, 1000, {"type": "block-start", "index": 0, "blockType": "text"}),
        *delta_run("text-delta", 3, 1),
        chunk_event(4, 1040, {"type": "block-end", "index": 0, "block": {"type": "text", "text": "t0t1t2"}}),
        {"type": "step/end", "seq": 5, "time": 1050, "data": {"turn": 1, "step": 1}},
    ]
    packed = pack_chunk_runs(events)
    assert len(packed) == 4
    assert packed[0] is events[0]
    assert packed[1]["type"] == "text-chunks"
    assert packed[1]["seq0"] == 1
    assert packed[2] is events[4]
    assert packed[3] is events[5]
    assert_exact(decode_all(packed), events)


def test_chunk_rows__breaks_a_run_on_a_seq_gap() -> None:
    # spec 19.13 #229
    events = delta_run("text-delta", 3)
    events[2]["seq"] = 9
    assert pack_chunk_runs(events) == events  # both halves are too short to pack


def test_chunk_rows__breaks_a_run_on_a_kind_switch() -> None:
    # spec 19.13 #230
    events = delta_run("text-delta", 2) + delta_run("reasoning-delta", 1, 2)
    assert pack_chunk_runs(events) == events


def test_chunk_rows__breaks_a_run_on_a_block_index_switch() -> None:
    # spec 19.13 #231
    events = delta_run("text-delta", 2) + delta_run("text-delta", 1, 2, index=7)
    assert pack_chunk_runs(events) == events


def test_chunk_rows__breaks_a_run_on_a_step_switch() -> None:
    # spec 19.13 #232
    events = delta_run("text-delta", 3)
    events[2] = chunk_event(2, events[2]["time"], events[2]["data"]["chunk"], 1, 2)
    assert pack_chunk_runs(events) == events
    # The same step on all three packs, so the step is what broke the run above.
    assert len(pack_chunk_runs(delta_run("text-delta", 3))) == 1


def test_chunk_rows__breaks_a_tool_call_run_on_call_id_or_name_change() -> None:
    # spec 19.13 #233
    id_switch = [tool_delta(0, 1000, "c1", "a", name="w"), tool_delta(1, 1000, "c1", "a", name="w")]
    id_switch.append(tool_delta(2, 1000, "c2", "a", name="w"))
    assert pack_chunk_runs(id_switch) == id_switch
    name_presence = [tool_delta(0, 1000, "c1", "a", name="w"), tool_delta(1, 1000, "c1", "a", name="w")]
    name_presence.append(tool_delta(2, 1000, "c1", "a"))
    assert pack_chunk_runs(name_presence) == name_presence
    name_absent_first = [tool_delta(0, 1000, "c1", "a"), tool_delta(1, 1000, "c1", "a")]
    name_absent_first.append(tool_delta(2, 1000, "c1", "a", name="w"))
    assert pack_chunk_runs(name_absent_first) == name_absent_first
    name_value = [tool_delta(0, 1000, "c1", "a", name="w"), tool_delta(1, 1000, "c1", "a", name="w")]
    name_value.append(tool_delta(2, 1000, "c1", "a", name="r"))
    assert pack_chunk_runs(name_value) == name_value


def test_chunk_rows__stores_an_off_whitelist_delta_verbatim() -> None:
    # spec 19.13 #234 (extra envelope field, non-string text, fractional time)
    extra_field = {
        **chunk_event(0, 1000, {"type": "text-delta", "index": 0, "text": "x"}),
        "surfaceOp": "append",
    }
    bad_text = chunk_event(1, 1001, {"type": "text-delta", "index": 0, "text": 7})
    fractional_time = chunk_event(2, 1001.5, {"type": "text-delta", "index": 0, "text": "y"})
    events = [extra_field, bad_text, fractional_time]
    packed = pack_chunk_runs(events)
    assert packed == events
    assert all(a is b for a, b in zip(packed, events, strict=True))
    # Each disqualifier alone breaks an otherwise packable run of three.
    for bad in (extra_field, bad_text, fractional_time):
        run = delta_run("text-delta", 3)
        run[1] = {**bad, "seq": 1}
        assert pack_chunk_runs(run) == run


def test_chunk_rows__breaks_a_run_on_a_time_gap_beyond_safe_integer_range() -> None:
    # spec 19.13 #235: both endpoints are safe, but their difference (~2**54) is not; a JS reader would
    # round that gap and decode a different timestamp.
    a = -MAX_SAFE
    b = MAX_SAFE - 1
    assert float(a) + (float(b) - float(a)) != b  # the double rounding this guard exists for
    events = [
        chunk_event(0, a, {"type": "text-delta", "index": 0, "text": "x"}),
        chunk_event(1, b, {"type": "text-delta", "index": 0, "text": "y"}),
        chunk_event(2, b + 1, {"type": "text-delta", "index": 0, "text": "z"}),
    ]
    assert pack_chunk_runs(events) == events  # split at the gap; both halves too short
    assert_exact(decode_all(pack_chunk_runs(events)), events)
    # A gap of exactly MAX_SAFE is itself a safe integer and keeps the run going.
    edge = [
        chunk_event(0, 0, {"type": "text-delta", "index": 0, "text": "x"}),
        chunk_event(1, MAX_SAFE, {"type": "text-delta", "index": 0, "text": "y"}),
        chunk_event(2, 0, {"type": "text-delta", "index": 0, "text": "z"}),
    ]
    packed = pack_chunk_runs(edge)
    assert [row["data"]["dt"] for row in packed] == [[MAX_SAFE, -MAX_SAFE]]
    assert_exact(decode_all(packed), edge)


def test_chunk_rows__stores_a_delta_with_an_off_whitelist_data_envelope_verbatim() -> None:
    # spec 19.13 #236 (7 malformed shapes, as parsed from a fixture file)
    def mk(seq: int, data: Any) -> Event:
        return {"type": "assistant/chunk", "seq": seq, "time": 1000, "data": data}

    events = [
        mk(0, "not-an-object"),
        mk(1, {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "a"}, "extra": 1}),
        mk(2, {"turn": "x", "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "a"}}),
        mk(3, {"turn": 1, "step": 1, "chunk": "not-an-object"}),
        mk(4, {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": "x", "text": "a"}}),
        mk(
            5,
            {
                "turn": 1,
                "step": 1,
                "chunk": {"type": "tool-call-delta", "index": 0, "id": 7, "argumentsDelta": "a"},
            },
        ),
        mk(
            6,
            {
                "turn": 1,
                "step": 1,
                "chunk": {"type": "tool-call-delta", "index": 0, "id": "c", "name": 7, "argumentsDelta": "a"},
            },
        ),
    ]
    packed = pack_chunk_runs(events)
    assert packed == events
    assert all(a is b for a, b in zip(packed, events, strict=True))


# ---------------------------------------------------------------------------------------------------------
# decodeStorageRecord (items 237–255)
# ---------------------------------------------------------------------------------------------------------


def test_chunk_rows__decode_passes_non_row_values_through_as_single_events_unvalidated() -> None:
    # spec 19.13 #237
    event = {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1}}
    decoded = decode_storage_record(event)
    assert decoded == [event]
    assert decoded[0] is event
    assert decode_storage_record("junk") == ["junk"]
    assert decode_storage_record(None) == [None]
    # Unvalidated: an envelope no session would accept still passes through untouched.
    odd = {"type": "assistant/chunk", "seq": -5, "bogus": True}
    assert decode_storage_record(odd) == [odd]
    assert decode_storage_record([1, 2]) == [[1, 2]]
    assert decode_storage_record({"type": ["text-chunks"]}) == [{"type": ["text-chunks"]}]


def test_chunk_rows__reconstructs_timestamps_through_negative_dt_gaps() -> None:
    # spec 19.13 #238 (the clock stepped back)
    events = [
        chunk_event(0, 1000, {"type": "text-delta", "index": 0, "text": "a"}),
        chunk_event(1, 990, {"type": "text-delta", "index": 0, "text": "b"}),
        chunk_event(2, 995, {"type": "text-delta", "index": 0, "text": "c"}),
    ]
    packed = pack_chunk_runs(events)
    assert packed[0]["data"]["dt"] == [-10, 5]
    assert_exact(decode_all(packed), events)


def test_chunk_rows__throws_on_non_object_data() -> None:
    # spec 19.13 #239
    raises_malformed(
        {"type": "text-chunks", "seq0": 0, "time0": 1, "data": "x"}, "text-chunks", "data must be an object"
    )


def test_chunk_rows__throws_on_envelope_with_extra_keys() -> None:
    # spec 19.13 #240
    raises_malformed(text_row(extra=1), "text-chunks", "envelope must be exactly {type, seq0, time0, data}")


def test_chunk_rows__throws_on_negative_seq0() -> None:
    # spec 19.13 #241
    raises_malformed(text_row(seq0=-1), "text-chunks", "seq0 must be a non-negative safe integer")


def test_chunk_rows__throws_on_non_finite_time0() -> None:
    # spec 19.13 #242
    raises_malformed(text_row(time0=float("inf")), "text-chunks", "time0 must be a safe integer")


def test_chunk_rows__throws_on_fractional_time0() -> None:
    # spec 19.13 #243
    raises_malformed(text_row(time0=1.5), "text-chunks", "time0 must be a safe integer")


def test_chunk_rows__throws_on_data_shape_mismatch() -> None:
    # spec 19.13 #244 (`args` on a text row)
    row = {
        "type": "text-chunks",
        "seq0": 0,
        "time0": 1,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [], "args": ["a"]},
    }
    raises_malformed(row, "text-chunks", "data must be exactly {turn, step, index, dt, texts}")


def test_chunk_rows__throws_on_non_string_member() -> None:
    # spec 19.13 #245
    raises_malformed(text_row(texts=[7]), "text-chunks", "texts must be a non-empty string array")


def test_chunk_rows__throws_on_empty_member_list() -> None:
    # spec 19.13 #246
    raises_malformed(text_row(texts=[]), "text-chunks", "texts must be a non-empty string array")


def test_chunk_rows__throws_on_dt_arity_mismatch() -> None:
    # spec 19.13 #247
    raises_malformed(text_row(dt=[1, 2], texts=["a", "b"]), "text-chunks", "dt length 2 does not match 2 members")


def test_chunk_rows__throws_on_non_finite_dt_gap() -> None:
    # spec 19.13 #248
    raises_malformed(
        text_row(dt=[float("nan")], texts=["a", "b"]), "text-chunks", "dt must be an array of safe integers"
    )


def test_chunk_rows__throws_on_fractional_dt_gap() -> None:
    # spec 19.13 #249
    raises_malformed(text_row(dt=[0.5], texts=["a", "b"]), "text-chunks", "dt must be an array of safe integers")


def test_chunk_rows__throws_on_member_seq_leaving_safe_range() -> None:
    # spec 19.13 #250
    row = text_row(seq0=MAX_SAFE, dt=[0, 0], texts=["a", "b", "c"])
    raises_malformed(row, "text-chunks", "member seqs must stay safe integers")
    # The last member may sit exactly on the bound.
    assert [e["seq"] for e in decode_storage_record(text_row(seq0=MAX_SAFE - 2, dt=[0, 0], texts=["a", "b", "c"]))] == [
        MAX_SAFE - 2,
        MAX_SAFE - 1,
        MAX_SAFE,
    ]


def test_chunk_rows__throws_on_member_time_leaving_safe_range() -> None:
    # spec 19.13 #251
    raises_malformed(
        text_row(time0=MAX_SAFE, dt=[1], texts=["a", "b"]),
        "text-chunks",
        "member times must stay safe integers",
    )
    # A *running* time that leaves the range fails even if a later gap would bring it back.
    row = text_row(time0=-MAX_SAFE, dt=[-1, 1], texts=["a", "b", "c"])
    raises_malformed(row, "text-chunks", "member times must stay safe integers")


def test_chunk_rows__throws_on_non_numeric_turn() -> None:
    # spec 19.13 #252
    raises_malformed(text_row(turn="x"), "text-chunks", "turn/step/index must be numbers")


def test_chunk_rows__throws_on_tool_call_row_without_id() -> None:
    # spec 19.13 #253
    row = {
        "type": "tool-call-chunks",
        "seq0": 0,
        "time0": 1,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [], "args": ["a"]},
    }
    raises_malformed(row, "tool-call-chunks", "data must be exactly {turn, step, index, id, name?, dt, args}")


def test_chunk_rows__throws_on_tool_call_row_with_non_string_id() -> None:
    # spec 19.13 #254
    data = {"turn": 1, "step": 1, "index": 0, "id": 7, "dt": [], "args": ["a"]}
    row = {"type": "tool-call-chunks", "seq0": 0, "time0": 1, "data": data}
    raises_malformed(row, "tool-call-chunks", "id (and name when present) must be strings")


def test_chunk_rows__throws_on_tool_call_row_with_non_string_name() -> None:
    # spec 19.13 #255
    data = {"turn": 1, "step": 1, "index": 0, "id": "c", "name": 7, "dt": [], "args": ["a"]}
    row = {"type": "tool-call-chunks", "seq0": 0, "time0": 1, "data": data}
    raises_malformed(row, "tool-call-chunks", "id (and name when present) must be strings")


# ---------------------------------------------------------------------------------------------------------
# Property (item 256)
# ---------------------------------------------------------------------------------------------------------

# A batch is a list of segments; a segment repeats one chunk "template" (kind, placement, call identity)
# with per-member text and time, so runs of every kind actually form. Independent per-event draws would
# almost never line up turn, step, kind and index three times in a row, leaving the packer untested.
_indexes = st.integers(0, 2)
_call_ids = st.sampled_from(["c1", "c2"])
_templates = st.one_of(
    st.builds(lambda i: ("text-delta", {"index": i}), _indexes),
    st.builds(lambda i: ("reasoning-delta", {"index": i}), _indexes),
    st.builds(lambda i, c: ("tool-call-delta", {"index": i, "id": c}), _indexes, _call_ids),
    st.builds(
        lambda i, c, n: ("tool-call-delta", {"index": i, "id": c, "name": n}),
        _indexes,
        _call_ids,
        st.sampled_from(["write", "read"]),
    ),
    st.builds(lambda i: ("block-start", {"index": i, "blockType": "text"}), _indexes),
    st.just(("finish", {"reason": {"kind": "stop"}})),
    st.just(("step/end", {})),  # an event type other than assistant/chunk
)
# Mostly realistic clocks (so runs form), sometimes the full safe range (so the gap-overflow guard and
# negative gaps are exercised: two safe endpoints can differ by more than a double subtracts exactly).
_times = st.one_of(st.integers(995, 1100), st.integers(995, 9000), st.integers(-MAX_SAFE, MAX_SAFE))
# A few members differ from their segment in the ways hardest to spot. Flip 1: text and reasoning deltas
# swap kind, tool-call deltas toggle whether `name` is present. Flip 2: text/reasoning deltas move to the
# next block index, tool-call deltas switch call id. Flip 0 is the common case: no difference.
_members = st.lists(
    st.tuples(_times, st.text(max_size=3), st.integers(0, 15).map(lambda n: n if n < 3 else 0)),
    min_size=1,
    max_size=6,
)
_segments = st.tuples(st.integers(0, 1), st.integers(0, 1), _templates, _members)
_FLIPPED_KIND = {"text-delta": "reasoning-delta", "reasoning-delta": "text-delta"}
_FLIPPED_ID = {"c1": "c2", "c2": "c1"}


def _member_event(
    seq: int, time: int, turn: int, step: int, template: tuple[str, dict[str, Any]], text: str, flip: int
) -> Event:
    """One event in the canonical key order an append produces (the codec matches key sets, not order)."""
    kind, fields = template
    if kind == "step/end":
        return {"type": "step/end", "seq": seq, "time": time, "data": {"turn": turn, "step": step}}
    if kind in _FLIPPED_KIND:
        chunk: dict[str, Any] = {
            "type": _FLIPPED_KIND[kind] if flip == 1 else kind,
            "index": fields["index"] + (flip == 2),
            "text": text,
        }
    elif kind == "tool-call-delta":
        chunk = {"type": kind, "index": fields["index"], "id": _FLIPPED_ID[fields["id"]] if flip == 2 else fields["id"]}
        if ("name" in fields) != (flip == 1):
            chunk["name"] = fields.get("name", "write")
        chunk["argumentsDelta"] = text
    else:
        chunk = {"type": kind, **fields}
    return chunk_event(seq, time, chunk, turn, step)


def _to_batch(
    segments: list[tuple[int, int, tuple[str, dict[str, Any]], list[tuple[int, str, int]]]],
) -> list[Event]:
    """Contiguous seqs from 0, normalised through JSON so the batch is exactly what a log reader holds."""
    batch: list[Event] = []
    for turn, step, template, members in segments:
        for time, text, flip in members:
            batch.append(_member_event(len(batch), time, turn, step, template, text, flip))
    normalised: list[Event] = json_round_trip(batch)
    return normalised


_batches = st.lists(_segments, max_size=8).map(_to_batch)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches)
def test_chunk_rows__json_serialized_pack_then_decode_reproduces_every_batch_exactly(
    events: list[Event],
) -> None:
    # spec 19.13 #256
    packed = pack_chunk_runs(events)
    assert_exact(decode_all(packed), events)
    # Rows only ever replace runs of at least MIN_RUN events; everything else is the input object itself.
    members = 0
    for record in packed:
        if record["type"] in ("text-chunks", "reasoning-chunks", "tool-call-chunks"):
            data: dict[str, Any] = dict(record["data"])
            payload = data["args" if record["type"] == "tool-call-chunks" else "texts"]
            assert len(payload) >= MIN_RUN
            members += len(payload)
        else:
            assert any(record is event for event in events)
            members += 1
    assert members == len(events)


# ---------------------------------------------------------------------------------------------------------
# Port decisions (Python numbers vs JS numbers; not separate checklist items)
# ---------------------------------------------------------------------------------------------------------


def test_chunk_rows__port_accepts_frozen_style_dict_subclass_events() -> None:
    # port decision, spec §15.2: committed events are frozen dict subclasses in this port
    class Frozen(dict[str, Any]):
        pass

    events = [Frozen(e, data=Frozen(e["data"], chunk=Frozen(e["data"]["chunk"]))) for e in delta_run("text-delta", 3)]
    packed = pack_chunk_runs(events)
    assert len(packed) == 1
    assert type(packed[0]) is dict
    assert_exact(decode_all(packed), [dict(e) for e in events])


def test_chunk_rows__port_requires_int_seq_and_time_not_bool_or_integral_float() -> None:
    # port decision, spec §0/§15.2: bool and integral floats are not safe integers here
    for field, bad in (("seq", True), ("time", 1000.0), ("seq", 1.0), ("time", MAX_SAFE + 1)):
        run = delta_run("text-delta", 3)
        run[1][field] = bad
        assert pack_chunk_runs(run) == run
    run = delta_run("text-delta", 3)
    run[0]["seq"] = -1
    run[1]["seq"] = 0
    run[2]["seq"] = 1
    assert pack_chunk_runs(run)[0] is run[0]  # a negative seq never joins a run


def test_chunk_rows__port_never_merges_numbers_that_serialise_differently() -> None:
    # port decision, spec §15.2: 1 and 1.0, 0.0 and -0.0 are equal in Python but not in JSON bytes
    for field, values in (("turn", (1, 1.0, 1)), ("step", (0.0, -0.0, 0.0)), ("turn", (True, 1, 1))):
        events = delta_run("text-delta", 3)
        for event, value in zip(events, values, strict=True):
            event["data"][field] = value
        assert pack_chunk_runs(events) == events
        assert_exact(decode_all(pack_chunk_runs(events)), events)
    floats = delta_run("text-delta", 3)
    for event in floats:
        event["data"]["turn"] = 2.5
        event["data"]["chunk"]["index"] = -0.0
    packed = pack_chunk_runs(floats)
    assert len(packed) == 1
    assert_exact(decode_all(packed), floats)


def test_chunk_rows__port_stores_non_finite_turn_verbatim() -> None:
    # port decision, spec §15.2: JSON writes NaN/inf as null, which the decoder refuses, so never pack them
    for value in (float("inf"), float("nan")):
        events = delta_run("text-delta", 3)
        for event in events:
            event["data"]["turn"] = value
        assert all(a is b for a, b in zip(pack_chunk_runs(events), events, strict=True))


def test_chunk_rows__port_bools_are_not_numbers_in_rows() -> None:
    # port decision, spec §15.3: a JSON `true` is not a number
    raises_malformed(text_row(index=True), "text-chunks", "turn/step/index must be numbers")
    raises_malformed(text_row(seq0=True), "text-chunks", "seq0 must be a non-negative safe integer")
    raises_malformed(text_row(dt=[False], texts=["a", "b"]), "text-chunks", "dt must be an array of safe integers")
    decoded = decode_storage_record(text_row(turn=1.5, step=0, index=2.0))
    assert decoded[0]["data"] == {
        "turn": 1.5,
        "step": 0,
        "chunk": {"type": "text-delta", "index": 2.0, "text": "a"},
    }


@pytest.mark.parametrize(
    ("row", "why"),
    [
        # Each row breaks its own check and every later one; the earliest check must win.
        (
            {"type": "text-chunks", "seq0": -1, "time0": 0.5, "data": 1, "x": 1},
            "envelope must be exactly {type, seq0, time0, data}",
        ),
        (
            {"type": "text-chunks", "seq0": -1, "time0": 0.5, "data": 1},
            "seq0 must be a non-negative safe integer",
        ),
        ({"type": "text-chunks", "seq0": 0, "time0": 0.5, "data": 1}, "time0 must be a safe integer"),
        ({"type": "text-chunks", "seq0": 0, "time0": 0, "data": [1]}, "data must be an object"),
        (text_row(extra=None, turn="x", texts=[]), "envelope must be exactly {type, seq0, time0, data}"),
        (text_row(turn="x", texts=[], dt="no"), "turn/step/index must be numbers"),
        (text_row(texts=[], dt="no"), "texts must be a non-empty string array"),
        (text_row(dt="no", seq0=MAX_SAFE, texts=["a", "b"]), "dt must be an array of safe integers"),
        (text_row(dt=[], seq0=MAX_SAFE, texts=["a", "b"]), "dt length 0 does not match 2 members"),
        (
            text_row(dt=[MAX_SAFE], seq0=MAX_SAFE, time0=1, texts=["a", "b"]),
            "member seqs must stay safe integers",
        ),
    ],
)
def test_chunk_rows__port_validation_order_first_failure_wins(row: dict[str, Any], why: str) -> None:
    # spec §15.3: the eleven whys are checked in order
    raises_malformed(row, "text-chunks", why)


def test_chunk_rows__port_tool_call_validation_order() -> None:
    # spec §15.3: keys, then id/name types, then turn/step/index, then payload
    data: dict[str, Any] = {"turn": "x", "step": 1, "index": 0, "id": 7, "dt": [], "args": ["a"], "extra": 1}
    row = {"type": "tool-call-chunks", "seq0": 0, "time0": 1, "data": data}
    raises_malformed(row, "tool-call-chunks", "data must be exactly {turn, step, index, id, name?, dt, args}")
    del data["extra"]
    raises_malformed(row, "tool-call-chunks", "id (and name when present) must be strings")
    data["id"] = "c"
    raises_malformed(row, "tool-call-chunks", "turn/step/index must be numbers")
    data["turn"] = 1
    data["args"] = []
    raises_malformed(row, "tool-call-chunks", "args must be a non-empty string array")
    data["args"] = ["a"]
    data["name"] = None  # a present null name is present, and not a string
    raises_malformed(row, "tool-call-chunks", "id (and name when present) must be strings")
    for tag in ("reasoning-chunks", "tool-call-chunks"):
        raises_malformed({"type": tag, "seq0": 0, "time0": 0, "data": None}, tag, "data must be an object")


def test_chunk_rows__every_backend_and_the_c_accelerator_read_the_same_row_tags() -> None:
    """One definition of the row tags: JSONL and PostgreSQL import it; SQLite's schema-17 codec keeps its own
    spelling (it imports no JSONL codec, spec §8.11 #300) and the C code interns its own: both equal it."""
    from agentlog.kernel import chunkrows
    from agentlog.persistence.sqlite import _codec

    assert chunkrows.CHUNK_ROW_TAGS == {"text-chunks", "reasoning-chunks", "tool-call-chunks"}
    assert _codec.PACKED_TAGS == chunkrows.CHUNK_ROW_TAGS
    speedups = pytest.importorskip("agentlog._speedups")  # (built even when AGENTLOG_PURE_PYTHON=1 skips it)
    assert frozenset(speedups.CHUNK_ROW_TAGS) == chunkrows.CHUNK_ROW_TAGS
    assert len(speedups.CHUNK_ROW_TAGS) == len(chunkrows.CHUNK_ROW_TAGS)


# ---------------------------------------------------------------------------------------------------------
# The C packer and its pure-Python twin
# ---------------------------------------------------------------------------------------------------------


class _StrSub(str):
    """A str subclass: equal to the tags, but never an exact str where the packer requires one."""


class _IntSub(int):
    """An int subclass: a number to ``==`` but not to the packer's exact-type whitelist."""


class _RaisingEq:
    """A value whose comparison raises: both packers must raise the same error at the same point."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        raise ValueError("compared a _RaisingEq")

    def __ne__(self, other: object) -> bool:
        raise ValueError("compared a _RaisingEq with !=")


class _EqualsAll:
    """A value equal to everything: compares as whatever tag or kind it is tested against."""

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


class _LyingGetDict(dict[str, Any]):
    """A dict subclass whose ``get`` disagrees with its items: the packer must read what ``get`` says."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key in ("text", "argumentsDelta"):
            return "lied"
        if key == "seq" and "seq" in self:
            return dict.get(self, "seq", default) + 1
        return dict.get(self, key, default)


class _LyingLenDict(dict[str, Any]):
    """A dict subclass whose ``len`` is whatever the packer wants to hear."""

    def __len__(self) -> int:
        return {"seq": 4, "turn": 3, "index": 3}.get(next(iter(dict.keys(self)), ""), 3) if self else 0


class _PosingDict:
    """Not a dict, but ``isinstance(x, dict)`` says it is (its ``__class__`` says so); reads go to ``inner``."""

    def __init__(self, inner: dict[str, Any]) -> None:
        self.inner = inner

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return dict

    def __len__(self) -> int:
        return len(self.inner)

    def get(self, key: str, default: Any = None) -> Any:
        return self.inner.get(key, default)


_ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 1.0, -0.0, 0.0, float("nan"), float("inf"), MAX_SAFE, MAX_SAFE + 1, -MAX_SAFE,
    -MAX_SAFE - 1, 2**64, "x", "", "text-delta", "reasoning-delta", "tool-call-delta", "assistant/chunk",
    _StrSub("text-delta"), _StrSub("assistant/chunk"), _StrSub("tool-call-delta"), _IntSub(1), [], {},
    _RaisingEq(), _EqualsAll(),
]  # fmt: skip
_DELETE = object()
_PATHS: list[tuple[str, ...]] = [
    ("type",), ("seq",), ("time",), ("data",), ("extra",), ("data", "turn"), ("data", "step"), ("data", "chunk"),
    ("data", "extra"), ("data", "chunk", "type"), ("data", "chunk", "index"), ("data", "chunk", "text"),
    ("data", "chunk", "id"), ("data", "chunk", "name"), ("data", "chunk", "argumentsDelta"),
    ("data", "chunk", "extra"),
]  # fmt: skip
_WRAPPERS: list[Any] = [FrozenDict, _LyingGetDict, _LyingLenDict, _PosingDict, MappingProxyType]
# An edit puts one value into a stretch of consecutive events, so odd values also form (or break) runs.
_edits = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 5), st.sampled_from(_PATHS), st.sampled_from([*_ODD_VALUES, _DELETE])),
    max_size=4,
)
_wraps = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 2), st.sampled_from(_WRAPPERS)), max_size=3)
_replacements = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from([None, 5, "x", [], _RaisingEq(), _PosingDict({})])), max_size=2
)


# Runs whose members differ only in how a number is spelled or typed (1 vs 1.0 vs True, 0.0 vs -0.0), or
# carry numbers no row may hold (inf, nan, an int subclass, a seq past the safe range).
_NUMBERS: list[Any] = [1, 1.0, 0.0, -0.0, True, float("inf"), float("nan"), _IntSub(1)]
_number_stretches = st.tuples(
    st.sampled_from(["text-delta", "reasoning-delta", "tool-call-delta"]),
    st.sampled_from(["turn", "step", "index"]),  # the one field that takes each stretch's number
    st.lists(
        st.tuples(
            st.sampled_from(_NUMBERS),
            st.sampled_from([1, 1, 1, 0, 2, MAX_SAFE, 1.0, True]),  # seq step from the previous member
            st.integers(1, 4),  # members sharing the number
        ),
        min_size=1,
        max_size=5,
    ),
)


def _number_batch(drawn: tuple[str, str, list[tuple[Any, Any, int]]]) -> list[Any]:
    kind, field, stretches = drawn
    batch: list[Any] = []
    seq: Any = 0
    for number, advance, count in stretches:
        for _ in range(count):
            k = len(batch)
            seq = seq + advance if k else 0
            fields = {"turn": 1, "step": 1, "index": 1, field: number}
            chunk: dict[str, Any] = {"type": kind, "index": fields["index"]}
            if kind == "tool-call-delta":
                chunk.update(id="c1", argumentsDelta=f"a{k}")
            else:
                chunk["text"] = f"t{k}"
            batch.append(chunk_event(seq, 1000 + k, chunk, fields["turn"], fields["step"]))
    return batch


def _edited_batch(events: list[Any], edits: Any, wraps: Any, replacements: Any) -> list[Any]:
    """``events`` with odd leaves, odd containers and odd events put in, as a caller might pass them."""
    for where, span, path, value in edits:
        for event in events[where % max(len(events), 1) :][:span]:
            node = event
            for key in path[:-1]:
                node = node.get(key) if type(node) is dict else None
            if type(node) is dict:
                if value is _DELETE:
                    node.pop(path[-1], None)
                else:
                    node[path[-1]] = value
    for where, depth, wrapper in sorted(wraps, key=lambda wrap: -wrap[1]):  # innermost first
        if not events:
            break
        k = where % len(events)
        if depth == 0:
            events[k] = wrapper(events[k]) if type(events[k]) is dict else events[k]
            continue
        parent = events[k] if type(events[k]) is dict else None
        if parent is not None and depth == 2:
            parent = parent.get("data") if type(parent.get("data")) is dict else None
        key = "data" if depth == 1 else "chunk"
        if parent is not None and type(parent.get(key)) is dict:  # each container wrapped once
            parent[key] = wrapper(parent[key])
    for where, value in replacements:
        if events:
            events[where % len(events)] = value
    return events


def _same_output(expected: list[Any], got: list[Any], events: list[Any]) -> None:
    """The same records: verbatim events as the very same objects, rows equal in types, order and values,
    each row value the same object the Python twin took from the first member (``dt`` gaps are new ints)."""
    assert len(got) == len(expected)
    for want, have in zip(expected, got, strict=True):
        if any(want is event for event in events):
            assert have is want
            continue
        assert type(have) is dict and list(have) == list(want)
        assert type(have["type"]) is str and have["type"] == want["type"]  # (the tag: each side's constant)
        assert have["seq0"] is want["seq0"] and have["time0"] is want["time0"]
        data, wanted = have["data"], want["data"]
        assert type(data) is dict and list(data) == list(wanted)
        for key, value in wanted.items():
            if key == "dt":
                assert type(data[key]) is list and [*map(type, data[key])] == [*map(type, value)]
                assert data[key] == value
            elif key in ("texts", "args"):
                assert type(data[key]) is list and len(data[key]) == len(value)
                assert all(a is b for a, b in zip(data[key], value, strict=True))
            else:
                assert data[key] is value


def _outcome(pack: Any, events: list[Any], as_iterator: bool) -> tuple[str, Any]:
    try:
        return "ok", pack(iter(events) if as_iterator else list(events))
    except Exception as err:  # the error itself is the result under test
        return "error", (type(err), str(err))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_batches, _number_stretches.map(_number_batch)), _edits, _wraps, _replacements, st.booleans())
def test_chunk_rows__c_packer_gives_exactly_the_pure_python_result_on_any_input(
    batch: list[Event], edits: Any, wraps: Any, replacements: Any, as_iterator: bool
) -> None:
    """Same rows, same verbatim objects, same errors — odd values, dict subclasses, impostors and iterators
    included. Runs in both CI passes: the compiled module is imported directly, so with
    ``AGENTLOG_PURE_PYTHON=1`` (nothing configured) it takes its generic path for the agentlog dict types."""
    speedups = pytest.importorskip("agentlog._speedups")  # (built even when AGENTLOG_PURE_PYTHON=1 skips it)
    events = _edited_batch(batch, edits, wraps, replacements)
    expected = _outcome(chunkrows._py_pack_chunk_runs, events, as_iterator)
    got = _outcome(speedups.pack_chunk_runs, events, as_iterator)
    assert got[0] == expected[0]
    if expected[0] == "error":
        assert got[1] == expected[1]
    else:
        _same_output(expected[1], got[1], events)


def test_chunk_rows__c_packer_refuses_what_the_python_twin_refuses() -> None:
    """A non-iterable batch is the same ``TypeError`` from both, and the packed-run threshold is the same."""
    speedups = pytest.importorskip("agentlog._speedups")
    for pack in (chunkrows._py_pack_chunk_runs, speedups.pack_chunk_runs):
        with pytest.raises(TypeError, match="'int' object is not iterable"):
            pack(5)
        assert len(pack(delta_run("text-delta", MIN_RUN))) == 1
        assert len(pack(delta_run("text-delta", MIN_RUN - 1))) == MIN_RUN - 1
    events = delta_run("text-delta", 4) + [tool_delta(4 + k, 2000 + k, "c1", "a", name="w") for k in range(3)]
    events.append(FrozenDict(events[0]))
    _same_output(chunkrows._py_pack_chunk_runs(events), speedups.pack_chunk_runs(events), events)
