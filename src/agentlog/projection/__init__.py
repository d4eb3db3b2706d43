"""Projections: per-session facts derived from the log (runtime spec §2, §3, §6.10, §6.11)."""
