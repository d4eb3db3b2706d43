"""Compaction policy: validated once at construction, scaled per routed model (runtime spec §5.5).

A configuration is checked completely when it is built — unknown keys, out-of-range values, a retention
that is not below the threshold — with the original's messages, so a typo fails at start-up rather than
silently disabling compaction hours into a session. What depends on the model (its context window) is
resolved per target: :meth:`CompactionConfig.policy_for` merges the exact ``provider``/``model``
override, and :meth:`TargetPolicy.spec` scales the ratios by the window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from ..errors import CompactionConfigError, TargetPressureConfigError
from ..kernel._js import js_string

DEFAULT_THRESHOLD_RATIO: Final = 0.8
DEFAULT_RETAIN_RATIO: Final = 0.16
DEFAULT_MAX_TOKENS: Final = 8192

_POLICY_KEYS: Final = (
    "thresholdRatio",
    "retainRatio",
    "retainTokens",
    "summarizationProvider",
    "summarizationModel",
    "maxTokens",
    "compactionRetries",
    "maxOverflowRetries",
)
_TOP_KEYS: Final = frozenset({*_POLICY_KEYS, "modelPolicies", "auto"})
_MODEL_KEYS: Final = frozenset({"provider", "model", *_POLICY_KEYS})
_SNAKE: Final = {
    "threshold_ratio": "thresholdRatio",
    "retain_ratio": "retainRatio",
    "retain_tokens": "retainTokens",
    "summarization_provider": "summarizationProvider",
    "summarization_model": "summarizationModel",
    "max_tokens": "maxTokens",
    "compaction_retries": "compactionRetries",
    "max_overflow_retries": "maxOverflowRetries",
    "model_policies": "modelPolicies",
    "auto": "auto",
    "provider": "provider",
    "model": "model",
}
NAME: Final = "BasicCompactionConfig"


def _fail(message: str) -> CompactionConfigError:
    return CompactionConfigError(message)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return _is_number(value) and math.isfinite(value) and float(value).is_integer()  # type: ignore[arg-type]


def _ratio(name: str, value: object) -> None:
    if not _is_number(value) or not math.isfinite(value) or not 0 < value <= 1:  # type: ignore[arg-type, operator]
        raise _fail(f"{name} ({js_string(value)}) must be a number in (0, 1]")


def _positive_int(name: str, value: object) -> None:
    if not _is_int(value) or value <= 0:  # type: ignore[operator]
        raise _fail(f"{name} ({js_string(value)}) must be a positive integer")


def _non_negative_int(name: str, value: object) -> None:
    if not _is_int(value) or value < 0:  # type: ignore[operator]
        raise _fail(f"{name} ({js_string(value)}) must be a non-negative integer")


def _keys(config: Mapping[str, Any], allowed: frozenset[str], name: str) -> None:
    for key in config:
        if key not in allowed:
            raise _fail(f'{name}: unknown key "{key}"')


def _validate_policy(config: Mapping[str, Any], name: str) -> None:
    if "thresholdRatio" in config:
        _ratio(f"{name}.thresholdRatio", config["thresholdRatio"])
    if "retainRatio" in config:
        _ratio(f"{name}.retainRatio", config["retainRatio"])
    if "retainTokens" in config:
        _non_negative_int(f"{name}.retainTokens", config["retainTokens"])
    if "retainRatio" in config and "retainTokens" in config:
        raise _fail(f"{name}: retainRatio and retainTokens are mutually exclusive")
    if "maxTokens" in config:
        _positive_int(f"{name}.maxTokens", config["maxTokens"])
    if "compactionRetries" in config:
        _non_negative_int(f"{name}.compactionRetries", config["compactionRetries"])
    if "maxOverflowRetries" in config:
        _non_negative_int(f"{name}.maxOverflowRetries", config["maxOverflowRetries"])
    # Present-but-null is a value (refused as not a string); only an absent key is "unset".
    has_provider = "summarizationProvider" in config
    has_model = "summarizationModel" in config
    provider = config.get("summarizationProvider")
    model = config.get("summarizationModel")
    if has_provider and not isinstance(provider, str):
        raise _fail(f"{name}.summarizationProvider must be a string")
    if has_model and not isinstance(model, str):
        raise _fail(f"{name}.summarizationModel must be a string")
    if not has_provider and not has_model:
        return
    if provider is None or model is None or (len(provider) == 0) != (len(model) == 0):
        raise _fail(
            f"{name}: summarizationProvider and summarizationModel must be set together as an empty or non-empty pair"
        )


@dataclass(frozen=True)
class Retention:
    """Exactly one retention form: a ratio of the window or an absolute token budget."""

    ratio: float | None = None
    tokens: int | None = None

    @staticmethod
    def of(config: Mapping[str, Any], fallback: Retention) -> Retention:
        if config.get("retainTokens") is not None:
            return Retention(tokens=int(config["retainTokens"]))
        if config.get("retainRatio") is not None:
            return Retention(ratio=config["retainRatio"])
        return fallback


def _check_ratio_retention(threshold: float, retention: Retention, name: str) -> None:
    if retention.ratio is not None and retention.ratio >= threshold:
        raise _fail(
            f"{name}: retainRatio ({js_string(retention.ratio)}) must be less than "
            f"the resolved thresholdRatio ({js_string(threshold)})"
        )


@dataclass(frozen=True)
class CompactSpec:
    """One routed model's concrete budgets (a :class:`TargetPolicy` scaled by its context window)."""

    provider: str
    model: str
    context_window: int
    threshold_ratio: float
    threshold_tokens: int
    retain_tokens: int
    summarization_provider: str
    summarization_model: str
    max_tokens: int
    compaction_retries: int
    max_overflow_retries: int


