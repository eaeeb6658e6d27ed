"""The fields of ``Settings`` for the fast path: dotted key -> (kind, default, bounds).

Written by ``python -m memoryd.config.derive`` from the pydantic model; do not edit (a test
fails when this differs from what the model gives). The kinds are described in
memoryd/config/fast.py.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Bounds = tuple[tuple[str, float], ...]

FIELDS: dict[str, tuple[str, Any, Bounds]] = {
    "roots": ("roots", ["~/agents"], ()),
    "max_depth": ("int", 4, (("ge", 0),)),
    "token_limit": ("int", 100000, (("gt", 0),)),
    "warning_at": ("float", 0.7, (("gt", 0), ("le", 1))),
    "summarize_at": ("float", 0.8, (("gt", 0), ("le", 1))),
    "critical_at": ("float", 0.85, (("gt", 0), ("le", 1))),
    "strategy": ("literal:narrative|rolling|checkpoint", "narrative", ()),
    "keep_recent_ratio": ("float", 0.4, (("gt", 0), ("lt", 1))),
    "keep_first": ("int", 1, (("ge", 0),)),
    "workers": ("int", 16, (("ge", 1), ("le", 1024))),
    "worker_idle_timeout": ("float", 60.0, (("gt", 0), ("le", 86400.0))),
    "coalesce_ms": ("int", 200, (("ge", 0), ("le", 60000))),
    "checkin_interval": ("float", 5.0, (("gt", 0), ("le", 3600.0))),
    "shutdown_timeout": ("float", 30.0, (("ge", 0), ("le", 3600.0))),
    "max_consecutive_failures": ("int", 3, (("ge", 1),)),
    "failure_cooldown": ("float", 600.0, (("gt", 0), ("le", 604800.0))),
    "drain_seconds": ("float", 0.5, (("ge", 0), ("le", 60.0))),
    "rescan_interval": ("float", 300.0, (("gt", 0), ("le", 86400.0))),
    "max_line_bytes": ("int", 8388608, (("gt", 0),)),
    "stale_after": ("float", 300.0, (("gt", 0), ("le", 604800.0))),
    "index_archive": ("bool", True, ()),
    "log_format": ("literal:json|console", "json", ()),
    "log_level": ("log_level", "info", ()),
    "idle_compact_after": ("validated", 0.0, (("ge", 0), ("le", 604800.0))),
    "idle_compact_at": ("validated", 0.6, (("gt", 0), ("le", 1))),
    "metrics_listen": ("validated", "", ()),
    "metrics_allow_remote": ("validated", False, ()),
    "metrics_textfile": ("str", "", ()),
    "metrics_per_workspace": ("bool", False, ()),
    "summarizer.backend": ("literal:auto|anthropic|openai|extractive", "auto", ()),
    "summarizer.max_summary_tokens": ("int", 1024, (("gt", 0),)),
    "summarizer.max_input_tokens": ("int", 150000, (("gt", 0),)),
    "summarizer.min_retention": ("float", 0.8, (("ge", 0), ("le", 1))),
    "summarizer.max_cost_per_day_usd": ("float", 0.0, (("ge", 0), ("le", 1000000))),
    "summarizer.max_llm_tokens_per_day": ("int", 0, (("ge", 0),)),
    "anthropic.model": ("nonempty-str", "claude-haiku-4-5", ()),
    "anthropic.base_url": ("url", "", ()),
    "anthropic.timeout": ("float", 60.0, (("gt", 0), ("le", 3600.0))),
    "anthropic.max_retries": ("int", 4, (("ge", 0),)),
    "anthropic.max_concurrent_requests": ("int", 16, (("ge", 1), ("le", 1024))),
    "anthropic.default_headers": ("headers", {}, ()),
    "anthropic.api_key": ("api_key", None, ()),
    "openai.base_url": ("url", "", ()),
    "openai.model": ("str", "", ()),
    "openai.timeout": ("float", 120.0, (("gt", 0), ("le", 3600.0))),
    "openai.max_retries": ("int", 4, (("ge", 0),)),
    "openai.max_concurrent_requests": ("int", 4, (("ge", 1), ("le", 1024))),
    "openai.context_window": ("int", 0, (("ge", 0),)),
    "openai.default_headers": ("headers", {}, ()),
    "openai.api_key": ("api_key", None, ()),
    "rolling.message_count_threshold": ("int", 30, (("gt", 0),)),
    "rolling.messages_to_summarize": ("int", 20, (("gt", 0),)),
    "rolling.recent_messages_to_keep": ("int", 10, (("ge", 0),)),
    "rolling.token_threshold": ("int", 15000, (("gt", 0),)),
    "checkpoint.compact_at": ("float", 0.9, (("gt", 0), ("le", 1))),
    "masking.enabled": ("bool", True, ()),
    "masking.keep_recent": ("int", 3, (("ge", 0),)),
    "masking.target": ("float", 0.6, (("gt", 0), ("le", 1))),
    "masking.min_freed": ("float", 0.1, (("ge", 0), ("le", 1))),
    "masking.tool_inputs": ("bool", True, ()),
    "masking.tool_input_chars": ("int", 1000, (("gt", 0),)),
    "masking.media": ("bool", True, ()),
    "masking.exclude_tools": ("names", [], ()),
    "prices": ("table", {}, ()),
    "memory.threshold": ("int", 50, (("gt", 0),)),
    "memory.keep_bookmarks": ("int", 10, (("ge", 0),)),
    "memory.max_entry_bytes": ("int", 16384, (("ge", 256), ("le", 1048576))),
    "sources": ("list", [], ()),
}
