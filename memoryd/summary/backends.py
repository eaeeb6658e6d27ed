"""One interface over the backends, and the ``auto`` choice (chunking of oversized input
is in :mod:`~memoryd.summary.chunking`)."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.config.settings import Settings
from memoryd.errors import ConfigError
from memoryd.summary import prompts
from memoryd.summary.checkpoint import as_items, as_lists
from memoryd.summary.checkpoint_prompt import (
    build_compaction_prompt,
    checkpoint_repair_prompt,
    parse_compaction_result,
)
from memoryd.summary.extractive import extractive_summary
from memoryd.summary.extractive_checkpoint import extractive_checkpoint
from memoryd.summary.items import HeadItem
from memoryd.tokens import LLMUsage, estimate_text_tokens

if TYPE_CHECKING:
    from memoryd.llm.completion import Completion, CompletionBackend

log = structlog.get_logger()

OFFLINE = "extractive"
"""The name of the backend without an LLM."""
CHECKPOINT_MAX_TOKENS = 4_096
"""Answer budget of a checkpoint: five lists of short items, as JSON."""


@dataclass(frozen=True, slots=True)
class Summary:
    """A summary text and what producing it cost."""

    text: str
    backend: str
    calls: int = 1
    input_tokens: int | None = None
    estimated_input_tokens: int = 0


PROMPTS: dict[str, Callable[[str, str | None, int], tuple[str, str]]] = {
    "narrative": prompts.narrative_prompt,
    "rolling": prompts.rolling_prompt,
}


class Summarizer:
    """A backend: summarizes messages, merges summaries of consecutive chunks, folds
    messages into a checkpoint's lists, and repairs its last answer.

    With a :class:`CompletionBackend` (anthropic, openai) every request is built from the
    prompts of :mod:`memoryd.summary.prompts`, so every backend gets the same requests;
    without one it is the offline backend (:mod:`memoryd.summary.extractive`), which makes
    no request and cannot be asked to repair. ``usage`` adds up what every call so far
    asked of the LLM; ``model`` is the model that answered (None without one). ``final``
    marks the call whose answer becomes the summary: the one a repair may follow, so the
    one worth caching.
    """

    def __init__(self, backend: CompletionBackend | None = None, cache: bool = True) -> None:
        self.backend = backend
        self.name = backend.name if backend is not None else OFFLINE
        self.cache = cache
        self.usage = LLMUsage()
        self.model: str | None = backend.model if backend is not None else None
        self._last: tuple[str, list[str]] | None = None
        self._last_checkpoint: tuple[str, str] | None = None

    def summarize(
        self,
        messages: Sequence[Mapping[str, Any]],
        previous: str | None,
        budget: int,
        style: str,
        final: bool = True,
    ) -> Summary:
        if self.backend is None:
            return Summary(extractive_summary(messages, previous, budget, style), self.name)
        transcript = prompts.render_transcript(messages, prompts.TOOL_OUTPUT_CHARS, ids=True)
        system, _user = PROMPTS[style](transcript, previous, budget)
        parts = prompts.user_prompt_parts(transcript, previous, prompts.TASKS[style])
        return self._complete(system, parts, budget, final)

    def merge(
        self,
        parts: Sequence[str],
        previous: str | None,
        budget: int,
        style: str,
        final: bool = True,
    ) -> Summary:
        if self.backend is None:
            joined = "\n".join(parts)
            text = f"{previous}\n{joined}" if previous else joined
            return Summary(extractive_summary([], text, budget, style), self.name)
        system, user = prompts.merge_prompt(parts, previous, budget, style)
        return self._complete(system, [user], budget, final)

    def repair(self, summary: str, missing: Sequence[str], budget: int) -> Summary | None:
        """One more request: the last final prompt, the summary it got, and what it lost;
        None when there is no LLM to ask (the reconcile step keeps what is missing).

        The repeated prompt is read from the prompt cache when it was marked for it.
        """
        if self.backend is None or self._last is None:
            return None
        system, parts = self._last
        completion = self.backend.complete(
            system,
            parts,
            budget,
            follow_up=(summary, prompts.repair_prompt(missing, budget)),
            cache=self.cache,
        )
        self._count(completion)
        return Summary(completion.text, self.name)

    def checkpoint(
        self,
        previous: Sequence[HeadItem] | None,
        messages: Sequence[Mapping[str, Any]],
        budget: int,
    ) -> list[HeadItem]:
        """``messages`` folded into the ``previous`` checkpoint's items (None: the first
        checkpoint); ``budget`` is the room of the lists, in tokens of the checkpoint's
        text (the LLM is asked for short lists instead). An LLM answers the five lists as
        JSON; they come back as items."""
        if self.backend is None:
            return extractive_checkpoint(previous or (), messages, budget)
        lists = as_lists(previous) if previous is not None else None
        system, user = build_compaction_prompt(lists, messages)
        completion = self.backend.complete(system, user, CHECKPOINT_MAX_TOKENS)
        self._count(completion)
        self._last_checkpoint = (system, user)
        return as_items(parse_compaction_result(completion.text))

    def repair_checkpoint(
        self, items: Sequence[HeadItem], missing: Sequence[str]
    ) -> list[HeadItem] | None:
        """One more request: the last checkpoint prompt, its lists, and what they lost;
        None when there is no LLM to ask (the lost details are kept beside the lists)."""
        if self.backend is None or self._last_checkpoint is None:
            return None
        system, user = self._last_checkpoint
        answer = json.dumps(as_lists(items).model_dump(), ensure_ascii=False)
        completion = self.backend.complete(
            system,
            user,
            CHECKPOINT_MAX_TOKENS,
            follow_up=(answer, checkpoint_repair_prompt(missing)),
        )
        self._count(completion)
        return as_items(parse_compaction_result(completion.text))

    def input_room(self, max_input_tokens: int, answer_tokens: int) -> int:
        """Estimated tokens one request may hold for an answer of ``answer_tokens``: at
        most ``max_input_tokens``, less when the server's context is smaller."""
        if self.backend is None:
            return max_input_tokens
        return self.backend.input_room(max_input_tokens, answer_tokens)

    @property
    def requests(self) -> int:
        """Requests sent to the LLM so far, the failed ones too (0 without one)."""
        return self.backend.requests if self.backend is not None else 0

    def context_note(self) -> str | None:
        """The server's context as learned and why, when one was (for the job's result)."""
        return self.backend.context_note() if self.backend is not None else None

    def close(self) -> None:
        """Close the SDK client, so that no keep-alive socket outlives the job."""
        if self.backend is not None:
            self.backend.close()

    def _complete(self, system: str, parts: list[str], budget: int, final: bool) -> Summary:
        assert self.backend is not None  # the offline backend makes no request
        cache = self.cache and final
        completion = self.backend.complete(system, parts, budget, cache=cache)
        self._count(completion)
        if final:
            self._last = (system, parts)
        # Calibration compares like with like: every input token the request was billed
        # for, cached or not, against the estimate of the whole prompt.
        billed = completion.input_tokens
        if billed is not None:
            billed += completion.cache_read_tokens + completion.cache_creation_tokens
        return Summary(
            completion.text,
            self.name,
            input_tokens=billed,
            estimated_input_tokens=estimate_text_tokens(system)
            + sum(estimate_text_tokens(part) for part in parts),
        )

    def _count(self, completion: Completion) -> None:
        self.usage = self.usage + LLMUsage(
            1,
            completion.input_tokens or 0,
            completion.output_tokens or 0,
            completion.cache_read_tokens,
            completion.cache_creation_tokens,
        )
        self.model = completion.model


