"""Write the stores bench.sh compares on: W(2000) and W(8000), jsonl-zstd, session ``bench``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from persist import write_session
from workload import build_workload

if __name__ == "__main__":
    target = Path(sys.argv[1])
    for name, kind, turns in (("z2", "jsonl-zstd", 2000), ("z8", "jsonl-zstd", 8000)):
        root = target / name
        if root.exists():
            continue
        os.makedirs(root)
        write_session(kind, str(root), build_workload(turns), "bulk")
        print(f"{root}: W({turns}) on {kind}")
