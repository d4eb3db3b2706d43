"""Delegation: an agent hands a task to a subagent whose run is its own session (runtime spec §6.8).

``Agent(..., subagents=SubagentConfig(...))`` registers a ``delegate`` tool and enables
:meth:`Agent.delegate <agentlog.agent.loop.Agent.delegate>`. Each delegation runs a child
:class:`~agentlog.agent.loop.Agent` on a child session in the parent's store:

- the child's header carries the lineage (``cwd``, ``agentPreset``, ``parentSession``,
  ``origin: "subagent"``, ``delegationDepth`` = parent depth + 1, ``seedLength`` for a non-empty seed);
- the ``fork`` provider seeds the child with the parent's prefix ending at its last ``turn/end`` (never
  the in-flight turn), ``spawn`` seeds nothing;
- after the seed the child gets the delegated policy (``approval/policy {policy: "never", source:
  "delegation"}``, and ``sandbox/mode {mode, source: "delegation"}`` when the parent set one), and in its
  first turn, before its first request, one ``subagent/descriptor`` (version 2);
- a ``continuable`` child has a ``label``: a later delegation with the same label resumes that child
  session instead of creating one (its id is derived from the parent's id and the label,
  :func:`continuable_child_id`, and the parent's results name it, so it is found after a restart or a
  crash);
- the parent's tool result carries the child's answer as text and, in ``meta.subagent``, the child's
  session id and the seq range of the answer (``seqs: [first, last]``: the child's turn start to its
  answer), so "where did this answer come from" is one lookup.

The depth is checked first: ``delegation_depth_of(parent header, subagent_depth) + 1 > max_depth`` is a
:class:`~agentlog.errors.SubagentDepthError` (the tool call's error result) and nothing is written.
Cancelling the parent's turn cancels its running children with cause ``{kind: "parent"}``; each child
closes its own turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    AgentlogError,
    InvalidAgentOptionError,
    SessionNotFoundError,
    SubagentDepthError,
    SubagentLabelError,
)
from ..kernel.events import ASSISTANT_MESSAGE, TOOL_RESULT, TURN_END, TURN_START
from ..kernel.jsonvalue import thaw
from ..kernel.lineage import SUBAGENT_DESCRIPTOR_VERSION, delegation_depth_of, is_depth
from ..kernel.session import Session
from ..kernel.store import SessionStore, store_of
from ..llm.types import Provider
from .events import (
    AGENT_PRESET_SELECTED,
    APPROVAL_POLICY,
    SANDBOX_MODE,
    SUBAGENT_DESCRIPTOR,
    ApprovalPolicyData,
    SandboxModeData,
    SubagentDescriptorData,
)
from .tools import TOOL_ABORTED, ExecutionMode, Tool, ToolContext, ToolOutcome, ToolRegistry

if TYPE_CHECKING:
    from .loop import Agent, TurnOutcome

__all__ = [
    "DELEGATE_TOOL",
    "DelegateTool",
    "Delegation",
    "DelegationResult",
    "SubagentConfig",
    "child_session_meta",
    "continuable_child_id",
    "fork_seed",
]

Mode = Literal["one-shot", "continuable"]
ProviderKind = Literal["fork", "spawn"]

DELEGATE_TOOL = "delegate"
"""The default name of the delegation tool."""


@dataclass(frozen=True)
class SubagentConfig:
    """How an agent delegates.

    ``max_depth`` caps ``delegationDepth`` (a non-negative safe integer; 1: children may not delegate
    again). ``subagent_depth`` is the depth an embedding says this agent runs at (the spec's
    ``options.subagentDepth``); the header's recorded depth wins when it is larger. ``tools`` are the
    tools a child may use (default: the parent's, without the delegation tool unless the child may
    delegate too); a delegation's ``tool_filter`` narrows them by name. ``providers`` maps the names a
    model-provider override may use to providers (the parent's provider serves the parent's provider
    name). ``open_session`` brings a stored continuable child back (e.g. a coordinator's ``resume``);
    without it only children live in the store can be continued.
    """

    max_depth: int = 1
    subagent_depth: int = 0
    default_provider: ProviderKind = "spawn"
    tools: Sequence[Tool] | ToolRegistry | None = None
    providers: Mapping[str, Provider] = field(default_factory=dict)
    open_session: Callable[[str], Session] | None = None
    tool_name: str = DELEGATE_TOOL
    max_steps: int | None = None
    release_one_shot: bool = False
    """Dispose a one-shot child's session once its answer is in (a persisted store flushes it and releases
    its lock on disposal); leave it off to keep finished children live, e.g. in a memory-only store."""

    def __post_init__(self) -> None:
        for name in ("max_depth", "subagent_depth"):
            value = getattr(self, name)
            if not is_depth(value):
                raise InvalidAgentOptionError(f"{name} must be a non-negative safe integer, got {value!r}")
        if self.default_provider not in ("fork", "spawn"):
            raise InvalidAgentOptionError(f'default_provider must be "fork" or "spawn", got {self.default_provider!r}')


@dataclass(frozen=True)
class DelegationResult:
    """What a delegation produced: the child's final answer, where it is, and how the child's turn ended."""

    session_id: str
    answer: str
    seqs: tuple[int, int]
    """The child's seq range of this delegation: its ``turn/start`` to its last ``assistant/message``
    (to its ``turn/end`` when it gave no answer)."""
    reason: dict[str, Any]
    mode: Mode
    provider: ProviderKind
    label: str | None
    depth: int
    resumed: bool

    @property
    def completed(self) -> bool:
        return self.reason.get("kind") == "completed"

    def meta(self) -> dict[str, Any]:
        """The ``meta.subagent`` record of the parent's ``tool/result``."""
        record: dict[str, Any] = {
            "sessionId": self.session_id,
            "mode": self.mode,
            "provider": self.provider,
            "depth": self.depth,
            "seqs": list(self.seqs),
            "reason": self.reason.get("kind", "completed"),
        }
        if self.label is not None:
            record["label"] = self.label
        if self.resumed:
            record["resumed"] = True
        return {"subagent": record}


