"""Lineage as the read commands show it: who a session's parent and children are (forks and subagents),
the ``ls --tree`` order, and the children's token use rolled up for ``stats``.

Everything is read from stored headers (``parentSession``, ``origin``, ``delegationDepth``) and, for the
token roll-up, from each descendant's own events: a child's usage counts from its ``seedLength`` on, so a
forked child's inherited prefix (the parent's own turns, already in the parent's figure) is never
counted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..kernel.lineage import delegation_depth_of
from ..projection.units import TOKEN_USAGE_UNIT

_BUCKETS = ("uncachedInputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


def children_index(headers: Iterable[tuple[str, Mapping[str, Any] | None]]) -> dict[str, list[str]]:
    """``parent id → [child ids]`` (in the given order) for every header that names a parent."""
    index: dict[str, list[str]] = {}
    for session_id, header in headers:
        parent = header.get("parentSession") if header else None
        if isinstance(parent, str) and parent != session_id:
            index.setdefault(parent, []).append(session_id)
    return index


def descendants(index: Mapping[str, Sequence[str]], root: str) -> list[tuple[str, int]]:
    """Every descendant of ``root`` depth first, with its level below it (1: a child); a cycle stops."""
    found: list[tuple[str, int]] = []
    seen = {root}
    stack = [(child, 1) for child in reversed(index.get(root, ()))]
    while stack:
        session_id, level = stack.pop()
        if session_id in seen:
            continue
        seen.add(session_id)
        found.append((session_id, level))
        stack.extend((child, level + 1) for child in reversed(index.get(session_id, ())))
    return found


def tree_order(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` (already sorted) reordered as a forest: each session followed by its descendants, each
    row given its ``level`` (0 for a root: no parent, or a parent not among the rows)."""
    ids = {row["id"] for row in rows}
    by_id = {row["id"]: row for row in rows}
    index = children_index(
        (row["id"], {"parentSession": row.get("parentSession")} if row.get("parentSession") in ids else None)
        for row in rows
    )
    ordered: list[dict[str, Any]] = []
    placed: set[str] = set()
    for row in rows:
        if row.get("parentSession") in ids:
            continue
        ordered.append({**row, "level": 0})
        placed.add(row["id"])
        for session_id, level in descendants(index, row["id"]):
            if session_id not in placed:
                ordered.append({**by_id[session_id], "level": level})
                placed.add(session_id)
    # sessions caught in a parent cycle (no root above them) still appear, as roots
    ordered.extend({**row, "level": 0} for row in rows if row["id"] not in placed)
    return ordered


def lineage_of(header: Mapping[str, Any]) -> dict[str, Any]:
    """The lineage fields of one header: ``{parentSession, origin, delegationDepth, seedLength}`` (``None``
    when absent; the depth is the header rule's, 0 when absent)."""
    return {
        "parentSession": header.get("parentSession"),
        "origin": header.get("origin"),
        "delegationDepth": delegation_depth_of(header),
        "seedLength": header.get("seedLength"),
    }


def own_usage(header: Mapping[str, Any], events: Sequence[Any]) -> dict[str, int] | None:
    """The usage a session reported itself: its events from ``seedLength`` on (``None``: none reported)."""
    start = header.get("seedLength")
    start = start if type(start) is int and start >= 0 else 0
    live = [event for event in events if event["seq"] >= start]
    state = TOKEN_USAGE_UNIT.fold(live)
    if state["last"] is None:
        return None
    return {key: int(state["totals"][key]) for key in _BUCKETS}  # type: ignore[literal-required]


def add_usage(total: Mapping[str, int] | None, more: Mapping[str, int] | None) -> dict[str, int] | None:
    if more is None:
        return dict(total) if total is not None else None
    if total is None:
        return dict(more)
    return {key: int(total.get(key, 0)) + int(more.get(key, 0)) for key in _BUCKETS}


def rolled_up_usage(
    own: Mapping[str, int] | None,
    children: Sequence[tuple[str, int]],
    read: Callable[[str], tuple[Mapping[str, Any], Sequence[Any]] | None],
) -> dict[str, Any]:
    """``{own, withChildren, children: [{id, level, usage}]}``: each descendant's own usage (past its seed),
    added once to ``own``; a descendant that cannot be read is listed with ``usage: null`` and an error."""
    total = dict(own) if own is not None else None
    listed: list[dict[str, Any]] = []
    for session_id, level in children:
        got = read(session_id)
        if got is None:
            listed.append({"id": session_id, "level": level, "usage": None})
            continue
        header, events = got
        usage = own_usage(header, events)
        listed.append({"id": session_id, "level": level, "usage": usage})
        total = add_usage(total, usage)
    return {"own": dict(own) if own is not None else None, "withChildren": total, "children": listed}
