"""The SDK clients of one process share one TLS context (building one loads the CA bundle,
half a job's CPU), and requests through it still work."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fake_anthropic import FakeAnthropic

from memoryd.daemon.processes import PRELOAD, preload
from memoryd.llm.anthropic import AnthropicBackend


def backend(fake_anthropic: FakeAnthropic) -> AnthropicBackend:
    return AnthropicBackend(
        api_key="sk-ant-test-tls",
        base_url=fake_anthropic.base_url,
        model="claude-haiku-4-5",
        timeout=5.0,
        max_retries=0,
        default_headers={},
        deadline=20.0,
    )


def test_two_jobs_clients_share_one_tls_context_and_both_answer(
    fake_anthropic: FakeAnthropic,
) -> None:
    first, second = backend(fake_anthropic), backend(fake_anthropic)
    with first, second:
        assert first.complete("system", "hello", max_tokens=64).text
        assert second.complete("system", "hello", max_tokens=64).text
        clients = [b._sdk_client() for b in (first, second)]
        contexts = [
            client._client._transport._pool._ssl_context  # type: ignore[attr-defined]
            for client in clients
        ]
    assert clients[0] is not clients[1]
    assert contexts[0] is contexts[1]


WORKER = """
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from memoryd.daemon.processes import PRELOAD, preload


def inherited() -> bool:
    from memoryd.llm import tls

    return tls.tls_built()


if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload(True, "{backend}"))
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        print(pool.submit(inherited).result())
"""


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_worker_forked_from_the_forkserver_inherits_the_tls_context_it_built(
    tmp_path: Path, backend: str
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(backend=backend))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"


def test_the_offline_backend_preloads_no_sdk_and_no_tls_context() -> None:
    assert preload(False, "anthropic") == [*PRELOAD]
