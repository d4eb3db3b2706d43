"""The inbox: durable splices of two pending-input lists, rebuilt on resume (runtime spec §6.1)."""

from __future__ import annotations

import pytest

import agentlog as al
from agentlog.agent.inbox import Inbox, InboxError


def _message(text: str) -> dict[str, object]:
    return dict(al.user_message(text, id=f"m-{text}"))


def _splices(session: al.Session) -> list[dict[str, object]]:
    return [al.thaw(e["data"]) for e in session.events if e["type"] == "agent/inbox/spliced"]


def test_inbox__every_mutation_is_one_logged_splice_before_the_lists_change() -> None:
    session = al.Session.create("s")
    inbox = Inbox(session)
    inbox.append("next-turn", _message("a"))
    inbox.append("next-turn", _message("b"))
    inbox.append("next-step", _message("steer"))
    assert [m["id"] for m in inbox.pending("next-turn")] == ["m-a", "m-b"]
    assert _splices(session)[0] == {"target": "next-turn", "start": 0, "inserted": [_message("a")]}
    claimed = inbox.claim("next-turn")
    assert [m["id"] for m in claimed] == ["m-steer", "m-a"]
    # claims are pure deletions (no outcome); removal of pending input is a cancellation
    assert _splices(session)[-2:] == [
        {"target": "next-step", "start": 0, "removedCount": 1, "inserted": []},
        {"target": "next-turn", "start": 0, "removedCount": 1, "inserted": []},
    ]
    assert inbox.remove("m-b") is True
    assert _splices(session)[-1]["outcome"] == "canceled"
    assert not inbox.has_pending()
    count = len(session.events)
    assert inbox.claim("next-turn") == []  # nothing to claim writes nothing
    inbox.clear()
    assert len(session.events) == count


def test_inbox__message_ids_are_unique_across_both_lists() -> None:
    session = al.Session.create("s")
    inbox = Inbox(session)
    inbox.append("next-turn", _message("a"))
    with pytest.raises(InboxError, match='already holds a message with id "m-a"'):
        inbox.append("next-step", _message("a"))
    with pytest.raises(InboxError, match="with an id"):
        inbox.append("next-step", {"role": "user", "content": []})
    assert len(_splices(session)) == 1  # refused mutations log nothing


def test_inbox__is_rebuilt_from_the_log_after_a_restore() -> None:
    session = al.Session.create("s")
    inbox = Inbox(session)
    for text in ("a", "b", "c"):
        inbox.append("next-turn", _message(text))
    inbox.append("next-step", _message("s"))
    inbox.claim("next-turn")
    inbox.remove("m-c")
    restored = al.Session.from_restore("s", al.thaw(list(session.events)), al.thaw(session.header))
    rebuilt = Inbox(restored)
    assert [m["id"] for m in rebuilt.pending("next-turn")] == ["m-b"]
    assert rebuilt.pending("next-step") == []


def test_inbox__a_fork_ignores_the_parents_splices_before_its_seed_boundary() -> None:
    store = al.SessionStore()
    parent = store.create("p")
    Inbox(parent).append("next-turn", _message("parent-only"))
    child = store.fork(parent)
    assert Inbox(child).pending("next-turn") == []


def test_inbox__an_invalid_persisted_splice_is_refused_with_its_seq() -> None:
    session = al.Session.create(
        "s",
        [
            {
                "type": "agent/inbox/spliced",
                "seq": 0,
                "time": 1,
                "data": {"target": "next-turn", "start": 5, "inserted": []},
            }
        ],
    )
    with pytest.raises(InboxError, match="invalid persisted inbox splice at session seq 0"):
        Inbox(session)


def test_inbox__prepend_and_replace_are_single_splices() -> None:
    session = al.Session.create("s")
    inbox = Inbox(session)
    inbox.append("next-turn", _message("b"))
    inbox.prepend("next-turn", _message("a"))
    assert [m["id"] for m in inbox.pending("next-turn")] == ["m-a", "m-b"]
    assert inbox.replace("m-b", _message("c")) is True
    assert [m["id"] for m in inbox.pending("next-turn")] == ["m-a", "m-c"]
    last = _splices(session)[-1]
    assert last == {
        "target": "next-turn",
        "start": 1,
        "removedCount": 1,
        "inserted": [_message("c")],
        "outcome": "canceled",
    }
    assert inbox.replace("missing", _message("d")) is False
    rebuilt = Inbox(al.Session.from_restore("s", al.thaw(list(session.events)), al.thaw(session.header)))
    assert [m["id"] for m in rebuilt.pending("next-turn")] == ["m-a", "m-c"]
