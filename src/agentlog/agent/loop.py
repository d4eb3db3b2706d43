"""The agent loop: turns and steps over the session log (runtime spec §6.2–§6.7).

Everything the loop knows is in the log or rebuilt from it: pending input (``agent/inbox/spliced``),
the request header (``request/header``), retry counts (``llm/retry``), turn numbers (``turn/start``).
So a loop resumed after a crash — or in another process — continues exactly where the durable log
says, and the request it sends is always the one the log reconstructs (checked before every dispatch
when ``check_reconstruction`` is on).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..checkpoint import CheckpointPolicy
from ..errors import AgentlogError, describe_error
from ..jsonvalue import thaw
from ..llm.assembler import Assembler
from ..llm.types import GenerateRequest, LlmError, Provider
from ..messages import user_message
from ..request_header import canonical_header, header_equals
from ..session import Session
from ..store import SessionStore
from .inbox import Inbox, Target
from .tools import CallResult, ToolCall, ToolContext, ToolRegistry, batch_concludes_turn, schedule_calls

DEFAULT_RETRY_CODES = ("EMPTY_RESPONSE", "RATE_LIMIT", "SERVER", "TIMEOUT", "TRANSPORT")


class AgentError(AgentlogError, RuntimeError):
    code = "AGENT_ERROR"


class ReconstructionError(AgentError):
    """The request about to be sent differs from what the log reconstructs (a loop bug; never sent)."""

    code = "RECONSTRUCTION_DESYNC"


class TurnAborted(AgentError):
    code = "TURN_ABORTED"


@dataclass(frozen=True)
class RetryPolicy:
    """The normal-mode retry policy of spec §6.7 (counts persist in the log across restarts)."""

    max_retries: int = 5
    codes: tuple[str, ...] = DEFAULT_RETRY_CODES
    initial_delay_ms: int = 500
    max_delay_ms: int = 10_000
    jitter_ratio: float = 0.1

    @property
    def key(self) -> str:
        value = [
            "normal",
            self.max_retries,
            sorted(self.codes),
            self.initial_delay_ms,
            self.max_delay_ms,
            self.jitter_ratio,
        ]
        return orjson.dumps(value).decode()


@dataclass
class TurnOutcome:
    turn: int
    reason: dict[str, Any]
    error: BaseException | None = None


@dataclass
class AgentOptions:
    provider: str
    model: str
    system: str | None = None
    reasoning_effort: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    context_window: int | None = None
    max_parallel_tools: int = 10
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    check_reconstruction: bool = True
    cwd: Path | None = None
    adapter_defaults: Mapping[str, Any] | None = None
    """Exact-model defaults the adapter applies when the request leaves them out, e.g.
    ``{"reasoningEffort": "high", "maxTokens": 256000}`` for DeepSeek (flagged in ``adapterDefaults``)."""


class Agent:
    """Drives one session: ``send`` input, ``run()`` until idle, ``cancel()`` the active turn."""

    def __init__(
        self,
        session: Session,
        provider: Provider,
        options: AgentOptions,
        *,
        tools: ToolRegistry | None = None,
        store: SessionStore | None = None,
    ) -> None:
        self.session = session
        self.provider = provider
        self.options = options
        self.tools = tools or ToolRegistry()
        self.store = store
        self.checkpoint = CheckpointPolicy(store) if store is not None else None
        self.inbox = Inbox(session)
        self._abort = asyncio.Event()
        self._cause: dict[str, Any] = {"kind": "user"}
        self._first_request = True
        self._wake = False
        # Input that was already pending in the log (a resumed session) is work to do, like a wake.
        self._resume_pending = self.inbox.has_pending("next-turn")
        self._last_turn = 0
        for event in session.events:
            if event["type"] == "turn/start":
                self._last_turn = event["data"]["turn"]  # turn numbers continue after a resume

    # -- input ---------------------------------------------------------------------------------------
    def send(
        self, message: Mapping[str, Any] | str, target: Target = "next-turn", *, wakeup: bool = True
    ) -> dict[str, Any]:
        """Queue input durably; ``wakeup`` marks it as work that ``run()`` should start a turn for."""
        payload: dict[str, Any] = dict(user_message(message)) if isinstance(message, str) else dict(message)
        self.inbox.append(target, payload)
        if wakeup:
            self._wake = True
        return payload

    def followup(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        return self.send(message, "next-turn")

    def steer(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        """Input for the next step boundary of the running (or next) turn."""
        return self.send(message, "next-step")

    def inject(self, message: Mapping[str, Any] | str) -> dict[str, Any]:
        """Context for the next step boundary that should not by itself start work (non-waking).

        ``run()`` starts only after a waking send (a prompt or steering); injected context waits in the
        next-step queue and rides along with whatever boundary comes next.
        """
        return self.send(message, "next-step", wakeup=False)

    def cancel(self, cause: Mapping[str, Any] | None = None, *, keep_inbox: bool = False) -> None:
        """Abort the active turn (its ``turn/end`` records the cause); pending input is discarded too."""
        if not keep_inbox:
            self.inbox.clear()
        self._cause = dict(cause or {"kind": "user"})
        self._abort.set()

    # -- driving ---------------------------------------------------------------------------------------
    async def run(self) -> list[TurnOutcome]:
        """Run turns while input is pending; returns each turn's ending (errors are recorded, not raised)."""
        outcomes: list[TurnOutcome] = []
        self._abort = asyncio.Event()
        if not self._wake and not self._resume_pending:
            return outcomes  # only non-waking context is pending: it waits for a real boundary
        self._wake = self._resume_pending = False
        while self.inbox.has_pending() and not self._abort.is_set():
            outcome = await self._turn()
            outcomes.append(outcome)
            if outcome.reason["kind"] in ("aborted", "error", "blocked"):
                break
        return outcomes

    async def _turn(self) -> TurnOutcome:
        session = self.session
        turn = self._last_turn + 1
        self._last_turn = turn
        session.append("turn/start", {"turn": turn})
        target: Target = "next-turn"
        ending: dict[str, Any] | None = None
        error: BaseException | None = None
        step = 0
        try:
            while True:
                claimed = self.inbox.claim(target)
                if ending is not None and not claimed:
                    break
                if step == 0 and not claimed:
                    ending = {"kind": "completed"}
                    break
                step += 1
                if self.checkpoint is not None:
                    await self.checkpoint.abefore_step(session)
                session.append("step/start", {"turn": turn, "step": step})
                try:
                    for message in claimed:
                        session.append("user/message", message, {"surfaceOp": "append"})
                    step_end = await self._step(turn, step)
                    if ending is None or ending["kind"] != "max-tokens":
                        ending = step_end
                finally:
                    session.append("step/end", {"turn": turn, "step": step})
                if ending is not None and not self.inbox.has_pending("next-step"):
                    break
                target = "next-step"
        except TurnAborted as err:
            ending, error = {"kind": "aborted", "reason": self._cause}, err
        except asyncio.CancelledError:
            ending = {"kind": "aborted", "reason": self._cause}
            raise
        except LlmError as err:
            ending, error = {"kind": "error", "error": thaw(err.failure)}, err
        except AgentlogError as err:  # our own typed refusals keep their stable code in the log
            ending, error = {"kind": "error", "error": {"message": str(err), "code": err.code}}, err
        except Exception as err:
            ending, error = {"kind": "error", "error": {"message": describe_error(err), "code": "UNKNOWN"}}, err
        finally:
            session.append("turn/end", {"turn": turn, "reason": ending or {"kind": "completed"}})
        return TurnOutcome(turn, ending or {"kind": "completed"}, error)

    # -- one step ------------------------------------------------------------------------------------------
    async def _step(self, turn: int, step: int) -> dict[str, Any] | None:
        session = self.session
        while True:
            request = self._build_request(turn, step)
            if self.checkpoint is not None:
                await self.checkpoint.abefore_model_request(session)
            if self._abort.is_set():
                raise TurnAborted("turn aborted before the model request")
            assembler = Assembler()
            chunk_seqs: list[int] = []
            async for chunk in self.provider.stream(request, signal=self._abort):
                event = session.append("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk})
                chunk_seqs.append(event.seq)
                assembler.push(chunk)
            result = assembler.result()
            finish = result.finish
            if self._abort.is_set():
                kept = assembler.interrupted_blocks()
                if kept:
                    data: dict[str, Any] = {
                        "turn": turn,
                        "step": step,
                        "message": self._assistant(kept),
                        "interrupted": True,
                    }
                    if result.usage is not None:
                        data["usage"] = result.usage
                    session.append("assistant/message", data, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs})
                raise TurnAborted("turn aborted while the model was streaming")
            if finish["kind"] in ("error", "aborted"):
                failure = finish["failure"]
                if await self._retry(turn, step, failure):
                    continue
                raise LlmError.from_failure(failure)
            data = {"turn": turn, "step": step, "message": self._assistant(result.content)}
            if result.usage is not None:
                data["usage"] = result.usage
            message_event = session.append(
                "assistant/message", data, {"surfaceOp": "append", "sourceEventSeqs": chunk_seqs}
            )
            if finish["kind"] == "max-tokens":
                return {"kind": "max-tokens"}
            calls = [
                ToolCall.from_block(block)
                for block in message_event.data["message"]["content"]
                if block.get("type") == "tool-call"
            ]
            if not calls:
                return {"kind": "completed"}
            results = await self._run_tools(turn, step, calls)
            return {"kind": "completed"} if batch_concludes_turn(results) else None

    def _assistant(self, content: Sequence[Any]) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "role": "assistant",
            "content": list(content),
            "source": {"kind": "model", "provider": self.options.provider, "model": self.options.model},
        }

    # -- request building ------------------------------------------------------------------------------------
    def _build_request(self, turn: int, step: int) -> GenerateRequest:
        session = self.session
        options = self.options
        persisted = session.request_header()
        config = self._proposed_config(persisted)
        adapter_defaults: dict[str, bool] = {}
        # Exact-model defaults (the adapter's): fields the proposal left absent are materialised and
        # flagged, so a later request (or a resumed loop) re-derives them instead of freezing them in.
        for key, value in (options.adapter_defaults or {}).items():
            if key in ("reasoningEffort", "maxTokens") and key not in config and value is not None:
                config[key] = value
                adapter_defaults[key] = True
        candidate: dict[str, Any] = {"config": config}
        if adapter_defaults:
            candidate["adapterDefaults"] = adapter_defaults
        if options.system:
            candidate["system"] = options.system
        schemas = self.tools.schemas()
        if schemas:
            candidate["tools"] = [thaw(schema) for schema in schemas]
        header = canonical_header(candidate)
        if self._first_request:
            reason = "initial" if persisted is None else "resume"
            session.append("request/header", {"header": header, "reason": reason})
        elif persisted is None or not header_equals(persisted, header):
            session.append("request/header", {"header": header, "reason": "change"})
        self._first_request = False
        context: dict[str, Any] = {"provider": options.provider, "model": options.model}
        if options.context_window is not None:
            context["contextWindow"] = options.context_window
        if session.request_context() != context:
            session.append("request/context", context)
        folded = session.request_header()
        messages = session.derive_messages()
        request = GenerateRequest.from_config(
            folded["config"],
            list(messages),
            system=folded.get("system"),
            tools=list(folded.get("tools") or ()),
            session_id=session.id,
        )
        if options.check_reconstruction:
            self._check_reconstruction(request)
        return request

    def _proposed_config(self, persisted: Mapping[str, Any] | None) -> dict[str, Any]:
        """The config this request proposes (runtime spec §6.5 step 2).

        A new loop instance starts from its declared options, restoring only an explicitly chosen
        reasoning effort of the same route; later requests propose the persisted config minus the fields
        the adapter defaulted, so explicit settings persist and defaults re-materialise.
        """
        options = self.options
        if not self._first_request and persisted is not None:
            config = dict(thaw(persisted["config"]))
            flagged = persisted.get("adapterDefaults") or {}
            for key in ("reasoningEffort", "maxTokens"):
                if flagged.get(key) is True:
                    config.pop(key, None)
            return config
        config = {"provider": options.provider, "model": options.model}
        if options.reasoning_effort is not None:
            config["reasoningEffort"] = options.reasoning_effort
        elif persisted is not None:
            old = persisted["config"]
            flagged = persisted.get("adapterDefaults") or {}
            same_route = old.get("provider") == options.provider and old.get("model") == options.model
            if same_route and "reasoningEffort" in old and flagged.get("reasoningEffort") is not True:
                config["reasoningEffort"] = old["reasoningEffort"]
        if options.temperature is not None:
            config["temperature"] = options.temperature
        if options.max_tokens is not None:
            config["maxTokens"] = options.max_tokens
        return config

    def _check_reconstruction(self, request: GenerateRequest) -> None:
        """The request must be exactly what the log rebuilds (derived messages + folded header)."""
        session = self.session
        folded = session.request_header()
        problems = []
        if orjson.dumps(list(request.messages)) != orjson.dumps(session.derive_messages().to_list()):
            problems.append("messages")
        if folded is None:
            problems.append("request/header")
        else:
            config = folded["config"]
            if request.model != config.get("model") or request.provider != config.get("provider"):
                problems.append("route")
            if request.system != folded.get("system"):
                problems.append("system")
            if request.max_tokens != config.get("maxTokens") or request.temperature != config.get("temperature"):
                problems.append("config")
            if orjson.dumps(list(request.tools)) != orjson.dumps(list(folded.get("tools") or [])):
                problems.append("tools")
        if not any(e["type"] == "step/start" for e in reversed(session.events)):
            problems.append("step/start")
        if problems:
            raise ReconstructionError(
                f'log-reconstruction desync in session "{session.id}": {", ".join(problems)} differ from the log'
            )

    # -- retries -------------------------------------------------------------------------------------------
    async def _retry(self, turn: int, step: int, failure: Mapping[str, Any]) -> bool:
        """Decide, log and wait for a retry of this step's request (counts survive restarts)."""
        policy = self.options.retry
        if failure.get("code") not in policy.codes or self._abort.is_set():
            return False
        previous = None
        for event in reversed(self.session.events):
            if event["type"] == "llm/retry":
                data = event["data"]
                if (
                    data.get("turn") == turn
                    and data.get("step") == step
                    and data.get("provider") == self.options.provider
                    and data.get("policyKey") == policy.key
                ):
                    previous = data
                    break
        count = previous["retry"] if previous is not None else 0
        if count >= policy.max_retries:
            return False
        retry = count + 1
        after = failure.get("providerRetryAfterMs")
        if isinstance(after, (int, float)) and 0 < after:
            if after > policy.max_delay_ms:
                return False
            delay = int(after)
        else:
            base = min(policy.initial_delay_ms * 2 ** (retry - 1), policy.max_delay_ms)
            jitter = policy.jitter_ratio
            delay = int(min(base * (1 - jitter + 2 * jitter * random.random()), policy.max_delay_ms))
        retry_id = previous["retryId"] if previous is not None else str(uuid.uuid4())
        self.session.append(
            "llm/retry",
            {
                "retryId": retry_id,
                "turn": turn,
                "step": step,
                "provider": self.options.provider,
                "mode": "normal",
                "policyKey": policy.key,
                "retry": retry,
                "maxRetries": policy.max_retries,
                "delayMs": delay,
                "failure": thaw(failure),
            },
        )
        try:
            await asyncio.wait_for(self._abort.wait(), timeout=delay / 1000)
            return False  # cancelled while waiting: nothing more is written
        except TimeoutError:
            pass
        self.session.append("llm/retry-started", {"retryId": retry_id, "turn": turn, "step": step, "retry": retry})
        return True

    # -- tools ---------------------------------------------------------------------------------------------
    async def _run_tools(self, turn: int, step: int, calls: list[ToolCall]) -> list[CallResult]:
        session = self.session
        call_seqs: dict[str, int] = {}

        async def start(call: ToolCall) -> None:
            event = session.append(
                "tool/call",
                {"turn": turn, "step": step, "callId": call.call_id, "name": call.name, "arguments": call.arguments},
            )
            call_seqs[call.call_id] = event.seq
            if self.checkpoint is not None:
                await self.checkpoint.abefore_tool_body(session)

        async def commit(result: CallResult) -> None:
            if not result.started:
                await start(result.call)
            data = result.outcome.result_data(result.call.call_id, turn=turn, step=step)
            session.append(
                "tool/result",
                data,
                {"surfaceOp": "append", "sourceEventSeqs": [call_seqs[result.call.call_id]]},
            )
            for extra in result.outcome.additional_contexts:
                self.inbox.append("next-step", extra)

        context = ToolContext(
            session_id=session.id,
            cwd=self.options.cwd or Path.cwd(),
            cancel=self._abort,
            turn=turn,
            step=step,
        )
        return await schedule_calls(
            calls, self.tools, start, self.options.max_parallel_tools, context=context, commit=commit
        )
