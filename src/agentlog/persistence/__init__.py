"""Durable sessions: a coordinator over narrow storage backends (memory, JSONL raw/zstd, SQLite)."""
