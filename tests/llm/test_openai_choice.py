"""Choosing the openai backend: ``auto``, the settings it needs, the package it needs, the
key it may have (never shown), and a foreground job through it with its receipt."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SettingsFactory, WorkspaceFactory
from fake_openai import FakeOpenAI, Reply
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import load_settings
from memoryd.errors import ConfigError
from memoryd.llm import limits
from memoryd.summary import backends as base
from memoryd.summary.backends import choose_backend

REPO = Path(__file__).resolve().parents[2]
OPENAI_KEY = "sk-openai-SECRET-4242"
ANTHROPIC_KEY = "sk-ant-SECRET-4343"


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


@pytest.fixture
def local_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(default=Reply.echo()) as server:
        yield server


@pytest.mark.parametrize(
    ("anthropic_key", "base_url", "chosen", "why"),
    [
        (True, True, "anthropic", "auto: an Anthropic API key is configured"),
        (True, False, "anthropic", "auto: an Anthropic API key is configured"),
        (False, True, "openai", "auto: no Anthropic API key, openai.base_url is set"),
        (False, False, "extractive", "auto: no Anthropic API key and no openai.base_url"),
    ],
)
def test_auto_prefers_anthropic_then_a_configured_openai_server_then_extractive(
    make_settings: SettingsFactory, anthropic_key: bool, base_url: bool, chosen: str, why: str
) -> None:
    server = {"openai__base_url": "http://127.0.0.1:8000/v1", "openai__model": "m"}
    settings = make_settings(**(server if base_url else {}))
    env = {"ANTHROPIC_API_KEY": ANTHROPIC_KEY} if anthropic_key else {}

    assert choose_backend(settings, env) == (chosen, why)


def test_an_openai_key_alone_does_not_select_the_openai_backend(
    make_settings: SettingsFactory,
) -> None:
    assert choose_backend(make_settings(), {"OPENAI_API_KEY": OPENAI_KEY})[0] == "extractive"


@pytest.mark.parametrize("missing", ["base_url", "model"])
def test_the_openai_backend_without_its_server_or_model_is_refused_in_one_line(
    env: dict[str, str], missing: str
) -> None:
    given = {"base_url": "http://127.0.0.1:8000/v1", "model": "qwen2.5:7b"}
    del given[missing]
    overrides = {"summarizer.backend": "openai", **{f"openai.{k}": v for k, v in given.items()}}

    with pytest.raises(ConfigError) as caught:
        load_settings(overrides=overrides, env=env)

    when = 'summarizer.backend is "openai"' if missing == "base_url" else "openai.base_url is set"
    assert str(caught.value) == (
        f"config: openai.{missing} = '' (default): openai.{missing} is required when {when}"
    )


def test_a_server_without_its_model_is_refused_under_auto_too(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"openai\.model is required when openai\.base_url"):
        load_settings(overrides={"openai.base_url": "http://127.0.0.1:11434/v1"}, env=env)


def test_choosing_openai_without_the_package_is_a_config_error(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "_installed", lambda package: False)
    settings = make_settings(openai__base_url="http://127.0.0.1:8000/v1", openai__model="m")

    with pytest.raises(ConfigError, match=r"pip install 'memoryd\[openai\]'"):
        choose_backend(settings, {})
    assert choose_backend(settings, {"ANTHROPIC_API_KEY": ANTHROPIC_KEY})[0] == "anthropic"


def _memoryd(
    args: list[str], env: dict[str, str], without_openai: bool = False
) -> subprocess.CompletedProcess[str]:
    """``memoryd ARGS`` in a fresh interpreter; ``without_openai`` hides the package."""
    hide = "sys.modules['openai'] = None; " if without_openai else ""
    code = f"import sys; {hide}from memoryd.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("command", ["summarize", "run"])
def test_selecting_openai_without_the_package_is_one_line_and_exit_2(
    workspace: WorkspaceFactory, env: dict[str, str], command: str
) -> None:
    ws = workspace(40, 2000)
    before = (ws / "conversation.jsonl").read_bytes()
    settings = {
        "MEMORYD_SUMMARIZER__BACKEND": "openai",
        "MEMORYD_OPENAI__BASE_URL": "http://127.0.0.1:9/v1",
        "MEMORYD_OPENAI__MODEL": "m",
        "MEMORYD_TOKEN_LIMIT": "5000",
    }
    args = (
        ["summarize", str(ws), "--force"]
        if command == "summarize"
        else ["run", "--root", str(ws.parent)]
    )

    done = _memoryd(args, {**env, **settings}, without_openai=True)

    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "memoryd: summarizer backend openai: the openai package is not installed "
        "(pip install 'memoryd[openai]')"
    ], done.stderr
    assert (ws / "conversation.jsonl").read_bytes() == before


def test_memoryd_config_masks_the_openai_key_and_names_its_source(env: dict[str, str]) -> None:
    overrides = {
        "OPENAI_API_KEY": OPENAI_KEY,
        "MEMORYD_OPENAI__DEFAULT_HEADERS": '{"Authorization": "Bearer x-SECRET"}',
    }

    shown = _memoryd(["config"], {**env, **overrides})
    as_json = _memoryd(["config", "--json"], {**env, **overrides})

    assert shown.returncode == 0 and as_json.returncode == 0, (shown, as_json)
    assert "SECRET" not in shown.stdout + shown.stderr + as_json.stdout + as_json.stderr
    [line] = [row for row in shown.stdout.splitlines() if row.startswith("openai.api_key")]
    assert '"set (masked)"' not in line and "set (masked)" in line
    assert line.endswith("# env OPENAI_API_KEY")
    assert json.loads(as_json.stdout)["settings"]["openai"]["api_key"] == "set (masked)"


def test_a_job_through_a_local_server_writes_a_receipt_with_its_model_tokens_and_no_cost(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, local_server: FakeOpenAI
) -> None:
    ws = workspace(40, 2000)
    settings = make_settings(
        token_limit=20_000,
        summarizer__backend="openai",
        openai__base_url=local_server.base_url,
        openai__model="local-model",
        openai__api_key=OPENAI_KEY,
    )

    result = run_job(JobRequest(ws, settings, force=True, env={"OPENAI_API_KEY": OPENAI_KEY}))

    assert result.outcome == "completed", result.reason
    assert result.backend == "openai"
    receipt = result.receipt
    assert receipt is not None
    assert (receipt.backend, receipt.model, receipt.cost_usd) == ("openai", "local-model", 0.0)
    assert receipt.llm.calls == len(local_server.requests) >= 1
    assert receipt.llm.input_tokens == sum(
        local_server.prompt_tokens(r.body) for r in local_server.requests
    )
    for name in ("receipts.jsonl", "events.jsonl", "state.json"):
        path = ws / ".memoryd" / name
        assert not path.exists() or OPENAI_KEY not in path.read_text()
    assert OPENAI_KEY not in (ws / "HEARTBEAT.md").read_text()
    assert all(r.headers["authorization"] == f"Bearer {OPENAI_KEY}" for r in local_server.requests)


def test_a_price_in_the_config_prices_a_local_model(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, local_server: FakeOpenAI
) -> None:
    ws = workspace(40, 2000)
    settings = make_settings(
        token_limit=20_000,
        summarizer__backend="openai",
        openai__base_url=local_server.base_url,
        openai__model="local-model",
        prices={"local-model": {"input": 1.0, "output": 2.0}},
    )

    receipt = run_job(JobRequest(ws, settings, force=True)).receipt

    assert receipt is not None and receipt.cost_usd is not None
    assert receipt.cost_usd == pytest.approx(
        (receipt.llm.input_tokens * 1.0 + receipt.llm.output_tokens * 2.0) / 1e6
    )


def test_a_reload_choosing_openai_without_the_package_keeps_the_running_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.daemon.supervisor import Supervisor

    config = tmp_path / "memoryd.toml"
    config.write_text(f'roots = ["{tmp_path}"]\n[summarizer]\nbackend = "extractive"\n')
    env = {"HOME": str(tmp_path), "MEMORYD_CONFIG": str(config)}
    supervisor = Supervisor(load_settings(env=env), env=env)
    monkeypatch.setattr(base, "_installed", lambda package: False)
    config.write_text(
        f'roots = ["{tmp_path}"]\n[summarizer]\nbackend = "openai"\n'
        '[openai]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n'
    )

    try:
        with capture_logs() as logs:
            supervisor.reload(0.0)
    finally:
        supervisor.close()

    assert supervisor.settings.summarizer.backend == "extractive"
    [refused] = [e for e in logs if e["event"] == "config_reload_refused"]
    assert "the openai package is not installed" in refused["error"]


def test_the_daily_token_cap_sends_openai_jobs_to_the_extractive_backend(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """A local model costs nothing, but its tokens count against max_llm_tokens_per_day."""
    from memoryd.daemon.telemetry import Telemetry
    from memoryd.tokens import LLMUsage

    settings = make_settings(
        openai__base_url="http://127.0.0.1:8000/v1",
        openai__model="m",
        summarizer__max_llm_tokens_per_day=1000,
    )
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    telemetry = Telemetry(settings, env, [tmp_path])
    now = time.time()
    assert telemetry.backend_for(settings, now) == (settings, None)

    telemetry.cap.record(LLMUsage(3, 900, 200), 0.0, now)
    capped, downgrade = telemetry.backend_for(settings, now)

    assert downgrade is not None and "token" in downgrade.reason
    assert capped.summarizer.backend == "extractive"
