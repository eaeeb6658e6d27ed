"""Tests of memoryd.config.settings: sources and their precedence, refusals, masking,
workspace overrides."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from memoryd.config.sections import AnthropicSettings
from memoryd.config.settings import LoadedSettings, Settings, load_settings, settings_for_workspace
from memoryd.config.view import config_as_dict, render_config
from memoryd.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-ant-SECRET-0123456789-wxyz"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(env: dict[str, str], **kwargs: Any) -> LoadedSettings:
    return load_settings(env=env, **kwargs)


def refusal(**kwargs: Any) -> str:
    """The one-line message of the ConfigError that load_settings raises."""
    with pytest.raises(ConfigError) as caught:
        load_settings(**kwargs)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("config: ")
    return message


def test_defaults_when_no_file_no_env_no_flags(env: dict[str, str]) -> None:
    """Without any source every value is the documented default, and says so."""
    loaded = load(env)
    settings = loaded.settings
    assert settings.roots == [Path("~/agents").expanduser()]
    assert (settings.max_depth, settings.token_limit, settings.workers) == (4, 100_000, 16)
    assert (settings.warning_at, settings.summarize_at, settings.critical_at) == (0.70, 0.80, 0.85)
    assert settings.strategy == "narrative"
    assert settings.keep_recent_ratio == 0.40
    assert (settings.coalesce_ms, settings.checkin_interval) == (200, 5.0)
    assert (settings.shutdown_timeout, settings.max_consecutive_failures) == (30.0, 3)
    assert settings.failure_cooldown == 600.0
    assert (settings.drain_seconds, settings.rescan_interval, settings.stale_after) == (
        0.5,
        300,
        300,
    )
    assert settings.max_line_bytes == 8 * 1024 * 1024
    assert (settings.log_format, settings.log_level) == ("json", "info")
    assert settings.summarizer.backend == "auto"
    assert settings.summarizer.max_summary_tokens == 1024
    assert settings.summarizer.max_input_tokens == 150_000
    assert settings.anthropic.model == "claude-haiku-4-5"
    assert settings.anthropic.api_key is None
    assert (settings.anthropic.timeout, settings.anthropic.max_retries) == (60.0, 4)
    assert settings.rolling.message_count_threshold == 30
    assert settings.rolling.messages_to_summarize == 20
    assert settings.rolling.recent_messages_to_keep == 10
    assert settings.rolling.token_threshold == 15_000
    assert settings.checkpoint.compact_at == 0.90
    assert (settings.memory.threshold, settings.memory.keep_bookmarks) == (50, 10)
    assert loaded.config_path is None
    assert loaded.config_candidate == Path(env["XDG_CONFIG_HOME"]) / "memoryd" / "config.toml"
    assert set(loaded.sources.values()) == {"default"}
    assert "summarizer.backend" in loaded.sources
    assert "anthropic.api_key" in loaded.sources


def test_example_config_file_loads_and_gives_the_defaults(env: dict[str, str]) -> None:
    """config/memoryd.toml loads, sets every key but api_key, and equals the defaults."""
    example = REPO / "config" / "memoryd.toml"
    loaded = load(env, config_file=example)
    assert loaded.settings == load(env).settings
    assert loaded.settings.roots == [Path("~/agents").expanduser()]
    from_file = {key for key, origin in loaded.sources.items() if origin == f"file {example}"}
    assert set(loaded.sources) - from_file == {"anthropic.api_key", "openai.api_key"}


def test_injected_env_is_used_instead_of_os_environ(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """load_settings(env=...) reads only the given mapping, not the process environment."""
    monkeypatch.setenv("MEMORYD_TOKEN_LIMIT", "7")
    monkeypatch.setenv("MEMORYD_BOGUS", "1")
    assert load(env).settings.token_limit == 100_000


def test_precedence_flag_over_env_over_file_over_default(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Each level wins over the weaker ones, and the recorded source says which one won."""
    config = write(tmp_path / "c.toml", 'token_limit = 1000\nstrategy = "rolling"\nworkers = 5\n')
    env |= {"MEMORYD_TOKEN_LIMIT": "2000", "MEMORYD_STRATEGY": "checkpoint"}
    loaded = load(env, config_file=config, overrides={"token_limit": 3000})
    settings = loaded.settings
    assert settings.token_limit == 3000
    assert settings.strategy == "checkpoint"
    assert settings.workers == 5
    assert settings.max_depth == 4
    assert loaded.sources["token_limit"] == "flag"
    assert loaded.sources["strategy"] == "env MEMORYD_STRATEGY"
    assert loaded.sources["workers"] == f"file {config}"
    assert loaded.sources["max_depth"] == "default"
    assert loaded.config_path == config


