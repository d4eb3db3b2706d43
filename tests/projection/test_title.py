"""The pure session-title half (runtime spec §6.10): normalizer vectors, fallback, UTF-8 budget, fold, unit.

The cases named after the original come from ``packages/session/session-title/tests/session-title.spec.ts``
(normalization, replay fold), ``projection.spec.ts`` (the ``title`` unit: once on the unit's own ``is``
contract, once through :class:`~agentlog.projection.registry.ProjectionRegistry` as the original mounts it;
"the title service unloads" is the unit's disposer here) and ``invariant.spec.ts`` (the title-source
relation). The vectors pin each normalization rule on its own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.errors import InvalidOptionError, SessionTitleStateError
from agentlog.kernel.events import Event
from agentlog.kernel.session import Session
from agentlog.projection.title import (
    DEFAULT_FALLBACK_MAX_BYTES,
    DEFAULT_FALLBACK_MAX_WORDS,
    DEFAULT_MAX_TITLE_BYTES,
    SESSION_TITLE,
    TITLE_KEY,
    TITLE_STATE_VERSION,
    TITLE_UNIT,
    collect_session_title_messages,
    fallback_session_title,
    fold_session_title,
    normalize_session_title,
    title_event_problem,
    truncate_title_utf8,
)


def utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def new_session() -> Session:
    return Session.create("titles", now=lambda: 1234)


def append_title(session: Session, title: str, seqs: list[int] | None = None, source: Any = None) -> Event:
    return session.append(
        SESSION_TITLE,
        {"title": title, "messageSeqs": [1] if seqs is None else seqs, "source": source or {"kind": "fallback"}},
    )


# --- the original's cases --------------------------------------------------------------------------------


def test_removes_terminal_controls_collapses_whitespace_and_applies_word_and_utf8_byte_caps() -> None:
    """The original's normalization case, value for value."""
    assert normalize_session_title("\x1b]0;stolen\x07  Hello\t brave\nnew world  ", 80) == "Hello brave new world"
    assert fallback_session_title("one two three four", 3, 80) == "one two three"
    assert fallback_session_title("你好世界", 5, 7) == "你好"
    assert utf8(fallback_session_title("😀😀", 5, 5)) == 4


def test_rejects_non_positive_and_fractional_public_limits() -> None:
    """Limits are positive integers; the texts are the original's."""
    with pytest.raises(InvalidOptionError, match="maxBytes must be a positive integer"):
        truncate_title_utf8("title", 0)
    with pytest.raises(InvalidOptionError, match="maxWords must be a positive integer"):
        fallback_session_title("title", 1.5, 10)  # type: ignore[arg-type]


def test_folds_the_latest_title_event_during_replay() -> None:
    """The latest ``session/title`` wins, with its seq and time; the snapshot is a copy."""
    seed = new_session()
    append_title(seed, "Earlier")
    provider_source = {"kind": "provider", "provider": "test-provider", "model": {"provider": "mock", "model": "m"}}
    append_title(seed, "Later", [1, 4], provider_source)
    snapshot = fold_session_title(seed.events)
    assert snapshot == {
        "title": "Later",
        "messageSeqs": [1, 4],
        "source": provider_source,
        "eventSeq": 1,
        "updatedAt": 1234,
    }
    assert snapshot is not None
    snapshot["messageSeqs"].append(9)  # a plain mutable copy: the log is untouched
    assert seed.events[1]["data"]["messageSeqs"] == [1, 4]


def test_title_unit_serves_null_before_the_first_title_event() -> None:
    assert TITLE_UNIT.view(TITLE_UNIT.fold(new_session().events)) is None


def test_title_unit_serves_the_latest_title_last_wins_and_reports_changes_with_the_causing_seq() -> None:
    """The change feed fires exactly where the reducer returns a new state (``is not``)."""
    session = new_session()
    first = append_title(session, "First title").seq
    second = append_title(session, "Second title").seq
    session.append("turn/start", {"turn": 1})
    state = TITLE_UNIT.initial()
    changes = []
    for event in session.events:
        nxt = TITLE_UNIT.reduce(state, event)
        if nxt is not state:
            changes.append((TITLE_UNIT.view(nxt), event.seq))
        state = nxt
    assert changes == [("First title", first), ("Second title", second)]
    assert TITLE_UNIT.view(state) == "Second title"


def test_title_unit_folds_titles_already_in_the_log_when_built_late() -> None:
    """A cell built after the fact (a fold over the existing prefix) serves the same title."""
    session = new_session()
    append_title(session, "Pre-mount title")
    assert TITLE_UNIT.fold(session.events) == "Pre-mount title"


