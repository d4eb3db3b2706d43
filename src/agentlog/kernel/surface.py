"""The surface: which logged messages the model currently sees.

The log never changes; compaction *shadows* a range of surface entries with a replacement event.
One pure planning function (:func:`plan_surface_event`) validates an event against the current
state and returns a plan; :func:`apply_plan` performs it. The live :class:`SurfaceManager` and the
offline :func:`fold_surface` both use exactly these two functions, so live and replayed state cannot
drift apart.
"""

from __future__ import annotations

import bisect
import weakref
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, NoReturn, overload

from ..errors import FrozenError, SeqOutOfRangeError, SurfaceError
from .events import ASSISTANT_MESSAGE, SURFACE_EVENT_TYPES, TOOL_RESULT
from .jsonvalue import MAX_SAFE_INTEGER
from .packedrun import ChunkRun

APPEND: Final = "append"

_MISSING: Any = object()


def replace_op(start: int, end: int) -> dict[str, Any]:
    """A ``surfaceOp`` that shadows the current surface nodes from seq ``start`` to seq ``end`` (inclusive)."""
    return {"op": "replace", "start": start, "end": end}


def is_surface_eligible_type(type: object) -> bool:
    return type in SURFACE_EVENT_TYPES


def is_surface_event(event: Mapping[str, Any]) -> bool:
    return event.get("type") in SURFACE_EVENT_TYPES and "surfaceOp" in event


def is_append_surface_event(event: Mapping[str, Any]) -> bool:
    return is_surface_event(event) and event["surfaceOp"] == APPEND


def is_replacement_surface_event(event: Mapping[str, Any]) -> bool:
    return is_surface_event(event) and event["surfaceOp"] != APPEND


def _is_safe_nonneg(v: object) -> bool:
    return type(v) is int and 0 <= v <= MAX_SAFE_INTEGER


def _raise(message: str) -> NoReturn:
    raise SurfaceError(message)


class AppendPlan(NamedTuple):
    """The event at ``seq`` joins the surface at its end."""

    kind: Literal["append"]
    seq: int


class ReplacePlan(NamedTuple):
    """The event at ``seq`` shadows the surface nodes ``start``..``end`` (positions ``start_idx``..``end_idx``)."""

    kind: Literal["replace"]
    seq: int
    start: int
    end: int
    start_idx: int
    end_idx: int
    shadowed: list[int]


Plan = AppendPlan | ReplacePlan | None
"""What an event does to the surface: ``None`` (nothing), an :class:`AppendPlan` or a :class:`ReplacePlan`."""

_INT_ONLY = frozenset({int})
_new_tuple = tuple.__new__  # builds a plan without the NamedTuple constructor's Python-level frame


def _check_sources(event: Mapping[str, Any], etype: str, seq: int, shadowed: Sequence[int]) -> None:
    sources = event.get("sourceEventSeqs", _MISSING)
    source_set: set[int] | frozenset[int] = frozenset()
    if sources is not _MISSING:
        if not isinstance(sources, list):
            _raise(f"sourceEventSeqs on event at seq {seq} must be an array when present")
        if not sources and etype != ASSISTANT_MESSAGE:
            _raise("sourceEventSeqs must not be empty except on assistant/message")
        # One C-speed pass per property (a streamed message lists every chunk it came from); any failure
        # of this first rule gives the same refusal, so which element fails first does not matter.
        if sources and (
            not {*map(type, sources)} <= _INT_ONLY or min(sources) < 0 or max(sources) > MAX_SAFE_INTEGER
        ):
            _raise(f'session event "{etype}" sourceEventSeqs must densely contain non-negative safe integers')
        source_set = set(sources)
        if len(source_set) != len(sources):
            _raise("sourceEventSeqs must not contain duplicates")
        if sources and max(sources) >= seq:
            for v in sources:
                if v >= seq:
                    _raise(f"sourceEventSeqs must reference earlier events: {v} >= current seq {seq}")
    if shadowed:
        missing = [s for s in shadowed if s not in source_set]
        if missing:
            _raise(
                "surface replace: sourceEventSeqs must include every shadowed surface node; missing "
                + ", ".join(str(s) for s in missing)
            )


