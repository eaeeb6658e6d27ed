"""A server whose shared cache ran full is sent one request at a time for a while, by
every memoryd process (docs/design.md#openai-compatible)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Reply

from memoryd.llm import crowding, limits
from memoryd.llm.openai_compat import OpenAICompatBackend

ANSWER_S = 1.0
"""How long the fake takes before each answer."""


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


def _backend(base_url: str) -> OpenAICompatBackend:
    return OpenAICompatBackend(
        api_key=None,
        base_url=base_url,
        model="local-model",
        timeout=30.0,
        max_retries=2,
        default_headers={},
        deadline=60.0,
        context_window=4096,
        backoff_base=0.01,
    )


def test_after_a_full_shared_cache_the_server_gets_one_request_at_a_time() -> None:
    """llama-server's "Context size has been exceeded." stream event: the request is
    retried (nothing learned), and then three requests at once reach the server one after
    the other, each after the one before has been answered."""
    with FakeOpenAI(default=Reply.ok("- a summary", delay=ANSWER_S)) as server:
        server.push(Reply.cache_full())
        first = _backend(server.base_url)
        assert first.complete("system", "user", 64).text == "- a summary"
        first.close()
        assert crowding.crowded(server.base_url)
        assert limits.learned_limits() == {}

        start = threading.Barrier(3)
        answers: list[str] = []

        def one() -> None:
            backend = _backend(server.base_url)
            start.wait()
            answers.append(backend.complete("system", "user", 64).text)
            backend.close()

        threads = [threading.Thread(target=one) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        received = sorted(r.received_at for r in server.requests[2:])
    assert answers == ["- a summary"] * 3
    assert len(received) == 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(received)]
    assert all(gap >= ANSWER_S * 0.9 for gap in gaps), gaps


def test_a_server_is_crowded_for_a_while_then_not(tmp_path: Path) -> None:
    key = "http://127.0.0.1:8080/v1"
    assert not crowding.crowded(key)
    crowding.mark_crowded(key, now=1_000.0)
    assert crowding.crowded(key, now=1_000.0 + crowding.CROWDED_S - 1)
    assert not crowding.crowded(key, now=1_000.0 + crowding.CROWDED_S + 1)
    assert not crowding.crowded("http://127.0.0.1:9090/v1", now=1_000.0)
    [marker] = crowding.servers_dir().iterdir()
    assert "127.0.0.1" not in marker.name
