"""The session page's first paint: the heading and the last log page from a seq-range read of the log's
tail while the whole log is read and validated in the background; the status then is the one a whole
read gives, and a damaged log is never shown as ok."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agentlog.errors import AgentlogError
from agentlog.inspector.views import PREVIEW_BACK, PREVIEW_EVENTS, Inspector

from .stores import damage_line, open_read_only, write_cached_session, write_store


def test_the_first_paint_shows_the_tail_while_validating_then_the_summary(tmp_path: Path) -> None:
    last = write_cached_session(tmp_path, "long", 60)
    assert last + 1 > PREVIEW_EVENTS  # the tail read does not cover the log
    gate = threading.Event()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False, page_after=None, validation_gate=gate)
    reference = Inspector(open_read_only(tmp_path, "jsonl"), search=False, page_after=None)
    try:
        early = inspector.first_paint("long")
        assert early["status"] == "validating"
        assert inspector.loads == 0  # nothing read whole yet
        assert early["lastSeq"] == last and early["storedEvents"] == last + 1
        assert early["header"] == reference.summary("long")["header"]
        assert early["log"] == reference.log_page("long", last - PREVIEW_BACK)
        assert inspector.first_paint("long")["status"] == "validating"  # asked again: still validating
        gate.set()
        assert inspector.wait_validated("long", timeout=600)
        assert inspector.first_paint("long") == reference.summary("long")
        assert inspector.loads == 1
    finally:
        gate.set()
        inspector.close()
        reference.close()


def test_a_log_damaged_before_its_tail_goes_from_validating_to_damaged(tmp_path: Path) -> None:
    write_cached_session(tmp_path, "rotten", 60)
    damage_line(tmp_path, "rotten", 5)
    backend = open_read_only(tmp_path, "jsonl")
    with pytest.raises(AgentlogError) as raised:
        Inspector(backend, search=False, page_after=None).summary("rotten")
    gate = threading.Event()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False, page_after=None, validation_gate=gate)
    try:
        early = inspector.first_paint("rotten")
        assert early["status"] == "validating"  # the tail reads fine: only the whole read sees the damage
        gate.set()
        assert inspector.wait_validated("rotten", timeout=600)
        for _ in range(2):  # kept: asked again, still damaged (not read again, never ok)
            after = inspector.first_paint("rotten")
            assert after["status"] == "damaged"
            assert after["error"]["code"] == raised.value.code
            assert "log" not in after
    finally:
        gate.set()
        inspector.close()


def test_without_a_count_the_first_paint_waits_for_the_validation(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")  # no projection cache, no listing asked: no count to place a tail
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False, page_after=None)
    try:
        assert inspector.first_paint("crashed") == inspector.summary("crashed")
        assert inspector.first_paint("crashed")["status"] == "repairable"
    finally:
        inspector.close()


def test_a_session_the_listing_counted_is_painted_from_its_tail(tmp_path: Path) -> None:
    write_store(tmp_path, "jsonl")
    gate = threading.Event()
    inspector = Inspector(open_read_only(tmp_path, "jsonl"), search=False, page_after=None, validation_gate=gate)
    try:
        inspector.sessions()
        assert inspector.first_paint("crashed")["status"] == "validating"
        gate.set()
        assert inspector.wait_validated("crashed", timeout=600)
        assert inspector.first_paint("crashed")["status"] == "repairable"  # the open turn a resume closes
    finally:
        gate.set()
        inspector.close()
