"""The reference pages cannot drift: docs/reference/commands.md and settings.md are what
tests/docs/reference_pages.py generates from the command-line parser and the settings model,
every command, option and setting is on them, and the example configuration documents
every setting at its default."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import reference_pages

from memoryd.cli import COMMANDS, build_parser
from memoryd.config.schema import leaf_keys
from memoryd.config.settings import Settings

REGENERATE = "run `python tests/docs/reference_pages.py` and commit the pages"


def test_the_commands_page_is_what_the_parser_generates() -> None:
    committed = reference_pages.COMMANDS_PAGE.read_text(encoding="utf-8")
    assert committed == reference_pages.commands_page(), REGENERATE


def test_the_settings_page_is_what_the_model_generates() -> None:
    committed = reference_pages.SETTINGS_PAGE.read_text(encoding="utf-8")
    assert committed == reference_pages.settings_page(), REGENERATE


def options_of(parser: argparse.ArgumentParser, words: str) -> list[tuple[str, str]]:
    """(command words, option or positional name) of every argument of ``parser`` and of
    its subcommands."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{words} {name}", ""), *options_of(sub, f"{words} {name}")]
        elif not isinstance(
            action, argparse._HelpAction | argparse._VersionAction
        ) and action.dest not in (
            "config",
            "log_format",
        ):
            found.append((words, action.option_strings[0] if action.option_strings else ""))
    return found


def test_every_command_and_option_of_the_parser_is_on_the_commands_page() -> None:
    page = reference_pages.COMMANDS_PAGE.read_text(encoding="utf-8")
    sections = dict(
        re.findall(r"^#{2,3} `(memoryd [^`]+)`\n(.*?)(?=^#{2,3} `|\Z)", page, re.M | re.S)
    )
    assert set(sections) >= {f"memoryd {name}" for name in COMMANDS}
    for words, option in options_of(build_parser(), "memoryd"):
        assert words in sections, words
        if option:
            assert f"`{option}" in sections[words], (words, option)


def default_in_example(value: Any) -> Any:
    return [str(item) for item in value] if isinstance(value, list) else value


def test_every_setting_is_on_the_settings_page_with_its_model_default() -> None:
    page = reference_pages.SETTINGS_PAGE.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_.]+)` \| ([^|]*) \|", page, re.M))
    assert set(rows) == set(leaf_keys(Settings))
    for key, info in reference_pages.settings_fields():
        shown = rows[key].strip()
        default = reference_pages.default_of(info)
        if default is None:
            assert shown == "unset", key
        elif isinstance(default, bool):
            assert shown == f"`{str(default).lower()}`", key
        elif isinstance(default, int | float):
            assert shown == f"`{default}`", key


def example_value(example: dict[str, Any], key: str) -> Any:
    value: Any = example
    for part in key.split("."):
        value = value[part]
    return value


@pytest.mark.parametrize("key", [key for key, _ in reference_pages.settings_fields()])
def test_the_example_configuration_explains_every_setting_at_its_default(key: str) -> None:
    """config/memoryd.toml, the file people copy, has each key (the API keys commented
    out) with a comment, and its value is the model's default."""
    text = reference_pages.EXAMPLE_CONFIG.read_text(encoding="utf-8")
    assert reference_pages.example_comments(text).get(key), f"{key} has no comment"
    if key.endswith(".api_key"):
        return
    example = tomllib.loads(text)
    default = reference_pages.default_of(dict(reference_pages.settings_fields())[key])
    assert example_value(example, key) == default_in_example(default), key


def test_the_comment_reader_takes_a_group_comment_and_skips_examples_in_comments() -> None:
    text = (
        '# Both of these.\nfirst = 1\nsecond = 2\n\n# For example:\n#   [prices."m"]\n'
        '#   input = 1.0\n[prices]\n[t]\n# The key.\n# api_key = "x"\n'
    )
    comments = reference_pages.example_comments(text)
    assert comments["first"] == comments["second"] == "Both of these."
    assert comments["prices"].startswith("For example:")
    assert "input" not in comments and comments["t.api_key"] == "The key."


def test_a_page_that_differs_from_the_code_is_caught(tmp_path: Path) -> None:
    """The comparison is byte for byte: a page with one setting's default edited by hand
    is not what the generator writes."""
    page = reference_pages.settings_page()
    edited = page.replace("| `token_limit` | `100000`", "| `token_limit` | `200000`")
    assert edited != page
