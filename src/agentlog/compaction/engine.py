"""When to compact, and how much (runtime spec §5.6, §5.10): the engine an agent plugs in.

``Agent(..., compaction=CompactionEngine())`` installs two hooks in the loop: before every step (after
the turn started and the inbox was claimed, before ``step/start``), *pressure* compaction — prune large
tool results, then summarize the surface head while the measured request is at or above the policy's
threshold; and on a ``CONTEXT_WINDOW_EXCEEDED`` answer, *overflow* compaction — prune, summarize
everything but the newest balanced tail, and retry the request once (``max_overflow_retries``). The
engine holds no session state of its own that matters: the lock, the surface and every decision's
input are in the log, so a resumed agent continues exactly where the log says.

The engine needs the model's context window for pressure: the provider's (``context_window_for``; the
DeepSeek provider knows its models) or ``AgentOptions.context_window``. Without one, pressure compaction
warns once per model and does nothing; overflow compaction needs none. A summarization request may use
the window minus the output cap (at most a quarter of the window is reserved for the answer); a region
larger than that is summarized in parts (see :mod:`agentlog.compaction.region`).

With an agent, ``compaction/start`` is flushed before the summary is awaited: the lock is durable while it
is held, so a crash mid-summary leaves the orphan start a resumed session's end-seed retires.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

from ..errors import (
    CompactionBusyError,
    CompactionThresholdError,
    ManualCompactionError,
    TargetPressureConfigError,
)
from ..kernel.events import ASSISTANT_MESSAGE
from .config import CompactionConfig, TargetPolicy
from .meter import TokenMeter
from .pruner import ToolResultPruner
from .region import (
    CompactionResult,
    RegionOptions,
    assert_no_active_compaction,
    compact_surface_region,
    manual_compaction_range,
)
from .selection import select_compactable_range
from .summarizer import ProviderSummarizer, SummarizationInput, Summarizer, SummaryResult, SummaryTarget

logger = logging.getLogger("agentlog")

CONTEXT_WINDOW_EXCEEDED: Final = "CONTEXT_WINDOW_EXCEEDED"
Trigger = Literal["pressure", "context-overflow"]


class _Default:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default()
"""``pruner=DEFAULT`` (the default): a :class:`ToolResultPruner` with the original's budgets."""


def routed_target(session: Any) -> SummaryTarget | None:
    """The provider/model of the latest durable request header (both non-empty), or ``None``."""
    header = session.request_header()
    if header is None:
        return None
    config = header["config"]
    provider, model = config.get("provider", ""), config.get("model", "")
    if not provider or not model:
        return None
    return SummaryTarget(provider, model)


def _options_target(agent: Any) -> SummaryTarget | None:
    options = getattr(agent, "options", None)
    provider, model = getattr(options, "provider", None), getattr(options, "model", None)
    if provider and model:
        return SummaryTarget(provider, model)
    return None


