"""Hostile JSONL logs: whatever a line holds, a load either succeeds or raises a typed error.

Every envelope field of a valid session's lines (and of packed chunk rows) may be replaced by any JSON
value, objects and arrays included; every read (a repairing load, an inspection, a suffix read, the
partial export) must end in an :class:`~agentlog.errors.AgentlogError` with a stable code or in a
result, never in a ``TypeError``/``KeyError`` from somewhere inside, and a refused load changes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentlog import SessionStore
from agentlog.errors import AgentlogError
from agentlog.persistence.coordinator import PersistenceCoordinator
from agentlog.persistence.jsonl.backend import JsonlBackend, encode_segment, project_key

CWD = "/home/me/app"
HEADER = {"type": "session", "version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD, "delegationDepth": 0}

BASE: list[dict[str, Any]] = [
    {"type": "turn/start", "seq": 0, "time": 1000, "data": {"turn": 1}},
    {
        "type": "user/message",
        "seq": 1,
        "time": 1000,
        "data": {"id": "u1", "role": "user", "content": [{"type": "text", "text": "q"}], "source": {"kind": "user"}},
        "surfaceOp": "append",
    },
    {"type": "step/start", "seq": 2, "time": 1000, "data": {"turn": 1, "step": 1}},
    {
        "type": "text-chunks",
        "seq0": 3,
        "time0": 1000,
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [0, 1], "texts": ["a", "b", "c"]},
    },
    {"type": "assistant/chunk", "seq": 6, "time": 1002,
     "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "d"}}},
    {"type": "assistant/chunk", "seq": 7, "time": 1002,
     "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "e"}}},
    {"type": "step/end", "seq": 8, "time": 1003, "data": {"turn": 1, "step": 1}},
    {"type": "turn/end", "seq": 9, "time": 1003, "data": {"turn": 1, "reason": {"kind": "completed"}}},
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=5,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, (*prefix, index))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)  # type: ignore[index,call-overload]
    return copy


@st.composite
def hostile_logs(draw: Any) -> list[bytes]:
    """The header line and the event lines, one to three values replaced anywhere (the header too)."""
    records: list[Any] = [dict(HEADER), *(dict(event) for event in BASE)]
    for _ in range(draw(st.integers(1, 3))):
        line = draw(st.integers(0, len(records) - 1))
        paths = _paths(records[line])[1:]
        path = draw(st.sampled_from(paths))
        records[line] = _replace(records[line], path, draw(json_values))
    return [orjson.dumps(record) for record in records]


def _write(root: Path, lines: list[bytes], compression: str) -> Path:
    suffix = ".jsonl.zstd" if compression == "zstd" else ".jsonl"
    path = root / project_key(CWD) / encode_segment("s1") / ("session" + suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = lines[0] + b"\n"
    body = b"".join(line + b"\n" for line in lines[1:])
    if compression == "zstd":
        compress = zstandard.ZstdCompressor().compress
        path.write_bytes(compress(head) + compress(body))
    else:
        path.write_bytes(head + body)
    return path


def _outcome(call: Any) -> str:
    try:
        call()
    except AgentlogError as err:
        assert isinstance(err.code, str) and err.code, err
        return err.code
    return "ok"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=hostile_logs(), compression=st.sampled_from(["none", "zstd"]))
def test_every_read_of_a_hostile_log_ends_typed(lines: list[bytes], compression: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = _write(root, lines, compression)
        before = path.read_bytes()

        def coordinator() -> PersistenceCoordinator:
            return PersistenceCoordinator(SessionStore(), JsonlBackend(str(root), compression=compression))

        inspected = _outcome(lambda: coordinator().inspect("s1"))
        assert path.read_bytes() == before  # inspection never writes
        _outcome(lambda: coordinator().read_from("s1", 5))
        _outcome(lambda: JsonlBackend(str(root), compression=compression).read_prefix("s1"))
        _outcome(lambda: [item.id for item in JsonlBackend(str(root), compression=compression).list_sessions()])
        loaded = _outcome(lambda: coordinator().load("s1"))
        if loaded != "ok":
            assert path.read_bytes() == before  # a refused load changes nothing
        assert (inspected == "ok") == (loaded == "ok"), (inspected, loaded)
