"""The OpenAI-compatible backend: a job's wall time against the Anthropic path, and the
requests a large input takes on a server whose context nobody configured.

1. The same foreground job (``run_job``, what ``memoryd summarize`` runs) on copies of one
   workspace, alternately through the fake OpenAI-compatible server and the fake Messages
   API, both subprocesses answering after the same fixed ``--latency``. Target: the two
   medians within 1.1x of each other (the yardstick is the Anthropic path of the same run).
2. A 100k-token input summarized against a llama.cpp-like fake at ``n_ctx`` 4k, 8k, 32k
   and 128k, first with ``context_window`` unset (the backend learns the context from the
   first overflow), then with it set (what the chunks need). Targets: unset takes no more
   requests than set plus one learning request, no request after the learning one is
   refused, and the chunk requests (those carrying a transcript) number within 1.2x of
   ceil(input / room) plus the learning one, room being the context less the measured
   instructions and the answer's 1,024 tokens.

    python bench/local_models.py [--latency 0.2] [--runs 7] [--contexts-only]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _common as common
from fake_openai import FakeOpenAI, Reply

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import load_settings
from memoryd.llm import limits
from memoryd.llm.openai_compat import OpenAICompatBackend
from memoryd.summary.backends import Summarizer
from memoryd.summary.chunking import instruction_tokens, summarize_messages
from memoryd.tokens import estimate_message_tokens

CONTEXTS = (4_096, 8_192, 32_768, 131_072)
INPUT_TOKENS = 100_000
MODEL = "local-model"


def job_seconds(folder: Path, template: bytes, overrides: dict[str, Any]) -> tuple[float, int]:
    """Wall time of one forced job on a fresh copy of the workspace, and its LLM calls."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "conversation.jsonl").write_bytes(template)
    env = {"XDG_CONFIG_HOME": str(folder.parent / "xdg")}
    settings = load_settings(overrides=overrides, env=env).settings
    started = time.perf_counter()
    result = run_job(JobRequest(folder, settings, force=True, env={}))
    elapsed = time.perf_counter() - started
    if result.outcome != "completed":
        raise RuntimeError(f"job {result.outcome}: {result.reason}")
    return elapsed, result.llm_calls


def wall_times(work: Path, latency: float, runs: int) -> dict[str, Any]:
    template = b"".join(common.message_line(i, 2000) for i in range(60))
    common_settings = {"token_limit": 30_000, "drain_seconds": 0, "index_archive": False}
    figures: dict[str, list[float]] = {"openai": [], "anthropic": []}
    calls: dict[str, int] = {}
    with (
        common.fake_openai(latency, ["--echo", "--model", MODEL]) as openai_url,
        common.fake_anthropic(latency) as anthropic_url,
    ):
        backends = {
            "openai": {
                "summarizer.backend": "openai",
                "openai.base_url": openai_url,
                "openai.model": MODEL,
            },
            "anthropic": {
                "summarizer.backend": "anthropic",
                "anthropic.base_url": anthropic_url,
                "anthropic.api_key": "sk-ant-bench",
            },
        }
        for backend, overrides in backends.items():  # one warm-up each: imports, TLS
            job_seconds(work / backend, template, {**common_settings, **overrides})
        for _ in range(runs):
            for backend, overrides in backends.items():
                seconds, made = job_seconds(
                    work / backend, template, {**common_settings, **overrides}
                )
                figures[backend].append(seconds)
                calls[backend] = made
    medians = {name: common.median(values) for name, values in figures.items()}
    return {
        "latency_s": latency,
        "runs": runs,
        "seconds": figures,
        "median_s": medians,
        "llm_calls": calls,
        "ratio": medians["openai"] / medians["anthropic"],
    }


def requests_for(n_ctx: int, configured: bool, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Summarize ``messages`` against a fake with ``n_ctx``; the requests it took."""
    limits.forget()  # nothing learned carries over between rows
    with FakeOpenAI(flavour="llamacpp", n_ctx=n_ctx, model=MODEL, default=Reply.echo()) as server:
        backend = OpenAICompatBackend(
            api_key=None,
            base_url=server.base_url,
            model=MODEL,
            timeout=30,
            max_retries=0,
            default_headers={},
            deadline=60,
            context_window=n_ctx if configured else 0,
        )
        with contextlib.closing(backend):
            summary = summarize_messages(
                Summarizer(backend), messages, None, 1024, 150_000, "narrative"
            )
        requests = server.requests
    refused = [r for r in requests if server.prompt_tokens(r.body) > n_ctx]
    chunks = [r for r in requests if "<transcript>" in r.body["messages"][-1]["content"]]
    return {
        "requests": len(requests),
        "chunk_requests": len(chunks),
        "refused": len(refused),
        "calls": summary.calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per fake answer")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--contexts-only", action="store_true", help="only part 2")
    args = parser.parse_args(argv)
    common.install_exit_handlers()

    within = True
    wall: dict[str, Any] = {}
    if not args.contexts_only:
        within, wall = wall_part(args.latency, args.runs)
    met = contexts_part(wall)
    return 0 if within and met else 1


def wall_part(latency: float, runs: int) -> tuple[bool, dict[str, Any]]:
    with common.scratch("local-models") as work:
        wall = wall_times(work, latency, runs)
    print(f"1. a job's wall time, fake servers answering after {latency} s")
    print(
        common.table(
            ["backend", "median s", "LLM calls"],
            [
                (name, wall["median_s"][name], wall["llm_calls"][name])
                for name in ("anthropic", "openai")
            ],
        )
    )
    within = 1 / 1.1 <= wall["ratio"] <= 1.1
    verdict = "met" if within else "NOT met"
    print(f"openai / anthropic: {wall['ratio']:.3f} (target within 1.1x: {verdict})\n")
    return within, wall


def contexts_part(wall: dict[str, Any]) -> bool:
    messages = [
        {"role": ("user", "assistant")[i % 2], "content": common.SENTENCE * 8} for i in range(200)
    ]
    tokens = sum(estimate_message_tokens(m) for m in messages)
    rows = []
    contexts: dict[str, Any] = {}
    for n_ctx in CONTEXTS:
        learned = requests_for(n_ctx, False, messages)
        known = requests_for(n_ctx, True, messages)
        needed = math.ceil(tokens / (n_ctx - instruction_tokens("narrative", 1024) - 1024))
        met = (
            learned["requests"] <= known["requests"] + 1
            and learned["refused"] <= 1
            and learned["chunk_requests"] <= 1.2 * needed + 1
        )
        contexts[str(n_ctx)] = {
            "unset": learned,
            "configured": known,
            "needed": needed,
            "met": met,
        }
        rows.append(
            (
                n_ctx,
                needed,
                learned["chunk_requests"],
                learned["requests"],
                learned["refused"],
                known["requests"],
                met,
            )
        )
    print(f"2. requests for a {tokens:,}-token input (estimated), llama.cpp-like server")
    print(
        common.table(
            [
                "n_ctx",
                "ceil(input/room)",
                "chunk requests (learned)",
                "all requests (learned)",
                "refused",
                "all requests (configured)",
                "met",
            ],
            rows,
        )
    )
    path = common.save("local_models", {"wall": wall, "input_tokens": tokens, "contexts": contexts})
    print(f"\nraw figures: {path}")
    return all(c["met"] for c in contexts.values())


if __name__ == "__main__":
    sys.exit(main())
