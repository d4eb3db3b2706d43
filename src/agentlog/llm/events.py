"""The LLM layer's events: the retry record (runtime spec §6.7, the original's ``packages/llm/llm-retry``).

A retry is the agent loop's decision, but its facts belong to the request layer: the count survives a
restart because it is read back from the last ``llm/retry`` of the same turn, step, provider and policy,
and :mod:`agentlog.llm.replay` treats both events as attempt boundaries. Both are log-only.
"""

from __future__ import annotations

from typing import Final, Literal, NotRequired, TypedDict

from ..kernel.events import LlmFailure

__all__ = ["LLM_RETRY", "LLM_RETRY_STARTED", "LlmRetryData", "LlmRetryStartedData"]

LLM_RETRY: Final = "llm/retry"
"""Appended before the wait of a scheduled retry (:class:`LlmRetryData`)."""

LLM_RETRY_STARTED: Final = "llm/retry-started"
"""Appended when the wait is over and the next attempt starts (:class:`LlmRetryStartedData`); a retry
cancelled during its wait writes nothing more."""


class LlmRetryData(TypedDict):
    """``llm/retry``: one retry scheduled after a failed request attempt.

    ``retryId`` is reused by every retry of the same (turn, step, provider, policy); ``retry`` counts
    from 1; ``maxRetries`` is present in ``normal`` mode only; ``policyKey`` is the policy's JSON key.
    """

    retryId: str
    turn: int
    step: int
    provider: str
    mode: Literal["normal", "always"]
    policyKey: str
    retry: int
    maxRetries: NotRequired[int]
    delayMs: int
    failure: LlmFailure


class LlmRetryStartedData(TypedDict):
    """``llm/retry-started``: the wait of retry ``retry`` completed."""

    retryId: str
    turn: int
    step: int
    retry: int
