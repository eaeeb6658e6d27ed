"""The SDK clients of one process share one TLS context (building one loads the CA bundle,
half a job's CPU), and requests through it still work."""

from __future__ import annotations

from fake_anthropic import FakeAnthropic

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