def test_accepts_cited_automatic_titles_and_citation_free_user_renames() -> None:
    assert title_event_problem({"title": "auto", "messageSeqs": [1], "source": {"kind": "fallback"}}) is None
    assert title_event_problem({"title": "named", "messageSeqs": [], "source": {"kind": "user"}}) is None


def test_rejects_a_citation_free_automatic_title_and_a_user_rename_that_cites_messages() -> None:
    assert (
        title_event_problem({"title": "auto", "messageSeqs": [], "source": {"kind": "fallback"}})
        == 'source "fallback" must cite at least one message seq; got 0'
    )
    assert (
        title_event_problem({"title": "named", "messageSeqs": [1], "source": {"kind": "user"}})
        == 'source "user" must cite no message seqs; got 1'
    )


# --- the unit's registration facts ------------------------------------------------------------------------


def test_title_unit_has_the_originals_key_version_and_wire() -> None:
    """Key ``title``, ``stateVersion`` 1, client visible, ``string | null`` state and view."""
    assert (TITLE_UNIT.key, TITLE_UNIT.state_version, TITLE_UNIT.client_visible) == (TITLE_KEY, 1, True)
    assert TITLE_STATE_VERSION == 1
    assert (DEFAULT_FALLBACK_MAX_WORDS, DEFAULT_FALLBACK_MAX_BYTES, DEFAULT_MAX_TITLE_BYTES) == (5, 40, 80)


def test_title_unit_returns_its_state_for_unrelated_events_and_for_a_repeated_title() -> None:
    """Unchanged means the same object: an unrelated event, or the same title again (``Object.is`` on
    strings compares values in the original, so a repeat is no change there either)."""
    session = new_session()
    append_title(session, "Same")
    session.append("turn/start", {"turn": 1})
    append_title(session, "Same")
    state = TITLE_UNIT.reduce(None, session.events[0])
    assert TITLE_UNIT.reduce(state, session.events[1]) is state
    assert TITLE_UNIT.reduce(state, session.events[2]) is state


def test_title_unit_state_survives_a_json_checkpoint_and_refuses_malformed_rows() -> None:
    session = new_session()
    append_title(session, "Checkpointed")
    state = TITLE_UNIT.fold(session.events)
    assert TITLE_UNIT.parse_state(json.loads(json.dumps(state))) == "Checkpointed"
    assert TITLE_UNIT.parse_state(None) is None
    for bad in ("", 3, ["x"], {"title": "x"}):
        with pytest.raises(SessionTitleStateError, match="non-empty string or null"):
            TITLE_UNIT.parse_state(bad)


# --- normalization vectors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\x1b]0;window title\x07Real", "Real"),  # OSC ended by BEL
        ("\x1b]8;;https://evil\x1b\\link\x1b]8;;\x1b\\", "link"),  # OSC ended by ST (a hyperlink)
        ("\x9d0;c1 osc\x07Real", "Real"),  # the C1 form of OSC
        ("Keep\x1b]0;never terminated\nstill inside", "Keep"),  # unterminated: swallows the rest
        ("A\x1b]0;x\n", "A"),  # the end of the text, not "before a final newline"
        ("\x1b[31mred\x1b[0m text", "red text"),  # CSI (SGR colours)
        ("\x1b[2J\x1b[1;1Hclear", "clear"),  # CSI with parameters
        ("\x9b1mC1 csi", "C1 csi"),  # the C1 form of CSI
        ("\x1bMup\x1bDdown", "updown"),  # two-byte ESC sequences
        ("\x1b7save", "7save"),  # ESC + a byte outside @-_: the lone ESC is a control
    ],
)
def test_normalizer_strips_escape_sequences(raw: str, expected: str) -> None:
    assert normalize_session_title(raw, 80) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\x00b\x07c\x08d", "abcd"),  # C0 controls vanish
        ("a\x0bb\x0cc", "abc"),  # VT and FF are controls here, not whitespace
        ("a\x1cb\x1fc", "abc"),  # separators U+001C-U+001F too (Python calls them whitespace)
        ("a\x7fb", "ab"),  # DEL
        ("a\x80b\x85c\x9fd", "abcd"),  # C1, NEL included (not a line break here)
        ("a\tb\nc\rd", "a b c d"),  # the whitespace controls become spaces
    ],
)
def test_normalizer_strips_c0_and_c1_controls_but_keeps_whitespace(raw: str, expected: str) -> None:
    assert normalize_session_title(raw, 80) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\u202eevil.exe\u202c", "evil.exe"),  # right-to-left override and pop
        ("\u2066iso\u2069 \u2067late\u2069", "iso late"),  # isolates
        ("a\u200bb\u2060c\u2064d", "abcd"),  # zero-width space, word joiner, invisible plus
        ("\u200eltr\u200frtl", "ltrrtl"),  # marks
        ("\ufeffbom", "bom"),  # byte order mark
        ("\u206adeprecated\u206f", "deprecated"),  # deprecated format controls
        ("👨\u200d👩\u200d👧", "👨\u200d👩\u200d👧"),  # ZWJ stays: it joins emoji, it does not deceive
    ],
)
def test_normalizer_strips_directional_and_invisible_controls(raw: str, expected: str) -> None:
    assert normalize_session_title(raw, 80) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\u00a0\u00a0b", "a b"),  # NBSP
        ("你\u3000好", "你 好"),  # ideographic space
        ("a\u2028b\u2029c", "a b c"),  # line and paragraph separators
        ("a\u1680b\u2000c\u200ad\u202fe\u205ff", "a b c d e f"),
        ("  \t lead and trail \u3000 ", "lead and trail"),
        (" \n\t ", ""),
    ],
)
def test_normalizer_collapses_every_whitespace_to_one_space_and_trims(raw: str, expected: str) -> None:
    assert normalize_session_title(raw, 80) == expected


