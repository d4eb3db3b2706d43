"""The ``parentUuid`` tree of a Claude Code transcript: which records are the conversation, which were
abandoned, and which abandoned branches are forks.

Claude Code appends every record and links it to the one before it in its conversation (``parentUuid``;
across a compaction, ``logicalParentUuid``). A rewind (Esc Esc) or an edited prompt starts a sibling
chain: the old records stay in the file. Claude Code resumes the chain that ends at the last record it
wrote, and that chain is what the model saw. So:

* the **active branch** is the chain up from the last conversation record of the file's side (the main
  chain, or a sub-agent file's sidechain);
* an off-chain conversation record belongs to the **branch** rooted at its first ancestor whose parent is
  on the active chain. A branch whose root is a human prompt, forked off at a point where the active chain
  also continues with a prompt, was a whole alternative turn sequence: it becomes a **fork** of the session
  at that turn boundary (agentlog's forks are closed-turn prefixes). Of several leaves under one root, the
  fork follows the one written last;
* any other off-chain record (an answer generated again, a sub-branch the fork does not follow) is **kept
  aside**: stored verbatim as ``import/record``, never on the surface, so nothing of the file is lost and
  nothing abandoned reaches the model.

When an off-chain record does not hang off the active chain at all (a second root, a link to a record the
file does not hold), the links do not describe the conversation: the file is imported in file order, as
one chain, as before.

A file with a conversation record that has no ``uuid`` or no ``parentUuid`` field (older layouts, files
written by other tools) cannot be placed: it is imported as one chain in file order, as before.
Pure: the importer feeds the records of its check pass and asks for the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BranchPlan", "ClaudeTree", "ForkSpec"]


@dataclass
class ForkSpec:
    """One abandoned branch imported as a fork: ``root`` is its first record (a prompt), ``resume`` the
    active chain's prompt at the same point (the fork's seed is the session up to that prompt's turn),
    ``members`` the records of the chain the fork follows (root to its last leaf)."""

    root: str
    resume: str
    members: frozenset[str]


@dataclass
class BranchPlan:
    aside: frozenset[str] = frozenset()
    """Off-chain conversation records kept verbatim in the session (``import/record``)."""
    forks: list[ForkSpec] = field(default_factory=list)
    forked: frozenset[str] = frozenset()
    """Every record some fork maps (the session skips them: they are stored in their fork)."""

    @property
    def off_chain(self) -> frozenset[str]:
        return self.aside | self.forked

    @property
    def resume_points(self) -> frozenset[str]:
        return frozenset(spec.resume for spec in self.forks)


class ClaudeTree:
    """What the check pass learns of the tree: parents, the conversation records of each side in file
    order, and which records are human prompts."""

    def __init__(self) -> None:
        self.parents: dict[str, str | None] = {}
        self.conversation: dict[bool, list[str]] = {False: [], True: []}  # keyed by isSidechain
        self.prompts: set[str] = set()
        self.placeable = True  # every conversation record has a uuid

    def add(self, record: Mapping[str, Any], conversation: bool) -> None:
        uuid = record.get("uuid")
        if not isinstance(uuid, str) or not uuid or "parentUuid" not in record:
            if conversation:
                self.placeable = False  # no link to follow: the file is one chain in file order
            return
        parent = record.get("parentUuid")
        if parent is None:
            parent = record.get("logicalParentUuid")  # a compaction boundary continues its conversation
        self.parents.setdefault(uuid, parent if isinstance(parent, str) and parent else None)
        if conversation:
            self.conversation[record.get("isSidechain") is True].append(uuid)
            if record.get("type") == "user" and _is_prompt(record):
                self.prompts.add(uuid)

    def _chain(self, leaf: str) -> list[str]:
        """``leaf`` and its ancestors, leaf first (stops at a missing parent or a cycle)."""
        chain: list[str] = []
        seen: set[str] = set()
        node: str | None = leaf
        while node is not None and node not in seen and node in self.parents:
            seen.add(node)
            chain.append(node)
            node = self.parents[node]
        return chain

    def plan(self, sidechain: bool) -> BranchPlan:
        records = self.conversation[sidechain]
        if not records or not self.placeable:
            return BranchPlan()
        active = set(self._chain(records[-1]))
        off = [uuid for uuid in records if uuid not in active]
        if not off:
            return BranchPlan()
        order = {uuid: index for index, uuid in enumerate(records)}
        children: dict[str, list[str]] = {}
        for uuid in records:
            parent = self.parents.get(uuid)
            if parent is not None:
                children.setdefault(parent, []).append(uuid)
        by_root: dict[str, list[str]] = {}
        aside: set[str] = set()
        for uuid in off:
            root = self._branch_root(uuid, active)
            if root is None:
                # Not a tree hanging off the active chain (several roots, links to records the file does
                # not hold): the links do not describe the conversation, so the file order does.
                return BranchPlan()
            by_root.setdefault(root, []).append(uuid)
        forks: list[ForkSpec] = []
        forked: set[str] = set()
        for root, members in by_root.items():
            parent = self.parents.get(root)
            resume = next(
                (child for child in children.get(parent or "", ()) if child in active and child in self.prompts),
                None,
            )
            if root not in self.prompts or parent is None or resume is None:
                aside.update(members)
                continue
            leaf = max(members, key=order.__getitem__)
            followed = [uuid for uuid in self._chain(leaf) if uuid not in active]
            forks.append(ForkSpec(root, resume, frozenset(followed)))
            forked.update(followed)
            aside.update(uuid for uuid in members if uuid not in followed)
        forks.sort(key=lambda spec: order[spec.root])
        return BranchPlan(frozenset(aside), forks, frozenset(forked))

    def _branch_root(self, uuid: str, active: set[str]) -> str | None:
        """The first ancestor of ``uuid`` (itself included) whose parent is on the active chain."""
        seen: set[str] = set()
        node = uuid
        while node not in seen:
            seen.add(node)
            parent = self.parents.get(node)
            if parent is None or parent not in self.parents:
                return None  # a root of its own, or a parent the file does not hold
            if parent in active:
                return node
            node = parent
        return None


def _is_prompt(record: Mapping[str, Any]) -> bool:
    """A human prompt: text, and no tool result (a result record continues its turn)."""
    message = record.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    if isinstance(content, str):
        return bool(content.strip())
    if not isinstance(content, list):
        return False
    kinds = {block.get("type") for block in content if isinstance(block, Mapping)}
    return "tool_result" not in kinds and "text" in kinds