def test_nested_env_with_double_underscore_merges_with_file_table(
    env: dict[str, str], tmp_path: Path
) -> None:
    """MEMORYD_SUMMARIZER__BACKEND sets one key of [summarizer]; the file's other keys stay."""
    config = write(tmp_path / "c.toml", "[summarizer]\nmax_summary_tokens = 500\n")
    env["MEMORYD_SUMMARIZER__BACKEND"] = "extractive"
    loaded = load(env, config_file=config)
    assert loaded.settings.summarizer.backend == "extractive"
    assert loaded.settings.summarizer.max_summary_tokens == 500
    assert loaded.sources["summarizer.backend"] == "env MEMORYD_SUMMARIZER__BACKEND"
    assert loaded.sources["summarizer.max_summary_tokens"] == f"file {config}"
    assert loaded.sources["summarizer.max_input_tokens"] == "default"


def test_dotted_flag_override_sets_a_nested_key(env: dict[str, str]) -> None:
    """An override "summarizer.backend" reaches the nested model; None overrides are skipped."""
    loaded = load(env, overrides={"summarizer.backend": "anthropic", "workers": None})
    assert loaded.settings.summarizer.backend == "anthropic"
    assert loaded.sources["summarizer.backend"] == "flag"
    assert loaded.settings.workers == 16
    assert loaded.sources["workers"] == "default"


def test_memoryd_roots_json_list_is_parsed_and_expanded(env: dict[str, str]) -> None:
    """MEMORYD_ROOTS='["~/a","/b"]' gives two roots, "~" expanded."""
    env["MEMORYD_ROOTS"] = '["~/a", "/b"]'
    loaded = load(env)
    assert loaded.settings.roots == [Path("~/a").expanduser(), Path("/b")]
    assert loaded.sources["roots"] == "env MEMORYD_ROOTS"


def test_root_flags_override_roots_from_env(env: dict[str, str]) -> None:
    """Repeated --root flags (a list override) replace MEMORYD_ROOTS."""
    env["MEMORYD_ROOTS"] = '["/from-env"]'
    loaded = load(env, overrides={"roots": ["/x", "/y"]})
    assert loaded.settings.roots == [Path("/x"), Path("/y")]
    assert loaded.sources["roots"] == "flag"


def test_anthropic_api_key_env_is_a_fallback(env: dict[str, str]) -> None:
    """ANTHROPIC_API_KEY and ANTHROPIC_BASE_URL fill the unset key and URL, with their source."""
    env |= {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}
    loaded = load(env)
    anthropic = loaded.settings.anthropic
    assert anthropic.effective_api_key({}) == SECRET
    assert anthropic.effective_base_url({}) == "http://127.0.0.1:9"
    assert loaded.sources["anthropic.api_key"] == "env ANTHROPIC_API_KEY"
    assert loaded.sources["anthropic.base_url"] == "env ANTHROPIC_BASE_URL"


def test_memoryd_anthropic_api_key_wins_over_anthropic_api_key(
    env: dict[str, str], tmp_path: Path
) -> None:
    """MEMORYD_ANTHROPIC__API_KEY beats ANTHROPIC_API_KEY; a configured base_url beats the env."""
    config = write(tmp_path / "c.toml", '[anthropic]\nbase_url = "http://configured"\n')
    env |= {
        "ANTHROPIC_API_KEY": "sk-ant-fallback",
        "MEMORYD_ANTHROPIC__API_KEY": SECRET,
        "ANTHROPIC_BASE_URL": "http://from-env",
    }
    loaded = load(env, config_file=config)
    anthropic = loaded.settings.anthropic
    assert anthropic.effective_api_key(env) == SECRET
    assert anthropic.effective_base_url(env) == "http://configured"
    assert loaded.sources["anthropic.api_key"] == "env MEMORYD_ANTHROPIC__API_KEY"
    assert loaded.sources["anthropic.base_url"] == f"file {config}"


