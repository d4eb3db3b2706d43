"""SQLite loads decode rows batch by batch (issue 14, "Resume at any size").

``load_stored`` and ``read_prefix`` fetch the ``events`` rows a batch at a time and decode each batch
before the next is fetched, so the fetched row tuples are never all alive beside the decoded events.
That must not change anything a caller can see: the events, which damage is reported (message, seq in
``offset``), and what wins when there are several problems — page damage anywhere in the rows, then
the session metadata, then the first damaged row — are exactly those of a read that fetched every row
first. The reference here is the same backend with a batch larger than the log (one fetch of all rows,
which is what the backend did before), compared across every batch size.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog.errors import SessionPersistenceCorruptionError
from agentlog.kernel.packedrun import compact_chunk_runs, expand_items
from agentlog.persistence.sqlite import _codec as codec
from agentlog.persistence.sqlite.backend import SqliteBackend

pytestmark = pytest.mark.accel

SID = "s1"
WHOLE = 10**9  # a batch larger than any log here: one fetch of every row, the reference read


def meta() -> dict[str, Any]:
    return {"version": 0, "id": SID, "createdAt": 1000, "cwd": "/work/project"}


def ev(kind: str, seq: int, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "seq": seq, "time": 1000 + seq, "data": data, **extra}


def chunk(seq: int, turn: int, text: str) -> dict[str, Any]:
    return ev(
        "assistant/chunk", seq, {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": text}}
    )


def tool_chunk(seq: int, turn: int, args: str) -> dict[str, Any]:
    block = {"type": "tool-call-delta", "index": 1, "id": f"c{turn}", "name": "read", "argumentsDelta": args}
    return ev("assistant/chunk", seq, {"turn": turn, "step": 1, "chunk": block})


def turn(seq: int, number: int, chunks: int) -> list[dict[str, Any]]:
    """One turn: scalar rows, a text run long enough to pack, a tool-call run, provenance, surface ops."""
    out = [ev("turn/start", seq, {"turn": number})]
    out.append(ev("user/message", seq + 1, {"id": f"u{number}", "text": "q" * 40}, surfaceOp="append"))
    first = seq + 2
    out += [chunk(first + k, number, f"t{k} ") for k in range(chunks)]
    out += [tool_chunk(first + chunks + k, number, '{"p":' if k == 0 else f"{k}") for k in range(4)]
    last = first + chunks + 4
    sources = list(range(first, last))
    out.append(
        ev("assistant/message", last, {"turn": number, "text": "a"}, sourceEventSeqs=sources, surfaceOp="append")
    )
    out.append(ev("tool/result", last + 1, {"turn": number, "r": [1, 2.5, None]}, sourceEventSeqs=[last, first]))
    out.append(ev("turn/end", last + 2, {"turn": number, "reason": {"kind": "completed"}}))
    return out


def write_log(path: Path) -> list[dict[str, Any]]:
    """A log of scalar and packed rows (one run split over two packed rows), appended in several batches."""
    events: list[dict[str, Any]] = []
    backend = SqliteBackend(str(path))
    try:
        for number, chunks in enumerate((5, 1100, 3, 7), start=1):
            batch = turn(len(events), number, chunks)
            backend.append_batch(meta(), batch, bool(events))
            events += batch
    finally:
        backend.close()
    return events


class Pristine(tuple):  # type: ignore[type-arg]
    """(database bytes, events, seq of every physical row), shown briefly in hypothesis reports."""

    def __repr__(self) -> str:
        return f"Pristine({len(self[2])} rows)"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[dict[str, Any]], list[int]]:
    """The database bytes of the log, its events and the seq of every physical row."""
    path = tmp_path_factory.mktemp("pristine") / "db" / "sessions.sqlite"
    events = write_log(path)
    con = sqlite3.connect(str(path))
    try:
        seqs = [row[0] for row in con.execute("SELECT seq FROM events ORDER BY seq")]
    finally:
        con.close()
    return Pristine((path.read_bytes(), events, seqs))


def fresh_copy(tmp_path: Path, pristine: tuple[bytes, list[dict[str, Any]], list[int]], name: str) -> Path:
    path = tmp_path / name / "sessions.sqlite"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(pristine[0])
    os.chmod(path, 0o600)
    return path


def foreign(path: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    """A foreign writer's change (autocommit), the way damage is inserted by hand."""
    con = sqlite3.connect(str(path), isolation_level=None)
    try:
        con.execute(statement, params)
    finally:
        con.close()


