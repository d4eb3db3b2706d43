"""Every JSONL line is one JSON text of its own (hostile files).

The scanner parses many lines with one parser call (joined into one array) and counts the elements.
A count alone cannot tell lines apart: a value split over two lines plus a line that holds two values
give as many elements as lines, so a file the original refuses (it parses line by line) would load
as if it were valid. Each case here must fail the load exactly where a line-by-line parse fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog import SessionStore
from agentlog.errors import AgentlogError, SessionPersistenceCorruptionError
from agentlog.kernel.chunkrows import CHUNK_ROW_TAGS
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl._scanner import _parse_many, _take_plain
from agentlog.persistence.jsonl.backend import JsonlBackend, encode_segment, project_key

HEADER = b'{"type":"session","version":0,"id":"s1","createdAt":1000,"cwd":"/home/me/app","delegationDepth":0}'


def _event(seq: int, etype: str = "llm/retry") -> bytes:
    return dumps({"type": etype, "seq": seq, "time": 1000 + seq, "data": {"attempt": seq}})


def _store(tmp_path: Path, lines: list[bytes], compression: str) -> JsonlBackend:
    backend = JsonlBackend(str(tmp_path / "store"), compression=compression)
    body = b"\n".join([HEADER, *lines]) + b"\n"
    if compression == "zstd":  # the header is a frame of its own, the events one more
        compress = zstandard.ZstdCompressor().compress
        body = compress(HEADER + b"\n") + compress(b"\n".join(lines) + b"\n")
    path = Path(backend.root) / project_key("/home/me/app") / encode_segment("s1") / ("session" + backend._suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return backend


SPLIT_CASES = {
    # line 2 opens a value that line 3 closes; line 4 holds two values: three elements for three lines
    "split object and a two-value line": [
        b'{"type":"llm/retry","seq":0,"time":1000,"data":{"attempt":[1',
        b"2]}}",
        _event(1) + b"," + _event(2),
        _event(3),
    ],
    # an unterminated string swallows the separator and the next line's start
    "string across lines": [
        b'{"type":"llm/retry","seq":0,"time":1000,"data":{"note":"x}}',
        b'{"y":"}}',
        _event(1) + b"," + _event(2),
        _event(3),
    ],
}


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_a_value_split_over_lines_is_damage_at_its_first_line(tmp_path: Path, case: str, compression: str) -> None:
    lines = SPLIT_CASES[case]
    backend = _store(tmp_path, lines, compression)
    with pytest.raises(SessionPersistenceCorruptionError) as caught:
        backend.load_stored("s1")
    # The first event line is line 1 of the scan; it is unparsable and complete records follow it.
    assert "unparsable committed event at line 1, and a complete record follows it" in str(caught.value)
    if compression == "none":
        assert caught.value.offset == len(HEADER) + 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(alphabet='ab"\\{}[],: \u00e9', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='k"\\{[', max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(
    values=st.lists(st.dictionaries(st.text(max_size=3), json_values, max_size=3) | st.lists(json_values, max_size=3),
                    min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 10_000), max_size=4),
    glue=st.sampled_from([b",", b"", b" ", b"]", b"}"]),
)  # fmt: skip
def test_a_joined_parse_is_the_line_by_line_parse_whenever_it_is_used(
    values: list[Any], cuts: list[int], glue: bytes
) -> None:
    """Re-cut valid JSON texts at random places (and glue some together): whenever the joined parse is
    used it yields exactly what parsing each line alone yields, and each line parses alone."""
    text = glue.join(orjson.dumps(value) for value in values)
    points = sorted({cut % (len(text) + 1) for cut in cuts})
    lines = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    lines = [line for line in lines if line]
    parsed = _parse_many(lines, False)
    if parsed is None:
        return
    assert parsed == [orjson.loads(line) for line in lines]


@pytest.mark.parametrize("compression", ["none", "zstd"])
@pytest.mark.parametrize("value", [b'{"a":1}', b"[1]", b"5"])
@pytest.mark.parametrize("followed", [True, False])
def test_an_event_whose_type_is_not_a_string_is_refused_with_a_typed_error(
    tmp_path: Path, compression: str, value: bytes, followed: bool
) -> None:
    """An object or array ``type`` (unhashable) is an unknown type like a number: the typed refusal,
    never a ``TypeError`` from a set lookup in the scanner."""
    lines = [b'{"type":' + value + b',"seq":0,"time":1000,"data":{}}']
    if followed:
        lines.append(_event(1))
    backend = _store(tmp_path, lines, compression)
    coordinator = PersistenceCoordinator(SessionStore(), backend)
    with pytest.raises(AgentlogError) as caught:
        coordinator.load("s1")
    assert caught.value.code == "SESSION_FORMAT_UNSUPPORTED"
    assert "unknown to this harness" in str(caught.value)
    if followed:  # a suffix read steps back over the line to find where seq 1 starts
        try:
            suffix = coordinator.read_from("s1", 1)
        except AgentlogError as err:
            assert err.code in ("SESSION_FORMAT_UNSUPPORTED", "SESSION_CORRUPT"), err
        else:
            assert [event["seq"] for event in suffix.events] == [1]


def _take_reference(parsed: list[Any], start: int, n: int, events: list[Any]) -> tuple[int, int]:
    """What the scanner's Python loop appends before it needs its general rules."""
    index = start
    while index < len(parsed):
        value = parsed[index]
        if type(value) is not dict:
            break
        tag = value.get("type")
        if tag.__class__ is str and tag in CHUNK_ROW_TAGS:
            break
        seq = value.get("seq")
        if type(seq) is not int or seq != n:
            break
        events.append(value)
        n += 1
        index += 1
    return index, n


envelope_values = st.none() | st.booleans() | st.integers(-2, 6) | st.floats(0, 6) | st.sampled_from(
    ["turn/start", "text-chunks", "tool-call-chunks", "x"]
) | st.lists(st.integers(), max_size=1) | st.dictionaries(st.text(max_size=1), st.integers(), max_size=1)


@pytest.mark.skipif(_take_plain is None, reason="the C fast path")
@settings(max_examples=300, deadline=None)
@given(
    parsed=st.lists(
        st.dictionaries(st.sampled_from(["type", "seq", "time"]), envelope_values, max_size=3)
        | st.integers() | st.lists(st.integers(), max_size=1),
        max_size=8,
    ),
    start=st.integers(0, 3),
    n=st.integers(0, 3),
)  # fmt: skip
def test_the_plain_event_fast_path_takes_exactly_what_the_python_loop_takes(
    parsed: list[Any], start: int, n: int
) -> None:
    got: list[Any] = []
    want: list[Any] = []
    assert _take_plain(parsed, start, n, got, CHUNK_ROW_TAGS) == _take_reference(parsed, start, n, want)
    assert [id(value) for value in got] == [id(value) for value in want]