def test_effective_helpers_read_the_given_env() -> None:
    """effective_api_key/base_url fall back to the mapping given, and give None when empty."""
    anthropic = AnthropicSettings()
    assert anthropic.effective_api_key({}) is None
    assert anthropic.effective_base_url({"ANTHROPIC_BASE_URL": ""}) is None
    given = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://u"}
    assert anthropic.effective_api_key(given) == "k"
    assert anthropic.effective_base_url(given) == "http://u"


def test_missing_explicit_config_file_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """--config naming a file that does not exist is a ConfigError (exit code 2)."""
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as caught:
        load(env, config_file=missing)
    assert str(caught.value) == f"config: {missing}: no such config file (given by --config)"
    assert caught.value.exit_code == 2


def test_memoryd_config_env_names_the_file(env: dict[str, str], tmp_path: Path) -> None:
    """$MEMORYD_CONFIG is read when no --config is given, and must exist."""
    config = write(tmp_path / "env.toml", "max_depth = 7\n")
    env["MEMORYD_CONFIG"] = str(config)
    loaded = load(env)
    assert loaded.settings.max_depth == 7
    assert loaded.config_path == config
    assert loaded.sources["max_depth"] == f"file {config}"
    other = write(tmp_path / "flag.toml", "max_depth = 9\n")
    assert load(env, config_file=other).settings.max_depth == 9
    env["MEMORYD_CONFIG"] = str(tmp_path / "gone.toml")
    assert "no such config file (given by $MEMORYD_CONFIG)" in refusal(env=env)


def test_xdg_config_home_file_is_read(env: dict[str, str]) -> None:
    """$XDG_CONFIG_HOME/memoryd/config.toml is the default file."""
    config = write(Path(env["XDG_CONFIG_HOME"]) / "memoryd" / "config.toml", "workers = 3\n")
    loaded = load(env)
    assert loaded.settings.workers == 3
    assert loaded.config_path == config


def test_without_xdg_config_home_the_file_is_under_home_dot_config(env: dict[str, str]) -> None:
    """With XDG_CONFIG_HOME unset, ~/.config/memoryd/config.toml is read."""
    del env["XDG_CONFIG_HOME"]
    config = write(Path(env["HOME"]) / ".config" / "memoryd" / "config.toml", "workers = 4\n")
    loaded = load(env)
    assert loaded.settings.workers == 4
    assert loaded.config_path == config


def test_unknown_top_level_key_in_file_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """A typo in a top-level key is refused, naming the key and the file."""
    config = write(tmp_path / "c.toml", "tokn_limit = 5\n")
    assert refusal(env=env, config_file=config) == (
        f"config: unknown key 'tokn_limit' (in file {config}); did you mean 'token_limit'?"
    )


