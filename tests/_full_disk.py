"""Real file-system conditions for tests: a small tmpfs, filled to ENOSPC (a full disk) or remounted
read-only, the one helper of the full-disk and read-only tests of ``tests/persistence``, ``tests/projection``
and ``tests/cli``. Mounting needs root; elsewhere the test is skipped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(size: str = "2m", *, mode: str = "0700") -> Iterator[Path]:
    """A private tmpfs of ``size`` (its root directory's ``mode``), unmounted afterwards, even when the
    test left it read-only (skips the test where it cannot be mounted)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a disk that can really be filled) needs root")
    point = Path(tempfile.mkdtemp(prefix="agentlog-full-disk-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(point)], capture_output=True
    )
    if done.returncode != 0:
        point.rmdir()
        pytest.skip(f"this machine forbids mounting a tmpfs: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield point
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(point)], capture_output=True)
        subprocess.run(["umount", "-l", str(point)], capture_output=True)
        point.rmdir()


def remount(point: Path, mode: str) -> None:
    """Remount the tmpfs at ``point`` ``ro`` or ``rw``."""
    subprocess.run(["mount", "-o", f"remount,{mode}", str(point)], check=True, capture_output=True)


def fill(point: Path) -> Path:
    """Fill the file system at ``point`` until ENOSPC; removing the returned file frees the space."""
    filler = point / "filler"
    with open(filler, "wb", buffering=0) as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 65536)
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 512)
    return filler
