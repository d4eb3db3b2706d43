"""The agent's own events: the inbox splice (runtime spec §6.1) and the delegation facts (§6.8).

``agent/inbox/spliced`` is log-only and is appended *before* the in-memory lists change, so a resumed
agent rebuilds exactly the pending input it had (:mod:`.inbox` writes and replays it). The other events
the loop writes belong to the kernel (turns, steps, messages), to the LLM layer (``llm/retry``,
:mod:`agentlog.llm.events`) and to compaction (:mod:`agentlog.compaction.events`).

Delegation (:mod:`.subagents`) writes three of the catalog's log-only types into a child session, in the
original's shapes (spec §8 rows 5, 24 and 31): ``approval/policy`` and ``sandbox/mode`` (the delegated
policy, after the seed) and ``subagent/descriptor`` (once, in the child's first turn, before its first
request). Their data validators (:mod:`agentlog.kernel.lineage`) are in the default :data:`agentlog.event_types`
registry from the start, so a session refuses a malformed one on append (nothing written) and on load,
in any process, whether or not it imports the agent.
"""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

from ..kernel import events as _core
from ..kernel.events import EventTypes
from ..kernel.lineage import (
    SUBAGENT_DESCRIPTOR_VERSION,
    check_approval_policy,
    check_sandbox_mode,
    check_subagent_descriptor,
)

__all__ = [
    "AGENT_INBOX_SPLICED",
    "AGENT_PRESET_SELECTED",
    "APPROVAL_POLICY",
    "SANDBOX_MODE",
    "SUBAGENT_DESCRIPTOR",
    "SUBAGENT_DESCRIPTOR_VERSION",
    "ApprovalPolicyData",
    "InboxSplicedData",
    "SandboxModeData",
    "SubagentDescriptorData",
    "check_approval_policy",
    "check_sandbox_mode",
    "check_subagent_descriptor",
    "register_validators",
]

AGENT_INBOX_SPLICED: Final = "agent/inbox/spliced"
"""One normalised JavaScript-style ``splice`` of one inbox list (:class:`InboxSplicedData`)."""

AGENT_PRESET_SELECTED: Final = "agent-preset/selected"
"""A preset chosen after creation (the catalog's row 2); a child's header names the parent's live preset."""

SUBAGENT_DESCRIPTOR: Final = _core.SUBAGENT_DESCRIPTOR
"""The durable identity and mode of a subagent child (:class:`SubagentDescriptorData`)."""

APPROVAL_POLICY: Final = "approval/policy"
"""An approval policy switch, last wins (:class:`ApprovalPolicyData`); a child gets ``never``."""

SANDBOX_MODE: Final = "sandbox/mode"
"""A sandbox mode switch, last wins (:class:`SandboxModeData`); a child inherits an explicit override."""


class InboxSplicedData(TypedDict):
    """``removedCount`` is omitted when nothing was removed; ``outcome: "canceled"`` marks a discard
    (removal, replace, clear) that removed at least one message; a claim is a pure deletion."""

    target: Literal["next-turn", "next-step"]
    start: int
    removedCount: NotRequired[int]
    inserted: list[Any]
    outcome: NotRequired[Literal["canceled"]]


class SubagentDescriptorData(TypedDict):
    """``subagent/descriptor``: ``label`` is required for ``continuable`` children (the name a later
    delegation resumes them by); the route override, persona and tool filter are a continuable
    child's, so its resume rebuilds the same agent."""

    version: int
    mode: Literal["one-shot", "continuable"]
    provider: str
    label: NotRequired[str]
    agentProvider: NotRequired[str]
    agentModel: NotRequired[str]
    persona: NotRequired[str]
    toolFilter: NotRequired[Any]
    """agentlog writes a list of tool names; the spec gives the field no shape, so any JSON value loads."""


class ApprovalPolicyData(TypedDict):
    policy: Literal["ask", "never"]
    source: NotRequired[Literal["delegation"]]


class SandboxModeData(TypedDict):
    mode: Literal["read-only", "workspace-write", "danger-full-access"]
    source: NotRequired[Literal["delegation"]]


def register_validators(registry: EventTypes) -> None:
    """Give another registry the delegation events' validators (the default one has them from the start)."""
    registry.register(SUBAGENT_DESCRIPTOR, validator=check_subagent_descriptor)
    registry.register(APPROVAL_POLICY, validator=check_approval_policy)
    registry.register(SANDBOX_MODE, validator=check_sandbox_mode)