def test_unknown_nested_key_and_table_in_file_are_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Unknown keys inside a table, and unknown tables, are refused with their dotted name."""
    config = write(tmp_path / "c.toml", '[summarizer]\nbakend = "extractive"\n')
    message = refusal(env=env, config_file=config)
    assert message.startswith(f"config: unknown key 'summarizer.bakend' (in file {config})")
    config = write(tmp_path / "d.toml", "[bogus]\nx = 1\n")
    assert refusal(env=env, config_file=config) == f"config: unknown key 'bogus' (in file {config})"


def test_unknown_memoryd_env_variable_is_refused(env: dict[str, str]) -> None:
    """A MEMORYD_* typo, top-level or nested, is refused naming the variable."""
    env["MEMORYD_TOKEN_LIMT"] = "5"
    message = refusal(env=env)
    assert "unknown environment variable MEMORYD_TOKEN_LIMT" in message
    assert "did you mean MEMORYD_TOKEN_LIMIT?" in message
    del env["MEMORYD_TOKEN_LIMT"]
    env["MEMORYD_SUMMARIZER__BAKEND"] = "extractive"
    assert "unknown environment variable MEMORYD_SUMMARIZER__BAKEND" in refusal(env=env)
    del env["MEMORYD_SUMMARIZER__BAKEND"]
    env["MEMORYD_TOKEN_LIMIT__X"] = "5"
    assert "unknown environment variable MEMORYD_TOKEN_LIMIT__X" in refusal(env=env)


def test_non_integer_token_limit_from_env_names_key_value_and_source(env: dict[str, str]) -> None:
    """token_limit='abc' is refused in one line with key, value, variable and reason."""
    env["MEMORYD_TOKEN_LIMIT"] = "abc"
    assert refusal(env=env).startswith(
        "config: token_limit = 'abc' (from env MEMORYD_TOKEN_LIMIT): "
        "Input should be a valid integer"
    )


def test_summarize_at_above_one_in_file_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    """summarize_at = 1.5 in the file is refused naming the key, the value and the file."""
    config = write(tmp_path / "c.toml", "summarize_at = 1.5\n")
    assert refusal(env=env, config_file=config) == (
        f"config: summarize_at = 1.5 (in file {config}): Input should be less than or equal to 1"
    )


def test_bogus_strategy_from_flag_is_refused(env: dict[str, str]) -> None:
    """strategy "bogus" from a flag is refused listing the valid strategies."""
    assert refusal(env=env, overrides={"strategy": "bogus"}) == (
        "config: strategy = 'bogus' (from flag): "
        "Input should be 'narrative', 'rolling' or 'checkpoint'"
    )


def test_warning_at_above_critical_at_is_refused(env: dict[str, str]) -> None:
    """warning_at > critical_at is refused naming both keys, their values and sources."""
    env["MEMORYD_WARNING_AT"] = "0.9"
    assert refusal(env=env) == (
        "config: warning_at = 0.9 (from env MEMORYD_WARNING_AT) and critical_at = 0.85 (default): "
        "warning_at must not be above critical_at"
    )


def test_bad_nested_value_and_bad_log_level_are_refused(env: dict[str, str]) -> None:
    """A bad nested value names its dotted key; log_level must be a known level."""
    env["MEMORYD_SUMMARIZER__MAX_SUMMARY_TOKENS"] = "0"
    assert refusal(env=env).startswith(
        "config: summarizer.max_summary_tokens = '0' "
        "(from env MEMORYD_SUMMARIZER__MAX_SUMMARY_TOKENS): Input should be greater than 0"
    )
    assert refusal(env={}, overrides={"log_level": "loud"}) == (
        "config: log_level = 'loud' (from flag): must be one of debug, info, warning, error"
    )


def test_roots_env_that_is_not_json_is_refused(env: dict[str, str]) -> None:
    """MEMORYD_ROOTS=/a (not a JSON list) is refused in one line naming the variable."""
    env["MEMORYD_ROOTS"] = "/a"
    assert refusal(env=env).startswith(
        "config: roots = '/a' (from env MEMORYD_ROOTS): not valid JSON"
    )


def test_toml_syntax_error_names_file_and_line(env: dict[str, str], tmp_path: Path) -> None:
    """A TOML syntax error is one line with the file and the line number."""
    config = write(tmp_path / "c.toml", "workers = 2\n\nstrategy = \n")
    assert refusal(env=env, config_file=config).startswith(
        f"config: {config}: invalid TOML at line 3: "
    )


def test_secret_never_appears_in_render_dict_repr_or_errors(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The API key and secret-looking header values are masked everywhere but masked=False."""
    config = write(
        tmp_path / "c.toml",
        f'[anthropic]\napi_key = "{SECRET}"\n'
        f'default_headers = {{ Authorization = "Bearer {SECRET}", X-Trace = "visible" }}\n',
    )
    loaded = load(env, config_file=config)
    shown = render_config(loaded)
    assert SECRET not in shown
    assert SECRET[-4:] not in shown
    assert "anthropic.api_key = set (masked)" in shown
    assert "visible" in shown
    assert SECRET not in str(config_as_dict(loaded))
    assert SECRET not in repr(loaded.settings)
    assert config_as_dict(loaded, masked=False)["settings"]["anthropic"]["api_key"] == SECRET
    assert "anthropic.api_key = unset" in render_config(load(env))

    env["MEMORYD_WORKERS"] = "0"
    assert SECRET not in refusal(env=env, config_file=config)
    del env["MEMORYD_WORKERS"]
    bad_key = write(tmp_path / "k.toml", "[anthropic]\napi_key = 4242424242\n")
    message = refusal(env=env, config_file=bad_key)
    assert message.startswith("config: anthropic.api_key = <hidden>")
    assert "4242424242" not in message
    env["MEMORYD_ANTHROPIC"] = f'{{"api_key": "{SECRET}"'  # a table as JSON, cut short
    message = refusal(env=env)
    assert message.startswith("config: anthropic = <hidden> (from env MEMORYD_ANTHROPIC)")
    assert SECRET not in message