class CompactionEngine:
    """Pressure and overflow compaction, region compaction, and manual ``compact_now``.

    ``meter``: the :class:`TokenMeter` every decision prices with (one per engine). ``pruner``: the
    model-free first pass (``None`` turns it off). ``summarizer``: any :class:`Summarizer`; the default
    asks the agent's own provider. ``config``: a :class:`CompactionConfig` or the original's camelCase
    mapping, validated here.
    """

    def __init__(
        self,
        *,
        meter: TokenMeter | None = None,
        pruner: ToolResultPruner | _Default | None = DEFAULT,
        summarizer: Summarizer | None = None,
        config: CompactionConfig | Mapping[str, Any] | None = None,
    ) -> None:
        self.meter = meter or TokenMeter()
        self.pruner: ToolResultPruner | None = (
            ToolResultPruner(meter=self.meter) if isinstance(pruner, _Default) else pruner
        )
        self.summarizer: Summarizer = summarizer or ProviderSummarizer()
        if config is None:
            self.config = CompactionConfig()
        elif isinstance(config, CompactionConfig):
            self.config = config
        else:
            self.config = CompactionConfig.from_mapping(config)
        self._warned: set[str] = set()
        self._overflow: weakref.WeakKeyDictionary[Any, tuple[int, int]] = weakref.WeakKeyDictionary()

    # -- wiring into the agent loop ----------------------------------------------------------------------
    def install(self, agent: Any) -> None:
        """Register the loop hooks (called by ``Agent(compaction=...)``); a no-op when ``auto`` is off."""
        if not self.config.auto:
            return
        agent.pre_step_hooks.append(self._on_pre_step)
        agent.request_error_hooks.append(self._on_request_error)
        agent.idle_hooks.append(self._on_idle)

    async def _on_pre_step(self, agent: Any, turn: int, step: int) -> None:
        if agent.aborted:
            return
        try:
            result = await self.compact_if_needed(agent, "pressure")
        except TargetPressureConfigError as err:
            if err.target_key in self._warned:
                return
            self._warned.add(err.target_key)
            logger.warning("step compaction failed: %s; continuing the turn", err)
            return
        except Exception as err:
            logger.warning("step compaction failed: %s; continuing the turn", err)
            return
        if result is not None:
            _log_result(result, "step pressure")

    def _on_idle(self, agent: Any) -> None:
        self._overflow.pop(agent, None)

    def _overflow_count(self, agent: Any) -> int:
        count, since = self._overflow.get(agent, (0, 0))
        events = agent.session.events
        for index in range(len(events) - 1, since - 1, -1):  # a model reply since then starts afresh
            if events[index]["type"] == ASSISTANT_MESSAGE:
                return 0
        return count

    async def _on_request_error(self, agent: Any, turn: int, step: int, failure: Mapping[str, Any]) -> str | None:
        """``"retry"`` when an overflow was answered by a durable surface reduction; else ``None``."""
        if failure.get("code") != CONTEXT_WINDOW_EXCEEDED or agent.aborted:
            return None
        session = agent.session
        target = routed_target(session)
        if target is None:
            return None
        policy = self.config.policy_for(target.provider, target.model)
        retries = self._overflow_count(agent)
        if retries >= policy.max_overflow_retries:
            return None
        generation = session.surface.replace_generation
        try:
            result = await self.compact_if_needed(agent, "context-overflow")
        except Exception as err:
            if not agent.aborted and session.surface.replace_generation > generation:
                logger.warning(
                    "context-overflow compaction failed after durable surface progress: %s; "
                    "retrying from the replacement surface",
                    err,
                )
                self._overflow[agent] = (retries + 1, session.seq)
                return "retry"
            logger.warning(
                "context-overflow compaction failed: %s; %s",
                err,
                "cancellation prevents retry" if agent.aborted else "preserving the original request error",
            )
            return None
        if agent.aborted or session.surface.replace_generation <= generation:
            return None
        if result is not None:
            _log_result(result, "context overflow recovery")
        self._overflow[agent] = (retries + 1, session.seq)
        return "retry"

    # -- capacity and targets ----------------------------------------------------------------------------
    def context_window(self, agent: Any, target: SummaryTarget) -> int | None:
        """The routed model's context window: the provider's model info, else ``AgentOptions.context_window``."""
        provider = getattr(agent, "provider", None)
        lookup = getattr(provider, "context_window_for", None)
        if callable(lookup) and getattr(provider, "name", None) == target.provider:
            window = lookup(target.model)
            if window is not None:
                return int(window)
        window = getattr(getattr(agent, "options", None), "context_window", None)
        return int(window) if window is not None else None

    def _policy(self, agent: Any) -> TargetPolicy | None:
        target = routed_target(agent.session) or _options_target(agent)
        return None if target is None else self.config.policy_for(target.provider, target.model)

    def _template(self, agent: Any | None, session: Any) -> SummarizationInput:
        """Everything but the messages: who to ask, the cap, the cancellation signal."""
        policy = self._policy(agent) if agent is not None else None
        configured_provider = policy.summarization_provider if policy else self.config.summarization_provider
        configured_model = policy.summarization_model if policy else self.config.summarization_model
        max_tokens = policy.max_tokens if policy else self.config.max_tokens
        target = (
            SummaryTarget(configured_provider, configured_model)
            if configured_provider
            else routed_target(session) or (_options_target(agent) if agent is not None else None)
        )
        return SummarizationInput(
            messages=(),
            session_id=session.id,
            target=target,
            max_tokens=max_tokens,
            provider=getattr(agent, "provider", None),
            signal=getattr(agent, "abort_signal", None),
        )

    def _max_input_tokens(self, agent: Any | None, session: Any, max_tokens: int | None) -> int | None:
        if agent is None:
            return None
        target = routed_target(session) or _options_target(agent)
        window = self.context_window(agent, target) if target is not None else None
        if window is None:
            return None
        # Room for the answer: the output cap, but never more than a quarter of the window — a cap at or
        # above the window (the default 8,192 with any small window) would leave no input budget at all
        # and split the region into one summarization request per message.
        reserve = min(max_tokens or 0, window // 4)
        return max(window - reserve, 1)

    async def _summarize(self, summary_input: SummarizationInput) -> SummaryResult:
        return await self.summarizer.summarize(summary_input)

    # -- the public operations ---------------------------------------------------------------------------
    async def compact_region(
        self,
        session: Any,
        start: int,
        end: int,
        *,
        agent: Any | None = None,
        options: RegionOptions | None = None,
    ) -> CompactionResult:
        """Summarize the surface span ``start``..``end`` (node seqs, inclusive) into one checkpoint.

        Inside the open turn by default (``RegionOptions(owner="current-turn")``); the span must be on the
        surface with balanced cuts on both sides. ``agent`` supplies the provider, model and signal.
        """
        return await self._region(session, start, end, agent, options or RegionOptions(), self._summarize)

    async def _region(
        self,
        session: Any,
        start: int,
        end: int,
        agent: Any | None,
        opts: RegionOptions,
        summarize: Callable[[SummarizationInput], Awaitable[SummaryResult]],
    ) -> CompactionResult:
        template = self._template(agent, session)
        if agent is not None:
            summarize = _durable_first(agent, summarize, manual=opts.owner is None)
        if opts.max_input_tokens is None:
            limit = self._max_input_tokens(agent, session, template.max_tokens)
            if limit is not None:
                opts = RegionOptions(opts.owner, opts.stability, opts.flush, opts.source_command_id, limit)
        return await compact_surface_region(
            session, start, end, meter=self.meter, summarize=summarize, template=template, options=opts
        )

    async def compact_if_needed(self, agent: Any, trigger: Trigger) -> CompactionResult | None:
        """Compact for step pressure or a confirmed context overflow; ``None`` when nothing was summarized."""
        session = agent.session
        target = routed_target(session)
        if target is None:
            return None
        policy = self.config.policy_for(target.provider, target.model)
        meter = self.meter
        measurement = meter.measure(session)
        if trigger == "context-overflow":
            if self.pruner is not None:
                self.pruner.prune_session(session)
                measurement = meter.measure(session)
            overflow_range = select_compactable_range(session, measurement, 0)
            if overflow_range is None:
                return None
            return await self.compact_region(session, overflow_range.start, overflow_range.end, agent=agent)
        if trigger != "pressure":
            raise ValueError(f"unknown compaction trigger {trigger!r}")
        window = self.context_window(agent, target)
        assert_no_active_compaction(session, "automatic pressure compaction")
        key = f"{target.provider}/{target.model}"
        if window is None:
            raise TargetPressureConfigError(
                key, f"compaction-basic: no context capacity for {key}; configure contextWindow on that adapter model"
            )
        spec = policy.spec(window)
        if measurement.total_tokens < spec.threshold_tokens:
            return None
        if self.pruner is not None:
            self.pruner.prune_session(session)
            measurement = meter.measure(session)
        if measurement.total_tokens < spec.threshold_tokens:
            return None
        result: CompactionResult | None = None
        for _attempt in range(spec.compaction_retries + 1):
            span = select_compactable_range(session, measurement, spec.retain_tokens)
            if span is None:
                if result is None:
                    return None
                break
            result = await self.compact_region(session, span.start, span.end, agent=agent)
            measurement = meter.measure(session)
            if measurement.total_tokens < spec.threshold_tokens:
                return result
        raise CompactionThresholdError(
            f"compaction still above threshold after {spec.compaction_retries + 1} compaction attempts "
            f"({measurement.total_tokens} estimated tokens >= threshold {spec.threshold_tokens})"
        )

    async def compact_now(self, agent: Any, *, source_command_id: str | None = None) -> CompactionResult | None:
        """Compact an idle agent's session now, below any threshold; durable before it returns.

        Keeps only the newest balanced tail; ``None`` (nothing written) when there is nothing to compact.
        Raises :class:`~agentlog.errors.ManualCompactionError` (``kind`` busy / cancelled / changed /
        summary / commit / persistence); a failed attempt stays visible in the log.
        """
        try:
            maintenance = agent.maintenance()
        except Exception as err:
            raise CompactionBusyError("manual compaction requires an idle agent with no waking queued work") from err
        async with maintenance:
            session = agent.session

            async def summarize(summary_input: SummarizationInput) -> SummaryResult:
                result = await self._summarize(summary_input)
                if agent.aborted:  # cancelled while the summary was produced: nothing is committed
                    raise _Stop("cancelled", "manual compaction was cancelled")
                return result

            async def flush() -> None:
                await _flush(agent)

            try:
                span = manual_compaction_range(session, self.meter.measure(session))
                if span is None:
                    return None
                return await self._region(
                    session,
                    span.start,
                    span.end,
                    agent,
                    RegionOptions(
                        owner=None, stability="selected-span", flush=flush, source_command_id=source_command_id
                    ),
                    summarize,
                )
            except CompactionBusyError:  # the durable lock: another compaction is live (already kind busy)
                raise
            except Exception as err:
                stop = err.__cause__ if isinstance(err, ManualCompactionError) and err.kind == "summary" else None
                if isinstance(stop, _Stop):  # our own stop inside the summary step, closed by the region
                    raise ManualCompactionError(stop.kind, str(stop)) from stop.__cause__
                if agent.aborted and not (isinstance(err, ManualCompactionError) and err.kind == "persistence"):
                    # The cause is what actually failed, not its classification as a summary/commit failure.
                    cause = err.__cause__ if isinstance(err, ManualCompactionError) and err.__cause__ else err
                    raise ManualCompactionError("cancelled", "manual compaction was cancelled") from cause
                raise


async def _flush(agent: Any) -> None:
    """Make the agent's session durable (``aflush`` when it has one; a no-op for a non-durable agent)."""
    aflush = getattr(agent, "aflush", None)
    if callable(aflush):
        await aflush()
        return
    flush = getattr(agent, "flush", None)
    if callable(flush):
        flush()


class _Stop(Exception):
    """A manual compaction stopped inside its summary step (cancelled, or the lock not durable).

    Raised through the region transaction, which closes the bracket with its text; ``compact_now`` turns it
    into the :class:`ManualCompactionError` of its ``kind``, so it never reaches a caller.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _durable_first(
    agent: Any, summarize: Callable[[SummarizationInput], Awaitable[SummaryResult]], *, manual: bool
) -> Callable[[SummarizationInput], Awaitable[SummaryResult]]:
    """``summarize`` that first makes ``compaction/start`` durable (once): the lock is durable while it is
    held, so a crash during the summary leaves the orphan start that the next lifecycle's end-seed retires,
    and another process reading the log sees the compaction in progress. For a manual compaction a failed
    flush is a ``persistence`` failure (the summary was never asked for)."""
    flushed = False

    async def durable(summary_input: SummarizationInput) -> SummaryResult:
        nonlocal flushed
        if not flushed:
            flushed = True
            try:
                await _flush(agent)
            except Exception as err:
                if not manual:
                    raise
                raise _Stop("persistence", "manual compaction could not make its compaction lock durable") from err
        return await summarize(summary_input)

    return durable


def _log_result(result: CompactionResult, trigger: str) -> None:
    logger.info(
        "compaction (%s): shadowed %d surface nodes (seqs %d-%d, ~%d tokens)",
        trigger,
        len(result.shadowed_seqs),
        result.shadowed_range.start,
        result.shadowed_range.end,
        result.shadowed_token_count,
    )