# --- lineage as data ----------------------------------------------------------------------------------


def fork_seed(parent: Session) -> list[Any]:
    """The fork provider's seed: the parent's events up to and including its last ``turn/end``."""
    events = parent.events
    for index in range(len(events) - 1, -1, -1):
        if events[index]["type"] == TURN_END:
            return list(events[: index + 1])
    return []


def continuable_child_id(parent_id: str, label: str) -> str:
    """The session id of ``parent_id``'s continuable child ``label``: derived, so a later delegation finds
    the child from the label alone (after a restart, or a crash that lost the result naming it)."""
    digest = hashlib.sha256(f"{parent_id}\n{label}".encode()).hexdigest()
    return f"subagent-{digest[:32]}"


def _live_preset(parent: Session) -> str | None:
    for event in reversed(parent.events):
        if event["type"] == AGENT_PRESET_SELECTED:
            preset = event["data"].get("agentPreset")
            return preset if isinstance(preset, str) else None
    preset = parent.header.get("agentPreset")
    return preset if isinstance(preset, str) else None


def child_session_meta(parent: Session, depth: int, seed_length: int) -> dict[str, Any]:
    """The spec's ``childSessionMeta``: the child header's lineage fields, in the original's order."""
    meta: dict[str, Any] = {}
    if "cwd" in parent.header:
        meta["cwd"] = parent.header["cwd"]
    preset = _live_preset(parent)
    if preset is not None:
        meta["agentPreset"] = preset
    meta["parentSession"] = parent.id
    meta["origin"] = "subagent"
    meta["delegationDepth"] = depth
    if seed_length > 0:
        meta["seedLength"] = seed_length
    return meta


def _explicit_sandbox(parent: Session) -> str | None:
    for event in reversed(parent.events):
        if event["type"] == SANDBOX_MODE:
            mode = event["data"].get("mode")
            return mode if isinstance(mode, str) else None
    return None


def _descriptor_of(session: Session) -> Mapping[str, Any] | None:
    """The child's own descriptor (an inherited one, in a fork seed, is the parent's, not its own)."""
    start = session.header.get("seedLength", 0)
    for event in session.events[start:]:
        if event["type"] == SUBAGENT_DESCRIPTOR:
            data: Mapping[str, Any] = event["data"]
            return data
    return None