@pytest.mark.parametrize(
    ("budget", "expected"),
    [(1, "a"), (2, "a"), (3, "a"), (4, "a"), (5, "a😀"), (6, "a😀b")],
)
def test_truncation_never_splits_a_four_byte_character(budget: int, expected: str) -> None:
    """Budgets 2-4 cut inside the 4-byte emoji: the whole code point goes."""
    assert truncate_title_utf8("a😀b", budget) == expected
    assert normalize_session_title("a😀b", budget) == expected


def test_truncation_counts_bytes_not_code_points() -> None:
    assert truncate_title_utf8("é你😀", 1) == ""  # nothing fits: the empty prefix
    assert truncate_title_utf8("é你😀", 2) == "é"
    assert truncate_title_utf8("é你😀", 5) == "é你"
    assert truncate_title_utf8("é你😀", 9) == "é你😀"
    assert truncate_title_utf8("\ud800x", 3) == "\ud800"  # a lone surrogate counts 3 bytes, as Buffer does


def test_a_cut_that_ends_on_a_space_is_trimmed() -> None:
    assert normalize_session_title("ab cd", 3) == "ab"
    assert fallback_session_title("ab cd ef", 5, 3) == "ab"


def test_fallback_takes_leading_words_after_normalization() -> None:
    assert fallback_session_title("\x1b[1m  Build\nlog-backed   session titles please now ", 5, 80) == (
        "Build log-backed session titles please"
    )
    assert fallback_session_title("😀", 5, 3) == ""  # the cap cannot hold the first code point


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_every_public_limit_must_be_a_positive_integer(bad: Any) -> None:
    with pytest.raises(InvalidOptionError, match="maxBytes must be a positive integer"):
        normalize_session_title("x", bad)
    with pytest.raises(InvalidOptionError, match="maxWords must be a positive integer"):
        fallback_session_title("x", bad, 10)


def test_collects_only_human_text_messages_through_a_seq() -> None:
    """Eligible: source ``user`` and visible text; plugin context, reasoning-only and blank are not."""
    from agentlog.kernel.messages import user_message

    session = new_session()
    surface = {"surfaceOp": "append"}
    session.append("user/message", user_message("plugin text", source={"kind": "plugin", "plugin": "seed"}), surface)
    session.append("user/message", user_message([{"type": "reasoning", "text": "hidden"}]), surface)
    session.append("user/message", user_message(" \n\t "), surface)
    session.append(
        "user/message", user_message([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]), surface
    )
    session.append("user/message", user_message("later"), surface)
    assert [(m.seq, m.text) for m in collect_session_title_messages(session.events)] == [(3, "one\ntwo"), (4, "later")]
    assert [m.seq for m in collect_session_title_messages(session.events, 3)] == [3]


# --- properties -------------------------------------------------------------------------------------------

_SPECIAL = list("\x1b\x07\x9b\x9d\\[]0;m \t\n\r\x0b\x00\x85\u00a0\u3000\u202e\u200b\ufeff\u200déa你😀")
_TEXT = st.text(st.one_of(st.sampled_from(_SPECIAL), st.characters()), max_size=60)
_BUDGET = st.integers(min_value=1, max_value=40)
_REMOVED = set(range(0x00, 0x20)) | set(range(0x7F, 0xA0)) | {0x200B, 0x200E, 0x200F, 0xFEFF}
_REMOVED |= set(range(0x202A, 0x202F)) | set(range(0x2060, 0x2065)) | set(range(0x2066, 0x2070))