def outcome(path: Path, batch_rows: int, *, compact: bool, partial: bool, read_only: bool = False) -> Any:
    """What a caller sees: the events (expanded) and the damage, or the error raised (type, text, offset)."""
    backend = SqliteBackend(str(path), read_only=read_only)
    backend._read_batch_rows = batch_rows
    try:
        with compact_chunk_runs() if compact else _nothing():
            if partial:
                found = backend.read_prefix(SID)
                assert found is not None
                damage = found.damage
                return (
                    "partial",
                    expand_items(found.events),
                    None if damage is None else (str(damage), damage.offset, damage.location),
                )
            stored = backend.load_stored(SID)
            assert stored is not None
            return ("stored", expand_items(stored.events))
    except Exception as err:  # the error is the outcome being compared
        return ("raised", type(err).__name__, str(err), getattr(err, "offset", None))
    finally:
        backend.close()


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# Each damage is a foreign writer's change to the row at a given seq (the seq a row is stored under).
DAMAGE = {
    "json": "UPDATE events SET data = '{\"turn\":' WHERE seq = ?",
    "utf8-data": "UPDATE events SET data = CAST(X'7B2261223A22FF227D' AS TEXT) WHERE seq = ?",
    "utf8-type": "UPDATE events SET type = CAST(X'74FF' AS TEXT) WHERE seq = ?",
    "varint": "UPDATE events SET source_event_seqs = X'80' WHERE seq = ?",
    "discriminator": "UPDATE events SET ignorable = 1 - coalesce(ignorable, 1) WHERE seq = ?",
    "gap": "DELETE FROM events WHERE seq = ?",
}


def test_the_log_spans_many_batches_and_a_run_split_over_two_packed_rows(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    _, events, seqs = pristine
    path = fresh_copy(tmp_path, pristine, "intact")
    con = sqlite3.connect(str(path))
    try:
        packed = [row[0] for row in con.execute("SELECT seq FROM events WHERE ignorable = 0 ORDER BY seq")]
    finally:
        con.close()
    assert len(packed) >= 4 and len(seqs) > 20  # fixture sanity: packed rows between scalar rows
    for batch_rows in (1, 2, 3, 7, len(seqs) - 1, len(seqs), WHOLE):
        for compact in (False, True):
            assert outcome(path, batch_rows, compact=compact, partial=False) == ("stored", events)
            assert outcome(path, batch_rows, compact=compact, partial=True) == ("partial", events, None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_batch_size_reports_what_one_fetch_of_all_rows_reports(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path_factory: pytest.TempPathFactory, data: Any
) -> None:
    seqs = pristine[2]
    path = fresh_copy(tmp_path_factory.mktemp("case"), pristine, "db")
    hits = data.draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(DAMAGE)), st.sampled_from(seqs)), max_size=2, unique_by=lambda hit: hit[1]
        )
    )
    for kind, seq in hits:
        foreign(path, DAMAGE[kind], (seq,))
    batch_rows = data.draw(st.integers(min_value=1, max_value=len(seqs) + 2))
    compact = data.draw(st.booleans())
    partial = data.draw(st.booleans())
    read_only = data.draw(st.booleans())
    expected = outcome(path, WHOLE, compact=compact, partial=partial, read_only=read_only)
    assert outcome(path, batch_rows, compact=compact, partial=partial, read_only=read_only) == expected
    if [hit for hit in hits if hit != ("gap", seqs[-1])]:  # (deleting the last row only shortens the log)
        assert expected[0] == "raised" or expected[-1] is not None  # the damage is reported, never skipped