def _labelled_children(parent: Session) -> dict[str, str]:
    """``label → child session id`` from the parent's own delegation results (the last one wins)."""
    found: dict[str, str] = {}
    for event in parent.events:
        if event["type"] != TOOL_RESULT:
            continue
        meta = event["data"].get("meta")
        record = meta.get("subagent") if isinstance(meta, Mapping) else None
        if not isinstance(record, Mapping) or record.get("mode") != "continuable":
            continue
        label, child = record.get("label"), record.get("sessionId")
        if isinstance(label, str) and isinstance(child, str):
            found[label] = child
    return found


# --- the delegation service -----------------------------------------------------------------------------


class Delegation:
    """The delegation service of one parent agent (made by ``Agent(subagents=...)``)."""

    def __init__(self, parent: Agent, config: SubagentConfig) -> None:
        self.parent = parent
        self.config = config
        self._children: dict[str, Agent] = {}  # continuable children this parent runs, by session id
        self._label_ids: dict[str, str] = {}  # labels of delegations made through the API (no tool result)
        self._label_locks: dict[str, asyncio.Lock] = {}

    @property
    def depth(self) -> int:
        """This agent's delegation depth (the header is authoritative and monotone)."""
        return delegation_depth_of(self.parent.session.header, self.config.subagent_depth)

    @property
    def may_delegate(self) -> bool:
        return self.depth + 1 <= self.config.max_depth

    def _store(self) -> SessionStore:
        store = store_of(self.parent.session)
        if store is None:
            raise SessionNotFoundError(
                f'session "{self.parent.session.id}" is not live in a store, so it cannot have child sessions'
            )
        return store

    async def delegate(
        self,
        task: str,
        *,
        mode: Mode = "one-shot",
        provider: ProviderKind | None = None,
        label: str | None = None,
        persona: str | None = None,
        tool_filter: Sequence[str] | None = None,
        agent_provider: str | None = None,
        agent_model: str | None = None,
        cancel: asyncio.Event | None = None,
    ) -> DelegationResult:
        """Run ``task`` in a child session and return its answer (see the module docstring)."""
        if not isinstance(task, str) or not task.strip():
            raise InvalidAgentOptionError("a delegation needs a non-empty task")
        if mode not in ("one-shot", "continuable"):
            raise InvalidAgentOptionError(f'mode must be "one-shot" or "continuable", got {mode!r}')
        kind: ProviderKind = provider or self.config.default_provider
        if kind not in ("fork", "spawn"):
            raise InvalidAgentOptionError(f'provider must be "fork" or "spawn", got {kind!r}')
        if label is not None and (not isinstance(label, str) or not label):
            raise InvalidAgentOptionError("label must be a non-empty string")
        if mode == "continuable" and label is None:
            raise InvalidAgentOptionError("a continuable delegation needs a label")
        depth = self.depth + 1
        if depth > self.config.max_depth:
            raise SubagentDepthError(
                f'session "{self.parent.session.id}" is at delegation depth {depth - 1}; a child would be at '
                f"depth {depth}, past max_depth {self.config.max_depth}"
            )
        if mode == "continuable":
            assert label is not None
            lock = self._label_locks.setdefault(label, asyncio.Lock())
            async with lock:  # two delegations to one label in one step run one after the other
                return await self._continuable(
                    task, kind, label, persona, tool_filter, agent_provider, agent_model, depth, cancel
                )
        child, session = self._new_child(
            kind, depth, label, "one-shot", persona, tool_filter, agent_provider, agent_model
        )
        try:
            return await self._run_child(child, task, "one-shot", kind, label, depth, False, cancel)
        finally:
            store = store_of(session) if self.config.release_one_shot else None
            if store is not None:
                store.dispose(session)  # a persisted store flushes it and releases its lock

    async def _continuable(
        self,
        task: str,
        kind: ProviderKind,
        label: str,
        persona: str | None,
        tool_filter: Sequence[str] | None,
        agent_provider: str | None,
        agent_model: str | None,
        depth: int,
        cancel: asyncio.Event | None,
    ) -> DelegationResult:
        known = {**_labelled_children(self.parent.session), **self._label_ids}
        child_id = known.get(label)
        if child_id is None and self._find(continuable_child_id(self.parent.session.id, label)) is not None:
            # Its id is derived from (parent, label): found even when the parent's result naming it was lost
            # (a crash while the child ran is repaired as TOOL_OUTCOME_UNKNOWN, which names no child).
            child_id = continuable_child_id(self.parent.session.id, label)
        if child_id is None:
            child, _ = self._new_child(
                kind,
                depth,
                label,
                "continuable",
                persona,
                tool_filter,
                agent_provider,
                agent_model,
                session_id=continuable_child_id(self.parent.session.id, label),
            )
            self._label_ids[label] = child.session.id
            self._children[child.session.id] = child
            return await self._run_child(child, task, "continuable", kind, label, depth, False, cancel)
        agent = self._children.get(child_id) or self._reopen(child_id, label)
        self._children[child_id] = agent
        descriptor = _descriptor_of(agent.session)
        recorded_kind = descriptor.get("provider") if descriptor is not None else kind
        shown: ProviderKind = recorded_kind if recorded_kind in ("fork", "spawn") else kind
        return await self._run_child(
            agent, task, "continuable", shown, label, delegation_depth_of(agent.session.header), True, cancel
        )

    def _find(self, session_id: str) -> Session | None:
        """A live session of the store, or a stored one brought back by ``open_session``; ``None`` if neither."""
        session = self._store().get(session_id)
        if session is None and self.config.open_session is not None:
            try:
                session = self.config.open_session(session_id)
            except SessionNotFoundError:
                return None
        return session

    def _reopen(self, child_id: str, label: str) -> Agent:
        """The agent of a stored continuable child; refused unless it is this parent's continuable child."""
        session = self._find(child_id)
        if session is None:
            raise SubagentLabelError(
                f'continuable subagent "{label}" (session "{child_id}") is not live in the store and the '
                "delegation has no open_session to bring it back"
            )
        header = session.header
        if header.get("parentSession") != self.parent.session.id or header.get("origin") != "subagent":
            raise SubagentLabelError(
                f'label "{label}" names session "{child_id}", which is not a subagent of session '
                f'"{self.parent.session.id}" (its parent: {header.get("parentSession")!r})'
            )
        descriptor = _descriptor_of(session)
        if descriptor is None or descriptor.get("mode") != "continuable" or descriptor.get("label") != label:
            raise SubagentLabelError(
                f'label "{label}" names session "{child_id}", which is not a continuable subagent with that label'
            )
        return self._child_agent(
            session,
            persona=descriptor.get("persona"),
            tool_filter=self._stored_filter(descriptor.get("toolFilter")),
            agent_provider=descriptor.get("agentProvider"),
            agent_model=descriptor.get("agentModel"),
            descriptor=None,
        )

    def _new_child(
        self,
        kind: ProviderKind,
        depth: int,
        label: str | None,
        mode: Mode,
        persona: str | None,
        tool_filter: Sequence[str] | None,
        agent_provider: str | None,
        agent_model: str | None,
        session_id: str | None = None,
    ) -> tuple[Agent, Session]:
        """Create the child session (header, seed, delegated policy) and its agent; checks come first."""
        descriptor: SubagentDescriptorData = {"version": SUBAGENT_DESCRIPTOR_VERSION, "mode": mode, "provider": kind}
        if label is not None:
            descriptor["label"] = label
        if mode == "continuable":
            # The original records the resolved route (the override, else the parent's), not only overrides.
            descriptor["agentProvider"] = agent_provider if agent_provider is not None else self.parent.options.provider
            descriptor["agentModel"] = agent_model if agent_model is not None else self.parent.options.model
            if persona is not None:
                descriptor["persona"] = persona
            if tool_filter is not None:
                descriptor["toolFilter"] = {"allow": list(tool_filter)}  # the original's ToolRestriction
        # Everything that can be refused is checked before the child session exists: nothing is written.
        tools = self._child_tools(tool_filter, depth)
        route = self._route(agent_provider, agent_model)
        store = self._store()
        parent = self.parent.session
        prefix = fork_seed(parent) if kind == "fork" else []
        # The original's layout: a spawn child has no seed (so no session/end-seed); a fork child's seed is
        # the parent's prefix. A continuable child's descriptor is part of its creation seed, between turns
        # after that prefix (staged like the original's seedDescriptorTurn); a one-shot child's is written
        # in its first turn. seedLength counts only the inherited prefix.
        seed: list[Any] | None = prefix or None
        if mode == "continuable":
            staged = Session.create(session_id or "staged-child", seed)
            staged.append_custom(SUBAGENT_DESCRIPTOR, descriptor)
            seed = list(staged.events)
        session = store.create(session_id, seed=seed, meta=child_session_meta(parent, depth, len(prefix)))
        sandbox = _explicit_sandbox(parent)  # the original appends the sandbox override first
        if sandbox is not None:
            delegated: SandboxModeData = {"mode": sandbox, "source": "delegation"}  # type: ignore[typeddict-item]
            session.append_custom(SANDBOX_MODE, delegated)
        policy: ApprovalPolicyData = {"policy": "never", "source": "delegation"}
        session.append_custom(APPROVAL_POLICY, policy)
        agent = self._make_agent(session, tools, route, persona, descriptor if mode == "one-shot" else None)
        return agent, session

    def _child_agent(
        self,
        session: Session,
        *,
        persona: Any,
        tool_filter: Any,
        agent_provider: Any,
        agent_model: Any,
        descriptor: SubagentDescriptorData | None,
    ) -> Agent:
        depth = delegation_depth_of(session.header)
        tools = self._child_tools(tool_filter, depth)
        route = self._route(agent_provider, agent_model)
        return self._make_agent(session, tools, route, persona, descriptor)

    def _stored_filter(self, value: Any) -> Sequence[str] | None:
        """A descriptor's ``toolFilter`` as tool names: the original's ``{allow?, deny?}`` restriction
        (what agentlog writes too), or the plain list of names agentlog wrote before it."""
        if value is None or not isinstance(value, Mapping):
            return value
        allow, deny = value.get("allow"), value.get("deny")
        if allow is None:
            base = self.config.tools if self.config.tools is not None else self.parent.tools
            allow = [t.name for t in base if not isinstance(t, DelegateTool)]
        return [name for name in allow if not (deny and name in deny)]

    def _child_tools(self, tool_filter: Sequence[str] | None, depth: int) -> list[Tool]:
        base = list(self.config.tools) if self.config.tools is not None else list(self.parent.tools)
        base = [t for t in base if not isinstance(t, DelegateTool)]
        if tool_filter is not None:
            if isinstance(tool_filter, str) or not all(isinstance(n, str) for n in tool_filter):
                raise InvalidAgentOptionError("tool_filter must be a list of tool names")
            names = {t.name for t in base}
            unknown = [n for n in tool_filter if n not in names]
            if unknown:
                raise InvalidAgentOptionError(
                    f"tool_filter names tools the subagent cannot have: {', '.join(unknown)} "
                    f"(available: {', '.join(sorted(names)) or 'none'})"
                )
            base = [t for t in base if t.name in tool_filter]
        return base

    def _route(self, agent_provider: Any, agent_model: Any) -> tuple[Provider, str, str]:
        options = self.parent.options
        provider_name = agent_provider if isinstance(agent_provider, str) else options.provider
        model = agent_model if isinstance(agent_model, str) else options.model
        if provider_name == options.provider:
            provider = self.config.providers.get(provider_name, self.parent.provider)
        else:
            found = self.config.providers.get(provider_name)
            if found is None:
                raise InvalidAgentOptionError(
                    f'no provider named "{provider_name}" for subagents '
                    f"(SubagentConfig.providers has: {', '.join(sorted(self.config.providers)) or 'none'})"
                )
            provider = found
        return provider, provider_name, model

    def _make_agent(
        self,
        session: Session,
        tools: list[Tool],
        route: tuple[Provider, str, str],
        persona: Any,
        descriptor: SubagentDescriptorData | None,
    ) -> Agent:
        from .loop import Agent

        parent = self.parent
        provider, provider_name, model = route
        changes: dict[str, Any] = {"provider": provider_name, "model": model}
        if isinstance(persona, str):
            changes["system"] = persona
        if self.config.max_steps is not None:
            changes["max_steps"] = self.config.max_steps
        options = dataclasses.replace(parent.options, **changes)
        child_config = dataclasses.replace(self.config, subagent_depth=0, tools=tools)
        child = Agent(
            session,
            provider,
            options,
            tools=ToolRegistry(tools),
            durable=parent.store is not None,
            subagents=child_config,
        )
        if descriptor is not None and _descriptor_of(session) is None:
            pending: list[SubagentDescriptorData] = [descriptor]

            async def write_descriptor(agent: Agent, turn: int, step: int) -> None:
                # Once, in the child's first turn, before its first request (the hook runs before step 1).
                if pending:
                    agent.session.append_custom(SUBAGENT_DESCRIPTOR, pending.pop())

            child.pre_step_hooks.insert(0, write_descriptor)
        return child

    async def _run_child(
        self,
        child: Agent,
        task: str,
        mode: Mode,
        kind: ProviderKind,
        label: str | None,
        depth: int,
        resumed: bool,
        cancel: asyncio.Event | None,
    ) -> DelegationResult:
        session = child.session
        start = len(session.events)
        child.followup(task)
        run = asyncio.ensure_future(child.run())
        watcher = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        try:
            if watcher is not None:
                await asyncio.wait({run, watcher}, return_when=asyncio.FIRST_COMPLETED)
                if not run.done():
                    child.cancel({"kind": "parent"})
            outcomes: list[TurnOutcome] = await asyncio.shield(run)
        except asyncio.CancelledError:
            # The parent itself is being cancelled: the child ends its turn as a parent abort, then we go on.
            if not run.done():
                child.cancel({"kind": "parent"})
                with contextlib.suppress(BaseException):
                    await run
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
        events = session.events
        first = next((e["seq"] for e in events[start:] if e["type"] == TURN_START), start)
        answer_seq: int | None = None
        answer = ""
        for event in events[start:]:
            if event["type"] == ASSISTANT_MESSAGE and event.get("surfaceOp") == "append":
                text = "".join(b["text"] for b in event["data"]["message"]["content"] if b.get("type") == "text")
                if text:
                    answer, answer_seq = text, event["seq"]
        last = answer_seq if answer_seq is not None else (events[-1]["seq"] if len(events) > start else first)
        reason = dict(thaw(outcomes[-1].reason)) if outcomes else {"kind": "completed"}
        return DelegationResult(session.id, answer, (first, last), reason, mode, kind, label, depth, resumed)