def _json_equal(a: Any, b: Any) -> bool:
    """JSON structural equality with JavaScript semantics (``True`` is not ``1``; ``1 == 1.0``)."""
    work = [(a, b)]
    while work:
        x, y = work.pop()
        if x is y:
            continue  # a shared (frozen) subtree: equal to itself under any semantics
        tx, ty = type(x), type(y)
        if isinstance(x, dict):
            if not isinstance(y, dict) or len(x) != len(y):
                return False
            for k, v in x.items():
                if k not in y:
                    return False
                work.append((v, y[k]))
        elif isinstance(x, list):
            if not isinstance(y, list) or len(x) != len(y):
                return False
            work.extend(zip(x, y, strict=True))
        elif tx is bool or ty is bool:
            if tx is not ty or x is not y:
                return False
        elif isinstance(x, (int, float)):
            if not isinstance(y, (int, float)) or x != y:
                return False
        elif tx is not ty or x != y:
            return False
    return True


def _content_blind(data: Any) -> Any:
    """``data`` with the result block's inner content blanked, for the content-only rewrite rule."""
    if not isinstance(data, dict):
        return data
    message = data.get("message")
    if not isinstance(message, dict):
        return data
    content = message.get("content")
    first: Any = None
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool-result":
                first = {**block, "content": None}
                break
    return {**data, "message": {**message, "content": [first]}}


def plan_surface_event(
    nodes: Sequence[int],
    event: Mapping[str, Any],
    expected_seq: int,
    window: Sequence[Mapping[str, Any]],
    base_seq: int = 0,
    positions: Mapping[int, int] | None = None,
) -> Plan:
    """Validate ``event`` as the next event after the state ``nodes``; return its plan. Pure.

    ``positions`` (seq → index in ``nodes``, exactly consistent with it) replaces the linear searches a
    replace needs; the live manager keeps one once replaces start to happen.
    """
    seq = event.get("seq")
    etype = event.get("type")
    if seq != expected_seq or type(seq) is not int:
        _raise(f"session event seq {seq} is not contiguous; expected {expected_seq}")
    if etype not in SURFACE_EVENT_TYPES:
        if "surfaceOp" in event:
            _raise(f'session event "{etype}" is not surface-eligible and cannot carry surfaceOp')
        if "sourceEventSeqs" in event:
            _raise(f'session event "{etype}" is not surface-eligible and cannot carry sourceEventSeqs')
        return None
    op = event.get("surfaceOp", _MISSING)
    if op is _MISSING:
        _raise(f'session event "{etype}" is surface-eligible and requires a surfaceOp marker')
    if op == APPEND and type(op) is str:
        _check_sources(event, etype, seq, ())
        return _new_tuple(AppendPlan, ("append", seq))
    if not isinstance(op, dict):
        _raise(f'session event "{etype}" carries an invalid surfaceOp')
    if (
        len(op) != 3
        or op.get("op") != "replace"
        or type(op.get("op")) is not str
        or not _is_safe_nonneg(op.get("start"))
        or not _is_safe_nonneg(op.get("end"))
    ):
        _raise(f'session event "{etype}" carries an invalid replace surfaceOp')
    start: int = op["start"]
    end: int = op["end"]
    if positions is not None:
        found = positions.get(start)
        if found is None:
            _raise(f"surface replace: start seq {start} not found in surface")
        start_idx = found
        found = positions.get(end)
        if found is None:
            _raise(f"surface replace: end seq {end} not found in surface")
        end_idx = found
    else:
        try:
            start_idx = nodes.index(start)
        except ValueError:
            _raise(f"surface replace: start seq {start} not found in surface")
        try:
            end_idx = nodes.index(end)
        except ValueError:
            _raise(f"surface replace: end seq {end} not found in surface")
    if start_idx > end_idx:
        _raise(
            f"surface replace: start seq {start} (index {start_idx}) is after end seq {end} (index {end_idx})"
        )
    shadowed = list(nodes[start_idx : end_idx + 1])
    _check_sources(event, etype, seq, shadowed)
    if etype == TOOL_RESULT:
        if len(shadowed) != 1:
            _raise("tool/result surface replacement must rewrite exactly one current node")
        target_pos = shadowed[0] - base_seq
        target = window[target_pos] if 0 <= target_pos < len(window) else None
        if target is None or target.get("type") != TOOL_RESULT:
            _raise("tool/result surface replacement must target a current tool/result")
        if not _json_equal(_content_blind(event.get("data")), _content_blind(target.get("data"))):
            _raise("tool/result surface replacement may change only content")
    return ReplacePlan("replace", seq, start, end, start_idx, end_idx, shadowed)