def test_damage_in_a_later_batch_names_the_same_row(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    seqs = pristine[2]
    message, result = seqs[-3], seqs[-2]  # the last turn's assistant/message and tool/result rows
    assert pristine[1][message]["type"] == "assistant/message" and pristine[1][result]["type"] == "tool/result"
    path = fresh_copy(tmp_path, pristine, "late")
    foreign(path, DAMAGE["varint"], (message,))
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        load(path, 2)  # many batches before it
    assert info.value.offset == message and "truncated varint" in str(info.value)
    partial = prefix(path, 2)
    assert partial.damage is not None and partial.damage.offset == message
    assert partial.events == pristine[1][:message]
    # Text that is not UTF-8 in a later batch: the re-read with raw text skips the rows already handed
    # out and still names the row and the byte.
    path = fresh_copy(tmp_path, pristine, "late-utf8")
    foreign(path, DAMAGE["utf8-data"], (result,))
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        load(path, 2)
    assert info.value.offset == result
    assert "not valid UTF-8 text (invalid byte 0xFF at byte offset 6 of the value)" in str(info.value)


def test_an_earlier_damaged_row_wins_over_invalid_text_in_a_later_batch(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    seqs = pristine[2]
    path = fresh_copy(tmp_path, pristine, "both")
    foreign(path, DAMAGE["json"], (seqs[1],))
    foreign(path, DAMAGE["utf8-type"], (seqs[-1],))  # its batch fails to fetch while the rest is drained
    with pytest.raises(SessionPersistenceCorruptionError) as info:
        load(path, 3)
    assert info.value.offset == seqs[1] and "not valid JSON" in str(info.value)
    assert prefix(path, 3).damage.offset == seqs[1]  # type: ignore[union-attr]


def test_damaged_session_metadata_wins_over_a_damaged_row(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    seqs = pristine[2]
    path = fresh_copy(tmp_path, pristine, "meta")
    foreign(path, DAMAGE["json"], (seqs[0],))
    foreign(path, "UPDATE sessions SET cwd = 'relative' WHERE id = ?", (SID,))
    for batch_rows in (1, WHOLE):
        with pytest.raises(SessionPersistenceCorruptionError, match="invalid metadata: stored session cwd"):
            load(path, batch_rows)
        with pytest.raises(SessionPersistenceCorruptionError, match="invalid metadata"):
            prefix(path, batch_rows)


def test_page_damage_after_a_damaged_row_still_wins(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    # Fetching every row first met the page damage before decoding anything, so it was what a load
    # reported even when an earlier row was damaged too. Decoding as the rows arrive finds the damaged
    # row first; the rest of the rows must still be read so the page damage keeps winning.
    path = tmp_path / "pages" / "sessions.sqlite"
    backend = SqliteBackend(str(path))
    try:
        events = [ev("note/added", seq, {"n": seq, "pad": os.urandom(300).hex()}) for seq in range(400)]
        backend.append_batch(meta(), events, False)
    finally:
        backend.close()
    foreign(path, DAMAGE["json"], (3,))
    con = sqlite3.connect(str(path))
    try:
        page_size = con.execute("PRAGMA page_size").fetchone()[0]
        last_leaf = con.execute(
            "SELECT max(pageno) FROM dbstat WHERE name = 'events' AND pagetype = 'leaf'"
        ).fetchone()[0]
    finally:
        con.close()
    with open(path, "r+b") as fh:
        fh.seek((last_leaf - 1) * page_size)
        fh.write(b"\xff")  # not a b-tree page type: SQLite reports the page as malformed
    con = sqlite3.connect(str(path))
    try:
        assert con.execute("SELECT count(*) FROM events WHERE seq < 10").fetchone()[0] == 10
        with pytest.raises(sqlite3.DatabaseError):
            con.execute("SELECT * FROM events ORDER BY seq").fetchall()
    finally:
        con.close()
    for batch_rows in (1, 4, WHOLE):
        with pytest.raises(SessionPersistenceCorruptionError, match="SQLite page damage") as info:
            load(path, batch_rows)
        assert info.value.offset is None
        with pytest.raises(SessionPersistenceCorruptionError, match="SQLite page damage"):
            prefix(path, batch_rows)
    foreign(path, "UPDATE sessions SET cwd = 'relative' WHERE id = ?", (SID,))  # the rows are read anyway
    for batch_rows in (1, WHOLE):
        with pytest.raises(SessionPersistenceCorruptionError, match="SQLite page damage"):
            load(path, batch_rows)


def test_a_load_leaves_the_connection_reading_text_as_str(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    # The raw-text re-read switches the connection's text factory only around each fetch.
    seqs = pristine[2]
    path = fresh_copy(tmp_path, pristine, "factory")
    foreign(path, DAMAGE["utf8-data"], (seqs[5],))
    backend = SqliteBackend(str(path))
    backend._read_batch_rows = 2
    try:
        with pytest.raises(SessionPersistenceCorruptionError):
            backend.load_stored(SID)
        foreign(path, "UPDATE events SET data = '{}' WHERE seq = ?", (seqs[5],))
        assert backend.list_sessions()[0].id == SID
        assert type(backend.load_stored(SID).events[0]["type"]) is str  # type: ignore[union-attr]
    finally:
        backend.close()


def load(path: Path, batch_rows: int) -> Any:
    backend = SqliteBackend(str(path))
    backend._read_batch_rows = batch_rows
    try:
        return backend.load_stored(SID)
    finally:
        backend.close()


def prefix(path: Path, batch_rows: int) -> Any:
    backend = SqliteBackend(str(path))
    backend._read_batch_rows = batch_rows
    try:
        return backend.read_prefix(SID)
    finally:
        backend.close()


def test_scan_batches_matches_scan_prefix_at_every_split() -> None:
    rows = [
        (0, "turn/start", 1000, '{"turn":1}', None, None, None),
        (1, "text-chunks", 1001, '{"turn":1,"step":1,"index":0,"dt":[1,1],"texts":["a","b","c"]}', None, None, 0),
        (4, "assistant/message", 1004, '{"t":1}', codec.encode_source_event_seqs([1, 2, 3]), '"append"', None),
        (5, "turn/end", 1005, "{", None, None, None),
        (6, "turn/start", 1006, "{}", None, None, None),
    ]
    for compact in (False, True):
        expected = codec.scan_prefix(rows, 0, location="db", compact=compact)
        for size in range(1, len(rows) + 1):
            batches = [rows[lo : lo + size] for lo in range(0, len(rows), size)]
            events, damage = codec.scan_batches(iter(batches), 0, location="db", compact=compact)
            assert expand_items(events) == expand_items(expected[0])
            assert damage is not None and expected[1] is not None
            assert (str(damage), damage.offset) == (str(expected[1]), 5)


def _reference_seqs(blob: bytes) -> list[int]:
    """The provenance varint format decoded the plain way (first value, then ZigZag deltas)."""
    values: list[int] = []
    value = shift = 0
    for byte in blob:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if values:
                value = values[-1] + (value >> 1 if not value & 1 else -((value + 1) >> 1))
            values.append(value)
            value = shift = 0
    return values


@given(first=st.integers(min_value=0, max_value=codec.MAX_SAFE), count=st.integers(min_value=0, max_value=40))
def test_consecutive_provenance_decodes_like_the_general_path(first: int, count: int) -> None:
    # Consecutive seqs (every delta +1) take a shortcut; the result and the refusal beyond the safe
    # range are those of the general decoder.
    seqs = [first + k for k in range(count + 1)]
    if seqs[-1] > codec.MAX_SAFE:
        blob = codec.encode_source_event_seqs([first]) + b"\x02" * count
        with pytest.raises(codec.StorageRowError, match="decoded seq is out of range"):
            codec.decode_source_event_seqs(blob)
        return
    blob = codec.encode_source_event_seqs(seqs)
    assert codec.decode_source_event_seqs(blob) == seqs == _reference_seqs(blob)
    if count and seqs[-1] < codec.MAX_SAFE:
        bumped = blob[:-1] + b"\x04"  # the last delta +2: not consecutive, the general path decodes it
        assert codec.decode_source_event_seqs(bumped) == [*seqs[:-1], seqs[-1] + 1] == _reference_seqs(bumped)


_DT = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=-codec.MAX_SAFE - 2, max_value=codec.MAX_SAFE + 2),
)


@given(
    time0=st.one_of(st.integers(-5, 5), st.integers(min_value=-codec.MAX_SAFE, max_value=codec.MAX_SAFE)),
    dt=st.lists(_DT, min_size=2, max_size=6),
    compact=st.booleans(),
)
def test_packed_member_times_are_validated_like_their_running_sum(time0: int, dt: list[int], compact: bool) -> None:
    # The member times are time0 plus each prefix sum of dt, all safe integers; with no negative gap
    # only the last can overflow, which the row check uses instead of building every time.
    data = {"turn": 1, "step": 1, "index": 0, "dt": dt, "texts": [f"t{k}" for k in range(len(dt) + 1)]}
    row = (7, "text-chunks", time0, codec.dumps(data).decode(), None, None, 0)
    times = [time0]
    for gap in dt:
        times.append(times[-1] + gap)
    if any(abs(gap) > codec.MAX_SAFE for gap in dt):
        reason = "dt must be an array of safe integers"
    elif any(abs(time) > codec.MAX_SAFE for time in times):
        reason = "member times exceed safe integers"
    else:
        reason = ""
    for scan in (False, True):
        if scan:
            events, damage = codec.scan_prefix([row], 7, location="db", compact=compact)
            if reason:
                assert events == [] and damage is not None and reason in str(damage) and damage.offset == 7
                continue
        elif reason:
            with pytest.raises(codec.StorageRowError, match=reason):
                codec.decode_row(row, compact=compact)
            continue
        else:
            events = codec.decode_row(row, compact=compact)
        members = expand_items(events)
        assert [member["time"] for member in members] == times
        assert [member["seq"] for member in members] == list(range(7, 7 + len(times)))
        assert [member["data"]["chunk"]["text"] for member in members] == data["texts"]
    if reason:
        with pytest.raises(codec.StorageRowError, match=reason):
            codec.last_member_seq(row)
    else:
        assert codec.last_member_seq(row) == 7 + len(dt)


_TEXTS = '{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"]}'
_INTACT = (3, "text-chunks", 1003, _TEXTS, None, None, 0)


@pytest.mark.parametrize(
    "row",
    [
        _INTACT,  # the cold load keeps it packed
        (3, ["text-chunks"], 1003, _TEXTS, None, None, 0),  # a type no SQLite column holds
        (3, "text-chunks", 1003, _TEXTS, b"", None, 0),
        (3, "text-chunks", 1003, _TEXTS, None, '"append"', 0),
        (3, "text-chunks", codec.MAX_SAFE + 1, _TEXTS, None, None, 0),
        (3, "text-chunks", 1003, 17, None, None, 0),
        (3, "text-chunks", 1003, _TEXTS[:-1], None, None, 0),
        (3, "reasoning-chunks", 1003, _TEXTS.replace('"dt":[0,0]', '"dt":[0]'), None, None, 0),
        (3, "user/message", 1003, _TEXTS, None, None, 0),
        (4, "text-chunks", 1003, _TEXTS, None, None, 0),  # not the expected seq
        (3, "text-chunks", 1003, _TEXTS, None, None, False),
    ],
)
def test_a_packed_row_kept_packed_is_refused_exactly_like_its_expansion(row: tuple[Any, ...]) -> None:
    kept, kept_damage = codec.scan_prefix([row], 3, location="db", compact=True)
    expanded, damage = codec.scan_prefix([row], 3, location="db", compact=False)
    assert expand_items(kept) == expanded
    assert (None if kept_damage is None else (str(kept_damage), kept_damage.offset)) == (
        None if damage is None else (str(damage), damage.offset)
    )
    intact = row is _INTACT
    assert (damage is None) is intact and (damage is None or damage.offset == row[0])
    if intact:
        assert type(kept[0]) is not dict and len(expanded) == 3  # kept as one run


def test_a_load_keeps_one_type_string_per_event_type(
    pristine: tuple[bytes, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    # Every fetched row brings its own copy of the type text; the events of a long log would otherwise
    # keep one copy each alive.
    path = fresh_copy(tmp_path, pristine, "kinds")
    for batch_rows in (1, WHOLE):
        events = load(path, batch_rows).events
        scalar = [event for event in events if event["type"] != "assistant/chunk"]
        assert len(scalar) > len({event["type"] for event in scalar}) + 10
        assert len({id(event["type"]) for event in scalar}) == len({event["type"] for event in scalar})