@given(_TEXT, _BUDGET)
def test_property_normalized_title_is_within_budget_one_clean_line(text: str, budget: int) -> None:
    title = normalize_session_title(text, budget)
    assert utf8(title) <= budget
    assert not any(ord(c) in _REMOVED for c in title)
    assert title == title.strip() and "  " not in title
    assert not any(c.isspace() and c != " " for c in title)


@given(_TEXT, _BUDGET)
def test_property_normalization_is_idempotent(text: str, budget: int) -> None:
    once = normalize_session_title(text, budget)
    assert normalize_session_title(once, budget) == once
    fallback = fallback_session_title(text, 3, budget)
    assert fallback_session_title(fallback, 3, budget) == fallback


@given(_TEXT, _BUDGET)
def test_property_truncation_is_the_longest_fitting_code_point_prefix(text: str, budget: int) -> None:
    cut = truncate_title_utf8(text, budget)
    assert text.startswith(cut) and utf8(cut) <= budget
    if cut != text:
        assert utf8(text[: len(cut) + 1]) > budget  # one more code point would not fit
    cut.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")  # whole code points only


@given(_TEXT, st.integers(min_value=1, max_value=6), _BUDGET)
def test_property_fallback_is_a_prefix_of_the_normalized_text_with_at_most_max_words(
    text: str, words: int, budget: int
) -> None:
    fallback = fallback_session_title(text, words, budget)
    assert normalize_session_title(text, 10**9).startswith(fallback)
    assert len(fallback.split()) <= words and utf8(fallback) <= budget


@given(st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=8)), max_size=8))
def test_property_the_unit_and_the_fold_agree_on_the_last_title(titles: list[str | None]) -> None:
    """``None`` entries stand for unrelated events; the unit's view is the fold's title."""
    session = new_session()
    for title in titles:
        if title is None:
            session.append("turn/start", {"turn": 1})
        else:
            append_title(session, title)
    snapshot = fold_session_title(session.events)
    assert TITLE_UNIT.view(TITLE_UNIT.fold(session.events)) == (snapshot["title"] if snapshot else None)


def test_title_unit_refuses_to_serve_a_title_that_is_not_a_string() -> None:
    """A malformed ``session/title`` in a log (no string title) is an error when served, never a value."""
    session = new_session()
    session.append(SESSION_TITLE, {"title": 5, "messageSeqs": [1], "source": {"kind": "fallback"}})
    with pytest.raises(SessionTitleStateError, match="non-empty string or null"):
        TITLE_UNIT.view(TITLE_UNIT.fold(session.events))


# --- projection.spec.ts through the registry (the original's harness: store + registry + title unit) -------


def _registry_harness(with_title: bool) -> tuple[Any, Session, Any]:
    from agentlog.kernel.store import SessionStore
    from agentlog.projection.registry import ProjectionRegistry

    store = SessionStore()
    registry = ProjectionRegistry(store)
    dispose = registry.register(TITLE_UNIT) if with_title else None
    return registry, store.create("titled"), dispose


def test_registry_serves_null_before_the_first_title_event() -> None:
    registry, session, _ = _registry_harness(True)
    assert registry.snapshot(session)["values"]["title"] is None


def test_registry_serves_the_latest_title_last_wins_and_notifies_the_change_feed_with_the_causing_seq() -> None:
    registry, session, _ = _registry_harness(True)
    changes: list[tuple[str, Any, int]] = []
    registry.on_changed(lambda _session, key, value, seq: changes.append((key, value, seq)))
    first = append_title(session, "First title").seq
    second = append_title(session, "Second title").seq
    session.append("turn/start", {"turn": 1})  # unrelated: same state, no notification
    assert changes == [("title", "First title", first), ("title", "Second title", second)]
    snapshot = registry.snapshot(session)
    assert snapshot["values"]["title"] == "Second title"
    assert snapshot["asOfSeq"] == session.seq - 1


def test_registry_folds_titles_already_in_the_log_when_the_unit_registers_late() -> None:
    registry, session, _ = _registry_harness(False)
    append_title(session, "Pre-mount title")
    registry.register(TITLE_UNIT)
    assert registry.snapshot(session)["values"]["title"] == "Pre-mount title"


def test_registry_has_no_title_key_without_the_unit_and_drops_it_when_the_unit_unregisters() -> None:
    registry, session, _ = _registry_harness(False)
    assert "title" not in registry.snapshot(session)["values"]
    dispose = registry.register(TITLE_UNIT)
    append_title(session, "Ephemeral")
    assert registry.snapshot(session)["values"]["title"] == "Ephemeral"
    dispose()
    assert "title" not in registry.snapshot(session)["values"]