def apply_plan(nodes: list[int], plan: Plan) -> int:
    """Apply a plan to ``nodes`` in place; return how many replacements it made (0 or 1)."""
    if plan is None:
        return 0
    if plan.kind == "append":
        nodes.append(plan.seq)
        return 0
    nodes[plan.start_idx : plan.end_idx + 1] = [plan.seq]
    return 1


class NodesView(Sequence[int]):
    """Read-only live view of a surface's node list (stable identity; reflects every later append)."""

    __slots__ = ("__weakref__", "_manager")

    def __init__(self, manager: SurfaceManager) -> None:
        self._manager = manager

    def _live(self) -> list[int]:
        return self._manager.folded_nodes()

    def __len__(self) -> int:
        return len(self._live())

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self._live()[index]

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._live()))

    def __contains__(self, value: object) -> bool:
        return value in self._live()

    def index(self, value: Any, start: int = 0, stop: int = MAX_SAFE_INTEGER) -> int:
        return self._live().index(value, start, stop)

    def __eq__(self, other: object) -> bool:
        live = self._live()
        if isinstance(other, NodesView):
            return live == other._live()
        if isinstance(other, (list, tuple)):
            return live == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NodesView({self._live()!r})"

    def _refuse(self, *args: object) -> NoReturn:
        raise FrozenError("surface nodes are read-only; change the surface by appending events")

    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = _refuse


