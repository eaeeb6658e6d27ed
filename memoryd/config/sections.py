"""The sections of the configuration: ``[summarizer]``, ``[anthropic]``, ``[openai]``,
``[rolling]``, ``[checkpoint]``, ``[masking]``, ``[memory]``, and the rules every model of
it follows.

``Settings`` (:mod:`memoryd.config.settings`) holds one of each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from memoryd.config.sources import header_problem
from memoryd.defaults import (
    DEFAULT_KEEP_BOOKMARKS,
    DEFAULT_MAX_ENTRY_BYTES,
    DEFAULT_MEMORY_THRESHOLD,
)

ANTHROPIC_API_KEY_ENV = "ANTHROPIC_API_KEY"
ANTHROPIC_BASE_URL_ENV = "ANTHROPIC_BASE_URL"
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"

# NaN and infinity are refused everywhere: a NaN passes no bound check it should fail and
# an infinite duration overflows the clocks and waits it reaches (docs/design.md#configuration).
_NESTED = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
MINUTE = 60.0
HOUR = 3600.0
DAY = 86_400.0
WEEK = 7 * DAY


class SummarizerSettings(BaseModel):
    """``[summarizer]``: which backend writes summaries, and their budgets."""

    model_config = _NESTED

    backend: Literal["auto", "anthropic", "openai", "extractive"] = "auto"
    max_summary_tokens: int = Field(default=1024, gt=0)
    max_input_tokens: int = Field(default=150_000, gt=0)
    min_retention: float = Field(default=0.8, ge=0, le=1)
    """Below this share of kept details a summary is repaired (docs/design.md#retention)."""
    # Daily (UTC) caps on LLM spend, per daemon; 0 is off (docs/design.md#spend-cap).
    max_cost_per_day_usd: float = Field(default=0.0, ge=0, le=1_000_000)
    max_llm_tokens_per_day: int = Field(default=0, ge=0)


def _with_scheme(cls: type, url: str) -> str:
    """A server's URL names its scheme: ``127.0.0.1:8000/v1`` would fail only at the first
    request, after every retry, as an unsupported protocol."""
    if url and not re.match(r"https?://[^/\s]", url, re.IGNORECASE):
        raise ValueError("must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)")
    return url


def _sendable(cls: type, headers: dict[str, str]) -> dict[str, str]:
    """Header values that HTTP can carry: no CR/LF, ASCII only; names that are tokens."""
    problem = header_problem(headers)
    if problem:
        raise ValueError(problem)
    return headers


class _LLMServer(BaseModel):
    """What both LLM sections share beyond their fields (each declares its own, in its own
    order): the checks of the URL, headers and key, and the key's fallback to ``key_env``."""

    key_env: ClassVar[str]
    if TYPE_CHECKING:
        api_key: SecretStr | None

    _headers_can_be_sent = field_validator("default_headers", check_fields=False)(_sendable)
    _url_has_a_scheme = field_validator("base_url", check_fields=False)(_with_scheme)

    @field_validator("api_key", check_fields=False)
    @classmethod
    def _empty_key_is_unset(cls, api_key: SecretStr | None) -> SecretStr | None:
        return api_key if api_key is not None and api_key.get_secret_value() else None

    def effective_api_key(self, env: Mapping[str, str]) -> str | None:
        """The key to use: ``api_key`` if set, else the variable ``key_env``, else None."""
        if self.api_key is not None:
            return self.api_key.get_secret_value()
        return env.get(self.key_env) or None


class AnthropicSettings(_LLMServer):
    """``[anthropic]``: the Messages API client; the key and URL fall back to the SDK's env."""

    model_config = _NESTED
    key_env = ANTHROPIC_API_KEY_ENV

    model: str = Field(default="claude-haiku-4-5", min_length=1)
    base_url: str = ""
    timeout: float = Field(default=60.0, gt=0, le=HOUR)
    max_retries: int = Field(default=4, ge=0)
    max_concurrent_requests: int = Field(default=16, ge=1, le=1024)
    """Summarization requests in flight at once, daemon-wide (docs/design.md#pool)."""
    # Header values may hold credentials: kept out of repr() and so out of logs.
    default_headers: dict[str, str] = Field(default_factory=dict, repr=False)
    api_key: SecretStr | None = None

    def effective_base_url(self, env: Mapping[str, str]) -> str | None:
        """The URL to use: ``base_url`` if set, else ``$ANTHROPIC_BASE_URL``, else None."""
        return self.base_url or env.get(ANTHROPIC_BASE_URL_ENV) or None


class OpenAISettings(_LLMServer):
    """``[openai]``: an OpenAI-compatible chat-completions server (vLLM, llama.cpp, Ollama,
    LM Studio); ``base_url`` and ``model`` are required when it is the backend, the key
    falls back to ``$OPENAI_API_KEY`` and is optional (docs/design.md#openai-compatible)."""

    model_config = _NESTED
    key_env = OPENAI_API_KEY_ENV

    base_url: str = ""
    model: str = ""
    # Local models are slow: a request waits longer than on the Anthropic API.
    timeout: float = Field(default=120.0, gt=0, le=HOUR)
    max_retries: int = Field(default=4, ge=0)
    max_concurrent_requests: int = Field(default=4, ge=1, le=1024)
    """Summarization requests in flight at once, daemon-wide: a local server runs few."""
    context_window: int = Field(default=0, ge=0)
    """The server's context in tokens (prompt and answer) when known; 0: unknown."""
    default_headers: dict[str, str] = Field(default_factory=dict, repr=False)
    api_key: SecretStr | None = None


class RollingSettings(BaseModel):
    """``[rolling]``: the rolling strategy's trigger and window."""

    model_config = _NESTED

    message_count_threshold: int = Field(default=30, gt=0)
    messages_to_summarize: int = Field(default=20, gt=0)
    recent_messages_to_keep: int = Field(default=10, ge=0)
    token_threshold: int = Field(default=15_000, gt=0)


class CheckpointSettings(BaseModel):
    """``[checkpoint]``: when the checkpoint strategy compacts."""

    model_config = _NESTED

    compact_at: float = Field(default=0.90, gt=0, le=1)


class MaskingSettings(BaseModel):
    """``[masking]``: old tool outputs become placeholders before a usage-triggered job
    summarizes (docs/design.md#masking)."""

    model_config = _NESTED

    enabled: bool = True
    keep_recent: int = Field(default=3, ge=0)
    """The newest tool results are never masked."""
    target: float = Field(default=0.6, gt=0, le=1)
    """Usage share at or below which masking alone ends the job (no LLM call)."""
    min_freed: float = Field(default=0.1, ge=0, le=1)
    """Share of the budget masking must free, or it is skipped (each edit busts the
    agent's prompt cache): the analogue of the API's ``clear_at_least``."""
    tool_inputs: bool = True
    """Old calls' large input fields become placeholders too."""
    tool_input_chars: int = Field(default=1000, gt=0)
    """A string field of an old call's input longer than this (characters) is masked."""
    media: bool = True
    """Images and documents of old user turns become placeholders too."""
    exclude_tools: list[str] = Field(default_factory=list)
    """Tools whose calls and results are never masked (a memory or to-do tool)."""


class MemorySettings(BaseModel):
    """``[memory]``: when memory stores are compacted, how many bookmarks stay and the
    longest entry taken."""

    model_config = _NESTED

    threshold: int = Field(default=DEFAULT_MEMORY_THRESHOLD, gt=0)
    keep_bookmarks: int = Field(default=DEFAULT_KEEP_BOOKMARKS, ge=0)
    max_entry_bytes: int = Field(default=DEFAULT_MAX_ENTRY_BYTES, ge=256, le=1024 * 1024)


class SourceEntry(BaseModel):
    """``[[sources]]``: another agent's sessions the daemon keeps indexed for recall
    (``kind``: ``claude-code``, ``codex`` or ``gemini``; ``path``: its folder, e.g.
    ``~/.claude``), read-only (docs/guides/sources.md)."""

    model_config = _NESTED

    kind: Literal["claude-code", "codex", "gemini"]
    path: Path

    @field_validator("path")
    @classmethod
    def _expand_path(cls, path: Path) -> Path:
        return path.expanduser()
