"""The address space a read reserves before parsing covers what the parser takes, for text of any shape.

Under an address-space limit the backends refuse a parse that could run out of memory before it starts,
because orjson can crash the process on an allocation failure midway (a CI run's child died of SIGSEGV
this way: the old reserve of 16 bytes per byte of text was below the 18 that chunk events need). Here
the parser's real peak (``tracemalloc``: every object and the parser's own pool) is measured against
the reserve, without its floor (which is for the allocators' granularity, invisible to ``tracemalloc``).
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentlog.persistence._headroom import FLOOR_BYTES, parse_reserve

_SIZE = 256 * 1024
"""Texts are repeated up to about this size, so the parser's fixed costs do not hide its per-byte ones."""


def _peak(lines: list[bytes], *, joined: bool) -> int:
    """Bytes the parse of ``lines`` allocates at its peak, the parsed values kept alive to the end."""
    text = b"[" + b",".join(lines) + b"]" if joined else b""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        if joined:
            kept: Any = orjson.loads(text)
        else:
            kept = [orjson.loads(line) for line in lines]
        peak = tracemalloc.get_traced_memory()[1] - base
        del kept
    finally:
        tracemalloc.stop()
    return peak


def _repeated(line: bytes) -> list[bytes]:
    return [line] * max(1, _SIZE // (len(line) + 1))


def _chunk(seq: int) -> bytes:
    chunk = {"type": "text-delta", "index": 0, "text": f"x{seq}"}
    data = {"turn": 1, "step": 1, "chunk": chunk}
    return orjson.dumps({"seq": seq, "type": "assistant/chunk", "time": 1_700_000_000_000 + seq, "data": data})


SHAPES = {
    "chunk events": [_chunk(seq) for seq in range(2000)],
    "messages": [
        orjson.dumps({"seq": s, "type": "user/message", "data": {"role": "user", "content": "y" * 2000}})
        for s in range(120)
    ],
    "empty objects": _repeated(b"[" + b",".join([b"{}"] * 1000) + b"]"),
    "empty arrays": _repeated(b"[" + b",".join([b"[]"] * 1000) + b"]"),
    "nested arrays": _repeated(b"[" + b",".join([b"[[[[0]]]]"] * 500) + b"]"),
    "one-key objects": _repeated(b"[" + b",".join(b'{"k%d":0}' % i for i in range(1000)) + b"]"),
    "small strings": _repeated(b"[" + b",".join(b'"a%d"' % i for i in range(1000)) + b"]"),
    "floats": _repeated(b"[" + b",".join([b"1.5"] * 1000) + b"]"),
    "one long string": [orjson.dumps("z" * (4 << 20))],
}


@pytest.mark.parametrize("joined", [True, False], ids=["one-call", "per-line"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_reserve_covers_the_parsers_peak_for_dense_and_plain_text(shape: str, joined: bool) -> None:
    lines = SHAPES[shape]
    assert _peak(lines, joined=joined) <= parse_reserve(lines, one_call=joined) - FLOOR_BYTES
    texts = [line.decode() for line in lines]  # (a SQLite TEXT column's value)
    assert _peak(lines, joined=joined) <= parse_reserve(texts, one_call=joined) - FLOOR_BYTES


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=30,
)


@settings(deadline=None, max_examples=60)  # (tracemalloc makes each example slow; the shapes above are dense)
@given(value=_json, joined=st.booleans())
def test_the_reserve_covers_the_parsers_peak_for_any_json_value(value: Any, joined: bool) -> None:
    lines = _repeated(orjson.dumps(value))
    assert _peak(lines, joined=joined) <= parse_reserve(lines, one_call=joined) - FLOOR_BYTES