class SurfaceManager:
    """Incremental owner of one surface over a live, append-only window of events.

    ``window`` is a reference to the log list (the session appends to it); ``base_seq`` is the seq of
    ``window[0]`` so a loaded tail of a long log can be folded without materialising its head.

    ``plain_tail=True`` is the owning session's promise that every event it appends without calling
    :meth:`commit` is a plain log-only event (no surface type, no surface metadata): the fold then steps
    over those without planning them, and the session's append fast path never touches the surface.
    Only the newest event can still be uncommitted (appends are serialized, and the commit follows the
    append), so that one is folded as usual.
    """

    __slots__ = (
        "_base",
        "_gen",
        "_last",
        "_nodes",
        "_pending",
        "_pending_plan",
        "_pending_seq",
        "_plain_tail",
        "_positions",
        "_view",
        "_window",
    )

    def __init__(self, window: list[Any], base_seq: int = 0, *, plain_tail: bool = False) -> None:
        self._window = window
        self._base = base_seq
        self._plain_tail = plain_tail
        self._nodes: list[int] = []
        self._gen = 0
        self._last = base_seq - 1
        # The last validated candidate (None: none), its seq and plan, reused when it is committed next.
        self._pending: Mapping[str, Any] | None = None
        self._pending_seq = -1
        self._pending_plan: Plan = None
        # seq -> index in _nodes, kept only after a replace happened (a session that is never compacted pays
        # nothing; one that is, e.g. pruned result by result, validates each replace without a linear scan).
        self._positions: dict[int, int] | None = None
        # The view refers to the manager; the manager keeps only a weak reference back, so the two form
        # no cycle: a dropped session (and its whole log) is freed at once, not at the next full collection.
        self._view: weakref.ref[NodesView] | None = None

    # -- state ---------------------------------------------------------------------------------
    def folded_nodes(self) -> list[int]:
        """The current node list itself (not a copy; callers must not change it), folded up to the log's end."""
        if self._last != self._base + len(self._window) - 1:
            self._process_delta()
        return self._nodes

    def folded_state(self) -> tuple[list[int], int]:
        """The node list itself and the replace generation, folded up to the log's end (one check: the
        session's derive reads both after every step)."""
        end = self._base + len(self._window) - 1
        if self._last != end:
            if self._plain_tail and self._pending is None:
                event = self._window[-1]
                if event.__class__ is ChunkRun or (len(event) == 4 and event["type"] not in SURFACE_EVENT_TYPES):
                    self._last = end  # the common case of _process_delta, inline: a plain newest event
                    return self._nodes, self._gen
            self._process_delta()
        return self._nodes, self._gen

    @property
    def nodes(self) -> NodesView:
        """The current surface (read-only, live, the same object on every access while it is held)."""
        if self._last != self._base + len(self._window) - 1:
            self._process_delta()
        view = self._view() if self._view is not None else None
        if view is None:
            view = NodesView(self)
            self._view = weakref.ref(view)
        return view

    @property
    def replace_generation(self) -> int:
        if self._last != self._base + len(self._window) - 1:
            self._process_delta()
        return self._gen

    @property
    def base_seq(self) -> int:
        return self._base

    # -- transitions ---------------------------------------------------------------------------
    def validate_next(self, candidate: Mapping[str, Any]) -> Plan:
        """Plan ``candidate`` as the next event; raise on violation; never change the fold state."""
        if self._last != self._base + len(self._window) - 1:
            self._process_delta()
        positions = self._positions
        if positions is None and self._gen > 0 and candidate.get("surfaceOp", APPEND) != APPEND:
            positions = self._positions = {seq: index for index, seq in enumerate(self._nodes)}
        plan = plan_surface_event(
            self._nodes, candidate, self._base + len(self._window), self._window, self._base, positions
        )
        self._pending = candidate
        self._pending_seq = self._base + len(self._window)
        self._pending_plan = plan
        return plan

    def plain_append_plan(self, candidate: Mapping[str, Any]) -> Plan:
        """The plan of ``candidate`` when it is plainly a surface append of the next seq, else ``None``.

        The restore's fast path for its many message events: when the fold is current and the candidate
        is a surface type carrying ``surfaceOp: "append"`` with the next seq, :func:`plan_surface_event`
        would check only its sources and plan an append, so this does exactly that (raising the same
        :class:`SurfaceError`). For anything else it returns ``None`` and the caller uses
        :meth:`validate_next`. Like :meth:`validate_next` it does not change the fold.
        """
        op = candidate.get("surfaceOp")
        expected = self._base + len(self._window)
        seq = candidate.get("seq")
        if (
            op.__class__ is not str
            or op != APPEND
            or seq != expected
            or seq.__class__ is not int
            or self._last != expected - 1
        ):
            return None
        etype = candidate.get("type")
        if etype not in SURFACE_EVENT_TYPES:
            return None
        _check_sources(candidate, etype, seq, ())
        self._pending = None
        return _new_tuple(AppendPlan, ("append", seq))

    def commit(self, event: Any, plan: Plan) -> None:
        """Fast path for the owning session: ``event`` was just appended with an already validated plan.

        Anything else (an event that is not the window's next one) is folded from the window as usual, so
        a wrong call cannot corrupt the fold.
        """
        seq = self._last + 1
        if seq != self._base + len(self._window) - 1 or self._window[seq - self._base] is not event:
            self._process_delta()
            return
        if plan is not None:
            positions = self._positions
            if plan.kind == "append":
                if positions is not None:
                    positions[plan.seq] = len(self._nodes)
                self._nodes.append(plan.seq)
            else:
                if positions is not None:
                    if plan.start_idx == plan.end_idx:  # one node rewritten in place: nothing else moves
                        del positions[plan.start]
                        positions[plan.seq] = plan.start_idx
                    else:
                        self._positions = None  # later positions shift: rebuilt on the next replace
                self._gen += apply_plan(self._nodes, plan)
        self._last = seq
        self._pending = None

    def commit_plain_appends(self, seqs: list[int]) -> None:
        """Restore fast path: ``seqs`` (increasing) are committed surface appends whose plan is plainly an
        append (what :meth:`plain_append_plan` returns for them); every other event up to the last is
        log-only without surface metadata. Folds up to the last one. A pending candidate (a cached plan,
        not state) is dropped: it was planned for an earlier fold."""
        self._pending = None
        nodes = self._nodes
        positions = self._positions
        if positions is not None:
            for seq in seqs:
                positions[seq] = len(nodes)
                nodes.append(seq)
        else:
            nodes.extend(seqs)
        self._last = seqs[-1]

    def skip_log_only(self, seq: int) -> None:
        """Advance over committed events known to be log-only without surface metadata (no transition)."""
        if self._last != seq:
            if self._pending is not None:
                self._process_delta()
            else:
                self._last = seq

    def _process_delta(self) -> None:
        window = self._window
        base = self._base
        end = base + len(window) - 1
        if self._plain_tail and self._last < end:
            # Every uncommitted event before the newest is one of the owner's plain log-only events (no
            # transition); only the newest is folded. This runs on every derive after appends, so the
            # common case (a plain newest event) does no call at all.
            event = window[end - base]
            pending = self._pending
            if pending is not None and pending is event and self._pending_seq == end:
                plan = self._pending_plan
            elif event.__class__ is ChunkRun or (len(event) == 4 and event["type"] not in SURFACE_EVENT_TYPES):
                plan = None  # plain as well (type, seq, time, data and nothing else; a packed run's chunks)
            else:
                plan = plan_surface_event(self._nodes, event, end, window, base)
            if plan is not None:
                self._positions = None
                self._gen += apply_plan(self._nodes, plan)
            self._last = end
            if pending is not None and self._pending_seq <= end:
                self._pending = None
            return
        while self._last < end:
            seq = self._last + 1
            event = window[seq - base]
            pending = self._pending
            if pending is not None and pending is event and self._pending_seq == seq:
                plan = self._pending_plan
            elif event.__class__ is ChunkRun:
                # A packed run of a compact restored log: log-only chunks without surface metadata (its
                # row's codec guarantees it), so the fold steps over all of its members at once.
                self._last = min(end, event.seq0 + event.n - 1)
                if pending is not None and self._pending_seq <= self._last:
                    self._pending = None
                continue
            else:
                plan = plan_surface_event(self._nodes, event, seq, window, base)
            if plan is not None:
                self._positions = None
            self._gen += apply_plan(self._nodes, plan)
            self._last = seq
            if pending is not None and self._pending_seq <= seq:
                self._pending = None


