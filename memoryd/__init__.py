"""memoryd: keeps AI-agent conversations inside their context budget.

The daemon (``memoryd run``) and the command line share these pieces with agents written
in Python; see docs/guides/agents.md, "Python API". Each name is imported on first use (module
``__getattr__``), so ``import memoryd`` stays cheap and loads neither the Anthropic SDK
nor pydantic until a name that needs them is used (docs/design.md#cli).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from memoryd.compaction.job.request import JobRequest, JobResult
    from memoryd.compaction.job.run import run_job
    from memoryd.config.settings import Settings, load_settings
    from memoryd.conversation.api_view import messages_for_api
    from memoryd.conversation.lines import append_message
    from memoryd.errors import (
        CheckpointParseError,
        CommitAborted,
        ConfigError,
        InputError,
        MemorydError,
        SummarizerError,
        UsageError,
    )
    from memoryd.levels import (
        ThresholdAction,
        detect_threshold,
        get_threshold_action,
        should_emit_event,
    )
    from memoryd.published.heartbeat import Heartbeat, HeartbeatManager
    from memoryd.published.monitor import ContextMonitor, MonitorState
    from memoryd.search.archive import expand, recall
    from memoryd.stores.compaction import CompactionReport
    from memoryd.stores.disk import (
        compact,
        read_entries,
        record_task_bookmark,
        write_entry,
    )
    from memoryd.summary.checkpoint import Checkpoint, CheckpointSummary
    from memoryd.summary.checkpoint_prompt import (
        build_compaction_prompt,
        parse_compaction_result,
    )

_HOMES: dict[str, tuple[str, ...]] = {
    "memoryd.runners": ("MessageSummarizer", "SummaryGenerator"),
    "memoryd.conversation.api_view": ("messages_for_api",),
    "memoryd.summary.checkpoint": ("Checkpoint", "CheckpointSummary"),
    "memoryd.config.settings": ("Settings", "load_settings"),
    "memoryd.conversation.lines": ("append_message",),
    "memoryd.errors": (
        "CheckpointParseError",
        "CommitAborted",
        "ConfigError",
        "InputError",
        "MemorydError",
        "SummarizerError",
        "UsageError",
    ),
    "memoryd.published.heartbeat": ("Heartbeat", "HeartbeatManager"),
    "memoryd.compaction.job.request": ("JobRequest", "JobResult"),
    "memoryd.compaction.job.run": ("run_job",),
    "memoryd.published.monitor": ("ContextMonitor", "MonitorState"),
    "memoryd.levels": (
        "ThresholdAction",
        "detect_threshold",
        "get_threshold_action",
        "should_emit_event",
    ),
    "memoryd.search.archive": ("expand", "recall"),
    "memoryd.stores.compaction": ("CompactionReport",),
    "memoryd.stores.disk": (
        "compact",
        "read_entries",
        "record_task_bookmark",
        "write_entry",
    ),
    "memoryd.summary.checkpoint_prompt": ("build_compaction_prompt", "parse_compaction_result"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "Checkpoint",
    "CheckpointParseError",
    "CheckpointSummary",
    "CommitAborted",
    "CompactionReport",
    "ConfigError",
    "ContextMonitor",
    "Heartbeat",
    "HeartbeatManager",
    "InputError",
    "JobRequest",
    "JobResult",
    "MemorydError",
    "MessageSummarizer",
    "MonitorState",
    "Settings",
    "SummarizerError",
    "SummaryGenerator",
    "ThresholdAction",
    "UsageError",
    "append_message",
    "build_compaction_prompt",
    "compact",
    "detect_threshold",
    "expand",
    "get_threshold_action",
    "load_settings",
    "messages_for_api",
    "parse_compaction_result",
    "read_entries",
    "recall",
    "record_task_bookmark",
    "run_job",
    "should_emit_event",
    "write_entry",
]


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use, then keep the value here."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'memoryd' has no attribute {name!r}")
    imported = importlib.import_module(module)
    # ``recall`` is also a package (callable as the function), which importing its
    # module has just set here: it stays.
    value = globals().get(name) or getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