def test_render_config_lists_every_key_with_its_source(env: dict[str, str], tmp_path: Path) -> None:
    """render_config shows the file, and each key = value with where it came from."""
    config = write(tmp_path / "c.toml", "workers = 6\n")
    env["MEMORYD_TOKEN_LIMIT"] = "1234"
    loaded = load(env, config_file=config)
    lines = render_config(loaded).splitlines()
    assert lines[0] == f"# config file: {config}"
    assert len(lines) == 1 + len(loaded.sources)
    assert any(
        line.startswith("token_limit = 1234 ") and "# env MEMORYD_TOKEN_LIMIT" in line
        for line in lines
    )
    assert any(line.startswith("workers = 6 ") and f"# file {config}" in line for line in lines)
    assert any(line.startswith('strategy = "narrative" ') and "# default" in line for line in lines)
    data = config_as_dict(loaded)
    assert data["config_file"] == str(config)
    assert data["settings"]["workers"] == 6
    assert data["sources"]["token_limit"] == "env MEMORYD_TOKEN_LIMIT"


def test_workspace_config_overrides_budget_and_strategy(tmp_path: Path) -> None:
    """A workspace's .memoryd/config.toml changes its budget, strategy and [rolling] only."""
    settings = load_settings(env={}, overrides={"workers": 3}).settings
    workspace = tmp_path / "ws"
    write(
        workspace / ".memoryd" / "config.toml",
        'token_limit = 5000\nstrategy = "rolling"\n[rolling]\nmessages_to_summarize = 5\n',
    )
    local = settings_for_workspace(settings, workspace)
    assert local.token_limit == 5000
    assert local.strategy == "rolling"
    assert local.rolling.messages_to_summarize == 5
    assert local.rolling.message_count_threshold == 30
    assert local.workers == 3
    assert settings.token_limit == 100_000


def test_workspace_without_config_keeps_the_settings(tmp_path: Path) -> None:
    """No .memoryd/config.toml: the daemon's settings are returned unchanged."""
    settings = load_settings(env={}).settings
    assert settings_for_workspace(settings, tmp_path) is settings


def test_workspace_config_refuses_forbidden_keys_and_bad_values(tmp_path: Path) -> None:
    """roots/anthropic, bad values and unknown [rolling] keys are refused naming the file."""
    settings = load_settings(env={}).settings
    path = write(tmp_path / ".memoryd" / "config.toml", 'roots = ["/elsewhere"]\n')
    with pytest.raises(ConfigError, match=r"key 'roots' is not allowed in a workspace config"):
        settings_for_workspace(settings, tmp_path)
    write(path, '[anthropic]\nmodel = "x"\n')
    with pytest.raises(ConfigError, match=rf"'anthropic' .*\(in file {path}\)"):
        settings_for_workspace(settings, tmp_path)
    write(path, "warning_at = 0.95\n")
    with pytest.raises(ConfigError) as caught:
        settings_for_workspace(settings, tmp_path)
    assert str(caught.value) == (
        f"config: warning_at = 0.95 (in file {path}) and critical_at = 0.85 "
        "(from daemon settings): warning_at must not be above critical_at"
    )
    write(path, "[rolling]\nmesages = 1\n")
    with pytest.raises(ConfigError, match=rf"unknown key 'rolling.mesages' \(in file {path}\)"):
        settings_for_workspace(settings, tmp_path)
    write(path, "token_limit = \n")
    with pytest.raises(ConfigError, match=rf"{path}: invalid TOML at line 1"):
        settings_for_workspace(settings, tmp_path)


def test_settings_pickle_round_trip(env: dict[str, str]) -> None:
    """Settings (secret, paths and nested models included) survive pickling for workers."""
    env |= {"MEMORYD_ANTHROPIC__API_KEY": SECRET, "MEMORYD_ROOTS": '["/a"]'}
    settings = load(env, overrides={"anthropic.default_headers": {"x-a": "b"}}).settings
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings
    assert copy.anthropic.effective_api_key({}) == SECRET
    assert copy.roots == [Path("/a")]
    assert copy.anthropic.default_headers == {"x-a": "b"}


def test_direct_settings_construction_is_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Settings() with an empty environment and no file gives the defaults too."""
    for name in list(os.environ):
        if name.upper().startswith("MEMORYD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("MEMORYD_WORKERS", "9")
    settings = Settings()
    assert settings.workers == 9
    assert settings.token_limit == 100_000
