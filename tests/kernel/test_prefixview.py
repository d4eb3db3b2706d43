"""``PrefixView``: the one immutable prefix view shared by the session (events, messages) and the token meter."""

from __future__ import annotations

import pytest

from agentlog import EventsView, MessageList, SessionStore
from agentlog.compaction import TokenMeter
from agentlog.errors import FrozenError
from agentlog.kernel.prefixview import PrefixView


def test_a_view_reads_only_its_prefix_like_a_list_of_it() -> None:
    backing = list(range(12))
    view = PrefixView(backing, 10)
    prefix = list(range(10))
    backing.append(12)  # the owner keeps appending: the view never sees it
    assert len(view) == 10 and list(view) == prefix and list(reversed(view)) == prefix[::-1]
    bounds = [None, -15, -3, 0, 2, 9, 10, 20]
    for start in bounds:
        for stop in bounds:
            for step in (None, 1, 2, -1, -2, 3):
                assert view[start:stop:step] == prefix[start:stop:step], (start, stop, step)
    assert view[-1] == 9 and view[0] == 0
    with pytest.raises(IndexError):
        view[10]
    with pytest.raises(IndexError):
        view[-11]
    assert view.to_list() == prefix and view.index(3) == 3 and 9 in view and 10 not in view


def test_a_view_compares_by_value_and_is_unhashable_and_immutable() -> None:
    items = [1, 2, 3]
    view = PrefixView(items, 2)
    assert view == PrefixView(items, 2) and view == PrefixView([1, 2], 2) and view == [1, 2] and view == (1, 2)
    assert PrefixView(items, 2) != PrefixView(items, 3)
    assert PrefixView(items, 2) != [1, 3]
    assert PrefixView(items, 2) != "12"
    with pytest.raises(TypeError):
        hash(PrefixView(items, 2))
    view = PrefixView(items, 2)
    for mutate in (lambda: view.append(4), lambda: view.pop(), lambda: view.__setitem__(0, 9)):  # type: ignore[attr-defined]
        with pytest.raises(FrozenError):
            mutate()
    assert items == [1, 2, 3]
    assert repr(view) == "PrefixView([1, 2])"


def test_the_session_and_the_meter_share_the_type() -> None:
    session = SessionStore().create("prefix-view")
    session.append("turn/start", {"turn": 1})
    session.append(
        "user/message",
        {"id": "m1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
        {"surfaceOp": "append"},
    )
    events, messages = session.events, session.derive_messages()
    nodes = TokenMeter().measure(session).nodes
    assert isinstance(events, EventsView) and isinstance(messages, MessageList)
    assert all(isinstance(view, PrefixView) for view in (events, messages, nodes))
    assert [node.seq for node in nodes] == [1] and nodes[::-1] == list(nodes)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert len(events) == 2 and len(session.events) == 3  # the earlier view did not grow