@dataclass(frozen=True)
class TargetPolicy:
    """The policy for one exact ``provider``/``model``: its override merged over the defaults."""

    provider: str
    model: str
    threshold_ratio: float
    retention: Retention
    summarization_provider: str
    summarization_model: str
    max_tokens: int
    compaction_retries: int
    max_overflow_retries: int

    @property
    def target_key(self) -> str:
        return f"{self.provider}/{self.model}"

    def spec(self, context_window: object) -> CompactSpec:
        """Scale the ratios by the model's context window (a positive integer)."""
        if not _is_int(context_window) or context_window <= 0:  # type: ignore[operator]
            raise TargetPressureConfigError(
                self.target_key, f"{NAME}: contextWindow ({js_string(context_window)}) must be a positive integer"
            )
        window = int(context_window)  # type: ignore[call-overload]
        threshold = math.floor(window * self.threshold_ratio)
        retention = self.retention
        retain = math.floor(window * retention.ratio) if retention.ratio is not None else int(retention.tokens or 0)
        if retain >= threshold:
            raise TargetPressureConfigError(
                self.target_key,
                f"{NAME}: {self.provider}/{self.model} retainTokens ({retain}) must be less than threshold tokens "
                f"{threshold}",
            )
        return CompactSpec(
            provider=self.provider,
            model=self.model,
            context_window=window,
            threshold_ratio=self.threshold_ratio,
            threshold_tokens=threshold,
            retain_tokens=retain,
            summarization_provider=self.summarization_provider,
            summarization_model=self.summarization_model,
            max_tokens=self.max_tokens,
            compaction_retries=self.compaction_retries,
            max_overflow_retries=self.max_overflow_retries,
        )


