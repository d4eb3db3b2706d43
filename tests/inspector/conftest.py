"""Fixtures of the inspector tests: a written store per backend kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .stores import write_store

BACKEND_KINDS = ("jsonl", "jsonl-zstd", "sqlite")


@pytest.fixture(params=BACKEND_KINDS)
def written(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """``(root, kind, facts)``: the test sessions written into a fresh store of each backend kind."""
    kind = str(request.param)
    return tmp_path, kind, write_store(tmp_path, kind)
