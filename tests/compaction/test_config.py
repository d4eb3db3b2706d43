"""Compaction configuration (runtime spec §5.5) against the original's ``compaction-basic.spec.ts``.

One test per case of its ``compact configuration and defaults`` block, named after the case. The
original's ``resolveConfig`` is :meth:`CompactionConfig.from_mapping` (its camelCase shape) — the
snake_case constructor is checked to resolve identically; ``resolveTargetPolicy`` is
:meth:`CompactionConfig.policy_for` and ``resolveCompactSpec`` is :meth:`TargetPolicy.spec`. Every
refusal is a :class:`~agentlog.errors.CompactionConfigError` whose message is the original's text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentlog.compaction import CompactionConfig
from agentlog.errors import CompactionConfigError, TargetPressureConfigError

MODEL = "test-model"


def test_uses_low_friction_service_wide_defaults() -> None:
    """Every field has the original's default, in the original's key order, and the result is frozen."""
    resolved = CompactionConfig.from_mapping({})

    assert resolved.to_json() == {
        "thresholdRatio": 0.8,
        "retainRatio": 0.16,
        "summarizationProvider": "",
        "summarizationModel": "",
        "maxTokens": 8192,
        "compactionRetries": 1,
        "maxOverflowRetries": 1,
        "modelPolicies": [],
        "auto": True,
    }
    assert list(resolved.to_json()) == [
        "thresholdRatio",
        "retainRatio",
        "summarizationProvider",
        "summarizationModel",
        "maxTokens",
        "compactionRetries",
        "maxOverflowRetries",
        "modelPolicies",
        "auto",
    ]
    assert CompactionConfig() == resolved
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.threshold_ratio = 0.5  # type: ignore[misc]


def test_resolves_threshold_and_retention_overrides_independently() -> None:
    """A threshold override keeps the default ratio retention; an absolute retention replaces the ratio."""
    threshold_only = CompactionConfig.from_mapping({"thresholdRatio": 0.5}).to_json()
    assert threshold_only["thresholdRatio"] == 0.5
    assert threshold_only["retainRatio"] == 0.16

    retention_only = CompactionConfig.from_mapping({"retainTokens": 70}).to_json()
    assert retention_only["thresholdRatio"] == 0.8
    assert retention_only["retainTokens"] == 70
    assert "retainRatio" not in retention_only
    assert CompactionConfig(retain_tokens=70).to_json() == retention_only


def test_merges_exact_provider_model_policy_overrides_and_scales_ratios_per_model() -> None:
    """An override applies to its exact provider/model only; ratios scale with each model's window, and
    an override naming a retention field replaces the inherited retention form."""
    config = CompactionConfig.from_mapping(
        {
            "thresholdRatio": 0.8,
            "retainRatio": 0.1,
            "modelPolicies": [
                {"provider": "small-provider", "model": "shared-id", "thresholdRatio": 0.5, "retainTokens": 120}
            ],
        }
    )
    small = config.policy_for("small-provider", "shared-id")
    other_provider = config.policy_for("large-provider", "shared-id")

    small_spec = small.spec(1000)
    assert (small_spec.threshold_tokens, small_spec.retain_tokens) == (500, 120)
    other_spec = other_provider.spec(2000)
    assert (other_spec.threshold_tokens, other_spec.retain_tokens) == (1600, 200)

    ratio_override = CompactionConfig.from_mapping(
        {
            "retainTokens": 200,
            "modelPolicies": [
                {
                    "provider": "ratio-provider",
                    "model": "ratio-model",
                    "thresholdRatio": 0.6,
                    "retainRatio": 0.2,
                    "summarizationProvider": "summary-provider",
                    "summarizationModel": "summary-model",
                    "maxTokens": 512,
                    "compactionRetries": 2,
                    "maxOverflowRetries": 3,
                }
            ],
        }
    ).policy_for("ratio-provider", "ratio-model")
    spec = ratio_override.spec(2000)
    assert spec.threshold_tokens == 1200
    assert spec.retain_tokens == 400
    assert spec.summarization_provider == "summary-provider"
    assert spec.summarization_model == "summary-model"
    assert spec.max_tokens == 512
    assert spec.compaction_retries == 2
    assert spec.max_overflow_retries == 3
    assert (spec.provider, spec.model, spec.context_window) == ("ratio-provider", "ratio-model", 2000)


def test_inherits_clears_and_replaces_the_summarization_target_as_a_pair() -> None:
    """A policy without the pair inherits it, an empty pair clears it, a full pair replaces it."""
    config = CompactionConfig.from_mapping(
        {
            "summarizationProvider": "default-provider",
            "summarizationModel": "default-model",
            "modelPolicies": [
                {"provider": "inherit-provider", "model": MODEL},
                {"provider": "clear-provider", "model": MODEL, "summarizationProvider": "", "summarizationModel": ""},
                {
                    "provider": "replace-provider",
                    "model": MODEL,
                    "summarizationProvider": "replacement-provider",
                    "summarizationModel": "replacement-model",
                },
            ],
        }
    )

    def pair(provider: str) -> tuple[str, str]:
        policy = config.policy_for(provider, MODEL)
        return policy.summarization_provider, policy.summarization_model

    assert pair("inherit-provider") == ("default-provider", "default-model")
    assert pair("clear-provider") == ("", "")
    assert pair("replace-provider") == ("replacement-provider", "replacement-model")


BAD: list[tuple[Any, str]] = [
    ({"maxTokens": 0}, r"^BasicCompactionConfig\.maxTokens \(0\) must be a positive integer$"),
    ({"compactionRetries": -1}, r"^BasicCompactionConfig\.compactionRetries \(-1\) must be a non-negative integer$"),
    ({"maxOverflowRetries": -1}, r"^BasicCompactionConfig\.maxOverflowRetries \(-1\) must be a non-negative integer$"),
    ({"auto": "yes"}, r"^BasicCompactionConfig: auto must be a boolean$"),
    ({"summarizationProvider": 1}, r"^BasicCompactionConfig\.summarizationProvider must be a string$"),
    ({"summarizationModel": 1}, r"^BasicCompactionConfig\.summarizationModel must be a string$"),
    ({"summarizationProvider": MODEL}, r"must be set together"),
    ({"summarizationModel": MODEL}, r"must be set together"),
    ({"summarizationProvider": ""}, r"must be set together"),
    ({"summarizationModel": ""}, r"must be set together"),
    ({"thresholdRatio": 0}, r"^BasicCompactionConfig\.thresholdRatio \(0\) must be a number in \(0, 1\]$"),
    ({"thresholdRatio": 1.1}, r"^BasicCompactionConfig\.thresholdRatio \(1\.1\) must be a number in \(0, 1\]$"),
    (
        {"retainRatio": 0.9},
        r"^BasicCompactionConfig: retainRatio \(0\.9\) must be less than the resolved thresholdRatio \(0\.8\)$",
    ),
    ({"thresholdRatio": 0.1}, r"retainRatio \(0\.16\) must be less than the resolved thresholdRatio \(0\.1\)"),
    ({"retainTokens": -1}, r"^BasicCompactionConfig\.retainTokens \(-1\) must be a non-negative integer$"),
    (
        {"retainRatio": 0.2, "retainTokens": 100},
        r"^BasicCompactionConfig: retainRatio and retainTokens are mutually exclusive$",
    ),
    ({"modelPolicies": {}}, r"^BasicCompactionConfig: modelPolicies must be an array$"),
    ({"modelPolicies": [1]}, r"^BasicCompactionConfig: modelPolicies\[0\] must be an object$"),
    ({"modelPolicies": [None]}, r"modelPolicies\[0\] must be an object"),
    ({"modelPolicies": [[]]}, r"modelPolicies\[0\] must be an object"),
    (
        {"modelPolicies": [{"provider": 1, "model": MODEL}]},
        r"^BasicCompactionConfig: modelPolicies\[0\]\.provider must be a non-empty string$",
    ),
    ({"modelPolicies": [{"provider": "", "model": MODEL}]}, r"provider must be a non-empty string"),
    ({"modelPolicies": [{"provider": MODEL, "model": 1}]}, r"model must be a non-empty string"),
    ({"modelPolicies": [{"provider": MODEL, "model": ""}]}, r"model must be a non-empty string"),
    (
        {"modelPolicies": [{"provider": MODEL, "model": MODEL, "summarizationProvider": 1}]},
        r"summarizationProvider must be a string",
    ),
    (
        {
            "summarizationProvider": "default-provider",
            "summarizationModel": "default-model",
            "modelPolicies": [{"provider": MODEL, "model": MODEL, "summarizationModel": ""}],
        },
        r"modelPolicies\[0\].*must be set together",
    ),
    (
        {
            "summarizationProvider": "default-provider",
            "summarizationModel": "default-model",
            "modelPolicies": [{"provider": MODEL, "model": MODEL, "summarizationProvider": ""}],
        },
        r"modelPolicies\[0\].*must be set together",
    ),
    (
        {"modelPolicies": [{"provider": MODEL, "model": MODEL, "retainRatio": 0.2, "retainTokens": 100}]},
        r"mutually exclusive",
    ),
    (
        {"modelPolicies": [{"provider": MODEL, "model": MODEL, "thresholdRatio": 0.1}]},
        r"modelPolicies\[0\]: retainRatio \(0\.16\).*thresholdRatio \(0\.1\)",
    ),
    (
        {"modelPolicies": [{"provider": MODEL, "model": MODEL, "retainRatio": 0.9}]},
        r"modelPolicies\[0\]: retainRatio \(0\.9\).*thresholdRatio \(0\.8\)",
    ),
    (
        {"modelPolicies": [{"provider": MODEL, "model": MODEL}, {"provider": MODEL, "model": MODEL}]},
        rf"^BasicCompactionConfig: duplicate model policy for {MODEL}/{MODEL}$",
    ),
    ({"models": {MODEL: {"retainTokens": 10}}}, r'^BasicCompactionConfig: unknown key "models"$'),
    ({"thresholdRato": 0.5}, r'^BasicCompactionConfig: unknown key "thresholdRato"$'),
]


def test_validates_common_values_and_pressure_policy_invariants() -> None:
    """Each of the original's bad configurations is refused with its text; an absolute retention at or
    above the scaled threshold, and a window that is not a positive integer, are refused per target."""
    for config, pattern in BAD:
        with pytest.raises(CompactionConfigError, match=pattern):
            CompactionConfig.from_mapping(config)

    invalid_pressure = CompactionConfig.from_mapping({"thresholdRatio": 0.5, "retainTokens": 500}).policy_for(
        MODEL, MODEL
    )
    with pytest.raises(TargetPressureConfigError, match="less than threshold") as raised:
        invalid_pressure.spec(1000)
    assert str(raised.value) == (
        f"BasicCompactionConfig: {MODEL}/{MODEL} retainTokens (500) must be less than threshold tokens 500"
    )
    assert raised.value.target_key == f"{MODEL}/{MODEL}"
    with pytest.raises(TargetPressureConfigError, match=r"^BasicCompactionConfig: contextWindow \(1\.5\) must be a "):
        invalid_pressure.spec(1.5)
    with pytest.raises(TargetPressureConfigError, match="positive integer"):
        invalid_pressure.spec(0)


# --- beyond the original's cases --------------------------------------------------------------------


def test_a_null_summarization_field_is_refused_like_any_non_string() -> None:
    """The original refuses ``null`` (``typeof null !== 'string'``); only an absent key means "unset"."""
    with pytest.raises(CompactionConfigError, match=r"^BasicCompactionConfig\.summarizationProvider must be a string$"):
        CompactionConfig.from_mapping({"summarizationProvider": None, "summarizationModel": MODEL})
    with pytest.raises(
        CompactionConfigError, match=r"^BasicCompactionConfig: modelPolicies\[0\]\.summarizationModel must be a string$"
    ):
        CompactionConfig.from_mapping(
            {"modelPolicies": [{"provider": MODEL, "model": MODEL, "summarizationModel": None}]}
        )


def test_resolved_model_policies_are_immutable() -> None:
    """Like the original's deep-frozen result, a validated policy cannot be edited around validation,
    nor through the mapping it was built from."""
    source = {"provider": MODEL, "model": MODEL, "thresholdRatio": 0.5}
    config = CompactionConfig.from_mapping({"modelPolicies": [source]})
    with pytest.raises(TypeError):
        config.model_policies[0]["thresholdRatio"] = 0.01  # type: ignore[index]
    source["thresholdRatio"] = 0.01
    assert config.policy_for(MODEL, MODEL).threshold_ratio == 0.5
    assert config.to_json()["modelPolicies"] == [{"provider": MODEL, "model": MODEL, "thresholdRatio": 0.5}]


def test_snake_case_keywords_resolve_like_the_camel_case_mapping() -> None:
    """``CompactionConfig(**snake)`` and ``from_mapping(camel)`` are the same configuration; a camelCase
    or unknown keyword is refused."""
    snake = CompactionConfig(
        threshold_ratio=0.6,
        retain_ratio=0.1,
        summarization_provider="p",
        summarization_model="m",
        max_tokens=100,
        compaction_retries=0,
        max_overflow_retries=2,
        model_policies=[{"provider": MODEL, "model": MODEL, "retain_tokens": 5}],
        auto=False,
    )
    camel = CompactionConfig.from_mapping(
        {
            "thresholdRatio": 0.6,
            "retainRatio": 0.1,
            "summarizationProvider": "p",
            "summarizationModel": "m",
            "maxTokens": 100,
            "compactionRetries": 0,
            "maxOverflowRetries": 2,
            "modelPolicies": [{"provider": MODEL, "model": MODEL, "retainTokens": 5}],
            "auto": False,
        }
    )
    assert snake.to_json() == camel.to_json()
    with pytest.raises(CompactionConfigError, match=r'^BasicCompactionConfig: unknown key "thresholdRatio"$'):
        CompactionConfig(thresholdRatio=0.5)
    with pytest.raises(CompactionConfigError, match=r'^BasicCompactionConfig: unknown key "provider"$'):
        CompactionConfig(provider=MODEL)


@given(
    threshold=st.floats(min_value=0.01, max_value=1.0),
    retain=st.floats(min_value=0.0, max_value=1.0, exclude_min=True),
    window=st.integers(min_value=1, max_value=2_000_000),
)
def test_property_a_valid_ratio_policy_scales_with_floor_and_keeps_retention_below_threshold(
    threshold: float, retain: float, window: int
) -> None:
    """Any accepted ratio pair scales to ``floor(W × ratio)`` budgets; a spec that exists always has
    retention strictly below the threshold (otherwise it is refused for that target)."""
    try:
        config = CompactionConfig.from_mapping({"thresholdRatio": threshold, "retainRatio": retain})
    except CompactionConfigError as err:
        assert retain >= threshold
        assert re.search(r"must be less than the resolved thresholdRatio", str(err))
        return
    assert retain < threshold
    policy = config.policy_for("p", "m")
    try:
        spec = policy.spec(window)
    except TargetPressureConfigError as err:
        assert int(window * retain) >= int(window * threshold)
        assert err.target_key == "p/m"
        return
    assert spec.threshold_tokens == int(window * threshold)
    assert spec.retain_tokens == int(window * retain)
    assert spec.retain_tokens < spec.threshold_tokens


def test_resolved_values_keep_the_configured_numbers_as_given() -> None:
    """A ratio of ``1`` stays ``1`` (JSON ``1``, as the original prints it), not ``1.0``."""
    config = CompactionConfig.from_mapping(
        {
            "thresholdRatio": 1,
            "retainRatio": 0.5,
            "modelPolicies": [{"provider": "p", "model": "m", "thresholdRatio": 1}],
        }
    )
    assert json.dumps(config.to_json()["thresholdRatio"]) == "1"
    assert json.dumps(config.policy_for("p", "m").threshold_ratio) == "1"
    assert config.policy_for("p", "m").spec(1000).threshold_tokens == 1000
