"""Configuration refused or shown with care: HTTP header values that cannot be sent are
refused at load time, every problem of a file is named at once, and a password in a base
URL is masked wherever the configuration is shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli

from memoryd.config.settings import load_settings
from memoryd.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memoryd.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("section", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('"café"', "not printable ASCII"),
        ('"a\\r\\nX-Evil: 1"', "line break"),
        ('"line\\nbreak"', "line break"),
    ],
)
def test_a_header_value_that_cannot_be_sent_is_refused_at_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, value: str, reason: str
) -> None:
    """A non-ASCII or CR/LF header value: ``memoryd config`` exits 2 with one line naming
    the key, the header and why, and nothing on stdout; so does ``memoryd status`` (its
    fast path leaves such headers to the full loader)."""
    path = write(tmp_path, f'[{section}]\ndefault_headers = {{"X-Test" = {value}}}\n')
    with pytest.raises(ConfigError, match=f"{section}.default_headers.*X-Test.*{reason}"):
        load_settings(path, env={})
    for command in (["config"], ["status", str(tmp_path)]):
        assert cli("--config", str(path), *command) == (2, "")
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and reason in lines[0], lines


def test_a_header_name_that_is_no_http_token_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, '[openai]\ndefault_headers = {"X Test" = "1"}\n')
    with pytest.raises(ConfigError, match="not an HTTP header name"):
        load_settings(path, env={})


def test_every_problem_of_a_config_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two wrong values (one of the wrong kind, one out of bounds) and an unknown key: the
    error names all three, one line each, and exits 2."""
    path = write(tmp_path, 'token_limit = "lots"\nwarning_at = 5\ntokn_limit = 3\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path, env={})
    lines = str(caught.value).splitlines()
    assert len(lines) == 3
    assert any("token_limit = 'lots'" in line and "whole number" in line for line in lines)
    assert any("warning_at = 5" in line for line in lines)
    assert any("unknown key 'tokn_limit'" in line for line in lines)
    assert cli("--config", str(path), "config") == (2, "")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("memoryd: config: ") for line in err)


def test_a_password_in_a_base_url_is_masked_when_the_config_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``memoryd config`` and its ``--json`` show the URL with its password masked; an
    error line that shows the URL masks it too."""
    url = "http://user:S3CRETPW@127.0.0.1:9/v1"
    path = write(tmp_path, f'[openai]\nbase_url = "{url}"\nmodel = "m"\n')
    code, text = cli("--config", str(path), "config")
    assert code == 0 and "S3CRETPW" not in text
    assert "http://user:(masked)@127.0.0.1:9/v1" in text
    code, text = cli("--config", str(path), "config", "--json")
    assert code == 0 and "S3CRETPW" not in text
    assert json.loads(text)["settings"]["openai"]["base_url"] == (
        "http://user:(masked)@127.0.0.1:9/v1"
    )
    bad = write(tmp_path, f'[anthropic]\nbase_url = "{url}"\ntimeout = -1\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(bad, env={})
    assert "S3CRETPW" not in str(caught.value)
    assert capsys.readouterr().err == ""
