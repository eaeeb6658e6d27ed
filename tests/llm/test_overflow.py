"""Reading a context overflow out of each server's error (pure), and the context believed
after it."""

from __future__ import annotations

from typing import Any

import pytest

from memoryd.llm.overflow import Overflow, find_overflow, limit_after_overflow

VLLM = (
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(3976 in the messages, 1024 in the completion). Please reduce the length of the messages "
    "or completion."
)


@pytest.mark.parametrize(
    ("body", "text", "expected"),
    [
        (  # vLLM, older releases: the body itself (the SDK keeps it whole)
            {"object": "error", "message": VLLM, "type": "BadRequestError", "code": 400},
            "",
            Overflow(4096, None),
        ),
        (  # vLLM, newer: the SDK hands over the inner "error" table
            {"message": VLLM, "type": "BadRequestError", "param": None, "code": 400},
            "",
            Overflow(4096, None),
        ),
        (
            {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9000,
                "n_ctx": 8192,
            },
            "",
            Overflow(8192, 9000),
        ),
        (  # llama.cpp's words in other front ends
            {"message": "request (70494 tokens) exceeds the available context size (67584 tokens)"},
            "",
            Overflow(67584, 70494),
        ),
        (  # LM Studio in a stream: the error table of the event
            {
                "message": "Trying to keep the first 6547 tokens when context the overflows. "
                "However, the model is loaded with context length of only 4096 tokens, which "
                "is not enough."
            },
            "",
            Overflow(4096, None),
        ),
        (  # LM Studio as a bare string
            "The number of tokens to keep from the initial prompt is greater than the context "
            "length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context",
            "",
            Overflow(4096, None),
        ),
        ({"code": "context_length_exceeded", "message": "too long"}, "", Overflow(None, None)),
        ({"message": "Input is too long: context length exceeded"}, "", Overflow(None, None)),
        (None, "Error code: 400 - maximum context length is 2048 tokens", Overflow(2048, None)),
    ],
    ids=[
        "vllm-old",
        "vllm",
        "llamacpp",
        "llamacpp-text",
        "lmstudio",
        "lmstudio-string",
        "openai",
        "generic",
        "text-only",
    ],
)
def test_each_servers_overflow_is_recognised_with_what_it_says(
    body: Any, text: str, expected: Overflow
) -> None:
    assert find_overflow(body, text) == expected


@pytest.mark.parametrize(
    "body",
    [
        {"message": "Loading model", "type": "unavailable_error", "code": 503},
        {"message": "The model `x` does not exist.", "type": "NotFoundError", "code": 404},
        {"message": "max_tokens must be at least 1", "type": "BadRequestError"},
        "Unauthorized",
        None,
    ],
)
def test_other_errors_are_not_overflows(body: Any) -> None:
    assert find_overflow(body) is None


def test_the_context_believed_is_the_servers_scaled_to_how_it_counts_else_half() -> None:
    # The server's context, when the refused request was larger than it.
    assert limit_after_overflow(Overflow(4096), 6000, 1024) == 4096
    # The server counted 9000 where memoryd estimated 6000: 8192 of its tokens are ~5461 of ours.
    assert limit_after_overflow(Overflow(8192, 9000), 6000, 1024) == 5461
    # Refused although it fit by the estimate, without the server's count: 80% of what was sent.
    assert limit_after_overflow(Overflow(8192), 6000, 1024) == int(7024 * 0.8)
    # No number at all: half of what was sent.
    assert limit_after_overflow(Overflow(), 6000, 1024) == 3512


@pytest.mark.parametrize("overflow", [Overflow(), Overflow(10**9), Overflow(10**9, 1), Overflow(1)])
def test_the_context_believed_is_always_below_what_was_sent(overflow: Overflow) -> None:
    """So each overflow makes the next request smaller, and learning ends."""
    for sent_prompt in (100, 10_000):
        assert 1 <= limit_after_overflow(overflow, sent_prompt, 24) < sent_prompt + 24