def choose_backend(settings: Settings, env: Mapping[str, str]) -> tuple[str, str]:
    """The backend to use and why: ``auto`` is anthropic when a key is configured, else
    openai when ``openai.base_url`` is set, else extractive. Raises ConfigError when the
    openai backend is chosen and its package is not installed."""
    wanted = settings.summarizer.backend
    if wanted == "auto":
        if settings.anthropic.effective_api_key(env):
            wanted, why = "anthropic", "auto: an Anthropic API key is configured"
        elif settings.openai.base_url:
            wanted, why = "openai", "auto: no Anthropic API key, openai.base_url is set"
        else:
            return "extractive", "auto: no Anthropic API key and no openai.base_url"
    else:
        why = "configured"
    if wanted == "openai" and not _installed("openai"):
        raise ConfigError(
            "summarizer backend openai: the openai package is not installed "
            "(pip install 'memoryd[openai]')"
        )
    return wanted, why


def request_timeout(settings: Settings, env: Mapping[str, str]) -> float:
    """The configured timeout of one request to the backend ``settings`` choose."""
    if choose_backend(settings, env)[0] == "openai":
        return settings.openai.timeout
    return settings.anthropic.timeout


@functools.cache
def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def make_summarizer(settings: Settings, env: Mapping[str, str], deadline: float) -> Summarizer:
    """Build the configured backend in this process (the SDK client is created lazily)."""
    name, why = choose_backend(settings, env)
    log.debug("summarizer_backend", backend=name, reason=why)
    if name == OFFLINE:
        return Summarizer()
    cache = settings.summarizer.min_retention > 0
    # The SDKs are imported only by a job that uses them (docs/design.md#processes).
    if name == "openai":
        from memoryd.llm.openai_compat import OpenAICompatBackend

        openai = settings.openai
        return Summarizer(
            cache=cache,
            backend=OpenAICompatBackend(
                api_key=openai.effective_api_key(env),
                base_url=openai.base_url,
                model=openai.model,
                timeout=openai.timeout,
                max_retries=openai.max_retries,
                default_headers=openai.default_headers,
                deadline=deadline,
                context_window=openai.context_window,
            ),
        )
    from memoryd.llm.anthropic import AnthropicBackend

    config = settings.anthropic
    return Summarizer(
        cache=cache,
        backend=AnthropicBackend(
            api_key=config.effective_api_key(env) or "",
            base_url=config.effective_base_url(env),
            model=config.model,
            timeout=config.timeout,
            max_retries=config.max_retries,
            default_headers=config.default_headers,
            deadline=deadline,
        ),
    )
