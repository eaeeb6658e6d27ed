"""memoryd: keeps AI-agent conversations inside their context budget.

The daemon (``memoryd run``) and the command line share these pieces with agents written
in Python; see README.md, "Python API".
"""

from memoryd.api import MessageSummarizer, SummaryGenerator
from memoryd.checkpoint import Checkpoint, CheckpointSummary
from memoryd.config import Settings, load_settings
from memoryd.conversation import append_message
from memoryd.errors import (
    CheckpointParseError,
    CommitAborted,
    ConfigError,
    InputError,
    MemorydError,
    SummarizerError,
    UsageError,
)
from memoryd.heartbeat import Heartbeat, HeartbeatManager
from memoryd.job import JobRequest, JobResult, run_job
from memoryd.monitor import ContextMonitor, MonitorState
from memoryd.policy import (
    ThresholdAction,
    detect_threshold,
    get_threshold_action,
    should_emit_event,
)
from memoryd.stores import (
    CompactionReport,
    compact,
    read_entries,
    record_task_bookmark,
    write_entry,
)
from memoryd.summarizers.checkpoint_prompt import build_compaction_prompt, parse_compaction_result

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
    "get_threshold_action",
    "load_settings",
    "parse_compaction_result",
    "read_entries",
    "record_task_bookmark",
    "run_job",
    "should_emit_event",
    "write_entry",
]
