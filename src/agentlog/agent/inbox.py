"""The agent inbox: pending user input, as durable splices of two ordered lists.

``next-turn`` holds prompts (one starts each turn); ``next-step`` holds steering and injected context,
consumed at the next step boundary. Every mutation is one normalised JavaScript-style ``splice``,
logged as ``agent/inbox/spliced`` *before* the lists change, so a resumed agent rebuilds exactly the
pending input it had — nothing a user typed is lost in a crash, and nothing is delivered twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..errors import InboxError as InboxError
from ..kernel.session import Session
from .events import AGENT_INBOX_SPLICED

Target = Literal["next-turn", "next-step"]
TARGETS: tuple[Target, Target] = ("next-turn", "next-step")


def _normalise(length: int, start: float, delete_count: float | None) -> tuple[int, int]:
    """JavaScript ``Array.prototype.splice`` argument normalisation (truncate, clamp, negative start)."""
    s = 0 if start != start else int(start)
    if s < 0:
        s = max(length + s, 0)
    s = min(s, length)
    if delete_count is None:
        count = length - s
    else:
        count = 0 if delete_count != delete_count else int(delete_count)
        count = min(max(count, 0), length - s)
    return s, count


class Inbox:
    """Pending input of one agent, rebuilt from (and persisted to) its session log."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._lists: dict[str, list[Any]] = {"next-turn": [], "next-step": []}
        self._replay()

    # -- reading -------------------------------------------------------------------------------------
    def pending(self, target: Target) -> list[Any]:
        return list(self._lists[target])

    def has_pending(self, target: Target | None = None) -> bool:
        if target is None:
            return bool(self._lists["next-turn"] or self._lists["next-step"])
        return bool(self._lists[target])

    # -- mutations -------------------------------------------------------------------------------------
    def splice(
        self,
        target: Target,
        start: float,
        delete_count: float | None = None,
        inserted: Sequence[Mapping[str, Any]] = (),
        *,
        canceled: bool = True,
    ) -> list[Any]:
        """One durable splice; returns the removed messages. A no-op splice writes nothing."""
        if target not in self._lists:
            raise InboxError(f'unknown inbox target "{target}"')
        items = self._lists[target]
        s, count = _normalise(len(items), start, delete_count)
        if count == 0 and not inserted:
            return []
        removed_ids = {m["id"] for m in items[s : s + count]}
        remaining = [m["id"] for t in TARGETS for m in self._lists[t]]
        for message in inserted:
            message_id = message.get("id") if isinstance(message, Mapping) else None
            if not isinstance(message_id, str) or not message_id:
                raise InboxError("inbox messages must be user messages with an id")
            if message_id in remaining and message_id not in removed_ids:
                raise InboxError(f'inbox already holds a message with id "{message_id}"')
            remaining.append(message_id)
        data: dict[str, Any] = {"target": target, "start": s}
        if count:
            data["removedCount"] = count
        data["inserted"] = [dict(m) for m in inserted]
        if count and canceled:
            data["outcome"] = "canceled"
        event = self._session.append_custom(AGENT_INBOX_SPLICED, data)  # durable before the lists change
        removed = items[s : s + count]
        items[s : s + count] = list(event.data["inserted"])
        return removed

    def append(self, target: Target, message: Mapping[str, Any]) -> None:
        self.splice(target, len(self._lists[target]), 0, [message])

    def prepend(self, target: Target, message: Mapping[str, Any]) -> None:
        self.splice(target, 0, 0, [message])

    def replace(self, message_id: str, message: Mapping[str, Any]) -> bool:
        """Swap a pending message in place (the old one is recorded as canceled)."""
        for target in TARGETS:
            for index, pending in enumerate(self._lists[target]):
                if pending["id"] == message_id:
                    self.splice(target, index, 1, [message])
                    return True
        return False

    def remove(self, message_id: str) -> bool:
        for target in TARGETS:
            for index, message in enumerate(self._lists[target]):
                if message["id"] == message_id:
                    self.splice(target, index, 1)
                    return True
        return False

    def clear(self) -> None:
        """Discard everything pending (a user cancellation): next-step first, then next-turn."""
        for target in ("next-step", "next-turn"):
            if self._lists[target]:
                self.splice(target, 0, len(self._lists[target]))

    def claim(self, target: Target) -> list[Any]:
        """Take the input of the next boundary: all of next-step, then (for a new turn) the first prompt."""
        claimed = self.splice("next-step", 0, len(self._lists["next-step"]), canceled=False)
        if target == "next-turn" and self._lists["next-turn"]:
            claimed += self.splice("next-turn", 0, 1, canceled=False)
        return claimed

    # -- reconstruction ----------------------------------------------------------------------------------
    def _replay(self) -> None:
        start = self._session.header.get("seedLength", 0)
        for event in self._session.events:
            if event["seq"] < start or event["type"] != AGENT_INBOX_SPLICED:
                continue
            data = event["data"]
            target = data.get("target") if isinstance(data, Mapping) else None
            items = self._lists.get(target) if isinstance(target, str) else None
            begin = data.get("start") if isinstance(data, Mapping) else None
            removed = data.get("removedCount", 0) if isinstance(data, Mapping) else None
            inserted = data.get("inserted") if isinstance(data, Mapping) else None
            if (
                items is None
                or type(begin) is not int
                or type(removed) is not int
                or not 0 <= begin <= len(items)
                or not 0 <= removed <= len(items) - begin
                or not isinstance(inserted, list)
            ):
                raise InboxError(f"invalid persisted inbox splice at session seq {event['seq']}")
            items[begin : begin + removed] = list(inserted)