# --- the tool -------------------------------------------------------------------------------------------

_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What the subagent should do; it answers in its final message."},
        "mode": {
            "type": "string",
            "enum": ["one-shot", "continuable"],
            "description": "one-shot (default) or continuable: a later call with the same label continues it.",
        },
        "label": {"type": "string", "description": "A short name; required for continuable subagents."},
        "provider": {
            "type": "string",
            "enum": ["fork", "spawn"],
            "description": "fork: the subagent sees this conversation so far; spawn: it starts fresh.",
        },
        "tools": {"type": "array", "items": {"type": "string"}, "description": "Only these tools, by name."},
        "model": {"type": "string", "description": "Run the subagent on this model."},
        "persona": {"type": "string", "description": "The subagent's system prompt."},
    },
    "required": ["task"],
}


@dataclass(frozen=True)
class DelegateTool:
    """The ``delegate`` tool of one parent agent: runs concurrently with other calls of its step."""

    delegation: Delegation
    name: str = DELEGATE_TOOL
    description: str = (
        "Delegate a task to a subagent with its own session and context; returns its final answer. "
        "Several delegate calls in one step run in parallel."
    )
    execution: ExecutionMode = "parallel"

    @property
    def parameters(self) -> Mapping[str, Any]:
        return _PARAMETERS

    async def run(self, args: Any, ctx: ToolContext) -> ToolOutcome:
        try:
            result = await self.delegation.delegate(
                args["task"],
                mode=args.get("mode", "one-shot"),
                provider=args.get("provider"),
                label=args.get("label"),
                persona=args.get("persona"),
                tool_filter=args.get("tools"),
                agent_model=args.get("model"),
                cancel=ctx.cancel,
            )
        except AgentlogError as err:
            return ToolOutcome.failure(str(err), code=err.code, name=type(err).__name__)
        meta = result.meta()
        if result.completed:
            return ToolOutcome.text(result.answer or "(the subagent gave no answer)", meta=meta)
        kind = result.reason.get("kind")
        if kind == "aborted":
            return ToolOutcome.failure(
                f'subagent session "{result.session_id}" was cancelled',
                code=TOOL_ABORTED,
                name="SubagentAborted",
                meta=meta,
            )
        error = result.reason.get("error")
        code = "SUBAGENT_FAILED"
        if isinstance(error, Mapping) and isinstance(error.get("code"), str):
            code = error["code"]
        message = error.get("message") if isinstance(error, Mapping) else None
        return ToolOutcome.failure(
            f'subagent session "{result.session_id}" ended with {kind}: {message or code}',
            code=code,
            name="SubagentFailed",
            meta=meta,
        )
