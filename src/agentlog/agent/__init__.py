"""The agent's tool layer: tool definitions, one-call execution and the §6.6 batch scheduler.

Kept apart from the session kernel on purpose: nothing here appends events. The agent loop calls
:func:`schedule_calls` and records ``tool/call`` / ``tool/result`` itself.
"""

from .builtin_tools import (
    CwdPolicy,
    ListDirTool,
    ReadFileTool,
    RunCommandTool,
    WriteFileTool,
    builtin_registry,
)
from .tools import (
    CallResult,
    ExecutionMode,
    FunctionTool,
    Tool,
    ToolCall,
    ToolConflictError,
    ToolContext,
    ToolDefinitionError,
    ToolOutcome,
    ToolRegistry,
    ToolSchedulerError,
    aborted_before_dispatch_outcome,
    batch_concludes_turn,
    check_arguments,
    parse_arguments,
    run_tool_call,
    schedule_calls,
)

__all__ = [
    "CallResult",
    "CwdPolicy",
    "ExecutionMode",
    "FunctionTool",
    "ListDirTool",
    "ReadFileTool",
    "RunCommandTool",
    "Tool",
    "ToolCall",
    "ToolConflictError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSchedulerError",
    "WriteFileTool",
    "aborted_before_dispatch_outcome",
    "batch_concludes_turn",
    "builtin_registry",
    "check_arguments",
    "parse_arguments",
    "run_tool_call",
    "schedule_calls",
]
