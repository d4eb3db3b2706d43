"""The agent's own event: one durable inbox splice (runtime spec §6.1, the original's ``core/agent`` inbox).

``agent/inbox/spliced`` is log-only and is appended *before* the in-memory lists change, so a resumed
agent rebuilds exactly the pending input it had (:mod:`.inbox` writes and replays it). The other events
the loop writes belong to the kernel (turns, steps, messages), to the LLM layer (``llm/retry``,
:mod:`agentlog.llm.events`) and to compaction (:mod:`agentlog.compaction.events`).
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

__all__ = ["AGENT_INBOX_SPLICED", "InboxSplicedData"]

AGENT_INBOX_SPLICED: Final = "agent/inbox/spliced"
"""One normalised JavaScript-style ``splice`` of one inbox list (:class:`InboxSplicedData`)."""


class InboxSplicedData(TypedDict):
    """``removedCount`` is omitted when nothing was removed; ``outcome: "canceled"`` marks a discard
    (removal, replace, clear) that removed at least one message; a claim is a pure deletion."""

    target: Literal["next-turn", "next-step"]
    start: int
    removedCount: NotRequired[int]
    inserted: list[Any]
    outcome: NotRequired[Literal["canceled"]]
