"""PostgreSQL session backend (the ``agentlog[postgres]`` extra: psycopg 3)."""

from .backend import DEFAULT_SCHEMA, MAX_SESSION_ID_BYTES, SCHEMA_VERSION, PostgresBackend

__all__ = ["DEFAULT_SCHEMA", "MAX_SESSION_ID_BYTES", "SCHEMA_VERSION", "PostgresBackend"]
