"""Configuration that makes no sense is refused at load time with one line: unbounded or
non-finite durations, levels out of order, a string or a boolean where a number belongs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from memoryd.config.settings import Settings, load_settings, settings_for_workspace
from memoryd.errors import ConfigError


def refusal_from_file(tmp_path: Path, env: dict[str, str], text: str) -> str:
    path = tmp_path / "memoryd.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env=env)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def float_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += float_fields(annotation, f"{prefix}{name}.")
        elif annotation is float:
            found.append((prefix + name, info))
    return found


def upper_bound(info: Any) -> float:
    for rule in info.metadata:
        for attribute in ("le", "lt"):
            value = getattr(rule, attribute, None)
            if value is not None:
                return float(value)
    return math.inf


def test_every_number_of_seconds_or_ratio_has_a_finite_upper_bound() -> None:
    """A duration without a bound (inf, 1e300) overflowed a wait or never ended a drain."""
    fields = float_fields(Settings)
    assert {"checkin_interval", "drain_seconds", "anthropic.timeout"} <= {k for k, _ in fields}
    unbounded = [key for key, info in fields if not math.isfinite(upper_bound(info))]
    assert unbounded == []


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("checkin_interval = inf", "checkin_interval"),
        ("drain_seconds = inf", "drain_seconds"),
        ("drain_seconds = 1e300", "drain_seconds"),
        ("failure_cooldown = 1e300", "failure_cooldown"),
        ("rescan_interval = nan", "rescan_interval"),
        ("coalesce_ms = 100000000", "coalesce_ms"),
        ("[anthropic]\ntimeout = inf", "anthropic.timeout"),
    ],
)
def test_a_duration_beyond_its_bound_is_refused_at_load(
    tmp_path: Path, env: dict[str, str], text: str, key: str
) -> None:
    assert refusal_from_file(tmp_path, env, text + "\n").startswith(f"config: {key} = ")


def test_infinity_from_the_environment_is_refused(env: dict[str, str]) -> None:
    env["MEMORYD_CHECKIN_INTERVAL"] = "inf"
    with pytest.raises(ConfigError, match=r"checkin_interval = 'inf' \(from env"):
        load_settings(env=env)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "warning_at = 0.82",
            "warning_at = 0.82 (in file {path}) and summarize_at = 0.8 (default): "
            "warning_at must not be above summarize_at",
        ),
        (
            "summarize_at = 0.84\ncritical_at = 0.83\nwarning_at = 0.5",
            "summarize_at = 0.84 (in file {path}) and critical_at = 0.83 (in file {path}): "
            "summarize_at must not be above critical_at",
        ),
        (
            'token_limit = "4000"',
            "token_limit = '4000' (in file {path}): must be a whole number, not a string",
        ),
        ("workers = true", "workers = True (in file {path}): must be a number, not true"),
        ("token_limit = 4000.5", "token_limit = 4000.5 (in file {path}): must be a whole number"),
        (
            'warning_at = "0.7"',
            "warning_at = '0.7' (in file {path}): must be a number, not a string",
        ),
        ("strategy = 3", "strategy = 3 (in file {path}): must be a string"),
        (
            "[rolling]\ntoken_threshold = false",
            "rolling.token_threshold = False (in file {path}): must be a number, not false",
        ),
    ],
)
def test_nonsense_in_the_file_is_refused_with_one_line(
    tmp_path: Path, env: dict[str, str], text: str, expected: str
) -> None:
    path = tmp_path / "memoryd.toml"
    assert refusal_from_file(tmp_path, env, text + "\n") == "config: " + expected.format(path=path)


def test_numbers_from_the_environment_are_still_parsed_from_text(env: dict[str, str]) -> None:
    env |= {"MEMORYD_TOKEN_LIMIT": "4000", "MEMORYD_WARNING_AT": "0.5"}
    settings = load_settings(env=env).settings
    assert (settings.token_limit, settings.warning_at) == (4000, 0.5)


def test_a_boolean_inside_a_json_environment_value_is_refused(env: dict[str, str]) -> None:
    env["MEMORYD_ROLLING"] = '{"token_threshold": true}'
    with pytest.raises(ConfigError, match=r"rolling.token_threshold = True .*not true"):
        load_settings(env=env)


def test_a_workspace_config_with_a_string_token_limit_is_refused(tmp_path: Path) -> None:
    settings = load_settings(env={}).settings
    path = tmp_path / ".memoryd" / "config.toml"
    path.parent.mkdir()
    path.write_text('token_limit = "4000"\n')
    with pytest.raises(ConfigError, match=r"token_limit = '4000' \(in file .*not a string"):
        settings_for_workspace(settings, tmp_path)


def test_a_process_with_an_infinite_drain_exits_2_with_one_line(tmp_path: Path) -> None:
    """`drain_seconds = inf` made summarize never exit: now refused before anything runs."""
    config = tmp_path / "memoryd.toml"
    config.write_text("drain_seconds = inf\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "summarize", str(ws), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("memoryd: config: drain_seconds = inf")
    assert len(done.stderr.splitlines()) == 1