@dataclass(frozen=True, init=False)
class CompactionConfig:
    """Validated compaction settings (every field optional; the original's defaults).

    Build with snake_case keywords (``CompactionConfig(threshold_ratio=0.7, retain_tokens=2000)``) or
    from the original's camelCase mapping (``CompactionConfig.from_mapping({"thresholdRatio": 0.7})``).
    ``model_policies`` are exact ``{provider, model, ...partial policy}`` overrides.
    """

    threshold_ratio: float
    retention: Retention
    summarization_provider: str
    summarization_model: str
    max_tokens: int
    compaction_retries: int
    max_overflow_retries: int
    model_policies: tuple[Mapping[str, Any], ...] = field(default=())
    auto: bool = True

    def __init__(self, **settings: Any) -> None:
        raw: dict[str, Any] = {}
        for key, value in settings.items():
            if key not in _SNAKE or key in ("provider", "model"):
                raise _fail(f'{NAME}: unknown key "{key}"')
            if value is not None:
                raw[_SNAKE[key]] = _camel_policies(value) if key == "model_policies" else value
        self._resolve(raw)

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None = None) -> CompactionConfig:
        """The original's ``BasicCompactionConfig`` shape (camelCase keys)."""
        if config is not None and not isinstance(config, Mapping):
            raise _fail(f"{NAME} must be an object")
        self = object.__new__(cls)
        self._resolve(dict(config or {}))
        return self

    def _resolve(self, config: dict[str, Any]) -> None:
        _keys(config, _TOP_KEYS, NAME)
        _validate_policy(config, NAME)
        if "auto" in config and not isinstance(config["auto"], bool):
            raise _fail(f"{NAME}: auto must be a boolean")
        threshold = config.get("thresholdRatio", DEFAULT_THRESHOLD_RATIO)  # as given (1 stays 1, as in JSON)
        retention = Retention.of(config, Retention(ratio=DEFAULT_RETAIN_RATIO))
        _check_ratio_retention(threshold, retention, NAME)
        policies = _resolve_policies(config.get("modelPolicies"))
        for index, policy in enumerate(policies):
            _check_ratio_retention(
                policy.get("thresholdRatio", threshold),
                Retention.of(policy, retention),
                f"{NAME}: modelPolicies[{index}]",
            )
        set_ = object.__setattr__
        set_(self, "threshold_ratio", threshold)
        set_(self, "retention", retention)
        set_(self, "summarization_provider", config.get("summarizationProvider", ""))
        set_(self, "summarization_model", config.get("summarizationModel", ""))
        set_(self, "max_tokens", int(config.get("maxTokens", DEFAULT_MAX_TOKENS)))
        set_(self, "compaction_retries", int(config.get("compactionRetries", 1)))
        set_(self, "max_overflow_retries", int(config.get("maxOverflowRetries", 1)))
        set_(self, "model_policies", tuple(policies))
        set_(self, "auto", config.get("auto", True))

    def policy_for(self, provider: str, model: str) -> TargetPolicy:
        """The merged policy of one exact routed target."""
        override: Mapping[str, Any] = next(
            (p for p in self.model_policies if p["provider"] == provider and p["model"] == model), {}
        )
        return TargetPolicy(
            provider=provider,
            model=model,
            threshold_ratio=override.get("thresholdRatio", self.threshold_ratio),
            retention=Retention.of(override, self.retention),
            summarization_provider=override.get("summarizationProvider", self.summarization_provider),
            summarization_model=override.get("summarizationModel", self.summarization_model),
            max_tokens=int(override.get("maxTokens", self.max_tokens)),
            compaction_retries=int(override.get("compactionRetries", self.compaction_retries)),
            max_overflow_retries=int(override.get("maxOverflowRetries", self.max_overflow_retries)),
        )

    def to_json(self) -> dict[str, Any]:
        """The resolved settings in the original's camelCase shape."""
        out: dict[str, Any] = {"thresholdRatio": self.threshold_ratio}
        if self.retention.tokens is not None:
            out["retainTokens"] = self.retention.tokens
        else:
            out["retainRatio"] = self.retention.ratio
        out.update(
            summarizationProvider=self.summarization_provider,
            summarizationModel=self.summarization_model,
            maxTokens=self.max_tokens,
            compactionRetries=self.compaction_retries,
            maxOverflowRetries=self.max_overflow_retries,
            modelPolicies=[dict(p) for p in self.model_policies],
            auto=self.auto,
        )
        return out


def _camel_policies(value: Any) -> Any:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return value  # refused with the original's message by _resolve_policies
    out = []
    for policy in value:
        if isinstance(policy, Mapping):
            out.append({_SNAKE.get(k, k): v for k, v in policy.items()})
        else:
            out.append(policy)
    return out


def _resolve_policies(configured: object) -> list[Mapping[str, Any]]:
    if configured is None:
        return []
    if not isinstance(configured, Sequence) or isinstance(configured, (str, bytes)):
        raise _fail(f"{NAME}: modelPolicies must be an array")
    seen: set[tuple[str, str]] = set()
    out: list[Mapping[str, Any]] = []
    for index, source in enumerate(configured):
        name = f"{NAME}: modelPolicies[{index}]"
        if not isinstance(source, Mapping):
            raise _fail(f"{name} must be an object")
        _keys(source, _MODEL_KEYS, name)
        for key in ("provider", "model"):
            value = source.get(key)
            if not isinstance(value, str) or not value:
                raise _fail(f"{name}.{key} must be a non-empty string")
        _validate_policy(source, name)
        target = (source["provider"], source["model"])
        if target in seen:
            raise _fail(f"{NAME}: duplicate model policy for {source['provider']}/{source['model']}")
        seen.add(target)
        out.append(MappingProxyType(dict(source)))  # detached and read-only, like the original's deepFreeze
    return out
