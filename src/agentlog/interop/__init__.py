"""Interop: agentlog under the code people already have.

Converters between derived messages and the OpenAI chat-completions, OpenAI Responses and Anthropic
Messages formats (both directions), a recorder that writes the turn/step/tool-call protocol for a loop
the user keeps, and importers/exporters of other tools' transcripts. The framework adapters live in
:mod:`agentlog.integrations`, each behind its optional extra.
"""

from ._common import ImportedConversation
from .anthropic import from_anthropic, session_to_anthropic, to_anthropic, tools_to_anthropic
from .openai_chat import from_openai_chat, session_to_openai_chat, to_openai_chat, tools_to_openai_chat
from .openai_responses import (
    from_openai_responses,
    session_to_openai_responses,
    to_openai_responses,
    tools_to_openai_responses,
)
from .recorder import RecordedStream, RecordedTurn, Recorder, ToolRun
from .transcripts import (
    IMPORT_DONE,
    IMPORT_RECORD,
    ExportReport,
    ImportReport,
    export_session,
    import_transcript,
    update_transcript,
)
from .tree import FailedTranscript, SkippedTranscript, TreeImport, detect_transcript_format, import_tree

__all__ = [
    "IMPORT_DONE",
    "IMPORT_RECORD",
    "ExportReport",
    "FailedTranscript",
    "ImportReport",
    "ImportedConversation",
    "RecordedStream",
    "RecordedTurn",
    "Recorder",
    "SkippedTranscript",
    "ToolRun",
    "TreeImport",
    "detect_transcript_format",
    "export_session",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "import_transcript",
    "import_tree",
    "session_to_anthropic",
    "session_to_openai_chat",
    "session_to_openai_responses",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
    "tools_to_anthropic",
    "tools_to_openai_chat",
    "tools_to_openai_responses",
    "update_transcript",
]