@dataclass(frozen=True)
class SurfaceFoldReplacement:
    seq: int
    start: int
    end: int
    shadowed_seqs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class SurfaceFoldResult:
    nodes: list[int]
    replacements: list[SurfaceFoldReplacement]


def fold_surface(events: Sequence[Mapping[str, Any]]) -> SurfaceFoldResult:
    """Replay a whole log from seq 0 with fresh state, reporting every replacement it made."""
    nodes: list[int] = []
    replacements: list[SurfaceFoldReplacement] = []
    for index, event in enumerate(events):
        plan = plan_surface_event(nodes, event, index, events, 0)
        if plan is not None and plan.kind == "replace":
            replacements.append(SurfaceFoldReplacement(plan.seq, plan.start, plan.end, list(plan.shadowed)))
        apply_plan(nodes, plan)
    return SurfaceFoldResult(list(nodes), replacements)


def _replacement_seq(replacement: SurfaceFoldReplacement) -> int:
    return replacement.seq


class SurfaceTimeline:
    """The surface of one validated log at every seq, from one fold: ``nodes_at(seq)`` is
    ``fold_surface(events[: seq + 1]).nodes`` (and ``session.at(seq).surface.nodes``) without folding
    the prefix again.

    Built by :meth:`add`-ing the log's events in seq order (events of other types may be left out, so a
    caller can step over a restored log's packed chunk runs). The log must be one the kernel has already
    validated (a session's or a view's events): an append is taken as it is, a replacement is planned
    with :func:`plan_surface_event` as the live fold plans it (and refused the same way if invalid).

    It keeps the seq of each surface transition (one ``array`` entry each) and, once a replacement has
    happened, a copy of the node list after every ``max(every, nodes // 4)`` transitions: memory stays
    within a few times the number of transitions, and an answer replays at most that many transitions
    from the nearest copy (runs of appends as one slice). A log that never replaces anything keeps no
    copy at all: its surface at a seq is a prefix of its appends.

    One thread may :meth:`add` while others ask :meth:`nodes_at` (a log followed as it grows): an event
    becomes answerable (``last_seq``) only once its transition is recorded, and a refused event changes
    nothing a reader sees.
    """

    __slots__ = (
        "_checkpoint_ops",
        "_checkpoints",
        "_every",
        "_first_replace",
        "_last",
        "_nodes",
        "_ops",
        "_positions",
        "_replace_ends",
        "_replace_ops",
        "_replace_starts",
        "_window",
        "replacements",
    )

    def __init__(self, window: Sequence[Mapping[str, Any]], *, every: int = 4096) -> None:
        """``window`` is the log the events come from (indexed by seq: a ``tool/result`` rewrite is
        checked against the result it rewrites)."""
        if every < 1:
            raise ValueError("every must be at least 1")
        self._window = window
        self._every = every
        self._ops = array("q")  # the seq of each surface transition, in seq order
        self._replace_ops = array("q")  # which transitions (their index in _ops) are replacements
        self._replace_starts = array("q")  # ... and the node positions each one spliced
        self._replace_ends = array("q")
        self._first_replace: int | None = None
        self._checkpoint_ops = array("q")  # transitions applied before each checkpoint
        self._checkpoints: list[array[int]] = []
        self._nodes: list[int] = []  # the fold so far
        self._positions: dict[int, int] | None = None
        self._last = -1
        self.replacements: list[SurfaceFoldReplacement] = []
        """Every replacement folded so far, in seq order (as :func:`fold_surface` reports them)."""

    def copy(self, window: Sequence[Mapping[str, Any]] | None = None) -> SurfaceTimeline:
        """A timeline that answers as this one does and that :meth:`add` continues on its own (this one
        unchanged): the log grew (a followed session continued by its stored suffix) and is folded on
        from here, not from seq 0. ``window`` is the grown log (default: this one's). The transition
        arrays and the node list are copied; the checkpoints, never changed once taken, are shared."""
        other = SurfaceTimeline.__new__(SurfaceTimeline)
        other._window = self._window if window is None else window
        other._every = self._every
        other._ops = array("q", self._ops)
        other._replace_ops = array("q", self._replace_ops)
        other._replace_starts = array("q", self._replace_starts)
        other._replace_ends = array("q", self._replace_ends)
        other._first_replace = self._first_replace
        other._checkpoint_ops = array("q", self._checkpoint_ops)
        other._checkpoints = list(self._checkpoints)
        other._nodes = list(self._nodes)
        other._positions = None if self._positions is None else dict(self._positions)
        other._last = self._last
        other.replacements = list(self.replacements)
        return other

    @property
    def last_seq(self) -> int:
        """The seq of the last event added (``-1`` before any)."""
        return self._last

    @property
    def nodes(self) -> list[int]:
        """The surface after the last event added (the fold's own list: do not change it)."""
        return self._nodes

    def add(self, event: Mapping[str, Any]) -> None:
        """Fold ``event`` (the next event of the log, or a later one when the ones between are log-only)."""
        seq = event["seq"]
        if seq <= self._last:
            raise SurfaceError(f"surface timeline: seq {seq} is not after the last one added ({self._last})")
        if event["type"] not in SURFACE_EVENT_TYPES:
            self._last = seq
            return
        op = event.get("surfaceOp")
        nodes = self._nodes
        ops = self._ops
        if op == APPEND and op.__class__ is str:
            if self._positions is not None:
                self._positions[seq] = len(nodes)
            nodes.append(seq)
            ops.append(seq)
        else:
            positions = self._positions
            if positions is None:
                positions = self._positions = {node: index for index, node in enumerate(nodes)}
            plan = plan_surface_event(nodes, event, seq, self._window, 0, positions)
            if plan is None or plan.kind != "replace":  # pragma: no cover - a surface type always plans
                self._last = seq
                return
            if plan.start_idx == plan.end_idx:
                del positions[plan.start]
                positions[seq] = plan.start_idx
            else:
                self._positions = None  # later positions shift: rebuilt on the next replacement
            if self._first_replace is None:
                self._first_replace = len(ops)
            self._replace_ops.append(len(ops))
            self._replace_starts.append(plan.start_idx)
            self._replace_ends.append(plan.end_idx)
            self.replacements.append(SurfaceFoldReplacement(seq, plan.start, plan.end, list(plan.shadowed)))
            apply_plan(nodes, plan)
            ops.append(seq)
        if self._first_replace is not None:
            since = len(ops) - (self._checkpoint_ops[-1] if self._checkpoints else self._first_replace)
            if since >= max(self._every, len(nodes) >> 2):
                self._checkpoints.append(array("q", nodes))
                self._checkpoint_ops.append(len(ops))  # (after its copy: a reader finds both)
        self._last = seq  # last: a reader answering seqs up to last_seq sees this event's transition

    def nodes_at(self, seq: int) -> list[int]:
        """The surface right after ``seq`` (a new list; any seq up to the last added)."""
        if type(seq) is not int or not 0 <= seq <= self._last:
            raise SeqOutOfRangeError(f"surface timeline: seq {seq!r} is not in 0..{self._last}")
        ops = self._ops
        count = bisect.bisect_right(ops, seq)  # transitions at or before seq
        first = self._first_replace
        if first is None or count <= first:
            return ops[:count].tolist()  # no replacement yet: the appends so far
        at = bisect.bisect_right(self._checkpoint_ops, count) - 1
        if at >= 0:
            done = self._checkpoint_ops[at]
            nodes = self._checkpoints[at].tolist()
        else:
            done = first
            nodes = ops[:first].tolist()
        replace_ops = self._replace_ops
        r = bisect.bisect_left(replace_ops, done)
        while done < count:
            next_replace = replace_ops[r] if r < len(replace_ops) else count
            if next_replace >= count:
                nodes.extend(ops[done:count])
                break
            nodes.extend(ops[done:next_replace])
            nodes[self._replace_starts[r] : self._replace_ends[r] + 1] = [ops[next_replace]]
            done = next_replace + 1
            r += 1
        return nodes

    def replacements_through(self, seq: int) -> list[SurfaceFoldReplacement]:
        """The replacements at or before ``seq`` (what ``fold_surface(events[: seq + 1])`` reports)."""
        replacements = self.replacements
        return replacements[: bisect.bisect_right(replacements, seq, key=_replacement_seq)]

    @classmethod
    def fold(cls, events: Sequence[Mapping[str, Any]], *, every: int = 4096) -> SurfaceTimeline:
        """The timeline of a whole validated log."""
        timeline = cls(events, every=every)
        for event in events:
            timeline.add(event)
        return timeline
