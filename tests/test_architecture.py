"""The architecture as documented is the architecture as checked.

``docs/architecture.md`` draws the layers; the ``layers`` contract of ``pyproject.toml`` is what
``lint-imports`` enforces. A layer added to one and not the other would make the picture lie, so the
diagram's first column must spell the contract's list, top to bottom, with the same independent siblings.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _contract_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert len(contracts) == 1, "one layers contract"
    return [[part.strip() for part in layer.split("|")] for layer in contracts[0]["layers"]]


def _diagram_layers() -> list[list[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert match is not None, "the Layers section draws its diagram in a text block"
    layers = []
    for line in match.group(1).splitlines():
        if not line.strip():
            continue
        modules = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]  # the first column: the layer's modules
        layers.append([name.strip().removesuffix("/").removesuffix(".py") for name in modules.split("|")])
    return layers


def test_architecture_diagram_draws_the_layers_contract() -> None:
    assert _diagram_layers() == _contract_layers()


def test_layers_contract_is_exhaustive_and_counts_indirect_imports() -> None:
    """Exhaustive: a new package cannot sit outside the picture unnoticed; no contract lets indirect imports through."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert contract["exhaustive"] is True
    assert contract["containers"] == ["agentlog"]
    assert "allow_indirect_imports" not in contract
    assert not any("allow_indirect_imports" in c for c in config["tool"]["importlinter"]["contracts"])
