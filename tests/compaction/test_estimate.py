"""The fixed token heuristic (runtime spec §5.4) as exact vectors.

Every expected number is the original's on the same input: lengths are JavaScript ``string.length``
(UTF-16 code units) and unknown blocks / tool lists are priced by the length of ``JSON.stringify``. The
JSON texts below are written out literally (what JavaScript prints), so a Python-flavoured
serialisation (``1.0``, ``1e-07``, spaces, escaped non-ASCII) fails a test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.compaction.estimate import (
    BLOCK_OVERHEAD,
    CHARS_PER_TOKEN,
    ROLE_OVERHEAD,
    estimate_content,
    estimate_header,
    estimate_message,
    estimate_system_tokens,
    estimate_tools_tokens,
    js_json,
    js_json_length,
    js_length,
)


def test_constants_are_the_originals() -> None:
    assert (CHARS_PER_TOKEN, BLOCK_OVERHEAD, ROLE_OVERHEAD) == (4, 4, 4)


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("", 0),
        ("a", 1),
        ("abcd", 4),
        ("é", 1),  # BMP, 1 unit
        ("中文", 2),  # CJK: 1 unit each
        ("😀", 2),  # outside the BMP: a surrogate pair
        ("a😀b", 4),
        ("👩‍💻", 5),  # ZWJ sequence: 2 + 1 + 2
        ("\ud800", 1),  # a lone surrogate is one unit
        ("\ud83d\ude00", 2),  # a pair given as two code points
    ],
)
def test_js_length_counts_utf16_code_units(text: str, units: int) -> None:
    assert js_length(text) == units


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0 + 4),
        ("a", 1 + 4),
        ("abcd", 1 + 4),
        ("abcde", 2 + 4),
        ("😀😀", 1 + 4),  # 4 units
        ("😀😀😀", 2 + 4),  # 6 units
        ("中文字四", 1 + 4),  # 4 units
        ("中文字四五", 2 + 4),
    ],
)
def test_text_and_reasoning_blocks_cost_ceil_units_over_four_plus_overhead(text: str, tokens: int) -> None:
    assert estimate_content([{"type": "text", "text": text}]) == tokens
    assert estimate_content([{"type": "reasoning", "text": text}]) == tokens


def test_tool_call_prices_name_and_arguments_separately() -> None:
    """ceil(5/4) + ceil(9/4) + 4: the two ceilings are taken separately (not ceil(14/4))."""
    block = {"type": "tool-call", "id": "c1", "name": "abcde", "arguments": '{"a":"😀"}'}  # args: 9 units
    assert estimate_content([block]) == 2 + 3 + 4


def test_tool_result_recurses_into_its_content() -> None:
    """(text 'xy' 1+4 + image) + 4; an image is priced by its JSON text."""
    image = {"type": "image", "attachment": {"attachmentId": "a", "mediaType": "image/png"}}
    image_json = '{"type":"image","attachment":{"attachmentId":"a","mediaType":"image/png"}}'
    assert js_json(image) == image_json
    image_tokens = 4 + -(-len(image_json) // 4)
    block = {"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "xy"}, image]}
    assert estimate_content([block]) == (5 + image_tokens) + 4


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"type": "future", "n": 1.0}, '{"type":"future","n":1}'),
        ({"type": "future", "n": 1.5}, '{"type":"future","n":1.5}'),
        ({"type": "future", "n": 1e21}, '{"type":"future","n":1e+21}'),
        ({"type": "future", "n": 1e-7}, '{"type":"future","n":1e-7}'),
        ({"type": "future", "n": -0.0}, '{"type":"future","n":0}'),
        ({"type": "future", "n": 1.2345678901234568e20}, '{"type":"future","n":123456789012345680000}'),
        ({"type": "future", "s": 'é😀\n"\\'}, '{"type":"future","s":"é😀\\n\\"\\\\"}'),
        ({"type": "future", "s": "\x1f\x7f\u2028"}, '{"type":"future","s":"\\u001f\x7f\u2028"}'),
        ({"type": "future", "l": [True, None, {"k": []}]}, '{"type":"future","l":[true,null,{"k":[]}]}'),
    ],
)
def test_unknown_blocks_are_priced_by_their_javascript_json_text(value: dict[str, Any], text: str) -> None:
    assert js_json(value) == text
    assert js_json_length(value) == js_length(text)
    assert estimate_content([value]) == 4 + -(-js_length(text) // 4)


def test_message_adds_role_overhead_to_its_content() -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "abcd"}, {"type": "text", "text": "😀"}]}
    assert estimate_message(message) == (1 + 4) + (1 + 4) + 4
    assert estimate_message({"role": "assistant", "content": []}) == 4


def test_system_and_tools_prices_and_their_absence() -> None:
    """system: ceil(len/4) + 4 (0 without); tools: ceil(len(JSON)/4) + 4 (0 when absent or empty)."""
    tools = [{"name": "read", "description": "read", "parameters": {"type": "object"}}]
    tools_json = '[{"name":"read","description":"read","parameters":{"type":"object"}}]'  # 69 characters
    header = {"config": {"provider": "p", "model": "m"}, "system": "系统😀", "tools": tools}
    assert estimate_system_tokens(header) == 1 + 4  # 4 units
    assert js_json(tools) == tools_json and len(tools_json) == 69
    assert estimate_tools_tokens(header) == 18 + 4
    assert estimate_header(header) == 5 + 22
    assert estimate_header(None) == estimate_system_tokens(None) == estimate_tools_tokens(None) == 0
    bare = {"config": {"provider": "p", "model": "m"}}
    assert estimate_header(bare) == 0
    assert estimate_tools_tokens({**bare, "tools": []}) == 0
    assert estimate_system_tokens({**bare, "system": ""}) == 0 + 4  # present but empty, as in the original


_STRINGS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=8)  # the gate refuses lone surrogates
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | _STRINGS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_STRINGS, children, max_size=3),
    max_leaves=12,
)


@given(_JSON)
def test_json_text_without_floats_is_the_standard_compact_serialisation(value: Any) -> None:
    """Without floats ``JSON.stringify`` equals the standard library's compact, non-ASCII-preserving output
    (the same escapes: ``\\n``-style for five controls, ``\\u00XX`` for the rest), and the orjson fast
    path measures exactly that text."""
    expected = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert js_json(value) == expected
    assert js_json_length(value) == js_length(expected)


def test_a_lone_surrogate_is_priced_as_javascript_escapes_it() -> None:
    """JSON.stringify writes a lone surrogate as a six-character \\uXXXX escape (orjson refuses it)."""
    from agentlog.llm.tokens import js_json, js_json_length

    assert js_json("a\ud800b") == '"a\\ud800b"'
    assert js_json_length({"t": "\udfff"}) == len('{"t":"\\udfff"}') == 14
    assert js_json_length([1.5, "\ud800"]) == len('[1.5,"\\ud800"]')
