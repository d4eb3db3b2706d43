"""The agent: its loop over the session log, its durable inbox, and its tools.

The tool layer (tool definitions, one-call execution, the §6.6 batch scheduler) appends no events
itself: the loop (:class:`Agent`) records ``tool/call`` / ``tool/result`` and everything else.
"""

from .builtin_tools import (
    CommandPolicy,
    CwdPolicy,
    ListDirTool,
    ReadFileTool,
    RunCommandTool,
    WriteFileTool,
    builtin_registry,
)
from .inbox import Inbox, InboxError
from .loop import Agent, AgentError, AgentOptions, ReconstructionError, RetryPolicy, TurnOutcome
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
    "Agent",
    "AgentError",
    "AgentOptions",
    "CallResult",
    "CommandPolicy",
    "CwdPolicy",
    "ExecutionMode",
    "FunctionTool",
    "Inbox",
    "InboxError",
    "ListDirTool",
    "ReadFileTool",
    "ReconstructionError",
    "RetryPolicy",
    "RunCommandTool",
    "Tool",
    "ToolCall",
    "ToolConflictError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSchedulerError",
    "TurnOutcome",
    "WriteFileTool",
    "aborted_before_dispatch_outcome",
    "batch_concludes_turn",
    "builtin_registry",
    "check_arguments",
    "parse_arguments",
    "run_tool_call",
    "schedule_calls",
]
