"""The shared id → path encoding (agentlog.persistence.paths): one module every backend imports."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentlog.persistence import paths
from agentlog.persistence.jsonl import backend as jsonl_backend


def test_paths__the_jsonl_backend_re_exports_the_shared_encoding() -> None:
    assert jsonl_backend.encode_segment is paths.encode_segment
    assert jsonl_backend.project_key is paths.project_key
    assert jsonl_backend.MAX_ENCODED_ID_BYTES == paths.MAX_ENCODED_ID_BYTES == 250


@given(st.text(min_size=1))
def test_paths__decode_segment_inverts_encode_segment(raw: str) -> None:
    encoded = paths.encode_segment(raw)
    assert paths.decode_segment(encoded) == raw
    assert set(encoded) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-~")
    assert encoded not in (".", "..")


@given(st.text(min_size=1))
def test_paths__encodes_verbatim_means_the_encoding_is_the_id(raw: str) -> None:
    if paths.encodes_verbatim(raw) and raw not in (".", ".."):
        assert paths.encode_segment(raw) == raw
    else:
        assert paths.encode_segment(raw) != raw


def test_paths__decode_segment_leaves_a_name_it_cannot_decode_as_it_is() -> None:
    assert paths.decode_segment("plain") == "plain"
    assert paths.decode_segment("~D83D~DE00x") == "😀x"
    assert paths.decode_segment("😀~0041") == "😀~0041"  # an astral character is no UTF-16 unit
    assert paths.decode_segment("~002E~002E") == ".."
