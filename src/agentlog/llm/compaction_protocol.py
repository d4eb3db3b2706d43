"""The compaction wire protocol: what a summarization request and a checkpoint look like on the wire.

Three parties must agree on these strings byte for byte: the summarizer that writes the instruction and
frames the checkpoint (:mod:`agentlog.compaction.summarizer`), the OpenAI-compatible provider that marks a
summarization call for DeepSeek's host (:mod:`agentlog.llm.openai_compat`), and the scripted demo model that
recognises such a call and answers it (:mod:`agentlog.testing.demo_server`); the CLI's transcript view also
recognises the framing. They live here, under ``llm/``, because ``llm`` must not import ``compaction``
while ``compaction`` may import ``llm`` (the import contracts in ``pyproject.toml``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COMPACTION_MARKER",
    "COMPACT_HEADER",
    "SUMMARY_CLOSE_TAG",
    "SUMMARY_OPEN_TAG",
    "SUMMARY_SECTIONS",
]

COMPACT_HEADER: Final = "x-deepseek-harness-compact"
"""The HTTP header (value ``"1"``) that marks a summarization request; sent to DeepSeek's host only."""

COMPACTION_MARKER: Final = "You are now acting as a compaction engine"
"""The opening words of the compaction instruction (runtime spec §5.9): a last user message containing
them is a compaction request, whichever implementation sent it."""

SUMMARY_SECTIONS: Final = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code",
    "Errors and Fixes",
    "Pending Jobs",
    "Current Work",
    "Next Step",
    "Critical Context",
)
"""The eight section headings of the compaction instruction (``## <name>``), in order."""

SUMMARY_OPEN_TAG: Final = "<compacted-summary>"
"""Opens the summary inside a checkpoint message; a message containing it is a prior checkpoint."""

SUMMARY_CLOSE_TAG: Final = "</compacted-summary>"
"""Closes the summary inside a checkpoint message (a text block of its own)."""
